import BgtaskJSON
import BgtaskPolicy

extension SimulationEvent {
    /// One line (and its pending holds) as `policy simulate` prints it.
    public var text: String {
        var what: String
        if !actions.isEmpty {
            what = actions.map(Simulation.describe).joined(separator: ", ")
        } else if holdElapsed {
            what = "hold elapsed"
        } else {
            what = "stays \(phase.name)"
        }
        let by = decision.matches.first.map { " — \($0.ruleID) (\($0.location)): \($0.reason)" } ?? " — no rule applies"
        var line = "\(Timestamp.clock(time))  +\(formatDuration(offset).padded(7)) \(what.padded(22)) \(decision.verdict.rawValue)\(by)"
        for p in decision.pending {
            line += "\n          hold: \(p.ruleID) \(p.becomesActive ? "takes effect" : "lets go") at \(Timestamp.clock(p.at)) if conditions stay"
        }
        return line
    }

    public var json: JSONValue {
        .object([
            ("time", .number(time)), ("offset_s", .number(offset)), ("phase", .string(phase.name)),
            ("verdict", .string(decision.verdict.rawValue)), ("cpu_percent", JSONValue(decision.cpuPercent)),
            ("actions", .array(actions.map { .string(Simulation.describe($0)) })),
            ("rules", .array(decision.matches.map { .string("\($0.ruleID) (\($0.location))") })),
            ("reason", .string(decision.reason)),
            ("pending", .array(decision.pending.map { .object([("rule", .string($0.ruleID)), ("becomes_active", .bool($0.becomesActive)), ("at", .number($0.at))]) })),
        ])
    }
}

extension String {
    /// Padded with spaces to at least `n` characters, for columns.
    public func padded(_ n: Int) -> String { count >= n ? self : self + String(repeating: " ", count: n - count) }
}
