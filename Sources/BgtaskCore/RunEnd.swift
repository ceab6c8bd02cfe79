#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskPolicy

/// What the queue does with a task when one run of it is over: the rules of retries, periods, calendar events
/// and interrupted work, as a pure function of the request and how the run ended, so they are tested in virtual
/// time rather than by running a daemon.
public enum RunEnd {
    /// The parts of a queued request these rules read.
    public struct Request: Sendable, Equatable {
        public var kind: TaskKind
        /// Retries allowed after a failure, and how many were used.
        public var retry: Int
        public var failures: Int
        public var calendar: String?
        public var every: Double?
        /// Where `every`'s periods are counted from (the first earliest date, else the submission).
        public var anchor: Double?
        public var submitted: Double
        /// When this run started (wall clock); nil if it never did.
        public var started: Double?

        public init(kind: TaskKind, retry: Int = 0, failures: Int = 0, calendar: String? = nil, every: Double? = nil,
                    anchor: Double? = nil, submitted: Double, started: Double? = nil) {
            self.kind = kind
            self.retry = retry
            self.failures = failures
            self.calendar = calendar
            self.every = every
            self.anchor = anchor
            self.submitted = submitted
            self.started = started
        }
    }

    /// How the run ended.
    public enum Outcome: Sendable, Equatable {
        /// The command was never started (a check before the spawn refused it): the request is not spent.
        case notStarted(why: String)
        /// It ran and ended with `status`. `expiredByRule` is the rule that ended it, if one did; `ownStatus` is the
        /// command's own exit status when it exited by itself (nil when a signal of ours ended it).
        case ended(status: Int32, expiredByRule: String?, ownStatus: Int32?)
        /// Someone cancelled it (`bgtask cancel`, an app, a notification's Cancel) while it ran: whatever its end
        /// status — the SIGTERM of the cancel included — the request is over.
        case cancelled
    }

    /// What happens next.
    public enum Next: Sendable, Equatable {
        /// Queued again as it was, not before `notBefore` (a start refused before the spawn).
        case tryAgain(notBefore: Double)
        /// A failure with retries left: retry `attempt` of the request's `retry`, not before `notBefore`.
        case retry(attempt: Int, notBefore: Double)
        /// Ended by the conditions (`rule`), not by the work: it waits for them again.
        case waitAgain(rule: String)
        /// The next elapse of its calendar event, or of its period (failures counted from zero again).
        case calendar(at: Double)
        case period(at: Double)
        /// Its calendar event does not elapse again (`reason`); the request is over.
        case calendarEnded(reason: String)
        /// The request is over.
        case done
    }

    /// The rules. `backoff` and `backoffMax` are the policy's `run.retry_backoff` and its cap.
    public static func next(_ r: Request, _ outcome: Outcome, now: Double, backoff: Double, backoffMax: Double) -> Next {
        let status: Int32, rule: String?, own: Int32?
        switch outcome {
        case .notStarted:
            return .tryAgain(notBefore: now + backoff)
        case .cancelled:
            // Terminal: not retried (its SIGTERM is no failure), no next period or elapse, no wait again.
            return .done
        case .ended(let s, let r, let o):
            (status, rule, own) = (s, r, o)
        }
        let failed = status != 0
        if failed, r.retry > r.failures {
            let attempt = r.failures + 1
            return .retry(attempt: attempt, notBefore: now + Schedule.backoff(attempt: attempt, base: backoff, max: backoffMax))
        }
        // The conditions ended it (the person came back, the charger went, heat), not the work: it waits for them
        // again, as work interrupted by a crash does. Refresh work is dropped, as on iOS. A command that exited
        // on its own with success after the expiration is done.
        if failed, let rule, r.kind != .refresh, own != 0 {
            return .waitAgain(rule: rule)
        }
        if let text = r.calendar {
            // The next elapse after this start: elapses missed while it waited or the machine was off run once
            // (systemd's Persistent=true), not once each.
            do {
                let event = try CalendarEvent(parsing: text)
                guard let at = event.next(after: max(r.started ?? 0, now)) else { return .calendarEnded(reason: "its calendar event '\(text)' does not elapse again") }
                return .calendar(at: at)
            } catch {
                return .calendarEnded(reason: "its calendar event '\(text)' no longer reads: \(error)")
            }
        }
        if let every = r.every {
            return .period(at: Schedule.nextPeriodic(anchor: r.anchor ?? r.submitted, every: every, after: r.started ?? now))
        }
        return .done
    }

    /// Whether work a dead daemon left running is queued again: processing, continued and regular work is;
    /// refresh work is dropped, as iOS drops a refresh the app did not finish.
    public static func requeuedAfterCrash(kind: TaskKind) -> Bool { kind != .refresh }

    /// The start of the next local day after `t` (a day's battery budget resets there), by the C library's zone
    /// rules: a day of 23 or 25 hours across a daylight-saving change, never a fixed 86,400 s.
    public static func nextLocalMidnight(after t: Double) -> Double {
        var now = time_t(t.rounded(.down))
        var parts = tm()
        localtime_r(&now, &parts)
        parts.tm_mday += 1
        parts.tm_hour = 0; parts.tm_min = 0; parts.tm_sec = 0; parts.tm_isdst = -1
        return Double(mktime(&parts))
    }
}

/// A run's identifier in the audit trail: the task, where and when it was made, and 64 random bits. A counter and
/// the pid alone repeat when a daemon restarts within the same second with the same pid (a container's pid 2,
/// a unit restarted at once), and two runs would then share one story.
public enum RunID {
    /// `ID-dPID-SECONDS-HEX16` (bgtaskd's; `bgtask run` uses `ID-PID-SECONDS`).
    public static func make(task id: String, pid: Int32, now: Double, random: UInt64) -> String {
        let hex = String(random, radix: 16)
        return "\(id)-d\(pid)-\(Int(now))-" + String(repeating: "0", count: 16 - hex.count) + hex
    }

    /// 64 bits from the system's generator (the stdlib's: getrandom on Linux).
    public static func randomBits() -> UInt64 {
        var g = SystemRandomNumberGenerator()
        return g.next()
    }
}
