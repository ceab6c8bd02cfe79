import BgtaskJSON
import ArgumentParser
import BgtaskConfig
import BgtaskCore
import BgtaskPolicy
import BgtaskProbes

extension Bgtask.PolicyCommand {
    struct Simulate: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Replay a condition trace (`bgtask watch --record`) and print when the task would have waited, started, been throttled, paused, resumed or stopped.",
            discussion: """
            The same scheduler core as `bgtask run`: holds, budgets (--budget, or run.refresh_budget for kind=refresh), \
            giving up (--max-wait, --no-wait) and expiry (SIGTERM, the grace, SIGKILL — a command is taken to use its \
            whole grace) happen in trace time. After the last line, conditions are taken to stay as they were until \
            pending holds and deadlines pass.
            """)

        @Option(name: .long, help: ArgumentHelp("A JSON-lines trace from `bgtask watch --record`.", valueName: "file"))
        var trace: String

        @Option(name: .long, help: ArgumentHelp("The task's fields, comma-separated.", valueName: "spec"))
        var task: String

        @Option(name: .long, help: ArgumentHelp("Expire the task after it has run this long, as `run --budget`.", valueName: "duration"))
        var budget: String?

        @Option(name: .long, help: ArgumentHelp("Give up waiting after this long, as `run --max-wait`.", valueName: "duration"))
        var maxWait: String?

        @Flag(name: .long, help: "Give up at once if it cannot start, as `run --no-wait`.")
        var noWait = false

        @Flag(name: .long, help: "Print JSON: one object per event.")
        var json = false

        func validate() throws {
            for (flag, v) in [("--max-wait", maxWait), ("--budget", budget)] {
                if let s = v, parseDuration(s) == nil { throw ValidationError("\(flag) \(s): a duration such as 90s, 30m or 2h") }
            }
        }

        @OptionGroup var layers: PolicyFilesOption

        func run() throws {
            let t = try TaskSpec.parse(task)
            let policy = try layers.load().policy
            let records = try TraceFile.read(trace)
            let limits = TaskLimits.from(settings: policy.settings, task: t, budget: budget.flatMap(parseDuration),
                                         maxWait: maxWait.flatMap(parseDuration), noWait: noWait, cpuMonitor: false)
            let events = Simulation.run(policy: policy, task: t, records: records, limits: limits,
                                        time: { localTime($0) }, label: clockText)
            for e in events {
                print(json ? e.json.rendered : Terminal.safe(e.text, keepNewlines: true))
            }
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
