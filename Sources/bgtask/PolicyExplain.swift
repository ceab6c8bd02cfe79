import BgtaskProtocol
import BgtaskCore
import BgtaskJSON
import ArgumentParser
import BgtaskConfig
import BgtaskPolicy
import BgtaskProbes

extension Bgtask.PolicyCommand {
    struct Explain: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "explain",
            abstract: "Say what the policy decides for a task now, every rule that matched, and every rule that came close.",
            discussion: """
            The task: a queued one by its id (`bgtask policy explain backup`, its fields and time waited asked of \
            bgtaskd), or the options `run` and `submit` take (--kind refresh --requires-external-power --cpu-heavy \
            --id backup), and --waited 2h; the older --task 'kind=…,requires_external_power,waited=2h' still works. \
            Conditions: read live (default, or from a recorded tree with --sysfs-root), or from a file holding \
            `bgtask status --json` output or a `bgtask watch --record` line.
            """)

        @Argument(help: ArgumentHelp("A task waiting in bgtaskd's queue, by id (bgtask pending lists them).", valueName: "id"))
        var queued: String?

        @OptionGroup var taskOptions: TaskOptionsGroup

        @Option(name: .long, help: ArgumentHelp("How long the task has waited (a rule may read task.waited).", valueName: "duration"), transform: DurationArgument.parse)
        var waited: DurationArgument?

        @Option(name: .long, help: ArgumentHelp("The task's fields, comma-separated (the older form of the options above).", valueName: "spec"))
        var task: String?

        @Option(name: .long, help: ArgumentHelp("'live', or a file of conditions.", valueName: "file|live"))
        var conditions: String = "live"

        @Flag(name: .long, help: "Print JSON.")
        var json = false

        @OptionGroup var layers: PolicyFilesOption
        @OptionGroup var probe: ProbeOptionsGroup

        func validate() throws {
            if task != nil, taskOptions.isGiven || waited != nil { throw ValidationError("--task and the task options exclude each other") }
            if queued != nil, task != nil || taskOptions.isGiven || waited != nil {
                throw ValidationError("a queued task's id takes its fields from bgtaskd: no task options with it")
            }
        }

        func run() throws {
            var t = try queued.map(Explain.queuedTask) ?? task.map(TaskSpec.parse) ?? taskOptions.task(command: [])
            if let w = waited { t.waited = w.seconds }
            let policy = try layers.load().policy
            let values = try ConditionSource.read(conditions, probe: probe, settings: policy.settings)
            let evaluator = Policy.Evaluator(policy: policy, conditions: values, time: localTime())
            let (decision, rules) = evaluator.explain(t)
            if json {
                print(ExplainOutput.json(decision, rules).rendered)
            } else {
                out(ExplainOutput.text(t, decision, rules))
            }
        }
    }
}

extension Bgtask.PolicyCommand.Explain {
    /// A pending task's fields as bgtaskd keeps them, and how long it has waited.
    static func queuedTask(_ id: String) throws -> TaskFields {
        guard let d = DaemonClient.pendingTask(id), let q = try? PendingTask(variant: d) else {
            DaemonClient.fail("no task \(id) waits in bgtaskd's queue (bgtask pending lists what does)", ExitStatus.failure)
        }
        var t = TaskFields(id: id, kind: TaskKind(rawValue: q.kind) ?? .processing)
        t.requiresExternalPower = q.requiresExternalPower
        t.requiresNetwork = q.requiresNetwork
        t.requiresUnmetered = q.requiresUnmetered
        t.cpuHeavy = q.cpuHeavy
        t.userInitiated = q.userInitiated
        t.waited = max(0, wallClockNow() - q.submitted)
        return t
    }
}

enum ConditionSource {
    static func read(_ source: String, probe: ProbeOptionsGroup, settings: PolicySettings) throws -> [String: PolicyValue] {
        if source == "live" {
            return ConditionConversion.values(Prober(options: probe.probeOptions.applying(settings)).snapshot().conditions)
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
            return ConditionConversion.values(pairs)
        } catch let e as JSONParseError {
            throw ValidationError("--conditions \(source): not JSON: \(e)")
        }
    }
}
