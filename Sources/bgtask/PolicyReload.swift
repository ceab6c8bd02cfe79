import BgtaskProtocol
import ArgumentParser
import BgtaskConfig
import BgtaskJSON

extension Bgtask.PolicyCommand {
    struct Reload: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "reload",
            abstract: "Ask bgtaskd to read the policy layers again now, and say what changed.",
            discussion: """
            bgtaskd also reads them again by itself when a file in a layer directory changes, and on SIGHUP. A layer \
            that does not load leaves the last good policy in force: this says why and exits 1.
            """)

        @Flag(name: .long, help: "Print {\"loaded\": bool, \"said\": string} as JSON.") var json = false

        func run() throws {
            let reply = try DaemonClient.call(.reloadPolicy)
            guard reply.count == 2, let ok = reply[0].bool, let said = reply[1].string else {
                throw ValidationError("bgtaskd answered ReloadPolicy with something else")
            }
            if json {
                print(JSONValue.object([("loaded", .bool(ok)), ("said", .string(said))]).rendered)
            } else {
                out(said)
            }
            if !ok { throw ExitCode(1) }
        }
    }
}
