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
    private var reported: [String: JSONValue] = [:]

    public init() {}

    /// The changes from what was last reported; updates the record of what was reported.
    public mutating func changes(to conditions: [(String, JSONValue)]) -> [ConditionChange] {
        var out: [ConditionChange] = []
        for (path, value) in conditions where !ignored.contains(path) {
            let old = reported[path]
            guard old != value else { continue }
            if let band = deadbands[path], case .number(let a)? = old, case .number(let b) = value, abs(a - b) < band {
                continue
            }
            out.append(ConditionChange(path: path, old: old, new: value))
            reported[path] = value
        }
        return out
    }
}
