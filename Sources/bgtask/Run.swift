import ArgumentParser
import BgtaskPolicy
import BgtaskProbes
import BgtaskAudit
import BgtaskRun
import BgtaskConfig
#if canImport(Glibc)
@preconcurrency import Glibc
#endif

extension Bgtask {
    struct Run: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Run a command when the policy allows, and throttle, pause or stop it as conditions change.",
            discussion: """
            Waits, without polling, until the policy's verdict is run (or throttle), starts the command in its \
            own process group, and follows every condition change. Exit status: the command's own (128+N if a \
            signal ended it); 75 when bgtask gave up waiting or expired the command; 2 for usage errors; \
            78 when the policy does not load; 73 when the audit trail or the state directory cannot be \
            written; 127/126 when the command cannot be found or executed.
            """)

        @Option(name: .long, help: ArgumentHelp("A name for the task, for messages and `bgtask why` (default: the command's name).", valueName: "name"))
        var id: String?

        @Option(name: .long, help: ArgumentHelp("processing (default), refresh (expires after run.refresh_budget) or continued.", valueName: "kind"))
        var kind: String = "processing"

        @Flag(name: .long, help: "Wait for external power (and turn the CPU monitor off, as iOS does).")
        var requiresExternalPower = false

        @Flag(name: .long, help: "Wait for the network.")
        var requiresNetwork = false

        @Flag(name: .long, help: "With --requires-network: wait for an unmetered network.")
        var unmetered = false

        @Flag(name: .long, help: "Declare the work CPU-heavy (the CPU monitor may also find it so).")
        var cpuHeavy = false

        @Flag(name: .long, help: "A person is waiting for it: exempt from discretionary rules, not from critical heat.")
        var userInitiated = false

        @Option(name: .long, help: ArgumentHelp("Give up waiting after this long (exit 75), e.g. 2h.", valueName: "duration"))
        var maxWait: String?

        @Flag(name: .long, help: "Do not wait: exit 75 with the reason if the command cannot start now.")
        var noWait = false

        @Option(name: .long, help: ArgumentHelp("Expire the command after it has run this long.", valueName: "duration"))
        var budget: String?

        @Flag(name: .shortAndLong, help: "No messages from bgtask on stderr.")
        var quiet = false

        @OptionGroup var layers: PolicyFilesOption
        @OptionGroup var probe: ProbeOptionsGroup

        @Argument(parsing: .postTerminator, help: ArgumentHelp("The command and its arguments, after --.", valueName: "command"))
        var command: [String] = []

        func validate() throws {
            if command.isEmpty { throw ValidationError("no command given: bgtask run [options] -- COMMAND [ARGS...]") }
            if !["processing", "refresh", "continued"].contains(kind) { throw ValidationError("--kind \(kind): one of processing, refresh, continued") }
            if unmetered && !requiresNetwork { throw ValidationError("--unmetered goes with --requires-network") }
            if noWait && maxWait != nil { throw ValidationError("--no-wait and --max-wait exclude each other") }
            for (flag, v) in [("--max-wait", maxWait), ("--budget", budget)] {
                if let s = v, parseDuration(s) == nil { throw ValidationError("\(flag) \(s): a duration such as 90s, 30m or 2h") }
            }
            if let i = id, i.isEmpty || i.count > 128 || !i.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "._-".contains($0)) }) {
                throw ValidationError("--id \(i): 1 to 128 letters, digits, '.', '_' or '-'")
            }
        }

        func run() throws {
            let policy = try layers.load().policy
            var task = TaskFields(id: id ?? taskName(command[0]), kind: kind)
            task.requiresExternalPower = requiresExternalPower
            task.requiresNetwork = requiresNetwork
            task.requiresUnmetered = unmetered
            task.cpuHeavy = cpuHeavy
            task.userInitiated = userInitiated || kind == "continued"
            var options = RunOptions(argv: Run.fullCommand ?? command, task: task, probe: probe.probeOptions.applying(policy.settings))
            options.noWait = noWait
            options.maxWait = maxWait.flatMap(parseDuration)
            options.budget = budget.flatMap(parseDuration)
            options.quiet = quiet
            options.cpuMonitor = !requiresExternalPower
            options.mechanism = CapMechanism.preference(Environment.get("BGTASK_CAP_MECHANISM"))

            let audit: AuditLog
            let active: ActiveTasks
            do {
                audit = try State.audit(write: true)!
                active = try ActiveTasks(runtimeDirectory: StatePaths.preparedRuntimeDirectory())
            } catch let e as State.Failure {
                fputs(Terminal.safe("bgtask: cannot write the audit trail: \(e.message)") + "\n", stderr)
                throw ExitCode(e.status)
            } catch let e as PathError {
                fputs(Terminal.safe("bgtask: runtime directory: \(e)") + "\n", stderr)
                throw ExitCode(ExitStatus.cantCreate)
            }
            audit.runID = "\(task.id)-\(getpid())-\(Int(wallClock()))"
            options.runID = audit.runID
            try? audit.prune(now: wallClock())
            State.recover(probe: options.probe, audit: audit, quiet: quiet)
            let runner = Runner(options: options, policy: policy, observer: audit, state: active)
            throw ExitCode(runner.run())
        }

        /// The command after `--`, taken before ArgumentParser sees it (see `Bgtask.main`): parsing
        /// 100,000 arguments through it is quadratic; a command line is passed on as it is.
        nonisolated(unsafe) static var fullCommand: [String]?

        func taskName(_ path: String) -> String {
            let base = path.split(separator: "/").last.map(String.init) ?? path
            let cleaned = base.filter { $0.isASCII && ($0.isLetter || $0.isNumber || "._-".contains($0)) }
            return cleaned.isEmpty ? "task" : String(cleaned.prefix(64))
        }
    }
}

