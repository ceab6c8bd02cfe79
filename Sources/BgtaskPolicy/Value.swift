/// A value a rule reads or computes. `null` is an unknown reading (no battery, no NetworkManager).
public enum PolicyValue: Sendable, Equatable, CustomStringConvertible {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    /// Seconds.
    case duration(Double)
    case list([PolicyValue])

    public var description: String {
        switch self {
        case .null: return "null"
        case .bool(let b): return b ? "true" : "false"
        case .number(let n): return formatNumber(n)
        case .string(let s): return s
        case .duration(let d): return formatDuration(d)
        case .list(let l): return "[" + l.map(\.literal).joined(separator: ", ") + "]"
        }
    }

    /// As it would be written in an expression.
    public var literal: String {
        if case .string(let s) = self { return "\"\(s)\"" }
        return description
    }
}

func formatNumber(_ n: Double) -> String {
    if n == n.rounded() && abs(n) < 1e15 { return String(Int64(n)) }
    guard n.isFinite, abs(n) < 1e15 else { return String(n) }
    let r = (n * 100).rounded() / 100
    return String(r)
}

/// The longest duration the language accepts anywhere (ten years): beyond it, arithmetic on instants
/// loses meaning and formatting could trap.
public let maxDuration: Double = 3650 * 86_400

/// How a duration is written: `compact` as the policy language and the command line write it ("1h30m", "250ms"),
/// `words` for sentences a person reads ("45 s", "3 min 5 s", "2 h 10 min": two units at most).
public enum DurationStyle: Sendable { case compact, words }

/// The one duration formatter.
public func formatDuration(_ seconds: Double, _ style: DurationStyle = .compact) -> String {
    // Durations are bounded where they are read (maxDuration); this keeps a message from trapping regardless.
    guard seconds.isFinite, abs(seconds) < 1e15 else { return "\(seconds)s" }
    if style == .words {
        var s = max(0, Int(seconds.rounded()))
        if s < 60 { return "\(s) s" }
        let h = s / 3600
        s %= 3600
        let m = s / 60
        if h == 0 { return "\(m) min" + (s % 60 > 0 && m < 10 ? " \(s % 60) s" : "") }
        return "\(h) h" + (m > 0 ? " \(m) min" : "")
    }
    if seconds < 1 && seconds > 0 { return "\(Int((seconds * 1000).rounded()))ms" }
    var s = Int(seconds.rounded())
    if s == 0 { return "0s" }
    var out = ""
    if s < 0 { out = "-"; s = -s }
    for (unit, size) in [("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)] where s >= size {
        out += "\(s / size)\(unit)"
        s %= size
    }
    return out
}

/// The type of a name or expression, checked when a file loads.
public indirect enum PolicyType: Sendable, Equatable, CustomStringConvertible {
    case bool, number, string, duration
    /// A closed set of strings; `ordered` allows `<`, `>=` in the listed order.
    case enumeration(name: String, cases: [String], ordered: Bool)
    case list(PolicyType)
    /// The literal `null`.
    case null

    public var description: String {
        switch self {
        case .bool: return "bool"
        case .number: return "number"
        case .string: return "string"
        case .duration: return "duration"
        case .enumeration(let n, let cases, let ordered):
            return "\(n) (\(ordered ? "ordered: " : "one of ")\(cases.joined(separator: ordered ? " < " : ", ")))"
        case .list(let t): return "list of \(t)"
        case .null: return "null"
        }
    }

    var shortName: String {
        if case .enumeration(let n, _, _) = self { return n }
        return description
    }
}
