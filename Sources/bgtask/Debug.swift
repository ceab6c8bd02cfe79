import ArgumentParser
import BgtaskBus
import BgtaskProtocol
import BgtaskConfig
import BgtaskCore
import BgtaskJSON
import BgtaskPolicy

extension Bgtask {
    struct Debug: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "debug",
            abstract: "Launch or expire a daemon task now, whatever the conditions (recorded as such).",
            subcommands: [Launch.self, Expire.self])

        struct Launch: ParsableCommand {
            static let configuration = CommandConfiguration(commandName: "launch", abstract: "Start a pending task now (Apple's _simulateLaunchForTaskWithIdentifier).")
            @Argument(help: ArgumentHelp("The task's id.", valueName: "id"), completion: TaskIDCompletion.pending) var id: String
            func run() throws {
                _ = try DaemonClient.call(.debugLaunch, [.string(id)])
                out("\(id): launched")
            }
        }

        struct Expire: ParsableCommand {
            static let configuration = CommandConfiguration(commandName: "expire", abstract: "Send a running task its expiration now (Apple's _simulateExpirationForTaskWithIdentifier).")
            @Argument(help: ArgumentHelp("The task's id.", valueName: "id"), completion: TaskIDCompletion.running) var id: String
            func run() throws {
                _ = try DaemonClient.call(.debugExpire, [.string(id)])
                out("\(id): expiring")
            }
        }
    }
}
