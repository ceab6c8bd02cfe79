import ArgumentParser
import BgtaskPolicy
import BgtaskConfig
import BgtaskJSON
#if canImport(Glibc)
@preconcurrency import Glibc
#endif

extension Bgtask.PolicyCommand {
    struct Check: ParsableCommand {
        /// Where the layers were looked for, and what was there but not read.
        static func layout(to stream: UnsafeMutablePointer<FILE> = stdout) {
            var lines = PolicyLayers.layerDirectories().map { d in
                "read: \(d.path)" + (d.files.map { " (\($0) file\($0 == 1 ? "" : "s"))" } ?? " (missing)")
            }
            lines += PolicyLayers.skipped().map { "skipped: \($0.path) (\($0.why))" }
            for l in lines { fputs(Terminal.safe(l) + "\n", stream) }
        }

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
                var fields: [(String, JSONValue)] = [("ok", .bool(errors.isEmpty)), ("files", .array(paths.map { .string($0.name) })),
                                                     ("rules", .number(Double(errors.isEmpty ? policy.rules.count : 0))), ("errors", .array(list))]
                if files.isEmpty {
                    fields.append(("directories", .array(PolicyLayers.layerDirectories().map { d in
                        .object([("path", .string(d.path)), ("files", d.files.map { .number(Double($0)) } ?? .null)]) })))
                    fields.append(("skipped", .array(PolicyLayers.skipped().map { .object([("path", .string($0.path)), ("why", .string($0.why))]) })))
                }
                print(JSONValue.object(fields).rendered)
                if !errors.isEmpty { throw ExitCode(ExitStatus.failure) }
                return
            }
            if !errors.isEmpty {
                PolicyLayers.printErrors(errors)
                let bad = Set(errors.map(\.location.file)).count
                fputs("\(errors.count) error\(errors.count == 1 ? "" : "s") in \(bad) of \(paths.count) file\(paths.count == 1 ? "" : "s")\n", stderr)
                if files.isEmpty { Check.layout(to: stderr) }
                throw ExitCode(ExitStatus.failure)
            }
            if !quiet {
                print("ok: \(paths.count) file\(paths.count == 1 ? "" : "s"), \(policy.rules.count) rules")
                if files.isEmpty { Check.layout() }
            }
        }
    }
}
