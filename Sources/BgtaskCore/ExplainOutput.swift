import BgtaskJSON
import BgtaskPolicy

/// What `policy explain` prints, as text and as JSON.
public enum ExplainOutput {
    static func readings(_ rs: [Reading]) -> String {
        rs.map { "\($0.name) = \($0.value == .null ? "unknown" : $0.value.literal)" }.joined(separator: ", ")
    }

    public static func text(_ task: TaskFields, _ d: Decision, _ rules: [RuleExplanation]) -> String {
        var out: [String] = []
        let cap = d.cpuPercent.map { " to \($0)%" } ?? ""
        out.append("\(task.id) (\(task.kind)): \(d.verdict.rawValue)\(cap) — \(d.reason)")
        if let first = d.matches.first {
            out.append("  decided by \(first.ruleID) (\(first.location))")
            out.append("    read: \(readings(first.readings))")
        } else {
            out.append("  no rule matched: the task may run now")
        }
        if d.matches.count > 1 {
            out.append("Also in effect:")
            for m in d.matches.dropFirst() {
                out.append("  \(m.verdict.rawValue) \(m.ruleID) (\(m.location)): \(m.reason)")
                out.append("    read: \(readings(m.readings))")
            }
        }
        let close = rules.filter(\.cameClose)
        if !close.isEmpty {
            out.append("Came close (all but one part held):")
            for r in close {
                out.append("  \(r.verdict.rawValue) \(r.ruleID) (\(r.location)): not `\(r.failing.joined())`")
                out.append("    read: \(readings(r.readings))")
            }
        }
        let unknown = rules.filter { $0.outcome == .unknown }
        if !unknown.isEmpty {
            out.append("Could not decide (a reading is unknown, so the rule does not apply):")
            for r in unknown {
                let missing = r.readings.filter { $0.value == .null }.map(\.name)
                out.append("  \(r.verdict.rawValue) \(r.ruleID) (\(r.location)): \(missing.joined(separator: ", ")) unknown")
            }
        }
        return out.joined(separator: "\n")
    }

    static func value(_ v: PolicyValue) -> JSONValue { ConditionConversion.json(v) }

    static func readingsJSON(_ rs: [Reading]) -> JSONValue { .object(rs.map { ($0.name, value($0.value)) }) }

    public static func json(_ d: Decision, _ rules: [RuleExplanation]) -> JSONValue {
        .object([
            ("verdict", .string(d.verdict.rawValue)), ("cpu_percent", JSONValue(d.cpuPercent)), ("grace_s", JSONValue(d.grace)),
            ("reason", .string(d.reason)),
            ("matched", .array(d.matches.map { m in .object([
                ("id", .string(m.ruleID)), ("origin", .string(m.location.description)), ("verdict", .string(m.verdict.rawValue)),
                ("reason", .string(m.reason)), ("readings", readingsJSON(m.readings)),
            ]) })),
            ("rules", .array(rules.map { r in .object([
                ("id", .string(r.ruleID)), ("origin", .string(r.location.description)), ("verdict", .string(r.verdict.rawValue)),
                ("outcome", .string(r.outcome.rawValue)), ("came_close", .bool(r.cameClose)),
                ("clauses", .array(r.clauses.map { .object([("text", .string($0.text)), ("value", value($0.value))]) })),
                ("readings", readingsJSON(r.readings)),
            ]) })),
        ])
    }
}

