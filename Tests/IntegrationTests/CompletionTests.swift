import BgtaskTestSupport
import Foundation
import Testing

/// The completion scripts as a person meets them: bash in a real terminal (tmux), keys typed, the screen read.
@Suite("shell completion: subcommands without a slash, ids from the live queue, the command after -- as a command")
struct CompletionTests {
    static let repo = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../..").standardized

    /// The scripts `make install` ships, made from the built bgtask by the same script.
    static func scripts() throws -> URL {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("bgtask-completion-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let (s, _, e) = try Child.run("/usr/bin/python3", [repo.appendingPathComponent("scripts/completions.py").path, Child.bgtaskPath, dir.path], deadline: 60)
        try #require(s == 0, "completions.py: \(e)")
        return dir
    }

    /// A bash at a terminal of its own tmux server, with bgtask's completion loaded, in `directory`.
    final class Terminal {
        let socket = "bgtask-test-\(UUID().uuidString.prefix(8))"
        init(directory: URL, completion: URL, environment: [String: String], width: Int = 160) throws {
            let rc = directory.appendingPathComponent(".bashrc-test")
            var lines = ["PS1='ready$ '", "cd '\(directory.path)'"]
            if FileManager.default.fileExists(atPath: "/usr/share/bash-completion/bash_completion") {
                lines.append(". /usr/share/bash-completion/bash_completion")
            }
            lines.append(". '\(completion.appendingPathComponent("bgtask.bash").path)'")
            try lines.joined(separator: "\n").write(to: rc, atomically: true, encoding: .utf8)
            var env = environment
            env["PATH"] = URL(fileURLWithPath: Child.bgtaskPath).deletingLastPathComponent().path + ":/usr/bin:/bin"
            env["TERM"] = "xterm"
            // An interactive bash writes its history to ~/.bash_history when it exits: the test's own directory.
            env["HOME"] = directory.path
            env["HISTFILE"] = directory.appendingPathComponent(".bash_history").path
            let (s, _, e) = try Child.run("/usr/bin/tmux", ["-L", socket, "-f", "/dev/null", "new-session", "-d", "-x", String(width), "-y", "40",
                                                             "bash --noprofile --rcfile '\(rc.path)' -i"], environment: env, deadline: 20)
            try #require(s == 0, "tmux: \(e)")
        }
        deinit { _ = try? Child.run("/usr/bin/tmux", ["-L", socket, "kill-server"], deadline: 10) }

        func type(_ keys: String...) throws {
            for k in keys { _ = try Child.run("/usr/bin/tmux", ["-L", socket, "send-keys", "-t", "0", k], deadline: 10) }
        }

        func screen() throws -> String { try Child.run("/usr/bin/tmux", ["-L", socket, "capture-pane", "-p", "-t", "0"], deadline: 10).1 }

        /// The screen once `done` holds, or at the deadline (a terminal has no event to wait on: it is read again).
        func screen(within seconds: Double, until done: (String) -> Bool) throws -> String {
            let end = Date().addingTimeInterval(seconds)
            var s = try screen()
            while !done(s) && Date() < end {
                usleep(50_000)
                s = try screen()
            }
            return s
        }

        /// Clears the line being typed and the screen.
        func reset() throws { try type("C-u", "C-l") }
    }

    @Test("bash: a subcommand that is also a directory here completes without a slash; a task id from bgtaskd's queue completes; the command after -- and its arguments complete as commands",
          .enabled(if: installedOrCI("/usr/bin/tmux"), "tmux is not installed"))
    func bashInATerminal() throws {
        let p = try PolicyEnv()
        let d = try SessionDaemon(policy: p, preload: false)
        #expect(try d.bgtask(["submit", "--id", "nightly-backup", "--earliest", "2h", "--", "true"]).0 == 0)
        let completion = try Self.scripts()
        let here = FileManager.default.temporaryDirectory.appendingPathComponent("bgtask-here-\(UUID().uuidString)")
        for sub in ["policy", "pending-stuff", "nightly-backup"] {
            try FileManager.default.createDirectory(at: here.appendingPathComponent(sub), withIntermediateDirectories: true)
        }
        let t = try Terminal(directory: here, completion: completion, environment: d.env)
        _ = try t.screen(within: 10) { $0.contains("ready$") }    // the prompt (tmux trims the space after it)

        try t.type("bgtask pol", "Tab")
        let policy = try t.screen(within: 10) { $0.contains("bgtask policy") }
        #expect(policy.contains("ready$ bgtask policy") && !policy.contains("policy/"), "\(policy)")

        try t.reset()
        try t.type("bgtask cancel night", "Tab")
        let cancel = try t.screen(within: 10) { $0.contains("nightly-backup") }
        #expect(cancel.contains("ready$ bgtask cancel nightly-backup") && !cancel.contains("nightly-backup/"), "\(cancel)")

        try t.reset()
        try t.type("bgtask run --id x -- printen", "Tab")
        let command = try t.screen(within: 10) { $0.contains("printenv") }
        #expect(command.contains("-- printenv"), "\(command)")

        try t.reset()
        try t.type("bgtask submit --every 1d ech", "Tab")
        let plain = try t.screen(within: 10) { $0.contains("echo") }
        #expect(plain.contains("--every 1d echo"), "the command without --: \(plain)")

        // An option's value is not taken for the command: `--id <Tab>` offers no commands.
        try t.reset()
        try t.type("bgtask run --kind ", "Tab", "Tab")
        let kind = try t.screen(within: 10) { $0.contains("processing") }
        #expect(kind.contains("processing") && kind.contains("regular"), "\(kind)")
    }

    @Test("zsh: the command after -- and the command without -- complete as commands, in a real terminal",
          .enabled(if: installedOrCI("/usr/bin/tmux", "/usr/bin/zsh"),
                   "tmux or zsh is not installed"))
    func zshInATerminal() throws {
        let completion = try Self.scripts()
        let home = FileManager.default.temporaryDirectory.appendingPathComponent("bgtask-zsh-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: home, withIntermediateDirectories: true)
        try "fpath=('\(completion.path)' $fpath)\nautoload -U compinit && compinit -u\nPS1='zready%% '\n"
            .write(to: home.appendingPathComponent(".zshrc"), atomically: true, encoding: .utf8)
        let socket = "bgtask-zsh-\(UUID().uuidString.prefix(8))"
        var env = Child.environment(["ZDOTDIR": home.path, "HOME": home.path, "TERM": "xterm"])
        env["PATH"] = URL(fileURLWithPath: Child.bgtaskPath).deletingLastPathComponent().path + ":/usr/bin:/bin"
        let (s, _, e) = try Child.run("/usr/bin/tmux", ["-L", socket, "-f", "/dev/null", "new-session", "-d", "-x", "160", "-y", "40", "zsh -i"],
                                      environment: env, deadline: 20)
        try #require(s == 0, "tmux: \(e)")
        defer { _ = try? Child.run("/usr/bin/tmux", ["-L", socket, "kill-server"], deadline: 10) }
        func screen(until done: (String) -> Bool) throws -> String {
            let end = Date().addingTimeInterval(10)
            var out = ""
            repeat {
                out = try Child.run("/usr/bin/tmux", ["-L", socket, "capture-pane", "-p", "-t", "0"], deadline: 10).1
                if done(out) { break }
                usleep(50_000)
            } while Date() < end
            return out
        }
        func type(_ keys: String...) throws { for k in keys { _ = try Child.run("/usr/bin/tmux", ["-L", socket, "send-keys", "-t", "0", k], deadline: 10) } }
        _ = try screen { $0.contains("zready") }
        try type("bgtask run --id x -- printen", "Tab")
        let after = try screen { $0.contains("printenv") }
        #expect(after.contains("-- printenv"), "\(after)")
        try type("C-u")
        try type("bgtask submit --every 1d printen", "Tab")
        let plain = try screen { $0.contains("1d printenv") }
        #expect(plain.contains("--every 1d printenv"), "\(plain)")
    }

    @Test("fish: the command of run/submit completes as a command line, after -- or from its first word; options still complete",
          .enabled(if: installedOrCI("/usr/bin/fish"), "fish is not installed"))
    func fish() throws {
        let completion = try Self.scripts()
        let home = FileManager.default.temporaryDirectory.appendingPathComponent("bgtask-fish-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: home, withIntermediateDirectories: true)
        func complete(_ line: String) throws -> String {
            let env = Child.environment(["HOME": home.path, "XDG_CONFIG_HOME": home.appendingPathComponent(".config").path])
            return try Child.run("/usr/bin/fish", ["-c", "source '\(completion.appendingPathComponent("bgtask.fish").path)'; complete -C '\(line)'"],
                                 environment: env, deadline: 30).1
        }
        #expect(try complete("bgtask run --id x -- printen").contains("printenv"))
        #expect(try complete("bgtask submit --every 1d printen").contains("printenv"))
        #expect(try complete("bgtask run --req").contains("--requires-external-power"))
        #expect(try !complete("bgtask run --id printen").contains("printenv"), "an option's value is not the command")
    }
}

@Suite("bgtask tasks on a terminal: a live view on the alternate screen")
struct LiveViewTests {
    @Test("the live view draws a table with the rule that throttles a task and its file:line, and Ctrl-C puts back the screen as it was",
          .enabled(if: installedOrCI("/usr/bin/tmux"), "tmux is not installed"))
    func alternateScreen() throws {
        let p = try PolicyEnv()
        try p.userPolicy("50-slow.toml", "[[rule]]\nid = \"crunch.slow\"\nwhen = 'task.id == \"crunch\"'\nverdict = \"throttle\"\ncpu_percent = 20\nreason = \"kept slow\"\n")
        let d = try SessionDaemon(policy: p, preload: false)
        #expect(try d.bgtask(["submit", "--id", "crunch", "--ignore-idle", "--", "sleep", "60"]).0 == 0)
        _ = try #require(d.said("crunch: started"), "\(d.daemon?.stderr ?? "")")
        let here = FileManager.default.temporaryDirectory.appendingPathComponent("bgtask-live-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: here, withIntermediateDirectories: true)
        let t = try CompletionTests.Terminal(directory: here, completion: try CompletionTests.scripts(), environment: d.env, width: 300)
        _ = try t.screen(within: 10) { $0.contains("ready$") }
        try t.type("echo MARKER-BEFORE; bgtask tasks", "Enter")
        let live = try t.screen(within: 10) { $0.contains("crunch") && $0.contains("WHY") }
        #expect(live.contains("ID") && live.contains("STATE") && live.contains("WHY"), "\(live)")
        #expect(live.contains("kept slow — rule crunch.slow (") && live.contains("50-slow.toml:2)"), "\(live)")
        #expect(!live.contains("MARKER-BEFORE"), "the live view is on a screen of its own: \(live)")
        try t.type("C-c")
        let after = try t.screen(within: 10) { $0.contains("MARKER-BEFORE") && !$0.contains("WHY") }
        #expect(after.contains("MARKER-BEFORE") && !after.contains("WHY"), "the screen as it was: \(after)")
        _ = try d.bgtask(["cancel", "crunch"])
    }
}
