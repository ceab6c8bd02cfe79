import ArgumentParser
import BgtaskConfig
import BgtaskPolicy
import BgtaskProbes
import BgtaskRun

extension Bgtask.PolicyCommand {
    struct Explain: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Say what the policy decides for a task now, every rule that matched, and every rule that came close.",
            discussion: """
            The task: --task 'kind=processing,requires_external_power=true,cpu_heavy,id=backup,waited=2h'. \
            Conditions: read live (default, or from a recorded tree with --sysfs-root), or from a file holding \
            `bgtask status --json` output or a `bgtask watch --record` line.
            """)

        @Option(name: .long, help: ArgumentHelp("The task's fields, comma-separated.", valueName: "spec"))
        var task: String

        @Option(name: .long, help: ArgumentHelp("'live', or a file of conditions.", valueName: "file|live"))
        var conditions: String = "live"

        @Flag(name: .long, help: "Print JSON.")
        var json = false

        @OptionGroup var layers: PolicyFilesOption
        @OptionGroup var probe: ProbeOptionsGroup

        func run() throws {
            let t = try TaskSpec.parse(task)
            let policy = try layers.load().policy
            let values = try ConditionSource.read(conditions, probe: probe, settings: policy.settings)
            let evaluator = Policy.Evaluator(policy: policy, conditions: values, time: ConditionValues.localTime(ConditionValues.now()))
            let (decision, rules) = evaluator.explain(t)
            if json {
                print(ExplainOutput.json(decision, rules).rendered)
            } else {
                out(ExplainOutput.text(t, decision, rules))
            }
        }
    }
}

enum ConditionSource {
    static func read(_ source: String, probe: ProbeOptionsGroup, settings: PolicySettings) throws -> [String: PolicyValue] {
        if source == "live" {
            return ConditionValues.from(Prober(options: probe.probeOptions.applying(settings)).snapshot().conditions)
        }
        let text: String
        switch PolicyLayers.readText(source) {
        case .success(let s): text = s
        case .failure(let e): throw ValidationError("--conditions \(source): \(e)")
        }
        // A recorded trace: its last line is the state at the end of it.
        let lines = text.split(separator: "\n").map(String.init).filter { !$0.trimmingCharacters(in: " ").isEmpty }
        let doc = lines.count > 1 && lines.allSatisfy { $0.hasPrefix("{") } ? lines.last! : text
        do {
            let json = try JSONValue.parse(doc)
            let pairs = json.conditionPairs(names: Schema.standard.order)
            guard !pairs.isEmpty else {
                throw ValidationError("--conditions \(source): no condition names in it (expected `bgtask status --json` output or a `watch --record` line)")
            }
            return ConditionValues.from(pairs)
        } catch let e as JSONParseError {
            throw ValidationError("--conditions \(source): not JSON: \(e)")
        }
    }
}

enum ExplainOutput {
    static func readings(_ rs: [Reading]) -> String {
        rs.map { "\($0.name) = \($0.value == .null ? "unknown" : $0.value.literal)" }.joined(separator: ", ")
    }

    static func text(_ task: TaskFields, _ d: Decision, _ rules: [RuleExplanation]) -> String {
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

    static func json(_ d: Decision, _ rules: [RuleExplanation]) -> JSONValue {
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

extension ProbeOptions {
    /// The thresholds a policy's [battery] and [thermal] sections share with the probes.
    func applying(_ s: PolicySettings) -> ProbeOptions {
        var o = self
        o.battery.lowPercent = s.number("battery.low_percent")
        o.battery.criticalPercent = s.number("battery.critical_percent")
        o.thermal.fairCelsius = s.number("thermal.fair_celsius")
        o.thermal.seriousCelsius = s.number("thermal.serious_celsius")
        o.thermal.criticalCelsius = s.number("thermal.critical_celsius")
        return o
    }
}
