import BgtaskTestSupport
import Foundation
import Testing

/// `bgtask tasks` tells what runs now, whoever runs it: bgtaskd's tasks and the foreground `bgtask run`s.
@Suite("bgtask tasks: bgtaskd's tasks and foreground bgtask runs, a killed run not listed, no daemon said")
struct TasksTests {
    static func list(_ json: String) throws -> [[String: Any]] {
        try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [[String: Any]], "not a JSON list: \(json)")
    }

    /// bgtaskd running `daemonTask` (`sleep 60`) and, beside it, a foreground `bgtask run --id fg -- sleep 30`, both
    /// started; the pid is the foreground command's.
    static func both(_ p: PolicyEnv, daemonTask: String) throws -> (SessionDaemon, Child, pid_t) {
        let d = try SessionDaemon(policy: p, preload: false)
        #expect(try d.bgtask(["submit", "--id", daemonTask, "--ignore-idle", "--", "sleep", "60"]).0 == 0)
        _ = try #require(d.said("\(daemonTask): started"), "\(d.daemon?.stderr ?? "")")
        let run = try Child(Child.bgtaskPath, ["run", "--id", "fg", "--ignore-idle", "--", "sleep", "30"], environment: d.env)
        let started = try #require(run.errorLine(within: 10) { $0.contains("fg: started") }, "\(run.stderr)")
        return (d, run, try #require(startedPID(started), "\(started)"))
    }

    @Test("a foreground bgtask run is listed beside bgtaskd's task, by run, with its pid, supervisor and runtime; once its bgtask run is SIGKILLed it is not, its record left for recovery; without bgtaskd the runs are still listed, the daemon's absence said, exit 69")
    func foregroundRuns() throws {
        let p = try PolicyEnv()
        let (d, run, pid) = try Self.both(p, daemonTask: "bg")
        defer { _ = try? d.bgtask(["cancel", "bg"]); run.stop(); kill(-pid, SIGKILL) }
        let supervisor = run.process.processIdentifier

        let (s, json, e) = try d.bgtask(["tasks", "--json"])
        #expect(s == 0 && e.isEmpty, "\(s) \(e)")
        let tasks = try Self.list(json)
        let fg = try #require(tasks.first { $0["id"] as? String == "fg" }, "\(json)")
        #expect(fg["by"] as? String == "run" && fg["state"] as? String == "running" && fg["kind"] as? String == "regular", "\(json)")
        #expect(fg["pid"] as? Int == Int(pid) && fg["supervisor_pid"] as? Int == Int(supervisor), "\(json)")
        #expect((fg["runtime"] as? Double).map { $0 >= 0 && $0 < 30 } == true, "\(json)")
        let bg = try #require(tasks.first { $0["id"] as? String == "bg" }, "\(json)")
        #expect(bg["by"] as? String == "bgtaskd", "\(json)")
        // bgtaskd is killed below: its task would outlive it.
        let bgPID = (bg["pid"] as? Int).map { pid_t($0) }
        defer { if let bgPID { kill(-bgPID, SIGKILL); kill(bgPID, SIGKILL) } }
        #expect(tasks.count == 2, "\(json)")

        let (_, text, _) = try d.bgtask(["tasks", "--once"])
        #expect(text.contains("fg: running, pid \(pid), running ") && text.contains(", by bgtask run (pid \(supervisor))"), "\(text)")
        #expect(text.contains("bg: running") && !text.split(separator: "\n").contains { $0.hasPrefix("bg:") && $0.contains("by bgtask run") }, "\(text)")

        // Without bgtaskd: the foreground run is still told, bgtaskd's absence said in words, and 69.
        d.crash()
        let alone = try d.bgtask(["tasks", "--json"])
        #expect(alone.0 == 69, "\(alone)")
        #expect(try Self.list(alone.1).map { $0["id"] as? String } == ["fg"], "\(alone)")
        #expect(alone.2.contains("bgtaskd is not reachable on the session bus") && alone.2.contains("listed only the foreground `bgtask run`s"), "\(alone)")
        let aloneText = try d.bgtask(["tasks"])
        #expect(aloneText.0 == 69 && aloneText.1.hasPrefix("fg: running, pid \(pid)"), "\(aloneText)")

        // SIGKILL: the record stays (the next run, why or log recovers what it left), but it is not a live run.
        let record = p.dir.appendingPathComponent("run/active/\(supervisor).rec").path
        #expect(FileManager.default.fileExists(atPath: record))
        kill(supervisor, SIGKILL)
        let deadline = Date().addingTimeInterval(5)
        while Date() < deadline, processState(supervisor).map({ $0 != "Z" }) ?? false { usleep(10_000) }   // SIGKILL has no event to wait on
        let dead = try d.bgtask(["tasks", "--json"])
        #expect(try dead.0 == 69 && Self.list(dead.1).isEmpty, "\(dead)")
        #expect(FileManager.default.fileExists(atPath: record), "a listing leaves the record to recovery")
        #expect(try d.bgtask(["tasks", "--once"]).1 == "nothing running\n")
    }

    @Test("the live view on a terminal: a task throttled by a rule reads `throttled 25%` once, a foreground run beside it by run",
          .enabled(if: installedOrCI("/usr/bin/tmux"), "tmux is not installed"))
    func liveViewSaysTheCapOnce() throws {
        let p = try PolicyEnv()
        try p.userPolicy("50-cap.toml", "[[rule]]\nid = \"crunch.cap\"\nwhen = 'task.id == \"crunch\"'\nverdict = \"throttle\"\ncpu_percent = 25\nreason = \"kept at a quarter\"\n")
        let (d, run, pid) = try Self.both(p, daemonTask: "crunch")
        defer { _ = try? d.bgtask(["cancel", "crunch"]); run.stop(); kill(-pid, SIGKILL) }

        let here = FileManager.default.temporaryDirectory.appendingPathComponent("bgtask-tasks-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: here, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: here) }
        let t = try CompletionTests.Terminal(directory: here, completion: try CompletionTests.scripts(), environment: d.env, width: 200)
        _ = try t.screen(within: 10) { $0.contains("ready$") }
        try t.type("bgtask tasks", "Enter")
        let live = try t.screen(within: 10) { $0.contains("crunch") && $0.contains("fg ") && $0.contains("WHY") }
        let crunch = try #require(live.split(separator: "\n").first { $0.hasPrefix("crunch ") }, "\(live)")
        #expect(crunch.contains(" bgtaskd ") && crunch.contains(" throttled 25% ") && !crunch.contains("25% 25%"), "\(live)")
        #expect(crunch.contains("kept at a quarter — rule crunch.cap ("), "\(live)")
        let fg = try #require(live.split(separator: "\n").first { $0.hasPrefix("fg ") }, "\(live)")
        #expect(fg.contains(" run ") && fg.contains(" running ") && fg.contains("bgtask run, pid \(run.process.processIdentifier)"), "\(live)")
        #expect(live.contains("2 running"), "\(live)")
        try t.type("C-c")
        _ = try t.screen(within: 10) { !$0.contains("WHY") }

        // Without bgtaskd the view still shows the foreground run, and says why once the screen is back, with 69.
        d.crash()
        try t.reset()
        try t.type("bgtask tasks; echo \"status $?\"", "Enter")
        let alone = try t.screen(within: 10) { $0.contains("fg ") && $0.contains("WHY") }
        #expect(alone.contains("1 running (bgtaskd is not reachable: only foreground `bgtask run`s)") && !alone.contains("crunch"), "\(alone)")
        try t.type("C-c")
        let after = try t.screen(within: 10) { $0.range(of: #"status \d+\n"#, options: .regularExpression) != nil }
        let unwrapped = after.replacingOccurrences(of: "\n", with: "")    // the sentence is wider than the terminal
        #expect(unwrapped.contains("bgtaskd is not reachable on the session bus") && unwrapped.contains("listed only the foreground `bgtask run`s")
                && after.contains("status 69\n") && !after.contains("WHY"), "\(after)")
    }
}
