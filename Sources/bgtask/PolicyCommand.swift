import ArgumentParser
import BgtaskConfig
#if canImport(Glibc)
@preconcurrency import Glibc
#endif

extension Bgtask {
    struct PolicyCommand: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "policy",
            abstract: "Check, show, explain and simulate the rules in the policy layers (bgtask-policy(5)).",
            discussion: """
            Layers, lowest first: the default policy built into bgtask (a file named default.toml in a \
            layer directory takes its place), the shipped policies (share/bgtask/policies), \
            /etc/bgtask/policy.d/*.toml, $XDG_CONFIG_HOME/bgtask/policy.d/*.toml. A later rule with the same id \
            replaces an earlier one; `enabled = false` switches it off. A layer in those directories that does not \
            load is left out with a warning naming its file:line:col, the others in force (as bgtaskd does); a file \
            named with --policy that does not load stops the command with exit 78.
            """,
            subcommands: [Check.self, Show.self, Explain.self, Simulate.self, Reload.self])
    }
}

/// `--policy FILE`: extra layers on top of the ones in force, for trying a change.
struct PolicyFilesOption: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("Add this file as the top layer (repeatable); exit 78 if it does not load.", valueName: "file"), completion: .file(extensions: ["toml"]))
    var policy: [String] = []

    /// The merged policy, by the one rule every command and bgtaskd follow (bgtask(1), EXIT STATUS): a layer found in
    /// a policy directory that does not load is left out with a warning naming its file:line:col, the others in
    /// force; a file named on the command line (`--policy FILE`) is what was asked for, so without it nothing is
    /// decided: 78 (EX_CONFIG).
    func load() throws -> BgtaskPolicyBox {
        let (policy, errors) = PolicyLayers.load(PolicyLayers.sources(extra: self.policy))
        if PolicyLayers.inNamedFile(errors, named: self.policy) {
            PolicyLayers.printErrors(errors)
            fputs("bgtask: the policy does not load; fix the file\(Set(errors.map(\.location.file)).count == 1 ? "" : "s") above (bgtask policy check)\n", stderr)
            throw ExitCode(ExitStatus.config)
        }
        PolicyLayers.warnLeftOut(errors)
        return BgtaskPolicyBox(policy: policy)
    }
}
import BgtaskPolicy
struct BgtaskPolicyBox { let policy: Policy }
