import BgtaskPolicy

/// Which readings' changes are kept for the learned start estimate and `bgtask report`, and when one is worth a
/// row: a change of value, a temperature or a charge level only when it moved 2 or more, a temperature at most
/// once a minute. Pure: the daemon gives it each new set of readings (a change that woke it anyway — keeping
/// history costs no wake-up) and writes what it returns.
public struct ReadingHistory: Sendable {
    public static let names = ["power.external", "user.idle", "network.online", "thermal.state", "thermal.celsius", "battery.percent"]
    /// How long rows are kept.
    public static let days = 60.0

    /// The last value of each name written, and when.
    private var written: [String: (text: String, at: Double)] = [:]

    public init() {}

    /// The rows to write for `values` read at `now` (wall clock), each as its text in the history.
    public mutating func changes(_ values: [String: PolicyValue], now: Double) -> [(time: Double, name: String, value: String)] {
        var out: [(time: Double, name: String, value: String)] = []
        for name in ReadingHistory.names {
            let text: String
            switch values[name] ?? .null {
            case .null: text = "null"
            case .bool(let b): text = b ? "true" : "false"
            case .number(let n), .duration(let n): text = n.isFinite ? String(Int(n.rounded())) : "null"
            case .string(let s): text = s
            case .list: continue
            }
            let last = written[name]
            guard last?.text != text else { continue }
            if name == "thermal.celsius" || name == "battery.percent", let old = last.flatMap({ Double($0.text) }),
               let new = Double(text), abs(old - new) < 2 { continue }
            // A temperature read every 2 s can swing by 2 °C all day: at most one row a minute for it, so 60
            // days stay a bounded history (~86,000 rows), not one of millions.
            if name == "thermal.celsius", let at = last?.at, now - at < 60 { continue }
            written[name] = (text, now)
            out.append((now, name, text))
        }
        return out
    }
}
