@testable import BgtaskCore
import BgtaskPolicy
import Testing

/// A test's rest: a plain string, alike only when equal.
extension String: RestState {
    public func sharesGroup(with other: String) -> Bool { self == other }
}

/// The queue's rules in virtual time: no daemon, no clock, no process. `Item` and `Rest` are plain strings here.
@Suite("the scheduler: admission, slots, budgets, midnight, rest and wake, what follows a run")
struct SchedulerTests {
    typealias Queue = Scheduler<String, String>
    static let day = 20_000    // a local day number; budgets count per day

    func queue(_ limits: Schedule.Limits = Schedule.Limits(maxRunning: 2, maxRunningHeavy: 1, maxPendingPerApp: 5),
               perSecond: Double = 1, burst: Double = 3) -> Queue {
        Queue(limits: limits, now: 0, day: Self.day, submitsPerSecond: perSecond, submitBurst: burst)
    }

    static func job(_ id: String, _ kind: TaskKind = .processing, app: String? = nil, heavy: Bool = false, power: Bool = false,
                    user: Bool = false) -> Queue.Job {
        var f = TaskFields(id: id, kind: kind)
        f.cpuHeavy = heavy
        f.requiresExternalPower = power
        f.userInitiated = user
        return Queue.Job(fields: f, app: app)
    }

    // MARK: Admission

    @Test("an app may have daemon.max_pending_per_app requests; one that replaces its own waiting request does not count twice")
    func perAppLimit() {
        var q = queue()
        for i in 0..<5 { #expect(q.refusal(for: Self.job("a\(i)", .continued, app: "org.a")) == nil); q.add(Self.job("a\(i)", .continued, app: "org.a"), "a\(i)") }
        #expect(q.refusal(for: Self.job("a5", .continued, app: "org.a"))?.contains("daemon.max_pending_per_app") == true)
        #expect(q.refusal(for: Self.job("a0", .continued, app: "org.a")) == nil, "a0 replaces its own request")
        #expect(q.refusal(for: Self.job("b0", .continued, app: "org.b")) == nil, "another app has its own count")
        #expect(q.refusal(for: Self.job("c0")) == nil, "command tasks have their own count")
        q.removeWaiting("a3")
        #expect(q.refusal(for: Self.job("a5", .continued, app: "org.a")) == nil, "a cancelled request frees its place")
        #expect(q.waitingCount(app: "org.a") == 4)
        q.start("a4")
        #expect(q.waitingCount(app: "org.a") == 3, "a running task is not pending")
    }

    @Test("Apple's limits per kind: one pending refresh request and ten processing ones per app; continued work is not limited by kind")
    func perKindLimits() {
        var q = queue(Schedule.Limits(maxPendingPerApp: 1000))
        q.add(Self.job("org.a/r", .refresh, app: "org.a"), "r")
        #expect(q.refusal(for: Self.job("org.a/r2", .refresh, app: "org.a"))?.contains("daemon.max_pending_refresh") == true)
        #expect(q.refusal(for: Self.job("org.a/r", .refresh, app: "org.a")) == nil, "the same identifier replaces its request")
        #expect(q.refusal(for: Self.job("org.b/r", .refresh, app: "org.b")) == nil)
        for i in 0..<10 { q.add(Self.job("org.a/p\(i)", .processing, app: "org.a"), "p") }
        #expect(q.refusal(for: Self.job("org.a/p10", .processing, app: "org.a"))?.contains("10 pending processing requests") == true)
        #expect(q.refusal(for: Self.job("org.a/c", .continued, app: "org.a")) == nil)
        // The kind of a replaced request is its own: a refresh id re-submitted as processing counts as processing.
        #expect(q.refusal(for: Self.job("org.a/r", .processing, app: "org.a")) != nil)
    }

    @Test("the submit rate: a burst, then the rate in virtual time, per sender; a sender that left starts afresh")
    func submitRate() {
        var q = queue(perSecond: 2, burst: 3)
        var burst: [Bool] = []
        for _ in 0..<4 { burst.append(q.allowSubmit(":1.5", now: 10)) }
        #expect(burst == [true, true, true, false], "the burst is spent after 3")
        let other = q.allowSubmit(":1.6", now: 10)
        #expect(other, "another sender has its own bucket")
        let early = q.allowSubmit(":1.5", now: 10.4), onTime = q.allowSubmit(":1.5", now: 10.5)
        #expect(!early && onTime, "one token back after 1/2 s at 2 per second")
        q.forgetSender(":1.5")
        var fresh: [Bool] = []
        for _ in 0..<3 { fresh.append(q.allowSubmit(":1.5", now: 10.5)) }
        #expect(fresh == [true, true, true])
    }

    // MARK: Slots

    @Test("slots: daemon.max_running tasks at once, one CPU-heavy; user-initiated work is not held back; a freed slot re-decides exactly the held-back tasks")
    func slots() {
        var q = queue()
        for id in ["a", "b", "c", "h1", "h2", "u"] {
            q.add(Self.job(id, heavy: id.hasPrefix("h"), user: id == "u"), id)
        }
        func slot(_ id: String) -> String? { q.slot(for: id) }
        #expect(slot("h1") == nil); q.start("h1")
        #expect(slot("h2")?.contains("max_running_heavy") == true, "one CPU-heavy task at a time")
        #expect(slot("a") == nil); q.start("a")
        #expect(slot("b")?.contains("2 tasks running") == true)
        #expect(slot("u") == nil, "user-initiated work takes no slot from the limits")
        #expect(q.load == Schedule.Load(running: 2, heavy: 1))
        // "c" never asked: it is not told of the freed slot (it waits on something else).
        let freed = q.finish("a")
        #expect(freed.item == "a")
        #expect(Set(freed.decideAgain) == ["h2", "b"])
        #expect(q.finish("a").decideAgain.isEmpty, "a second finish of the same run changes nothing")
        #expect(q.slot(for: "b") == nil)
        _ = q.finish("h1")
        #expect(q.load == Schedule.Load())
        #expect(q.slot(for: "h2") == nil)
    }

    @Test("one run of an id at a time: a request submitted while its previous run runs waits for that run's end")
    func previousRunStill() {
        var q = queue()
        q.add(Self.job("backup"), "run 1")
        q.start("backup")
        q.add(Self.job("backup"), "run 2")
        #expect(q.running["backup"] == "run 1" && q.awake["backup"] == "run 2")
        #expect(q.slot(for: "backup") == Queue.previousRunStill)
        let freed = q.finish("backup")
        #expect(freed.item == "run 1" && freed.decideAgain == ["backup"])
        #expect(q.slot(for: "backup") == nil)
    }

    // MARK: Budgets and midnight

    @Test("an app's daily battery budget counts only time on battery while its tasks run, holds its work back once spent, and starts again at midnight")
    func batteryBudget() {
        var q = queue(Schedule.Limits(maxRunning: 4, appBatteryBudget: 600))
        q.add(Self.job("org.a/x", app: "org.a"), "x")
        q.add(Self.job("org.a/y", app: "org.a"), "y")
        q.add(Self.job("cmd"), "cmd")
        q.setOnBattery(false, now: 0, day: Self.day)
        q.start("org.a/x")
        q.account(now: 1_000, day: Self.day)
        #expect(q.batteryUse.seconds["org.a"] == nil, "on the charger nothing is counted")
        q.setOnBattery(true, now: 1_000, day: Self.day)
        q.account(now: 1_400, day: Self.day)
        #expect(q.batteryUse.seconds["org.a"] == 400)
        #expect(q.slot(for: "org.a/y") == nil, "400 s of 600 used")
        q.account(now: 1_700, day: Self.day)
        #expect(q.slot(for: "org.a/y")?.contains("daily battery budget") == true)
        #expect(q.slot(for: "cmd") == nil, "command tasks have no app budget")
        q.setOnBattery(false, now: 1_700, day: Self.day)
        #expect(q.slot(for: "org.a/y") == nil, "on the charger the budget does not apply")
        q.setOnBattery(true, now: 1_800, day: Self.day)
        #expect(q.slot(for: "org.a/y") != nil)
        // Local midnight: the awake waiting tasks are re-decided, and the new day's budget is whole.
        let again = q.midnight(now: 2_000, day: Self.day + 1)
        #expect(Set(again) == ["org.a/y", "cmd"])
        #expect(q.batteryUse.day == Self.day + 1)
        #expect(q.slot(for: "org.a/y") == nil)
    }

    @Test("a restart keeps the day's battery use and the apps' standing (they are given back to a new scheduler)")
    func restartKeepsBudgetAndStanding() {
        var q = Queue(limits: Schedule.Limits(appBatteryBudget: 600), now: 50, day: Self.day, usage: ["org.a": 650], standing: ["org.b": 2],
                      submitsPerSecond: 1, submitBurst: 1)
        q.add(Self.job("org.a/x", app: "org.a"), "x")
        q.setOnBattery(true, now: 50, day: Self.day)
        #expect(q.slot(for: "org.a/x") != nil, "the budget spent before the restart still holds")
        #expect(q.refreshHoldBack(app: "org.b") == Schedule.refreshHoldBack(ended: 2))
        // A new day after the restart: the stored use was yesterday's.
        q.account(now: 60, day: Self.day + 1)
        #expect(q.slot(for: "org.a/x") == nil)
    }

    @Test("standing: each task the system had to end holds the app's refresh work back longer, up to a cap; each completed in time makes one good")
    func standing() {
        var q = queue()
        #expect(q.refreshHoldBack(app: "org.a") == 0)
        #expect(q.madeGood(app: "org.a") == nil)
        #expect(q.endedBySystem(app: "org.a") == 1)
        #expect(q.refreshHoldBack(app: "org.a") == 900)
        #expect(q.endedBySystem(app: "org.a") == 2)
        #expect(q.refreshHoldBack(app: "org.a") == 1_800)
        for _ in 0..<40 { _ = q.endedBySystem(app: "org.a") }
        #expect(q.standing["org.a"] == Schedule.maxStanding)
        #expect(q.refreshHoldBack(app: "org.a") == 8 * 3600)
        #expect(q.madeGood(app: "org.a") == Schedule.maxStanding - 1)
    }

    // MARK: Rest and wake

    func evaluator(external: Bool?, _ p: Policy = Policy.merge([])) -> Policy.Evaluator {
        var c: [String: PolicyValue] = [:]
        if let e = external { c["power.external"] = .bool(e) }
        return Policy.Evaluator(policy: p, conditions: c, time: TimeFields(hour: 12, secondsSinceMidnight: 43_200, weekday: "mon"))
    }

    @Test("rest and wake: resting tasks are not awake; a change wakes exactly the groups whose class's verdict changed, asking one verdict per class")
    func restAndWake() {
        var q = queue(Schedule.Limits(maxPendingPerApp: 100_000))
        for i in 0..<1_000 { q.add(Self.job("p\(i)", power: true), "p\(i)") }
        for i in 0..<1_000 { q.add(Self.job("h\(i)", heavy: true, power: true), "h\(i)") }
        q.add(Self.job("plain"), "plain")
        let battery = evaluator(external: false)
        for id in q.awake.keys {
            let v = battery.verdict(q.job(id)!.fields)
            #expect(q.rest(id, verdict: v, rest: "\(v)") == id, "its item is handed back: the caller keeps nothing of it")
        }
        #expect(q.awake.isEmpty && q.restingCount == 2_001 && q.waitingCount == 2_001 && q.waitingCount(app: nil) == 2_001)
        #expect(q.job("p7")?.fields.requiresExternalPower == true && q.job("p7")?.id == "p7", "a resting task's job is its group's, with its id")
        #expect(q.slot(for: "p1") == nil)
        // A change that changes no verdict: nothing wakes, and one verdict is asked per class (3 classes).
        var asked = 0
        #expect(q.wake { asked += 1; return battery.verdict($0) }.isEmpty)
        #expect(asked == 3)
        // The charger: the two groups that wait for it wake, with their rest; the plain task (verdict run) stays.
        let charger = evaluator(external: true)
        asked = 0
        let woken = q.wake { asked += 1; return charger.verdict($0) }
        #expect(asked == 3)
        #expect(woken.count == 2_000 && !woken.contains { $0.id == "plain" } && woken.allSatisfy { $0.rest == "defer" })
        // Woken tasks have left the books until added again: the caller adds each with its new item.
        #expect(q.waitingCount == 1 && !q.isWaiting("p7") && q.isResting("plain"))
        for w in woken { q.add(w.job, w.id) }
        #expect(q.awake.count == 2_000 && q.waitingCount(app: nil) == 2_001)
        // Woken by something else (a call about it); removed while resting: gone from every index and count.
        let one = q.wakeOne("plain")
        #expect(one?.rest == "run" && q.waitingCount == 2_000)
        q.add(one!.job, "plain")
        #expect(q.rest("p7", verdict: .run, rest: "run") == "p7")
        #expect(q.removeWaiting("p7")?.item == nil, "a resting task has no item to hand back")
        #expect(!q.isWaiting("p7") && q.waitingCount == 2_000 && q.waitingCount(app: nil) == 2_000)
    }

    @Test("tasks alike share a group only with an equal rest; past maxGroups a task that could rest stays awake")
    func restGroups() {
        var q = queue(Schedule.Limits(maxPendingPerApp: 1_000))
        q.add(Self.job("a", power: true), "a")
        q.add(Self.job("b", power: true), "b")
        q.rest("a", verdict: .defer, rest: "hold since 10")
        q.rest("b", verdict: .defer, rest: "hold since 20")
        #expect(q.rest(of: "a") == "hold since 10" && q.rest(of: "b") == "hold since 20", "each keeps what its supervisor knew")
        for i in 0..<(Queue.maxGroups + 5) { q.add(Self.job("x\(i)", power: true), "x\(i)") }
        var rested = 0
        for i in 0..<(Queue.maxGroups + 5) where q.rest("x\(i)", verdict: .defer, rest: "own \(i)") != nil { rested += 1 }
        #expect(rested == Queue.maxGroups - 2 && q.restingCount == Queue.maxGroups)
        #expect(q.awake["x\(Queue.maxGroups + 4)"] != nil, "no room for its group: it stays awake")
        // An equal rest still joins its group, however many groups there are.
        q.add(Self.job("c", power: true), "c")
        #expect(q.rest("c", verdict: .defer, rest: "hold since 10") == "c" && q.isResting("c"))
        let all = q.wakeAll()
        #expect(all.count == Queue.maxGroups + 1 && q.restingCount == 0 && q.waitingCount == 7)
    }

    @Test("a free slot goes to the first in line of the tasks resting on one, among those whose class fits it; a woken group's others rest beside the one decided")
    func restingOnASlot() {
        var q = queue(Schedule.Limits(maxRunning: 3, maxRunningHeavy: 1, maxPendingPerApp: 100))
        for (id, t, heavy) in [("a", 10.0, false), ("h", 5.0, true), ("b", 20.0, false), ("c", 30.0, false)] {
            var j = Self.job(id, heavy: heavy)
            j.submitted = t
            q.add(j, id)
        }
        q.start("a")
        q.add(Self.job("r", heavy: true), "r")
        q.start("r")
        // One slot left, none for CPU-heavy work (r runs): h waits behind it although it came first.
        for id in ["h", "b", "c"] { #expect(q.rest(id, verdict: .run, rest: "no slot") == id) }
        #expect(q.nextForSlot()?.id == "b", "h's class has no slot: the first in line that fits takes it")
        q.add(Self.job("b"), "b")
        q.start("b")
        #expect(q.nextForSlot() == nil, "no slot free")
        _ = q.finish("r")
        _ = q.finish("a")
        #expect(q.nextForSlot()?.id == "h", "the first in line, now that its class fits")
        // A resting task on a condition is not offered a slot.
        q.add(Self.job("d"), "d")
        q.rest("d", verdict: .defer, rest: "power")
        #expect(q.nextForSlot()?.id == "c")
        #expect(q.nextForSlot() == nil && q.isResting("d"))
        // A group that wakes: once one of it rests again, the others rest beside it, counted as waiting.
        q.add(Self.job("e"), "e")
        q.rest("e", verdict: .defer, rest: "power")
        let woken = q.wake { _ in .run }
        #expect(woken.count == 2 && Set(woken.map(\.group)).count == 1 && q.waitingCount == 0)
        q.add(woken[0].job, woken[0].id)
        q.rest(woken[0].id, verdict: .run, rest: "no slot")
        let besideNobody = q.rest(woken[1], like: "nobody")
        #expect(!besideNobody, "beside a task that does not rest: refused")
        let beside = q.rest(woken[1], like: woken[0].id)
        #expect(beside && q.restingCount == 2 && q.waitingCount == 2)
    }

    @Test("a resting class is asked the thermal question once, and only while some task of it rests")
    func restingClasses() {
        var q = queue()
        q.add(Self.job("a", heavy: true), "a")
        q.add(Self.job("b", heavy: true), "b")
        q.rest("a", verdict: .defer, rest: "r")
        q.rest("b", verdict: .defer, rest: "r2")
        var asked = 0
        #expect(q.anyRestingClass { asked += 1; return $0.cpuHeavy })
        #expect(asked == 1, "two groups of one class: asked once")
        q.removeWaiting("a")
        let b = q.wakeOne("b")!
        q.add(b.job, "b")
        q.start("b")
        #expect(!q.anyRestingClass { _ in true }, "no class is left once none rests")
    }

    // MARK: Listing

    @Test("a listing's cursor is a place in the submission order: equal times ordered by id, its text read back, nonsense refused")
    func submissionOrderCursor() throws {
        let a = Queue.Position(submitted: 20, id: "b"), b = Queue.Position(submitted: 20, id: "c"), c = Queue.Position(submitted: 30, id: "a")
        #expect(a < b && b < c && !(b < a))
        #expect(Queue.Position(cursor: a.cursor) == a)
        #expect(Queue.Position(cursor: "nonsense") == nil && Queue.Position(cursor: "inf|x") == nil)
        #expect(Queue.Position(cursor: "12.5|org.a/x|y") == Queue.Position(submitted: 12.5, id: "org.a/x|y"))
    }

    // MARK: Run ends, across a restart

    @Test("retries back off by the policy's limits; periods missed while down run once and keep their phase across a restart")
    func runEndsUnderLimits() {
        let q = queue(Schedule.Limits(retryBackoff: 10, retryBackoffMax: 25))
        let t0 = 1_800_000_000.0
        let failed = RunEnd.Outcome.ended(status: 1, expiredByRule: nil, ownStatus: 1)
        var r = RunEnd.Request(kind: .processing, retry: 3, submitted: t0)
        var waits: [Double] = []
        while case .retry(let attempt, let notBefore) = q.next(r, failed, now: t0) {
            waits.append(notBefore - t0)
            r.failures = attempt
        }
        #expect(waits == [10, 20, 25])
        // A daily task, its scheduler gone for 3.5 days (a restart gives it a new one with the stored anchor).
        let restarted = queue()
        let daily = RunEnd.Request(kind: .processing, every: 86_400, anchor: t0, submitted: t0, started: t0 + 3.5 * 86_400)
        #expect(restarted.next(daily, .ended(status: 0, expiredByRule: nil, ownStatus: 0), now: t0 + 3.5 * 86_400 + 5) == .period(at: t0 + 4 * 86_400))
        #expect(restarted.next(.init(kind: .processing, submitted: t0), .notStarted(why: "disk"), now: t0) == .tryAgain(notBefore: t0 + 30))
    }
}
