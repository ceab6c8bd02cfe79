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

    /// The rows that say every name stops being read at `now` (bgtaskd stopping), for the names written before.
    public mutating func stopped(now: Double) -> [(time: Double, name: String, value: String)] {
        changes([:], now: now, unread: Set(written.keys))
    }

    /// The text of a row that says a reading stopped being read from then on (`unread` here): heat while the
    /// daemon reads no thermal zone, every name when it stops. `bgtask report` draws what follows as "not read",
    /// never as the last value stretched; the next value read is a change again.
    public static let unreadText = "unread"

    /// The names whose values are not being read now: thermal.* while bgtaskd polls no zone (no task's verdict
    /// depends on a temperature), though the watcher still hands over the last values it read.
    public static let thermalNames: Set<String> = ["thermal.state", "thermal.celsius"]

    /// The rows to write for `values` read at `now` (wall clock), each as its text in the history; the names in
    /// `unread` are written as `unread` once, whatever their stale value says.
    public mutating func changes(_ values: [String: PolicyValue], now: Double, unread: Set<String> = []) -> [(time: Double, name: String, value: String)] {
        var out: [(time: Double, name: String, value: String)] = []
        for name in ReadingHistory.names {
            let text: String
            switch unread.contains(name) ? .string(ReadingHistory.unreadText) : values[name] ?? .null {
            case .null: text = "null"
            case .bool(let b): text = b ? "true" : "false"
            case .number(let n), .duration(let n): text = n.isFinite ? String(Int(n.rounded())) : "null"
            case .string(let s): text = s
            case .list: continue
            }
            let last = written[name]
            guard last?.text != text else { continue }
            if name == "thermal.celsius" || name == "battery.percent", text != ReadingHistory.unreadText, let old = last.flatMap({ Double($0.text) }),
               let new = Double(text), abs(old - new) < 2 { continue }
            // A temperature read every 2 s can swing by 2 °C all day: at most one row a minute for it, so 60
            // days stay a bounded history (~86,000 rows), not one of millions.
            // A jump of 10 °C or more is written at once: one that is dropped may get no later row to correct it.
            if name == "thermal.celsius", text != ReadingHistory.unreadText, last?.text != ReadingHistory.unreadText,
               let at = last?.at, now - at < 60, let old = last.flatMap({ Double($0.text) }), let new = Double(text), abs(old - new) < 10 { continue }
            written[name] = (text, now)
            out.append((now, name, text))
        }
        return out
    }
}
