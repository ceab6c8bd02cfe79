import ArgumentParser
import BgtaskPolicy

/// "Did you mean" for a mistyped subcommand (`bgtask stauts`, `bgtask policy chek`), as git says it.
enum Suggestions {
    /// The message for the first word of `args` that should name a subcommand of `command` and does not, if any.
    static func unknownSubcommand(_ args: [String], of command: ParsableCommand.Type, path: [String] = ["bgtask"]) -> String? {
        let subs = command.configuration.subcommands
        guard !subs.isEmpty, let word = args.first, !word.hasPrefix("-"), word != "help" else { return nil }
        let names = subs.flatMap { [$0._commandName] + $0.configuration.aliases }
        if let sub = subs.first(where: { $0._commandName == word || $0.configuration.aliases.contains(word) }) {
            return unknownSubcommand(Array(args.dropFirst()), of: sub, path: path + [word])
        }
        // A command that takes arguments of its own after its name (none here) would need care; only the
        // containers (bgtask, policy, debug, apps) are asked.
        let close = names.map { ($0, editDistance(word, $0)) }.filter { $0.1 <= max(2, word.count / 3) }.sorted { $0.1 < $1.1 }
        let hint = close.first.map { "; did you mean '\(path.joined(separator: " ")) \($0.0)'?" } ?? ""
        return "\(path.joined(separator: " ")): '\(word)' is not a command\(hint) (see '\(path.joined(separator: " ")) --help')"
    }
}
