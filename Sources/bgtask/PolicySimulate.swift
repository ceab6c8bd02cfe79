import BgtaskJSON
import ArgumentParser
import BgtaskConfig
import BgtaskCore
import BgtaskPolicy
import BgtaskProbes

extension Bgtask.PolicyCommand {
    struct Simulate: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "simulate",
            abstract: "Replay a condition trace (`bgtask watch --record`) and print when the task would have waited, started, been throttled, paused, resumed or stopped.",
            discussion: """
            The same scheduler core as `bgtask run`: holds, budgets (--budget, or run.refresh_budget for kind=refresh), \
            giving up (--max-wait, --no-wait) and expiry (SIGTERM, the grace, SIGKILL — a command is taken to use its \
            whole grace) happen in trace time. After the last line, conditions are taken to stay as they were until \
            pending holds and deadlines pass.
            """)

        @Option(name: .long, help: ArgumentHelp("A JSON-lines trace from `bgtask watch --record`.", valueName: "file"))
        var trace: String

        @OptionGroup var taskOptions: TaskOptionsGroup

        @Option(name: .long, help: ArgumentHelp("The task's fields, comma-separated (the older form of the options above).", valueName: "spec"))
        var task: String?

        @Option(name: .long, help: ArgumentHelp("Give up waiting after this long, as `run --max-wait`.", valueName: "duration"), transform: DurationArgument.parse)
        var maxWait: DurationArgument?

        @Flag(name: .long, help: "Give up at once if it cannot start, as `run --no-wait`.")
        var noWait = false

        @Option(name: .long, help: ArgumentHelp("Also draw the task against the trace's readings into this HTML page (as `bgtask report` does).", valueName: "file"),
                completion: .file(extensions: ["html"]))
        var html: String?

        @Flag(name: .long, help: "Print JSON: one object per event.")
        var json = false

        func validate() throws {
            // --budget is the group's; with the older --task form it may still be given.
            if task != nil, taskOptions.isGiven && !(taskOptions.budget != nil && !taskOptions.isGivenBesidesBudget) {
                throw ValidationError("--task and the task options exclude each other")
            }
        }

        @OptionGroup var layers: PolicyFilesOption

        func run() throws {
            let t = try task.map(TaskSpec.parse) ?? taskOptions.task(command: [])
            let policy = try layers.load().policy
            let records = try TraceFile.read(trace)
            let limits = TaskLimits.from(settings: policy.settings, task: t, budget: taskOptions.budget?.seconds,
                                         maxWait: maxWait?.seconds, noWait: noWait, cpuMonitor: false)
            let events = Simulation.run(policy: policy, task: t, records: records, limits: limits,
                                        time: { localTime($0) }, label: { clockText($0) })
            for e in events {
                print(json ? e.json.rendered : Terminal.safe(e.text, keepNewlines: true))
            }
            if let path = html {
                let page = Simulate.timeline(task: t, records: records, events: events, trace: trace).html()
                do { try Bgtask.Metrics.writeAtomically(page, to: path) } catch {
                    err("\(error)", status: ExitStatus.cantCreate)
                    throw ExitCode(ExitStatus.cantCreate)
                }
            }
        }

        /// The simulated task against the trace's readings.
        static func timeline(task: TaskFields, records: [TraceRecord], events: [SimulationEvent], trace: String) -> Timeline {
            let start = records.first?.time ?? 0
            let end = max(records.last?.time ?? start, events.last?.time ?? start) + 60
            var t = Timeline(start: start, end: end, title: "bgtask policy simulate: \(task.id) on \(trace)")
            func text(_ v: PolicyValue?) -> String {
                switch v ?? .null {
                case .null: return "null"
                case .bool(let b): return b ? "true" : "false"
                case .number(let n), .duration(let n): return String(Int(n.rounded()))
                case .string(let s): return s
                case .list: return "list"
                }
            }
            var history: [String: [(time: Double, value: String)]] = [:]
            for name in ["power.external", "battery.percent", "thermal.state", "thermal.celsius", "user.idle", "network.online"] {
                var changes: [(time: Double, value: String)] = []
                for r in records where r.conditions[name] != nil {
                    let v = text(r.conditions[name])
                    if changes.last?.value != v { changes.append((r.time, v)) }
                }
                if !changes.isEmpty { history[name] = changes }
            }
            Bgtask.Report.readings(history, into: &t)
            var taskEvents: [Timeline.TaskEvent] = []
            for e in events {
                let m = e.decision.matches.first
                let rule = m.map { "\($0.ruleID) (\($0.location))" }
                if e.actions.isEmpty, e.phase == .waiting, e.decision.verdict != .run {
                    taskEvents.append(.init(time: e.time, event: "deferred", detail: "", rule: rule, reason: m?.reason))
                }
                for a in e.actions {
                    let (name, detail): (String?, String) = {
                        switch a {
                        case .start: return ("started", "")
                        case .throttle(let p): return ("throttled", "\(p)%")
                        case .unthrottle: return ("unthrottled", "")
                        case .pause: return ("paused", "")
                        case .resume: return ("resumed", "")
                        case .expire: return ("expired", "")
                        case .kill: return ("killed", "")
                        case .giveUp(let r): return ("gave-up", r.description)
                        default: return (nil, "")
                        }
                    }()
                    if let n = name { taskEvents.append(.init(time: e.time, event: n, detail: detail, rule: rule, reason: m?.reason)) }
                }
            }
            t.addTask(task.id, events: taskEvents)
            return t
        }
    }
}

extension TraceFile {
    static func read(_ path: String) throws -> [TraceRecord] {
        let text: String
        switch PolicyLayers.readText(path) {
        case .success(let s): text = s
        case .failure(let e): throw ValidationError("--trace \(path): \(e)")
        }
        do { return try TraceFile.parse(text) } catch {
            throw ValidationError(error.line.map { "\(path):\($0): \(error.message)" } ?? "--trace \(path): \(error.message)")
        }
    }
}
