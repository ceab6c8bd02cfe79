import ArgumentParser
import BgtaskConfig
import BgtaskPolicy

/// A task's kind, as `--kind` takes it (completed by the shells from the cases).
extension TaskKind: ExpressibleByArgument {}

/// A duration argument (`90s`, `30m`, `2h`, `1d`, `1h30m`), parsed once where the argument is read.
struct DurationArgument: ExpressibleByArgument, Sendable, CustomStringConvertible {
    let seconds: Double
    let text: String
    init?(argument: String) {
        guard let d = parseDuration(argument) else { return nil }
        seconds = d
        text = argument
    }
    var description: String { text }
    /// For `@Option(transform:)`: a value that is not a duration is refused with the form it takes.
    static func parse(_ s: String) throws -> DurationArgument {
        guard let d = DurationArgument(argument: s) else {
            throw ValidationError("a duration is written 30s, 10m, 2h or 1h30m (a number needs its unit)")
        }
        return d
    }
    static var defaultCompletionKind: CompletionKind { .default }
}

/// `--between 01:00-06:00`.
struct WindowArgument: Sendable, CustomStringConvertible {
    let window: ClockWindow
    var description: String { window.text }
    static func parse(_ s: String) throws -> WindowArgument {
        guard let w = ClockWindow(s) else {
            throw ValidationError("a window is two local times, HH:MM-HH:MM, such as 01:00-06:00 or 22:00-06:00 (not the same time twice)")
        }
        return WindowArgument(window: w)
    }
}

/// The task options `run`, `submit`, `policy explain` and `policy simulate` share (one definition, one validation).
struct TaskOptionsGroup: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("A name for the task, for messages and `bgtask why` (default: the command's name).", valueName: "name"))
    var id: String?

    @Option(name: .long, help: ArgumentHelp("processing (default: runs while you are away), refresh (expires after run.refresh_budget), continued, or regular (a command that does not wait for you to step away).", valueName: "kind"))
    var kind: TaskKind = .processing

    @Flag(name: .long, help: "Do not wait for you to step away (processing work otherwise does): the kind regular.")
    var ignoreIdle = false

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

    @Option(name: .long, help: ArgumentHelp("Only between these local times each day (01:00-06:00; 22:00-06:00 spans midnight): outside, it waits, and a running task is paused until the window opens again.", valueName: "HH:MM-HH:MM"), transform: WindowArgument.parse)
    var between: WindowArgument?

    @Option(name: .long, help: ArgumentHelp("Expire the command after it has run this long (90s, 30m, 2h).", valueName: "duration"), transform: DurationArgument.parse)
    var budget: DurationArgument?

    func validate() throws {
        if unmetered && !requiresNetwork { throw ValidationError("--unmetered goes with --requires-network") }
        if let i = id, let why = TaskID.problem(i) { throw ValidationError("--id: \(why)") }
    }

    /// Whether any option of the group was given (the older `--task 'spec'` form cannot be mixed with them).
    var isGiven: Bool {
        isGivenBesidesBudget || budget != nil
    }

    var isGivenBesidesBudget: Bool {
        id != nil || kind != .processing || ignoreIdle || requiresExternalPower || requiresNetwork || unmetered || cpuHeavy || userInitiated
            || between != nil
    }

    func task(command: [String]) -> TaskFields {
        let k = ignoreIdle && kind == .processing ? TaskKind.regular : kind
        var t = TaskFields(id: id ?? TaskID.fromCommand(command.first ?? "task"), kind: k)
        t.requiresExternalPower = requiresExternalPower
        t.requiresNetwork = requiresNetwork
        t.requiresUnmetered = unmetered
        t.cpuHeavy = cpuHeavy
        t.userInitiated = userInitiated || kind == .continued
        t.window = between?.window
        return t
    }
}
