import ArgumentParser
import BgtaskConfig
#if canImport(Glibc)
@preconcurrency import Glibc
#endif

@main
/// Synchronous on purpose: an async main puts libdispatch's once-a-second worker-pool monitor into
/// every process, and an idle `bgtask watch` must not wake at all.
struct Bgtask: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bgtask",
        abstract: "Run background work when the machine can afford it: on the charger, cool, online.",
        version: bgtaskVersion,
        subcommands: [Run.self, Submit.self, Pending.self, Tasks.self, Cancel.self, Output.self, Debug.self, Apps.self,
                      Why.self, Log.self, Status.self, Watch.self, PolicyCommand.self])

    static func main() {
        // Lines go to pipes (scripts, tests): flush each one.
        setvbuf(stdout, nil, _IOLBF, 0)
        // A reader that goes away (`bgtask why | head`) must not kill bgtask mid-write: EPIPE instead.
        signal(SIGPIPE, SIG_IGN)
        do {
            var args = Array(CommandLine.arguments.dropFirst())
            // `run … -- COMMAND ARGS…`: the command is handed over whole, not parsed argument by argument.
            if args.first == "run" || args.first == "submit", let dd = args.firstIndex(of: "--"), dd + 1 < args.count {
                Run.fullCommand = Array(args[(dd + 1)...])
                args = Array(args[...dd]) + [args[dd + 1]]
            }
            var command = try parseAsRoot(args)
            try command.run()
        } catch {
            // Usage errors exit 2, as Unix tools do (ArgumentParser's own default is EX_USAGE, 64).
            let code = exitCode(for: error)
            if code == .validationFailure {
                fputs(Terminal.safe(fullMessage(for: error), keepNewlines: true) + "\n", stderr)
                Glibc.exit(ExitStatus.usage)
            }
            exit(withError: error)
        }
    }
}
