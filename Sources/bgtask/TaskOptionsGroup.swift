import ArgumentParser
import BgtaskConfig
import BgtaskPolicy

/// The task options `run` and `submit` share (one definition, one validation).
struct TaskOptionsGroup: ParsableArguments {
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

    @Option(name: .long, help: ArgumentHelp("Expire the command after it has run this long.", valueName: "duration"))
    var budget: String?

    func validate() throws {
        if !["processing", "refresh", "continued"].contains(kind) { throw ValidationError("--kind \(kind): one of processing, refresh, continued") }
        if unmetered && !requiresNetwork { throw ValidationError("--unmetered goes with --requires-network") }
        if let s = budget, parseDuration(s) == nil { throw ValidationError("--budget \(s): a duration such as 90s, 30m or 2h") }
        if let i = id, let why = TaskID.problem(i) { throw ValidationError("--id: \(why)") }
    }

    func task(command: [String]) -> TaskFields {
        var t = TaskFields(id: id ?? TaskID.fromCommand(command.first ?? "task"), kind: kind)
        t.requiresExternalPower = requiresExternalPower
        t.requiresNetwork = requiresNetwork
        t.requiresUnmetered = unmetered
        t.cpuHeavy = cpuHeavy
        t.userInitiated = userInitiated || kind == "continued"
        return t
    }
}
