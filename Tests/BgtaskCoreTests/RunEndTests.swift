@testable import BgtaskCore
import Testing

/// What the queue does when a run is over, in virtual time: times are plain numbers, no daemon runs.
@Suite("the end of a run: retries, periods, calendar events, interrupted work")
struct RunEndTests {
    let t0 = 1_800_000_000.0    // a Friday, 2027-01-15 08:00:00 UTC
    func next(_ r: RunEnd.Request, _ o: RunEnd.Outcome, at now: Double) -> RunEnd.Next {
        RunEnd.next(r, o, now: now, backoff: 30, backoffMax: 600)
    }
    static func failed(_ status: Int32) -> RunEnd.Outcome { .ended(status: status, expiredByRule: nil, ownStatus: status) }

    @Test("a failure with retries left is retried after a backoff that doubles from the base to its cap; then the request is over")
    func retriesBackOff() {
        var r = RunEnd.Request(kind: .processing, retry: 6, submitted: t0)
        var waits: [Double] = []
        var now = t0
        while case .retry(let attempt, let notBefore) = next(r, Self.failed(1), at: now) {
            #expect(attempt == r.failures + 1)
            waits.append(notBefore - now)
            r.failures = attempt
            now = notBefore + 5
        }
        #expect(waits == [30, 60, 120, 240, 480, 600], "\(waits)")
        #expect(next(r, Self.failed(1), at: now) == .done, "no retry is left after the sixth")
        #expect(next(RunEnd.Request(kind: .processing, retry: 3, submitted: t0), Self.failed(0), at: t0) == .done, "a success is not retried")
    }

    @Test("cancellationIsTerminal: a cancelled run is the request's end, whatever it has left: retries, periods, calendar elapses, a wait for its conditions")
    func cancellationIsTerminal() {
        let requests = [RunEnd.Request(kind: .processing, retry: 3, submitted: t0, started: t0 + 1),
                        RunEnd.Request(kind: .processing, every: 60, anchor: t0, submitted: t0, started: t0 + 1),
                        RunEnd.Request(kind: .processing, calendar: "*-*-* *:*:00", submitted: t0, started: t0 + 1)]
        for r in requests {
            #expect(next(r, .ended(status: 75, expiredByRule: nil, ownStatus: nil), at: t0 + 90) != .done, "not cancelled: it goes on (\(r))")
            #expect(next(r, .cancelled, at: t0 + 90) == .done, "\(r)")
        }
    }

    @Test("a period missed while the machine was off runs once, then keeps its phase: the next due time is the first anchor + k·P after the start")
    func periodsCatchUpOnce() {
        let day = 86_400.0
        // Anchored at t0, daily; the machine was off for three days and the run started 3.5 days later.
        let r = RunEnd.Request(kind: .processing, every: day, anchor: t0, submitted: t0 - 100, started: t0 + 3.5 * day)
        #expect(next(r, Self.failed(0), at: t0 + 3.5 * day + 60) == .period(at: t0 + 4 * day))
        // A failed periodic run with no retries left waits for its next period, not for ever.
        #expect(next(r, Self.failed(2), at: t0 + 3.5 * day + 60) == .period(at: t0 + 4 * day))
        // Across a restart the request keeps its anchor (the queue row), so the phase is the same.
        let again = RunEnd.Request(kind: .processing, every: day, anchor: t0, submitted: t0 + 4 * day, started: t0 + 4 * day + 10)
        #expect(next(again, Self.failed(0), at: t0 + 4 * day + 20) == .period(at: t0 + 5 * day))
    }

    @Test("a calendar task is due at the next elapse after its start; elapses missed while it waited run once; one that never elapses again ends")
    func calendarNextElapse() throws {
        // "*-*-* 09:00:00 UTC", a run started at 08:00: ended at 08:30 it is due at 09:00 today; ended at 10:00
        // (09:00 passed while it ran) at 09:00 tomorrow — one run per elapse, never two back to back.
        let r = RunEnd.Request(kind: .processing, calendar: "*-*-* 09:00:00 UTC", submitted: t0 - 3600, started: t0)
        #expect(next(r, Self.failed(0), at: t0 + 2 * 3600) == .calendar(at: t0 + 25 * 3600))
        #expect(next(r, Self.failed(0), at: t0 + 1800) == .calendar(at: t0 + 3600))
        // Three days late: once, at the next elapse after now.
        #expect(next(r, Self.failed(0), at: t0 + 3 * 86_400 + 7200) == .calendar(at: t0 + 4 * 86_400 + 3600))
        let once = RunEnd.Request(kind: .processing, calendar: "2027-01-15 09:00:00 UTC", submitted: t0, started: t0 + 3600)
        guard case .calendarEnded(let why) = next(once, Self.failed(0), at: t0 + 3700) else { Issue.record("a past one-off event ends"); return }
        #expect(why.contains("does not elapse again"), "\(why)")
    }

    @Test("work the conditions ended waits for them again, unless it is refresh work or the command had already succeeded")
    func expiredByARuleWaitsAgain() {
        let ended = RunEnd.Outcome.ended(status: 143, expiredByRule: "user.returned", ownStatus: nil)
        #expect(next(RunEnd.Request(kind: .processing, submitted: t0), ended, at: t0) == .waitAgain(rule: "user.returned"))
        #expect(next(RunEnd.Request(kind: .refresh, submitted: t0), ended, at: t0) == .done, "refresh work is dropped, as on iOS")
        let succeeded = RunEnd.Outcome.ended(status: 143, expiredByRule: "user.returned", ownStatus: 0)
        #expect(next(RunEnd.Request(kind: .processing, submitted: t0), succeeded, at: t0) == .done)
        // Retries come first: a failure with retries left is a retry even when a rule ended it.
        #expect(next(RunEnd.Request(kind: .processing, retry: 1, submitted: t0), ended, at: t0) == .retry(attempt: 1, notBefore: t0 + 30))
    }

    @Test("a start refused before the spawn spends nothing: the request tries again after the base backoff; a crash requeues all but refresh work")
    func notStartedAndCrashes() {
        #expect(next(RunEnd.Request(kind: .processing, retry: 0, submitted: t0), .notStarted(why: "no slot"), at: t0) == .tryAgain(notBefore: t0 + 30))
        #expect(RunEnd.requeuedAfterCrash(kind: .processing) && RunEnd.requeuedAfterCrash(kind: .continued) && !RunEnd.requeuedAfterCrash(kind: .refresh))
    }

    @Test("run ids differ for the same task, pid and second (a daemon restarted at once in a container), and keep their readable prefix")
    func runIDsDoNotRepeat() {
        let a = RunID.make(task: "backup", pid: 2, now: t0, random: 1)
        let b = RunID.make(task: "backup", pid: 2, now: t0, random: UInt64.max)
        #expect(a == "backup-d2-1800000000-0000000000000001" && b == "backup-d2-1800000000-ffffffffffffffff")
        var seen = Set<String>()
        for _ in 0..<10_000 { seen.insert(RunID.make(task: "backup", pid: 2, now: t0, random: RunID.randomBits())) }
        #expect(seen.count == 10_000)
    }
}
