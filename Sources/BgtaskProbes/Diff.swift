import BgtaskJSON
/// One condition that changed between two snapshots.
public struct ConditionChange: Sendable, Equatable {
    public var path: String
    public var old: JSONValue?
    public var new: JSONValue
}

/// Decides which condition changes are worth a line. Gauges that move all the time have a dead band
/// relative to the last value reported, so slow drift is still reported once it adds up.
public struct ConditionDiffer: Sendable {
    public var deadbands: [String: Double] = [
        "thermal.celsius": 1.0,
        "battery.percent": 0.5,
        "upower.percentage": 0.5,
        "battery.time_to_empty_s": 300,
    ]
    /// Sampled only when something else wakes us; never a reason for a line on its own.
    public var ignored: Set<String> = ["system.cpu_pressure"]
    /// A gauge said with the flag its threshold sets: when the flag changes (the threshold is crossed) the gauge is
    /// said too, however little it moved.
    public var thresholds: [String: String] = ["storage.free_bytes": "storage.low"]
    private var reported: [String: JSONValue] = [:]

    public init() {}

    /// 1 % of the filesystem's size: free space moves with every write, and a busy disk is not news
    /// (docs/probes.md, "storage.*"). Set from each reading, as the filesystem's size is known.
    public mutating func storageSize(_ bytes: Double?) {
        deadbands["storage.free_bytes"] = bytes.map { $0 / 100 }
    }

    /// The changes from what was last reported; updates the record of what was reported.
    public mutating func changes(to conditions: [(String, JSONValue)]) -> [ConditionChange] {
        var crossed: Set<String> = []
        for (path, value) in conditions where thresholds.values.contains(path) && reported[path] != value { crossed.insert(path) }
        var out: [ConditionChange] = []
        for (path, value) in conditions where !ignored.contains(path) {
            let old = reported[path]
            guard old != value else { continue }
            if let band = deadbands[path], case .number(let a)? = old, case .number(let b) = value, abs(a - b) < band,
               !(thresholds[path].map(crossed.contains) ?? false) {
                continue
            }
            out.append(ConditionChange(path: path, old: old, new: value))
            reported[path] = value
        }
        return out
    }
}
