import ArgumentParser
import BgtaskPolicy
import BgtaskConfig
import BgtaskJSON
#if canImport(Glibc)
@preconcurrency import Glibc
#endif

extension Bgtask.PolicyCommand {
    struct Check: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "check",
            abstract: "Check policy files: exit 0 when valid, else each error as file:line:col on stderr and exit 1.",
            discussion: "With no files, checks every layer of the policy in force.")

        @Argument(help: ArgumentHelp("Files to check (default: every layer in force).", valueName: "file"), completion: .file(extensions: ["toml"]))
        var files: [String] = []

        @Flag(name: .shortAndLong, help: "Say nothing when all is well.")
        var quiet = false

        @Flag(name: .long, help: "Print the result as one JSON object on stdout (errors included); the exit status is the same.")
        var json = false

        func run() throws {
            let paths: [PolicySource] = files.isEmpty ? PolicyLayers.sources() : files.map(PolicySource.file)
            let (policy, errors) = PolicyLayers.load(paths)
            if json {
                let list: [JSONValue] = errors.map { e in
                    .object([("file", .string(e.location.file)), ("line", .number(Double(e.location.line))),
                             ("column", .number(Double(e.location.column))), ("message", .string(e.message))])
                }
                print(JSONValue.object([("ok", .bool(errors.isEmpty)), ("files", .array(paths.map { .string($0.name) })),
                                        ("rules", .number(Double(errors.isEmpty ? policy.rules.count : 0))), ("errors", .array(list))]).rendered)
                if !errors.isEmpty { throw ExitCode(ExitStatus.failure) }
                return
            }
            if !errors.isEmpty {
                PolicyLayers.printErrors(errors)
                let bad = Set(errors.map(\.location.file)).count
                fputs("\(errors.count) error\(errors.count == 1 ? "" : "s") in \(bad) of \(paths.count) file\(paths.count == 1 ? "" : "s")\n", stderr)
                throw ExitCode(ExitStatus.failure)
            }
            if !quiet {
                print("ok: \(paths.count) file\(paths.count == 1 ? "" : "s"), \(policy.rules.count) rules")
            }
        }
    }
}
