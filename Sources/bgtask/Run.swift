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
        static let configuration = CommandConfiguration(commandName: "run",
            abstract: "Run a command when the policy allows, and throttle, pause or stop it as conditions change.",
            discussion: """
            Waits, without polling, until the policy's verdict is run (or throttle), starts the command in its \
            own process group, and follows every condition change. Exit status: the command's own (128+N if a \
            signal ended it); 75 when bgtask gave up waiting or expired the command; 2 for usage errors; \
            78 when a policy file named with --policy does not load (a broken layer in a policy directory is left \
            out with a warning, the others in force); 73 when the audit trail or the state directory cannot be \
            written; 127/126 when the command cannot be found or executed.
            """)

        @OptionGroup var taskOptions: TaskOptionsGroup

        @Option(name: .long, help: ArgumentHelp("Give up waiting after this long (exit 75), e.g. 2h.", valueName: "duration"), transform: DurationArgument.parse)
        var maxWait: DurationArgument?

        @Flag(name: .long, help: "Do not wait: exit 75 with the reason if the command cannot start now.")
        var noWait = false

        @Flag(name: .shortAndLong, help: "No messages from bgtask on stderr.")
        var quiet = false

        @OptionGroup var layers: PolicyFilesOption
        @OptionGroup var probe: ProbeOptionsGroup

        @Argument(parsing: .captureForPassthrough,
                  help: ArgumentHelp("The command and its arguments: everything from the first word that is not an option of bgtask's (-- before it is accepted, and needed when it starts with -).", valueName: "command"))
        var command: [String] = []

        mutating func validate() throws {
            command = try CommandWords.command(command, usage: "bgtask run [options] [--] COMMAND [ARGS...]", of: Self.self)
            if noWait && maxWait != nil { throw ValidationError("--no-wait and --max-wait exclude each other") }
        }

        func run() throws {
            let policy = try layers.load().policy
            let task = taskOptions.task(command: command)
            var options = RunOptions(argv: command, task: task, probe: probe.probeOptions.applying(policy.settings))
            options.noWait = noWait
            options.maxWait = maxWait?.seconds
            options.budget = taskOptions.budget?.seconds
            options.quiet = quiet
            options.cpuMonitor = !task.requiresExternalPower
            options.mechanism = CapMechanism.preference(Environment.get("BGTASK_CAP_MECHANISM"))

            let audit: AuditLog
            let active: ActiveTasks
            do {
                audit = try State.audit(write: true)!
                active = try ActiveTasks(runtimeDirectory: StatePaths.preparedRuntimeDirectory())
            } catch let e as State.Failure {
                err("cannot write the audit trail: \(e.message)")
                throw ExitCode(e.status)
            } catch let e as PathError {
                err("runtime directory: \(e)")
                throw ExitCode(ExitStatus.cantCreate)
            }
            audit.runID = "\(task.id)-\(getpid())-\(Int(wallClock()))"
            options.runID = audit.runID
            try? audit.prune(now: wallClock())
            State.recover(probe: options.probe, audit: audit, quiet: quiet)
            let runner = Runner(options: options, policy: policy, observer: audit, state: active)
            throw ExitCode(runner.run())
        }

        /// The words after the first `--`, taken before ArgumentParser sees them (see `Bgtask.main`): parsing
        /// 100,000 arguments through it is quadratic; a command line is passed on as it is (`CommandWords`). Written once by `main`
        /// before any command runs or any thread exists, read after.
        nonisolated(unsafe) static var fullCommand: [String]?
    }
}

