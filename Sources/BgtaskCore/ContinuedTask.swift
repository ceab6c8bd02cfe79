import BgtaskPolicy

/// What a continued task's progress says over time (pure; the daemon feeds it the clock). Apple: "tasks that
/// do not report any progress will be expired", and slow progress first asks the person. Here: no change of
/// progress for `stalledAfter` shows the task as stalled; for `expireAfter`, it expires.
public struct ProgressWatch: Sendable, Equatable {
    public enum State: Sendable, Equatable {
        case moving
        case stalled(since: Double)
        case expire(since: Double)
    }

    public var stalledAfter: Double
    public var expireAfter: Double
    /// When progress last changed (the task's start until it first reports).
    public private(set) var lastChange: Double
    public private(set) var last: (UInt64, UInt64)?

    public init(start: Double, stalledAfter: Double, expireAfter: Double) {
        self.stalledAfter = max(0, stalledAfter)
        self.expireAfter = max(self.stalledAfter, expireAfter)
        lastChange = start
    }

    /// Records a report; only a change counts as progress (the same numbers again do not).
    public mutating func report(completed: UInt64, total: UInt64, now: Double) {
        if let l = last, l.0 == completed, l.1 == total { return }
        last = (completed, total)
        lastChange = now
    }

    /// The person chose to let it go on: the quiet time counts from now.
    public mutating func keepGoing(now: Double) { lastChange = now }

    public func state(now: Double) -> State {
        let quiet = now - lastChange
        if quiet >= expireAfter { return .expire(since: lastChange) }
        if quiet >= stalledAfter { return .stalled(since: lastChange) }
        return .moving
    }

    /// When the state changes next if nothing is reported (nil once it is due to expire).
    public func nextCheck(now: Double) -> Double? {
        switch state(now: now) {
        case .moving: return lastChange + stalledAfter
        case .stalled: return lastChange + expireAfter
        case .expire: return nil
        }
    }

    public static func == (a: ProgressWatch, b: ProgressWatch) -> Bool {
        a.stalledAfter == b.stalledAfter && a.expireAfter == b.expireAfter && a.lastChange == b.lastChange
            && a.last?.0 == b.last?.0 && a.last?.1 == b.last?.1
    }
}

/// Updates to what the person sees, at most one per `interval` (pure): the first goes out at once, later
/// ones wait for the interval and carry the newest state.
public struct UpdateThrottle: Sendable, Equatable {
    public var interval: Double
    public private(set) var lastSent: Double?
    /// An update is waiting to be sent at this time.
    public private(set) var dueAt: Double?

    public init(interval: Double = 1) { self.interval = interval }

    public enum Decision: Sendable, Equatable {
        case sendNow
        /// Send at this time (a timer); a later offer before then adds nothing.
        case sendAt(Double)
        case alreadyScheduled
    }

    public mutating func offer(now: Double) -> Decision {
        if dueAt != nil { return .alreadyScheduled }
        guard let l = lastSent, now - l < interval else {
            lastSent = now
            return .sendNow
        }
        dueAt = l + interval
        return .sendAt(l + interval)
    }

    /// The timer fired (or a final update is sent regardless).
    public mutating func sent(now: Double) {
        lastSent = now
        dueAt = nil
    }
}

/// The text a notification shows for a continued task's progress: "42 % · 42 of 100" (GNOME draws no bar,
/// so the number is in the body; servers that read the `value` hint draw one too).
public enum ProgressText {
    public static func percent(completed: UInt64, total: UInt64) -> Int? {
        guard total > 0 else { return nil }
        return Int(min(100, (Double(completed) / Double(total) * 100).rounded(.down)))
    }

    public static func body(subtitle: String?, completed: UInt64, total: UInt64, stalledFor: Double? = nil) -> String {
        var lines: [String] = []
        if let s = subtitle, !s.isEmpty { lines.append(s) }
        if let p = percent(completed: completed, total: total) {
            lines.append("\(p) % · \(completed) of \(total)")
        } else {
            lines.append("starting…")
        }
        if let s = stalledFor { lines.append("No progress for \(formatDuration(s, .words)) — it will be stopped unless it moves") }
        return lines.joined(separator: "\n")
    }

    /// The body for a server that reads markup (`body-markup`): the app's words are text, not markup — an
    /// `&` or `<` in a subtitle would otherwise break the server's parse (GNOME then shows nothing) or style it.
    public static func markupEscaped(_ text: String) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for c in text {
            switch c {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            default: out.append(c)
            }
        }
        return out
    }
}


