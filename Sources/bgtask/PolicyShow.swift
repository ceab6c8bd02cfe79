import BgtaskJSON
import ArgumentParser
import BgtaskCore
import BgtaskPolicy
import BgtaskProbes

extension Bgtask.PolicyCommand {
    struct Show: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "show", abstract: "Print the merged policy, each rule with the file and line it comes from.")

        @OptionGroup var layers: PolicyFilesOption

        @Flag(name: .long, help: "Print JSON.")
        var json = false

        func run() throws {
            let policy = try layers.load().policy
            if json {
                print(JSONValue.object([
                    ("files", .array(policy.files.map(JSONValue.string))),
                    ("settings", .object(policy.settings.values.sorted { $0.key < $1.key }.map { ($0.key, .string($0.value.description)) })),
                    ("rules", .array(policy.rules.map { r in .object([
                        ("id", .string(r.id)), ("origin", .string(r.location.description)), ("verdict", .string(r.verdict.rawValue)),
                        ("when", .string(r.when)), ("cpu_percent", JSONValue(r.cpuPercent)), ("grace_s", JSONValue(r.grace)),
                        ("hold_on_s", .number(r.holdOn)), ("hold_off_s", .number(r.holdOff)), ("when_unknown", .string(r.whenUnknown.rawValue)),
                        ("reason", JSONValue(r.reason)), ("history", .array((policy.history[r.id] ?? []).map(JSONValue.string))),
                    ]) })),
                ]).rendered)
                return
            }
            out("# layers: \(policy.files.isEmpty ? "none" : policy.files.joined(separator: " < "))")
            out("# settings: " + policy.settings.values.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " "))
            for r in policy.rules {
                var extra: [String] = []
                if let c = r.cpuPercent { extra.append("cpu_percent=\(c)") }
                if let g = r.grace { extra.append("grace=\(formatDuration(g))") }
                if r.holdOn > 0 { extra.append("hold_on=\(formatDuration(r.holdOn))") }
                if r.holdOff > 0 { extra.append("hold_off=\(formatDuration(r.holdOff))") }
                if r.whenUnknown == .match { extra.append("when_unknown=match") }
                out("\(r.verdict.rawValue.padded(8)) \(r.id)  (\(r.location)\((policy.history[r.id] ?? []).map { "; \($0)" }.joined()))")
                out("         when \(r.when)" + (extra.isEmpty ? "" : "  [\(extra.joined(separator: " "))]"))
            }
        }
    }
}


