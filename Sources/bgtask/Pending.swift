import ArgumentParser
import BgtaskBus
import BgtaskConfig
import BgtaskCore
import BgtaskJSON
import BgtaskPolicy

extension Bgtask {
    struct Pending: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "pending",
            abstract: "What waits in bgtaskd's queue, each with why (the rule and its file:line) and when it is next looked at.")

        @Flag(name: .long, help: "Print the list as JSON.")
        var json = false

        func run() throws {
            let reply = try DaemonClient.call("ListPending")
            let status = try? DaemonClient.call("GetStatus")
            guard case .dicts(let tasks)? = reply.first else { return }
            if json { print(DaemonClient.json(.dicts(tasks)).rendered); return }
            if case .dict(let s)? = status?.first, let w = s["policy_warning"]?.string { out("warning: \(w)") }
            if tasks.isEmpty { out("nothing pending"); return }
            for t in tasks {
                let id = t["id"]?.string ?? "?"
                var line = "\(id): \(t["reason"]?.string ?? "")"
                if let n = t["next_check"]?.number { line += "; looked at again \(untilText(n)) if nothing changes before" }
                else { line += "; looked at again when conditions change" }
                if let e = t["every"]?.number { line += " (every \(formatDuration(e)))" }
                out(line)
            }
        }
    }
}
