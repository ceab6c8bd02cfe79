import ArgumentParser
import BgtaskPolicy

/// The command given to `run` and `submit`: everything from the first word that is not one of bgtask's options,
/// as `nice`, `timeout` and `systemd-run` take it. `--` may come before it, and must where the command itself
/// starts with `-`; any other word starting with `-` there is an option bgtask does not know.
enum CommandWords {
    static func command(_ words: [String], usage: String, of subcommand: ParsableCommand.Type) throws -> [String] {
        // The parser leaves every word from the first one it does not know to the command, --help included.
        if words.first == "--help" || words.first == "-h" { throw CleanExit.helpRequest(subcommand) }
        let afterTerminator = words.first == "--"
        var command = afterTerminator ? Array(words.dropFirst()) : words
        // `main` gave the parser the words up to the first `--` and one more (`Run.fullCommand`: all after it). That
        // `--` came before the command: the command is all of it. It came after the command's first word, as one of
        // the command's own (`git log -- FILE`): the words the parser took, then the rest.
        if let full = Bgtask.Run.fullCommand {
            command = afterTerminator ? full : command + full.dropFirst()
        }
        guard let first = command.first, !first.isEmpty else { throw ValidationError("no command given: \(usage)") }
        if !afterTerminator, first.hasPrefix("-") {
            let hint = closestOption(first, of: subcommand).map { "; did you mean '\($0)'?" } ?? ""
            throw ValidationError("Unknown option '\(first)'\(hint) (a command whose name starts with - goes after --)")
        }
        return command
    }

    /// The option of `subcommand` nearest `word` (`--requires-externl-power` → `--requires-external-power`), as the
    /// parser says for the commands it parses alone: the long names its help lists, within a third of the word.
    static func closestOption(_ word: String, of subcommand: ParsableCommand.Type) -> String? {
        let name = String(word.prefix { $0 != "=" })
        guard name.hasPrefix("--"), name.count > 3 else { return nil }
        var options: Set<String> = []
        for token in subcommand.helpMessage(columns: 1000).split(whereSeparator: { " ,[]<>=\n".contains($0) }) where token.hasPrefix("--") && token.count > 2 {
            options.insert(String(token))
        }
        return options.map { ($0, editDistance(name, $0)) }.filter { $0.1 <= max(2, name.count / 3) }
            .min { ($0.1, $0.0) < ($1.1, $1.0) }?.0
    }
}
