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
                      Why.self, Log.self, Status.self, Watch.self, PolicyCommand.self, Calendar.self, Metrics.self, Report.self, Doctor.self])

    /// Subcommands that scripts and status bars call over and over. Parsed on their own, they skip building every
    /// other subcommand's arguments — reflection and protocol-conformance look-ups that were a third of
    /// `bgtask status`'s run time (docs/benchmarks.md, "What the numbers rest on"). Anything unusual (help, completion scripts, a
    /// parse error) takes the full path, so messages and exit codes stay the root command's.
    static let direct: [String: ParsableCommand.Type] = [
        "status": Status.self, "pending": Pending.self, "tasks": Tasks.self, "why": Why.self, "log": Log.self,
        "submit": Submit.self, "cancel": Cancel.self,
    ]

    static func direct(_ args: [String]) -> ParsableCommand? {
        guard let first = args.first, let leaf = direct[first] else { return nil }
        let rest = args.dropFirst()
        if rest.contains(where: { $0 == "help" || $0 == "-h" || $0 == "--help" || $0.hasPrefix("--generate-completion")
                                   || $0.hasPrefix("--experimental") || $0 == "--version" }) { return nil }
        return try? leaf.parseAsRoot(Array(rest))
    }

    static func main() {
        // Lines go to pipes (scripts, tests): flush each one.
        setvbuf(stdout, nil, _IOLBF, 0)
        // A reader that goes away (`bgtask why | head`) must not kill bgtask mid-write: EPIPE instead.
        signal(SIGPIPE, SIG_IGN)
        do {
            var args = Array(CommandLine.arguments.dropFirst())
            // `--json` among bgtask's own options (not the command's, after `--`): errors as JSON too.
            Messages.json = args.prefix(while: { $0 != "--" }).contains("--json")
            // `run … -- COMMAND ARGS…`: the command is handed over whole, not parsed argument by argument.
            if args.first == "run" || args.first == "submit", let dd = args.firstIndex(of: "--"), dd + 1 < args.count {
                Run.fullCommand = Array(args[(dd + 1)...])
                args = Array(args[...dd]) + [args[dd + 1]]
            }
            if args.first == "status", let report = Status.plain(args.dropFirst()) {
                report.print()
                return
            }
            if let unknown = Suggestions.unknownSubcommand(args, of: Bgtask.self) {
                err(unknown.hasPrefix("bgtask: ") ? String(unknown.dropFirst(8)) : unknown, status: ExitStatus.usage)
                Glibc.exit(ExitStatus.usage)
            }
            var command = try direct(args) ?? parseAsRoot(args)
            try command.run()
        } catch {
            // Usage errors exit 2, as Unix tools do (ArgumentParser's own default is EX_USAGE, 64). Messages in
            // bgtask's one style (`bgtask: …`, not ArgumentParser's `Error: …`); help and --version as they are.
            let code = exitCode(for: error)
            if code == .success { exit(withError: error) }
            var message = fullMessage(for: error)
            if message.hasPrefix("Error: ") { message = String(message.dropFirst(7)) }
            let status = code == .validationFailure ? ExitStatus.usage : code.rawValue
            if Messages.json, let first = message.split(separator: "\n").first { message = String(first) }   // no help text in JSON
            if !message.isEmpty { err(message, status: status) }
            Glibc.exit(status)
        }
    }
}
