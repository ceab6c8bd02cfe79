#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskPolicy

/// The daemon's queue rules that are not about one task's conditions: periodic schedules, retries,
/// and how many tasks may run at once. Pure functions of their inputs; times are seconds on one clock.
public enum Schedule {
    /// The next due time of `--every P` work anchored at `anchor`, after a launch at `after`: the first
    /// `anchor + k·P` later than `after`. Periods missed while the machine was off or asleep are not
    /// run one by one (as systemd's `Persistent=`): whatever was missed, the work is due once, now.
    /// A period of whole days (`--every 1d --at 02:00`) steps by the local calendar, as systemd's calendar timers
    /// do: 02:00 stays 02:00 across a daylight-saving change, whose day has 23 or 25 hours.
    public static func nextPeriodic(anchor: Double, every: Double, after: Double) -> Double {
        guard every > 0, every.isFinite, after.isFinite, anchor.isFinite else { return after }
        if after < anchor { return anchor }
        let days = every / 86_400
        if days >= 1, days == days.rounded(), days <= 36_500 {
            let step = Int(days)
            var a = time_t(anchor.rounded(.down))
            var parts = tm()
            localtime_r(&a, &parts)
            let frac = anchor - anchor.rounded(.down)
            func nth(_ k: Int) -> Double {
                var p = parts
                p.tm_mday += Int32(k * step)
                p.tm_isdst = -1   // the zone's rule on that date, not the anchor's
                return Double(mktime(&p)) + frac
            }
            // From the period count in seconds (off by at most one per change crossed), to the first one after.
            var k = max(1, Int(((after - anchor) / every).rounded(.down)) - 1)
            while k > 1, nth(k - 1) > after { k -= 1 }
            while nth(k) <= after { k += 1 }
            return nth(k)
        }
        let k = ((after - anchor) / every).rounded(.down) + 1
        return anchor + k * every
    }

    /// The wait before retry number `attempt` (1 for the first retry): `base`, doubled each time, at most `max`.
    /// "Counts against the app" (Apple): each task of an app the system had to end, not made good since, holds
    /// its next refresh launches back longer — 15 min, 30 min, 1 h, … up to 8 h; each task it completes in
    /// time takes one away.
    public static func refreshHoldBack(ended: Int) -> Double {
        ended <= 0 ? 0 : min(8 * 3600, 900 * Double(1 << (min(ended, 16) - 1)))
    }
    public static let maxStanding = 16

    public static func backoff(attempt: Int, base: Double, max: Double) -> Double {
        guard attempt >= 1, base > 0 else { return 0 }
        let doublings = Swift.min(attempt - 1, 40)
        return Swift.min(max, base * Double(1 << UInt64(doublings)))
    }

    /// Background runtime on battery, per app and local day: `add` the time from the last mark to `now`
    /// for every app that had a task running, if the machine was on battery over that stretch.
    public struct BatteryUse: Sendable, Equatable {
        public var day: Int
        public var seconds: [String: Double] = [:]
        public init(day: Int) { self.day = day }

        public mutating func add(_ elapsed: Double, apps: Set<String>, onBattery: Bool, day today: Int) {
            if today != day { day = today; seconds = [:] }
            guard onBattery, elapsed > 0, elapsed.isFinite else { return }
            for a in apps { seconds[a, default: 0] += elapsed }
        }
    }

    /// How many tasks run now, in the terms of the daemon's limits.
    public struct Load: Sendable, Equatable {
        public var running: Int
        public var heavy: Int
        public init(running: Int = 0, heavy: Int = 0) {
            self.running = running
            self.heavy = heavy
        }
    }

    /// The daemon's limits from the policy's `[daemon]` settings.
    public struct Limits: Sendable, Equatable {
        public var maxRunning: Int
        public var maxRunningHeavy: Int
        public var maxPendingPerApp: Int
        /// An app's pending requests by kind (Apple's limits: 1 refresh, 10 processing); continued work is not limited.
        public var maxPendingRefresh = 1
        public var maxPendingProcessing = 10
        public var retryBackoff: Double
        public var retryBackoffMax: Double
        /// Seconds of background runtime an app's tasks may have on battery each day (Android-style quota).
        public var appBatteryBudget: Double

        public init(maxRunning: Int = 4, maxRunningHeavy: Int = 1, maxPendingPerApp: Int = 1000, retryBackoff: Double = 30,
                    retryBackoffMax: Double = 3600, appBatteryBudget: Double = 600) {
            self.maxRunning = maxRunning
            self.maxRunningHeavy = maxRunningHeavy
            self.maxPendingPerApp = maxPendingPerApp
            self.retryBackoff = retryBackoff
            self.retryBackoffMax = retryBackoffMax
            self.appBatteryBudget = appBatteryBudget
        }

        public init(_ s: PolicySettings) {
            self.init(maxRunning: Int(s.number("daemon.max_running")), maxRunningHeavy: Int(s.number("daemon.max_running_heavy")),
                      maxPendingPerApp: Int(s.number("daemon.max_pending_per_app")), retryBackoff: s.number("daemon.retry_backoff"),
                      retryBackoffMax: s.number("daemon.retry_backoff_max"), appBatteryBudget: s.number("daemon.app_battery_budget"))
            maxPendingRefresh = Int(s.number("daemon.max_pending_refresh"))
            maxPendingProcessing = Int(s.number("daemon.max_pending_processing"))
        }

        /// nil if an app with `pending` requests of `kind` may have one more, else why not (Apple's
        /// `tooManyPendingTaskRequests`).
        public func pendingOfKind(_ kind: TaskKind, app: String, pending: Int) -> String? {
            let (most, setting): (Int, String)
            switch kind {
            case .refresh: (most, setting) = (maxPendingRefresh, "daemon.max_pending_refresh")
            case .processing: (most, setting) = (maxPendingProcessing, "daemon.max_pending_processing")
            case .continued, .regular: return nil
            }
            guard pending >= most else { return nil }
            return "\(app) has \(pending) pending \(kind) request\(pending == 1 ? "" : "s"), the most \(setting) allows"
        }

        /// nil if an app that has used `used` seconds on battery today may start more work now, else why not.
        /// On external power (or when power is unknown) the budget does not apply.
        public func budget(app: String, used: Double, onBattery: Bool) -> String? {
            guard onBattery, used >= appBatteryBudget else { return nil }
            return "\(app) used its daily battery budget (\(formatDuration(appBatteryBudget)), daemon.app_battery_budget); it waits for the charger or tomorrow"
        }

        /// nil if one more task like `task` may start under `load`, else why not (in the words `pending` shows).
        /// Work the user started (`user_initiated`) is not held back by the background limits.
        public func slot(for task: TaskFields, load: Load) -> String? {
            if task.userInitiated { return nil }
            if load.running >= maxRunning { return "\(load.running) tasks running, the most daemon.max_running allows" }
            if task.cpuHeavy, load.heavy >= maxRunningHeavy {
                return "\(load.heavy) CPU-heavy task\(load.heavy == 1 ? "" : "s") running, the most daemon.max_running_heavy allows"
            }
            return nil
        }
    }
}
