#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskJSON
import BgtaskPolicy

/// One thing that happened to a task, for the audit trail and the messages on stderr.
public struct RunEvent: Sendable {
    public enum Kind: String, Sendable {
        case deferred, started, throttled, unthrottled, paused, resumed, expired, killed
        case gaveUp = "gave-up", finished, signalled, cpuHeavy = "cpu-heavy", failed
        /// The supervisor of a run was found gone; `recovered`: what was then done to its command.
        case lost, recovered
    }
    public var kind: Kind
    public var monotonic: Double
    public var detail: String
    public var decision: Decision?
    public var conditions: [String: PolicyValue]
    public var exitStatus: Int32?
    /// For events about another run than the observer's own (recovery of a dead supervisor's task).
    public var runID: String?
    /// At the end of a run: the energy it used (`EnergyMeter`), and what to say of it (or why it is unknown).
    public var energyWh: Double?
    public var energy: String?
    /// At the end of a run: the CPU seconds its processes used, where known.
    public var cpuSeconds: Double?

    public init(kind: Kind, monotonic: Double, detail: String, decision: Decision?, conditions: [String: PolicyValue], exitStatus: Int32?,
                runID: String? = nil) {
        self.runID = runID
        self.kind = kind
        self.monotonic = monotonic
        self.detail = detail
        self.decision = decision
        self.conditions = conditions
        self.exitStatus = exitStatus
    }
}

public protocol RunObserver: AnyObject {
    func record(_ event: RunEvent, task: TaskFields)
}



public func wallClockNow() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_REALTIME, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
}

/// Local time that carries its day, as `systemctl list-timers` does: `13:20:20` today, `tomorrow 13:20:20`,
/// `yesterday 13:20:20`, `Wed 13:20:20` within the week around today, else `2026-12-03 13:20:20`.
public func clockText(_ epoch: Double, now: Double = wallClockNow()) -> String {
    guard epoch.isFinite, abs(epoch) < 1e12 else { return "?" }
    var secs = time_t(epoch), today = time_t(now)
    var at = Glibc.tm(), nowTM = Glibc.tm()
    localtime_r(&secs, &at)
    localtime_r(&today, &nowTM)
    func p(_ v: Int32) -> String { v < 10 ? "0\(v)" : String(v) }
    let clock = "\(p(at.tm_hour)):\(p(at.tm_min)):\(p(at.tm_sec))"
    // Days between the two local dates (noon to noon: a daylight-saving change cannot tip it).
    func noon(_ t: Glibc.tm) -> Double {
        var c = t
        c.tm_hour = 12; c.tm_min = 0; c.tm_sec = 0; c.tm_isdst = -1
        return Double(mktime(&c))
    }
    let days = Int(((noon(at) - noon(nowTM)) / 86_400).rounded())
    switch days {
    case 0: return clock
    case 1: return "tomorrow " + clock
    case -1: return "yesterday " + clock
    case -6...6: return ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"][Int(at.tm_wday)] + " " + clock
    default: return "\(at.tm_year + 1900)-\(p(at.tm_mon + 1))-\(p(at.tm_mday)) " + clock
    }
}

/// A full date as systemd prints one (`Thu 2026-11-26 01:00:00 CET`), in local time or UTC.
public func dateText(_ epoch: Double, utc: Bool = false) -> String {
    guard epoch.isFinite, abs(epoch) < 1e12 else { return "?" }
    var secs = time_t(epoch.rounded(.down))
    var t = Glibc.tm()
    if utc { gmtime_r(&secs, &t) } else { localtime_r(&secs, &t) }
    func p(_ v: Int32) -> String { v < 10 ? "0\(v)" : String(v) }
    let day = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"][Int(t.tm_wday)]
    let zone = utc ? "UTC" : t.tm_zone.map { String(cString: $0) } ?? ""
    return "\(day) \(t.tm_year + 1900)-\(p(t.tm_mon + 1))-\(p(t.tm_mday)) \(p(t.tm_hour)):\(p(t.tm_min)):\(p(t.tm_sec)) \(zone)"
}

/// A time to come, with its day and how far off it is: `tomorrow 01:00:00, in 11h39m`.
public func untilText(_ epoch: Double, now: Double = wallClockNow()) -> String {
    let left = epoch - now
    return clockText(epoch, now: now) + (left > 0 ? ", in \(formatDuration(left.rounded(.up)))" : "")
}

public func localTime(_ epoch: Double? = nil) -> TimeFields {
    var ts = timespec()
    clock_gettime(CLOCK_REALTIME, &ts)
    var t = epoch.map { time_t($0) } ?? ts.tv_sec
    var tm = tm()
    localtime_r(&t, &tm)
    let days = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]
    let at = epoch ?? Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    return TimeFields(hour: Int(tm.tm_hour), secondsSinceMidnight: Double(tm.tm_hour * 3600 + tm.tm_min * 60 + tm.tm_sec),
                      weekday: days[Int(tm.tm_wday)], secondsUntil: { secondsUntilLocal($0, from: at) })
}

/// Seconds from `epoch` until the local clock next reads time of day `target` (seconds since midnight), found
/// as systemd finds a calendar time: the broken-down date with that time, normalized by mktime(3), today or on a
/// later day, so a day of 23 or 25 hours is one day. A time a spring-forward skips is taken where mktime puts it
/// (an hour later); one a fall-back repeats, at its first occurrence after `epoch`.
public func secondsUntilLocal(_ target: Double, from epoch: Double) -> Double {
    var t = time_t(epoch.rounded(.down))
    var today = tm()
    localtime_r(&t, &today)
    let whole = Int(target.rounded(.down))
    for day in 0...2 {
        var c = today
        c.tm_mday += Int32(day)
        c.tm_hour = Int32(whole / 3600); c.tm_min = Int32(whole % 3600 / 60); c.tm_sec = Int32(whole % 60)
        c.tm_isdst = -1
        let e = Double(mktime(&c)) + (target - Double(whole))
        if e > epoch { return e - epoch }
    }
    return TimeFields.evenDays(target, from: Double(today.tm_hour * 3600 + today.tm_min * 60 + today.tm_sec))
}

/// Between the probes' JSON values and the policy's values: the one place the two meet.
public enum ConditionConversion {
    public static func values(_ pairs: [(String, JSONValue)]) -> [String: PolicyValue] {
        var out: [String: PolicyValue] = [:]
        for (k, v) in pairs { out[k] = value(v) }
        return out
    }

    public static func value(_ v: JSONValue) -> PolicyValue {
        switch v {
        case .null, .object: return .null
        case .bool(let b): return .bool(b)
        case .number(let n): return .number(n)
        case .string(let s): return .string(s)
        case .array(let a): return .list(a.map(value))
        }
    }

    public static func json(_ v: PolicyValue) -> JSONValue {
        switch v {
        case .null: return .null
        case .bool(let b): return .bool(b)
        case .number(let n), .duration(let n): return .number(n)
        case .string(let s): return .string(s)
        case .list(let l): return .array(l.map(json))
        }
    }
}
