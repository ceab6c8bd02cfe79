import ArgumentParser
import BgtaskBus
import BgtaskProtocol
import BgtaskConfig
import BgtaskCore
import BgtaskJSON
import BgtaskPolicy
#if canImport(Glibc)
@preconcurrency import Glibc
#endif

extension Bgtask {
    struct Submit: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "submit",
            abstract: "Queue a command with bgtaskd and return at once, printing its id.",
            discussion: """
            The daemon runs it when the policy allows, as `bgtask run` would, and keeps it queued across logout \
            and reboot. One pending request per id: submitting the same id again replaces it. Exit status: 0; \
            2 for bad input (nothing is queued), a command that is not found or not executable as bgtaskd \
            would start it (PATH, or relative to the working directory) among it; 69 when bgtaskd is not reachable; 75 when too many requests wait.
            """)

        @OptionGroup var taskOptions: TaskOptionsGroup

        @Option(name: .long, help: ArgumentHelp("Not before this time: a duration from now (2h), a local time (01:00: the next one; 'tomorrow 01:00', 'sat 09:00'), or ISO-8601 (2026-11-22T21:00, with Z or ±HH:MM).", valueName: "when"))
        var earliest: String?

        @Option(name: .long, help: ArgumentHelp("Not before the next HH:MM local time; with --every 1d, at that time each day.", valueName: "HH:MM"))
        var at: String?

        @Option(name: .long, help: ArgumentHelp("Run at each elapse of a systemd calendar event (systemd.time(7)): 'Mon..Fri 01:00', daily, '*-*-1 03:00'; a missed one runs once when it can (as Persistent=true). `bgtask calendar` shows when one elapses.", valueName: "event"))
        var onCalendar: String?

        @Option(name: .long, help: ArgumentHelp("Run again every DURATION (one pending instance; a missed period runs once).", valueName: "duration"), transform: DurationArgument.parse)
        var every: DurationArgument?

        @Option(name: .long, help: ArgumentHelp("Retry a failed run up to N times, with a growing wait between tries.", valueName: "n"))
        var retry: Int?

        @Flag(name: .long, help: "Print the result as JSON.")
        var json = false

        @Argument(parsing: .captureForPassthrough,
                  help: ArgumentHelp("The command and its arguments: everything from the first word that is not an option of bgtask's (-- before it is accepted, and needed when it starts with -).", valueName: "command"))
        var command: [String] = []

        mutating func validate() throws {
            command = try CommandWords.command(command, usage: "bgtask submit [options] [--] COMMAND [ARGS...]", of: Self.self)
            if let e = earliest, parseWhen(e, now: wallClockNow()) == nil {
                throw ValidationError("--earliest \(e): a duration from now (2h, 30m), a local time (01:00, 'tomorrow 01:00', 'sat 09:00') or an ISO-8601 time such as 2026-11-22T21:00 or 2026-11-22T21:00:00Z")
            }
            if let a = at {
                guard !a.contains(" "), parseClockWords(a, now: wallClockNow()) != nil else { throw ValidationError("--at \(a): a local time such as 01:00 or 18:30:00") }
                if earliest != nil { throw ValidationError("--at and --earliest exclude each other (--earliest 'tomorrow 01:00' says both)") }
            }
            if let e = every, e.seconds < 1 { throw ValidationError("--every \(e): a duration of at least 1s, such as 1d or 6h") }
            if let c = onCalendar {
                let event: CalendarEvent
                do { event = try CalendarEvent(parsing: c) } catch { throw ValidationError("--on-calendar: \(error)") }
                if every != nil || at != nil { throw ValidationError("--on-calendar says when it repeats: it excludes --every and --at") }
                if event.next(after: wallClockNow()) == nil { throw ValidationError("--on-calendar '\(c)' (\(event)) never elapses again") }
            }
            if let r = retry, !(0...100).contains(r) { throw ValidationError("--retry \(r): 0 to 100") }
            // As bgtaskd will look for it at each start (it refuses the same at Submit, with its own PATH).
            if let why = CommandCheck.notRunnable(command[0], directory: nil, path: CommandCheck.searchPath) {
                throw ValidationError("\(why); nothing was queued")
            }
        }

        func run() throws {
            let task = taskOptions.task(command: command)
            var opts = SubmitOptions(id: task.id, kind: task.kind.rawValue, requiresExternalPower: task.requiresExternalPower,
                                     requiresNetwork: task.requiresNetwork, requiresUnmetered: task.requiresUnmetered,
                                     cpuHeavy: task.cpuHeavy, userInitiated: task.userInitiated)
            opts.earliest = (earliest ?? at).flatMap { parseWhen($0, now: wallClockNow()) }
            opts.every = every?.seconds
            opts.budget = taskOptions.budget?.seconds
            opts.window = taskOptions.between?.window.text
            opts.onCalendar = onCalendar
            opts.retry = retry.map { UInt32($0) }
            if let cwd = getcwd(nil, 0) { opts.directory = String(cString: cwd); free(cwd) }
            // The id bgtaskd queued it under (it may differ from the one asked for: none was given); never empty.
            let id = try DaemonClient.string(.submit, [.dict(opts.variant), .strings(command)])
            if json { print(JSONValue.object([("id", .string(id))]).rendered) } else { out(id) }
        }
    }
}
