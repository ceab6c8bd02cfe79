import ArgumentParser
import BgtaskPolicy
import BgtaskConfig
#if canImport(Glibc)
@preconcurrency import Glibc
#endif

extension Bgtask.PolicyCommand {
    struct Check: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Check policy files: exit 0 when valid, else each error as file:line:col on stderr and exit 1.",
            discussion: "With no files, checks every layer of the policy in force.")

        @Argument(help: ArgumentHelp("Files to check (default: every layer in force).", valueName: "file"), completion: .file(extensions: ["toml"]))
        var files: [String] = []

        @Flag(name: .shortAndLong, help: "Say nothing when all is well.")
        var quiet = false

        func run() throws {
            let paths: [PolicySource] = files.isEmpty ? PolicyLayers.sources() : files.map(PolicySource.file)
            let (policy, errors) = PolicyLayers.load(paths)
            if !errors.isEmpty {
                PolicyLayers.printErrors(errors)
                let bad = Set(errors.map(\.location.file)).count
                fputs("\(errors.count) error\(errors.count == 1 ? "" : "s") in \(bad) of \(paths.count) file\(paths.count == 1 ? "" : "s")\n", stderr)
                throw ExitCode(1)
            }
            if !quiet {
                print("ok: \(paths.count) file\(paths.count == 1 ? "" : "s"), \(policy.rules.count) rules")
            }
        }
    }
}
