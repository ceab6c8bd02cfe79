import ArgumentParser
import BgtaskBus
import BgtaskProtocol
import BgtaskConfig
import BgtaskCore
import BgtaskJSON
import BgtaskPolicy

extension Bgtask {
    struct Cancel: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "cancel",
            abstract: "Remove a pending request from bgtaskd's queue (a running task is expired: SIGTERM, grace, SIGKILL).")

        @Flag(name: .long, help: "Cancel every pending request.")
        var all = false

        @Flag(name: .long, help: "Print the result as JSON.")
        var json = false

        @Argument(help: ArgumentHelp("The task's id.", valueName: "id"), completion: TaskIDCompletion.queued)
        var id: String?

        func validate() throws {
            if all == (id != nil) { throw ValidationError("give a task id or --all") }
        }

        func run() throws {
            if all {
                guard let n = try DaemonClient.call(.cancelAll).first?.number else { DaemonClient.wrongReply(.cancelAll, "no count") }
                if json { print(JSONValue.object([("cancelled", .number(n))]).rendered) } else { out("cancelled \(Int(n)) pending request(s)") }
                return
            }
            let done = try DaemonClient.string(.cancel, [.string(id!)])
            if json { print(JSONValue.object([("id", .string(id!)), ("done", .string(done))]).rendered) } else { out("\(id!): \(done)") }
        }
    }
}
