import ArgumentParser

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
            throw ValidationError("Unknown option '\(first)' (a command whose name starts with - goes after --)")
        }
        return command
    }
}
