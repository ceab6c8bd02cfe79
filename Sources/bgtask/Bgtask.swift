import ArgumentParser
#if canImport(Glibc)
@preconcurrency import Glibc
#endif

@main
struct Bgtask: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bgtask",
        abstract: "Run background work when the machine can afford it: on the charger, cool, online.",
        version: "0.1.0",
        subcommands: [Status.self, Watch.self])

    static func main() async {
        // Lines go to pipes (scripts, tests): flush each one.
        setvbuf(stdout, nil, _IOLBF, 0)
        do {
            var command = try parseAsRoot()
            if var c = command as? AsyncParsableCommand { try await c.run() } else { try command.run() }
        } catch {
            exit(withError: error)
        }
    }
}
