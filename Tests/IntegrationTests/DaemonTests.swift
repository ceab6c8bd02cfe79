import BgtaskTestSupport
import Foundation
import Testing

struct DaemonTestError: Error, CustomStringConvertible {
    var message: String
    var description: String { message }
}

/// bgtaskd on a private session bus, with the per-test state and policy directories of `PolicyEnv`.
final class SessionDaemon {
    let bus: PrivateBus
    let env: [String: String]
    var daemon: Child?

    let arguments: [String]
    let daemonEnv: [String: String]

    /// `system`: a private system bus (mocked logind) for the daemon; without one it runs `--no-dbus`.
    /// `daemonEnv`: for the daemon only; `extraEnv`: for the daemon and every `bgtask` call.
    init(policy: PolicyEnv, preload: Bool, system: PrivateBus? = nil, session: PrivateBus? = nil, daemonEnv: [String: String] = [:],
         extraEnv: [String: String] = [:]) throws {
        bus = try session ?? PrivateBus()
        env = policy.environment(preload: preload, ["DBUS_SESSION_BUS_ADDRESS": bus.address, "DBUS_SYSTEM_BUS_ADDRESS": system?.address])
            .merging(extraEnv) { $1 }
        self.daemonEnv = daemonEnv
        arguments = system == nil ? ["--no-dbus"] : []
        try start()
    }

    deinit { daemon?.stop() }

    func start() throws {
        // As systemd or a shell starts it: no signal blocked (Spawned resets the mask the test thread has).
        let d = try Child(Child.bgtaskdPath, arguments, environment: env.merging(daemonEnv) { $1 })
        daemon = d
        // Its own line once the name is owned: an event, not a sleep.
        guard d.errorLine(within: 20, where: { $0.contains("serving io.github.bgtask.Scheduler1") }) != nil else {
            throw DaemonTestError(message: "bgtaskd did not come up: \(d.stderr)")
        }
    }

    /// SIGTERM and wait (bounded), then a new daemon on the same state.
    func restart() throws {
        daemon?.process.terminate()
        _ = daemon?.waitExit(within: 15)
        try start()
    }

    /// SIGKILL: no chance to clean up.
    func crash() {
        guard let d = daemon else { return }
        kill(d.process.processIdentifier, SIGKILL)
        _ = d.waitExit(within: 10)
    }

    /// The next line of the daemon's stderr that contains `text` (bounded).
    /// 30 s by default: generous for a machine busy with the rest of the suite (a python app's start under a load of
    /// 8 took over 10); a test that passes waits only as long as the line takes.
    func said(_ text: String, within seconds: Double = 30) -> String? {
        daemon?.errorLine(within: seconds) { $0.contains(text) }
    }

    /// The next line about task `id` after its "submitted": what became of it (waiting, started, not started).
    func saidOf(_ id: String, within seconds: Double = 30) -> String? {
        daemon?.errorLine(within: seconds) { $0.contains("\(id): ") && !$0.contains("\(id): submitted") }
    }

    func pending() throws -> [[String: Any]] {
        let (s, o, e) = try bgtask(["pending", "--json"])
        guard s == 0, let list = try JSONSerialization.jsonObject(with: Data(o.utf8)) as? [[String: Any]] else {
            throw DaemonTestError(message: "pending --json: status \(s), \(o) \(e); bgtaskd said: \(daemon?.stderr.suffix(3000) ?? "")")
        }
        return list
    }

    func bgtask(_ args: [String]) throws -> (Int32, String, String) {
        try Child.run(Child.bgtaskPath, args, environment: env, deadline: 30)
    }

    /// bgtask run from the working directory `dir`, as a shell there would run it (a submit sends it as the task's).
    func bgtask(in dir: URL, _ args: [String]) throws -> (Int32, String, String) {
        try Child.run("/bin/sh", ["-c", "cd \"$1\" && shift && exec \"$@\"", "sh", dir.path, Child.bgtaskPath] + args, environment: env, deadline: 30)
    }
}

extension UmockdevIntegrationTests {
    @Test("bgtaskd: submit on battery → pending with rule and file:line → daemon restart → still pending → charger uevent → runs → why tells it → not pending")
    func daemonKeepsTheQueueAcrossARestartAndRunsOnTheCharger() throws {
        try requirePreload()
        let p = try PolicyEnv()
        try p.userPolicy("50-fast.toml", immediatePowerRule)
        let tb = Testbed()
        let laptop = tb.addLaptop(acOnline: false)
        let d = try SessionDaemon(policy: p, preload: true)
        let marker = p.dir.appendingPathComponent("ran")

        let (st, out, err) = try d.bgtask(["submit", "--id", "backup", "--requires-external-power", "--",
                                           "sh", "-c", "echo started; echo done > '\(marker.path)'"])
        #expect(st == 0, "submit: \(err)")
        #expect(out.trimmingCharacters(in: .whitespacesAndNewlines) == "backup")

        func pendingJSON() throws -> [[String: Any]] {
            let (s, o, e) = try d.bgtask(["pending", "--json"])
            #expect(s == 0, "pending: \(e)")
            return try #require(try JSONSerialization.jsonObject(with: Data(o.utf8)) as? [[String: Any]], "not a JSON array: \(o)")
        }
        var list = try pendingJSON()
        var entry = try #require(list.first { $0["id"] as? String == "backup" }, "not pending: \(list)")
        #expect(entry["rule"] as? String == "processing.needs-power")
        #expect((entry["location"] as? String)?.hasSuffix("50-fast.toml:2") == true, "\(entry)")
        #expect((entry["reason"] as? String)?.contains("waiting for external power") == true)

        try d.restart()
        list = try pendingJSON()
        entry = try #require(list.first { $0["id"] as? String == "backup" }, "lost in the restart: \(list); \(d.daemon?.stderr ?? "")")
        #expect(entry["rule"] as? String == "processing.needs-power")
        #expect(!FileManager.default.fileExists(atPath: marker.path))

        tb.plug(laptop, true)
        let finished = d.daemon?.errorLine(within: 10) { $0.contains("backup: finished") }
        #expect(finished?.contains("exit 0") == true, "did not run: \(d.daemon?.stderr ?? "")")
        #expect(FileManager.default.fileExists(atPath: marker.path))

        let (ws, why, we) = try d.bgtask(["why", "backup"])
        #expect(ws == 0, "why: \(we)")
        #expect(why.contains("processing.needs-power"), "\(why)")
        #expect(why.contains("Started"), "\(why)")
        #expect(why.contains("finished") || why.contains("exit 0"), "\(why)")

        let (os, output, _) = try d.bgtask(["output", "backup"])
        #expect(os == 0 && output == "started\n", "output: \(output)")
        #expect(try pendingJSON().isEmpty)
    }
}

/// The state letter of a process, or nil once it is gone (a zombie counts as gone).
func liveState(_ pid: Int32) -> String? {
    guard let s = processState(pid), s != "Z" else { return nil }
    return s
}

/// Waits (bounded) until `condition` holds, asking every `interval` seconds: for what another process does that
/// has no event here (a stop, an exit, its open files). True if it held by the deadline.
func polled(within seconds: Double, every interval: Double = 0.02, _ condition: () -> Bool) -> Bool {
    let end = Date().addingTimeInterval(seconds)
    while Date() < end {
        if condition() { return true }
        usleep(useconds_t(interval * 1_000_000))
    }
    return condition()
}

/// Waits (bounded) until `pid` is in `state`.
func reaches(_ pid: Int32, _ state: String, within seconds: Double) -> Bool {
    polled(within: seconds) { liveState(pid) == state }
}

/// Waits (bounded) until `pid` is gone.
func gone(_ pid: Int32, within seconds: Double) -> Bool {
    polled(within: seconds, every: 0.05) { liveState(pid) == nil }
}

extension UmockdevIntegrationTests {
    @Test("bgtaskd SIGKILLed while a task is paused: after the restart it is not left frozen, is recorded as interrupted, and waits again")
    func daemonCrashWhilePaused() throws {
        try requirePreload()
        let p = try PolicyEnv()
        try p.userPolicy("50-fast.toml", immediatePowerRule)
        let tb = Testbed()
        let laptop = tb.addLaptop(acOnline: true, batteryStatus: "Charging")
        let d = try SessionDaemon(policy: p, preload: true)
        #expect(try d.bgtask(["submit", "--id", "sync", "--requires-external-power", "--", "sleep", "300"]).0 == 0)
        let started = try #require(d.said("sync: started"), "did not start: \(d.daemon?.stderr ?? "")")
        let pid = try #require(startedPID(started))
        tb.plug(laptop, false)
        _ = try #require(d.said("sync: paused"), "not paused: \(d.daemon?.stderr ?? "")")
        #expect(reaches(pid, "T", within: 5), "state \(liveState(pid) ?? "gone")")   // SIGSTOP lands a moment after it is sent

        d.crash()
        // Frozen with nobody to thaw it — unless the kernel's rule for an orphaned process group with a
        // stopped member (SIGHUP, SIGCONT) ended it already; either way the restart must leave nothing frozen.
        try d.restart()
        #expect(gone(pid, within: 10), "the paused command was left behind: state \(liveState(pid) ?? "gone")")
        let list = try d.pending()
        let entry = try #require(list.first { $0["id"] as? String == "sync" }, "not queued again: \(list)")
        #expect((entry["reason"] as? String)?.contains("external power") == true)
        let (_, running, _) = try d.bgtask(["tasks", "--json"])
        #expect(running.trimmingCharacters(in: .whitespacesAndNewlines) == "[]")
        let (_, why, _) = try d.bgtask(["why", "sync"])
        #expect(why.contains("interrupted") || why.contains("gone"), "\(why)")
    }

    @Test("bgtaskd SIGKILLed while a task runs: the restart ends the old command before the task runs again, so it never runs twice at once")
    func daemonCrashWhileRunning() throws {
        let (p, tb, d) = try onTheCharger()
        _ = (p, tb)   // kept: their directories and testbed go with them
        #expect(try d.bgtask(["submit", "--id", "index", "--", "sleep", "300"]).0 == 0)
        let line = try #require(d.said("index: started"), "did not start: \(d.daemon?.stderr ?? "")")
        let first = try #require(startedPID(line))
        d.crash()
        #expect(liveState(first) != nil)          // a crash leaves it running, unsupervised
        try d.restart()
        let again = try #require(d.said("index: started"), "not run again: \(d.daemon?.stderr ?? "")")
        let second = try #require(startedPID(again))
        #expect(second != first)
        #expect(liveState(first) == nil, "the first command still runs beside the second")
        let log = d.daemon?.stderr ?? ""
        let interrupted = try #require(log.range(of: "index: interrupted"), "\(log)")
        #expect(interrupted.lowerBound < (log.range(of: "index: started")?.lowerBound ?? log.startIndex), "\(log)")
        #expect(try d.bgtask(["cancel", "index"]).0 == 0)
        #expect(gone(second, within: 15))
    }

    @Test("process identity with a boot identity: the running rows of an earlier boot are queued again without signalling the pid they name")
    func recoveryKnowsTheBoot() throws {
        let (p, tb, d) = try onTheCharger()
        defer { withExtendedLifetime(tb) {} }
        #expect(try d.bgtask(["submit", "--id", "index", "--", "sleep", "300"]).0 == 0)
        let line = try #require(d.said("index: started"), "did not start: \(d.daemon?.stderr ?? "")")
        let first = try #require(startedPID(line))
        defer { kill(first, SIGKILL) }
        d.crash()
        // As after a reboot whose early start gave another process the same pid and start tick: the queue says its
        // running rows were written in another boot.
        let db = p.dir.appendingPathComponent("state/queue.sqlite").path
        let (rc, _, err) = try Child.run("/usr/bin/python3", ["-c", """
            import sqlite3, sys
            c = sqlite3.connect(sys.argv[1])
            n = c.execute("UPDATE meta SET value = 'an-earlier-boot' WHERE key = 'run_boot'").rowcount
            c.commit()
            sys.exit(0 if n == 1 else 3)
            """, db], deadline: 20)
        try #require(rc == 0, "the queue has no run_boot: \(rc) \(err)")
        try d.restart()
        let again = try #require(d.said("index: started"), "not run again: \(d.daemon?.stderr ?? "")")
        #expect(d.daemon?.stderr.contains("index: interrupted: the machine has restarted since") == true, "\(d.daemon?.stderr ?? "")")
        #expect(liveState(first) != nil, "the pid an earlier boot's row named was signalled")
        let second = try #require(startedPID(again))
        #expect(try d.bgtask(["cancel", "index"]).0 == 0)
        #expect(gone(second, within: 15))
    }

    @Test("cancellationIsTerminal with a real bgtaskd: a periodic task cancelled while its command ignores SIGTERM, bgtaskd SIGKILLed before the command exits: the next bgtaskd ends the command and does not queue the task again")
    func cancellationIsTerminalAcrossACrash() throws {
        let (p, tb, d) = try onTheCharger()
        _ = (p, tb)   // kept: their directories and testbed go with them
        // It ignores the cancel's SIGTERM (so does its sleep: an ignored signal stays ignored across exec), so its
        // exit waits for the grace's SIGKILL, and the daemon dies first.
        #expect(try d.bgtask(["submit", "--id", "sync", "--every", "1s", "--", "sh", "-c", "trap '' TERM; sleep 300"]).0 == 0)
        let line = try #require(d.said("sync: started"), "did not start: \(d.daemon?.stderr ?? "")")
        let first = try #require(startedPID(line))
        let (status, out, err) = try d.bgtask(["cancel", "sync"])
        #expect(status == 0 && out.contains("expired the running task"), "\(out) \(err)")
        d.crash()
        #expect(liveState(first) != nil, "the command outlived the daemon, as a command that ignores SIGTERM does")
        try d.restart()
        // Recovery comes before the daemon serves: its line is among those `start` read up to "serving".
        let recovered = (d.daemon?.stderr ?? "").split(separator: "\n").first { $0.contains("sync: interrupted") }
        #expect(recovered?.contains("it was cancelled (bgtask cancel): not queued again") == true, "\(d.daemon?.stderr ?? "")")
        #expect(gone(first, within: 15), "the cancelled command was left running")
        #expect(try d.pending().isEmpty, "the cancelled task is queued again")
        let log = d.daemon?.stderr ?? ""
        #expect(!log.contains("sync: started"), "the cancelled task ran again: \(log)")
    }

    @Test("one pending request per identifier: a second submit replaces the first; bad input exits 2 and queues nothing")
    func onePendingPerIdentifier() throws {
        try requirePreload()
        let p = try PolicyEnv()
        let tb = Testbed()
        _ = tb.addLaptop(acOnline: false)
        let d = try SessionDaemon(policy: p, preload: true)
        #expect(try d.bgtask(["submit", "--id", "report", "--requires-external-power", "--", "echo", "one"]).0 == 0)
        #expect(try d.bgtask(["submit", "--id", "report", "--requires-external-power", "--", "echo", "two"]).0 == 0)
        let list = try d.pending()
        #expect(list.count == 1)
        #expect(list.first?["command"] as? [String] == ["echo", "two"])

        for bad in [["submit", "--bogus", "--", "true"], ["submit", "--earliest", "tomorrowish", "--", "true"],
                    ["submit", "--id", String(repeating: "x", count: 256), "--", "true"], ["submit", "--id", "a\u{1}b", "--", "true"],
                    ["submit", "--"], ["submit", "--every", "0s", "--", "true"]] {
            let (s, _, e) = try d.bgtask(bad)
            #expect(s == 2, "\(bad): \(s) \(e)")
        }
        #expect(try d.pending().count == 1)
        #expect(try d.bgtask(["cancel", "--all"]).0 == 0)
        #expect(try d.pending().isEmpty)
    }

    @Test("without a reachable daemon, submit says so, exits 69 and queues nothing")
    func submitWithoutDaemon() throws {
        let p = try PolicyEnv()
        let bus = try PrivateBus()
        let env = p.environment(preload: false, ["DBUS_SESSION_BUS_ADDRESS": bus.address])
        let (s, _, e) = try Child.run(Child.bgtaskPath, ["submit", "--", "true"], environment: env, deadline: 30)
        #expect(s == 69, "\(e)")
        #expect(e.contains("bgtaskd"))
        let (s2, _, e2) = try Child.run(Child.bgtaskPath, ["pending"], environment: p.environment(preload: false, ["DBUS_SESSION_BUS_ADDRESS": "unix:path=/nonexistent/bus"]), deadline: 30)
        #expect(s2 == 69, "\(e2)")
    }

    @Test("a bgtaskd that the bus activates and that exits at once: submit and pending exit 69 and say why in words, not the bus's error")
    func activationFailureIsSaidInWords() throws {
        let p = try PolicyEnv()
        // A bgtaskd on one bus holds the state directory; a second bus activates another on the same state, which exits 75.
        let holder = try SessionDaemon(policy: p, preload: false)
        let services = p.dir.appendingPathComponent("services")
        try FileManager.default.createDirectory(at: services, withIntermediateDirectories: true)
        let env = p.env
        let exec = ["/usr/bin/env", "BGTASK_STATE_DIR=\(env["BGTASK_STATE_DIR"]!)", "BGTASK_RUNTIME_DIR=\(env["BGTASK_RUNTIME_DIR"]!)",
                    "BGTASK_POLICY_DIR=\(env["BGTASK_POLICY_DIR"]!)", Child.bgtaskdPath, "--no-dbus"].joined(separator: " ")
        try "[D-BUS Service]\nName=io.github.bgtask.Scheduler1\nExec=\(exec)\n"
            .write(to: services.appendingPathComponent("io.github.bgtask.Scheduler1.service"), atomically: true, encoding: .utf8)
        let bus = try PrivateBus(serviceDirectory: services)
        let caller = p.environment(preload: false, ["DBUS_SESSION_BUS_ADDRESS": bus.address])
        for args in [["submit", "--", "true"], ["pending"]] {
            let (s, out, e) = try Child.run(Child.bgtaskPath, args, environment: caller, deadline: 60)
            #expect(s == 69, "\(args): \(s) \(out) \(e)")
            #expect(e.contains("exited with status 75: another bgtaskd holds the state directory"), "\(args): \(e)")
            #expect(!e.contains("ChildExited"), "\(args): \(e)")
        }
        #expect(try holder.pending().isEmpty, "the refused submit was queued")
    }

    @Test("the limits in the daemon: with daemon.max_running = 1 the second task waits for the slot, and starts when the first ends; --retry runs a failing command again")
    func limitsAndRetry() throws {
        try requirePreload()
        let p = try PolicyEnv()
        try p.userPolicy("60-limits.toml", "[daemon]\nmax_running = 1\nretry_backoff = \"1s\"\n")
        let tb = Testbed()
        _ = tb.addLaptop(acOnline: true, batteryStatus: "Charging")
        let d = try SessionDaemon(policy: p, preload: true)
        let gate = p.dir.appendingPathComponent("gate")
        try Data().write(to: gate)
        #expect(try d.bgtask(["submit", "--id", "first", "--", "sh", "-c", "while [ -e '\(gate.path)' ]; do sleep 0.05; done"]).0 == 0)
        _ = try #require(d.said("first: started"), "\(d.daemon?.stderr ?? "")")
        #expect(try d.bgtask(["submit", "--id", "second", "--", "true"]).0 == 0)
        let waiting = try #require(d.said("second: waiting"), "\(d.daemon?.stderr ?? "")")
        #expect(waiting.contains("daemon.max_running"))
        let entry = try #require(try d.pending().first { $0["id"] as? String == "second" })
        #expect((entry["reason"] as? String)?.contains("daemon.max_running") == true)
        try FileManager.default.removeItem(at: gate)
        _ = try #require(d.said("second: started"), "\(d.daemon?.stderr ?? "")")

        #expect(try d.bgtask(["submit", "--id", "flaky", "--retry", "1", "--", "false"]).0 == 0)
        _ = try #require(d.said("flaky: failed (status 1); retry 1 of 1"), "\(d.daemon?.stderr ?? "")")
        _ = try #require(d.said("flaky: started"), "not retried: \(d.daemon?.stderr ?? "")")
        _ = try #require(d.said("flaky: finished (exit 1)"), "\(d.daemon?.stderr ?? "")")
        #expect(try d.pending().isEmpty)            // the retries are used up
    }
}

/// A laptop on its charger (umockdev), a policy that starts power-bound work at once, and bgtaskd (`--no-dbus`).
func onTheCharger() throws -> (PolicyEnv, Testbed, SessionDaemon) {
    try requirePreload()
    let p = try PolicyEnv()
    try p.userPolicy("50-fast.toml", immediatePowerRule)
    let tb = Testbed()
    _ = tb.addLaptop(acOnline: true, batteryStatus: "Charging")
    return (p, tb, try SessionDaemon(policy: p, preload: true))
}

/// A laptop on its charger (umockdev), python-dbusmock's logind on a private system bus, and bgtaskd watching it.
func onTheChargerWithLogind() throws -> (PolicyEnv, Testbed, MockServices, SessionDaemon) {
    try requirePreload()
    let p = try PolicyEnv()
    let tb = Testbed()
    _ = tb.addLaptop(acOnline: true, batteryStatus: "Charging")
    let logind = try MockServices(env: ["LD_PRELOAD": nil, "UMOCKDEV_DIR": nil])
    try logind.spawn(template: "logind", name: "org.freedesktop.login1")
    return (p, tb, logind, try SessionDaemon(policy: p, preload: true, system: logind.bus))
}

extension UmockdevIntegrationTests {
    @Test("PrepareForSleep from mocked logind: the delay lock is held while tasks run, refresh work expires, the rest is frozen, the lock is released within 5 s; after resume the work goes on")
    func sleepThroughLogind() throws {
        let (p, tb, logind, d) = try onTheChargerWithLogind()
        defer { withExtendedLifetime((p, tb)) {} }   // their directories and testbed live as long as the daemon
        #expect(try d.bgtask(["submit", "--id", "work", "--", "sleep", "300"]).0 == 0)
        _ = try #require(d.said("work: started"), "\(d.daemon?.stderr ?? "")")
        #expect(try d.bgtask(["submit", "--id", "feed", "--kind", "refresh", "--", "sleep", "300"]).0 == 0)
        let feedLine = try #require(d.said("feed: started"), "\(d.daemon?.stderr ?? "")")
        let feed = try #require(startedPID(feedLine))

        func inhibitors() throws -> String {
            try logind.call("org.freedesktop.login1", "/org/freedesktop/login1", "org.freedesktop.login1.Manager.ListInhibitors", [])
        }
        let held = try inhibitors()
        // Two locks, each kind on its own: logind grants a combined one only where it would grant the stricter.
        #expect(held.contains("'sleep', 'bgtaskd'") && held.contains("'shutdown', 'bgtaskd'"), "no delay locks while tasks run: \(held)")
        #expect(held.contains("'delay'"))

        let t0 = Date()
        try logind.call("org.freedesktop.login1", "/org/freedesktop/login1", "org.freedesktop.DBus.Mock.EmitSignal",
                        ["org.freedesktop.login1.Manager", "PrepareForSleep", "b", "[<true>]"])
        _ = try #require(d.said("delay locks released"), "\(d.daemon?.stderr ?? "")")
        #expect(Date().timeIntervalSince(t0) < 5)
        let released = try inhibitors()
        #expect(!released.contains("bgtaskd"), "the lock is still held: \(released)")
        let (_, tasks, _) = try d.bgtask(["tasks", "--json"])
        let list = try #require(try JSONSerialization.jsonObject(with: Data(tasks.utf8)) as? [[String: Any]])
        #expect(list.first { $0["id"] as? String == "work" }?["state"] as? String == "paused", "\(tasks)")
        #expect(gone(feed, within: 5), "the refresh task was not expired")
        let (_, why, _) = try d.bgtask(["why", "feed"])
        #expect(why.contains("sleep.expire-refresh"), "\(why)")

        try logind.call("org.freedesktop.login1", "/org/freedesktop/login1", "org.freedesktop.DBus.Mock.EmitSignal",
                        ["org.freedesktop.login1.Manager", "PrepareForSleep", "b", "[<false>]"])
        _ = try #require(d.said("work: resumed"), "\(d.daemon?.stderr ?? "")")
        #expect(try inhibitors().contains("bgtaskd"), "the lock was not taken again after resume")
        #expect(try d.bgtask(["cancel", "work"]).0 == 0)
    }

    @Test("PrepareForSleep: the delay locks are kept until an expiring refresh task has finished its SIGTERM handler (within logind's delay)")
    func locksOutlastTheExpiringTask() throws {
        let (p, tb, logind, d) = try onTheChargerWithLogind()
        _ = tb
        let done = p.dir.appendingPathComponent("handled")
        // The sleep comes only once the trap is set: a SIGTERM before it would end the shell at once (as it did
        // under a loaded machine, when the test did not wait for the trap).
        let ready = try ReadyFIFO(in: p.dir)
        // Its handler takes 1.5 s, as an app's expiration handler may (the shipped grace is 10 s, logind's delay 5 s).
        let handler = "trap 'sleep 1.5; date +%s.%N > \(done.path); exit 0' TERM; echo > \(ready.path); while :; do sleep 0.1; done"
        #expect(try d.bgtask(["submit", "--id", "feed", "--kind", "refresh", "--", "sh", "-c", handler]).0 == 0)
        _ = try #require(d.said("feed: started"), "\(d.daemon?.stderr ?? "")")
        #expect(ready.wait(within: 20), "the task never set its trap: \(d.daemon?.stderr ?? "")")
        try logind.call("org.freedesktop.login1", "/org/freedesktop/login1", "org.freedesktop.DBus.Mock.EmitSignal",
                        ["org.freedesktop.login1.Manager", "PrepareForSleep", "b", "[<true>]"])
        _ = try #require(d.said("delay locks released", within: 10), "\(d.daemon?.stderr ?? "")")
        let released = Date().timeIntervalSince1970
        let handled = try #require(Double((try? String(contentsOf: done, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines) ?? ""),
                                   "the handler had not finished when the locks went")
        #expect(handled <= released)
        let inhibitors = try logind.call("org.freedesktop.login1", "/org/freedesktop/login1", "org.freedesktop.login1.Manager.ListInhibitors", [])
        #expect(!inhibitors.contains("bgtaskd"), "\(inhibitors)")
    }
}

/// Random and wrong-typed calls to every method, through python-dbus (which sends any signature asked).
let fuzzScript = #"""
import dbus, random, string, sys
random.seed(int(sys.argv[1]))
bus = dbus.SessionBus()
name, path, iface = "io.github.bgtask.Scheduler1", "/io/github/bgtask/Scheduler1", "io.github.bgtask.Scheduler1"
methods = ["Submit", "Cancel", "CancelAll", "ListPending", "ListPendingPage", "ListPendingJSON", "ListRunning", "DebugLaunch", "DebugExpire", "GetStatus", "Nope",
           "GetSupportedResources", "ListApps", "SetAppEnabled", "AppRegister", "AppReady", "AppSubmit", "AppCancel",
           "AppCancelAll", "AppPending", "AppComplete", "AppProgress", "AppUpdateTitle"]
def rstr():
    n = random.choice([0, 1, 5, 255, 256, 4000])
    return "".join(random.choice(string.printable + "\u00e9\u2603\x01") for _ in range(n))
def rval(sig):
    return {"s": rstr, "u": lambda: dbus.UInt32(random.randint(0, 2**32 - 1)), "i": lambda: dbus.Int32(random.randint(-2**31, 2**31 - 1)),
            "b": lambda: dbus.Boolean(random.random() < 0.5), "d": lambda: dbus.Double(random.choice([0.0, -1.0, 1e300, float("inf"), float("nan"), 3.5])),
            "t": lambda: dbus.UInt64(random.randint(0, 2**64 - 1)), "x": lambda: dbus.Int64(random.randint(-2**63, 2**63 - 1)),
            "as": lambda: dbus.Array([rstr() for _ in range(random.randint(0, 5))], signature="s"),
            "a{sv}": lambda: dbus.Dictionary({random.choice(["id", "kind", "every", "earliest", "retry", "budget", "directory", "requires_network", rstr()]):
                                               random.choice([dbus.String(rstr()), dbus.Double(random.uniform(-1e12, 1e12)), dbus.Boolean(True),
                                                              dbus.UInt32(7), dbus.Array([], signature="s")])
                                               for _ in range(random.randint(0, 4))}, signature="sv")}[sig]()
sigs = ["", "s", "u", "b", "d", "t", "x", "as", "a{sv}", "ss", "a{sv}as", "a{sv}s", "asa{sv}", "sss", "a{sv}asu",
        "sb", "sa{sv}", "ssb", "sstt", "ssss", "st"]
errors = replies = 0
for i in range(int(sys.argv[2])):
    m = random.choice(methods)
    sig = random.choice(sigs)
    parts, j = [], 0
    while j < len(sig):
        if sig.startswith("a{sv}", j): parts.append("a{sv}"); j += 5
        elif sig.startswith("as", j): parts.append("as"); j += 2
        else: parts.append(sig[j]); j += 1
    try:
        bus.call_blocking(name, path, iface, m, sig, [rval(p) for p in parts], timeout=10)
        replies += 1
    except dbus.exceptions.DBusException as e:
        if e.get_dbus_name() in ("org.freedesktop.DBus.Error.NoReply", "org.freedesktop.DBus.Error.ServiceUnknown"):
            print("daemon gone after", m, sig, e); sys.exit(1)
        errors += 1
print(f"{replies} replies, {errors} errors")
"""#

extension UmockdevIntegrationTests {
    @Test("every method called with random and wrong-typed arguments: a D-Bus error or a reply each time, and the daemon goes on")
    func fuzzEveryMethod() throws {
        try requirePreload()
        let p = try PolicyEnv()
        let tb = Testbed()
        _ = tb.addLaptop(acOnline: false)
        // Random commands must not run anything: the daemon's PATH is an empty directory.
        let empty = p.dir.appendingPathComponent("empty-path")
        try FileManager.default.createDirectory(at: empty, withIntermediateDirectories: true)
        let d = try SessionDaemon(policy: p, preload: true, daemonEnv: ["PATH": empty.path])
        let script = p.dir.appendingPathComponent("fuzz.py")
        try fuzzScript.write(to: script, atomically: true, encoding: .utf8)
        var env = d.env
        env["LD_PRELOAD"] = nil
        let (s, out, err) = try Child.run("/usr/bin/python3", [script.path, "1", "400"], environment: env, deadline: 120)
        #expect(s == 0, "\(out) \(err)")
        #expect(out.contains("errors"), "\(out)")
        let (gs, status, ge) = try d.bgtask(["pending", "--json"])
        #expect(gs == 0, "the daemon stopped answering: \(ge) \(d.daemon?.stderr.suffix(2000) ?? "")")
        #expect(status.hasPrefix("["))
        #expect(d.daemon?.process.isRunning == true)
    }
}

extension UmockdevIntegrationTests {
    @Test("bgtaskd started without G_SLICE re-executes itself once with G_SLICE=always-malloc: the same pid, serving")
    func daemonRunsWithMallocForGVariants() throws {
        try requirePreload()
        try #require(getenv("G_SLICE") == nil, "the test runner itself has G_SLICE set")
        let p = try PolicyEnv()
        let tb = Testbed()
        _ = tb.addLaptop(acOnline: true)
        let d = try SessionDaemon(policy: p, preload: true)
        let pid = try #require(d.daemon?.process.processIdentifier)
        #expect(d.daemon?.stderr.contains("(pid \(pid))") == true, "\(d.daemon?.stderr ?? "")")
        let environ = try String(contentsOfFile: "/proc/\(pid)/environ", encoding: .utf8).split(separator: "\0")
        #expect(environ.contains("G_SLICE=always-malloc"), "\(environ.filter { $0.hasPrefix("G_") })")
        #expect(try String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8) == "bgtaskd\n", "named as ps and pkill know it, not \"exe\"")
        #expect(try d.bgtask(["pending"]).0 == 0)
    }
}

extension UmockdevIntegrationTests {
    @Test("a policy file edited while bgtaskd runs is applied to waiting work; a broken one keeps the last good policy and pending warns")
    func policyReloadsOnFileChange() throws {
        try requirePreload()
        let p = try PolicyEnv()
        try p.userPolicy("50-fast.toml", immediatePowerRule)
        let tb = Testbed()
        _ = tb.addLaptop(acOnline: false)
        let d = try SessionDaemon(policy: p, preload: true)
        #expect(try d.bgtask(["submit", "--id", "later", "--requires-external-power", "--", "true"]).0 == 0)
        _ = try #require(d.said("later: waiting"), "\(d.daemon?.stderr ?? "")")

        try p.userPolicy("70-night.toml", """
        [[rule]]
        id = "user.not-now"
        when = 'task.id == "later"'
        verdict = "pause"
        reason = "not now"
        """)
        _ = try #require(d.said("policy reloaded"), "no reload after a new file: \(d.daemon?.stderr ?? "")")
        let entry = try #require(try d.pending().first)
        #expect(entry["rule"] as? String == "user.not-now", "\(entry)")   // pause is stricter than defer: it decides now
        #expect((entry["location"] as? String)?.hasSuffix("70-night.toml:2") == true, "\(entry)")

        try p.userPolicy("70-night.toml", "[[rule]]\nid = \"broken\"\nwhen = 'thermal.state > \"warm\"'\nverdict = \"defer\"\n")
        let logged = try #require(d.said("the last good policy stays in force"), "\(d.daemon?.stderr ?? "")")
        // The log line names the file, its line and what is wrong, on one line (no escaped snippet in the journal).
        #expect(logged.contains("70-night.toml:3:") && !logged.contains("\\x0a") && !logged.contains("^"), "\(logged)")
        let (_, text, _) = try d.bgtask(["pending"])
        #expect(text.contains("warning:") && text.contains("70-night.toml:3"), "\(text)")
        #expect(try d.pending().count == 1)
    }
}

extension UmockdevIntegrationTests {
    @Test("bgtaskd across charger cycles: work queued after an unplug waits, and the next plug starts it (three cycles)")
    func chargerCycles() throws {
        try requirePreload()
        let p = try PolicyEnv()
        try p.userPolicy("50-fast.toml", immediatePowerRule)
        let tb = Testbed()
        let laptop = tb.addLaptop(acOnline: false, zoneMilliC: 50_000)   // a zone, as laptops have
        let d = try SessionDaemon(policy: p, preload: true)
        for cycle in 0..<3 {
            for i in 0..<5 { #expect(try d.bgtask(["submit", "--id", "c\(cycle)-\(i)", "--requires-external-power", "--", "true"]).0 == 0) }
            _ = try #require(d.said("c\(cycle)-4: waiting"), "cycle \(cycle): \(d.daemon?.stderr ?? "")")
            tb.plug(laptop, true)
            for _ in 0..<5 { _ = try #require(d.said("c\(cycle)-"), "cycle \(cycle) did not run: \(d.daemon?.stderr ?? "")") }
            let deadline = Date().addingTimeInterval(10)
            while try !d.pending().isEmpty, Date() < deadline { _ = d.said(": finished", within: 1) }
            let left = try d.pending()
            #expect(left.isEmpty, "cycle \(cycle): \(left)")
            tb.plug(laptop, false)
            // The unplug is seen once a task that needs the charger waits.
            var n = 0
            while true {
                n += 1
                #expect(try d.bgtask(["submit", "--id", "probe-\(cycle)-\(n)", "--requires-external-power", "--", "true"]).0 == 0)
                let l = try #require(d.saidOf("probe-\(cycle)-\(n)"), "\(d.daemon?.stderr ?? "")")
                if l.contains("waiting") { #expect(try d.bgtask(["cancel", "probe-\(cycle)-\(n)"]).0 == 0); break }
                #expect(n < 20)
            }
        }
    }
}

extension UmockdevIntegrationTests {
    @Test("bgtaskd sees every child's exit: 40 short tasks through 4 slots all finish (signals are blocked before GDBus starts its thread)")
    func everyExitIsSeen() throws {
        try requirePreload()
        let p = try PolicyEnv()
        let tb = Testbed()
        _ = tb.addLaptop(acOnline: true, batteryStatus: "Charging")
        let d = try SessionDaemon(policy: p, preload: true)
        for i in 0..<40 { #expect(try d.bgtask(["submit", "--id", "short-\(i)", "--", "true"]).0 == 0) }
        var finished = Set<String>()
        while finished.count < 40, let l = d.said(": finished", within: 15) {
            if let id = l.split(separator: " ").dropFirst().first { finished.insert(String(id)) }
        }
        #expect(finished.count == 40, "\(finished.count) of 40 finished: \(d.daemon?.stderr.suffix(1500) ?? "")")
        let (_, running, _) = try d.bgtask(["tasks", "--json"])
        #expect(running.trimmingCharacters(in: .whitespacesAndNewlines) == "[]")
    }
}

extension UmockdevIntegrationTests {
    @Test("every thread of bgtaskd blocks SIGCHLD and SIGTERM, so the signalfd sees each one (GDBus's threads included)")
    func everyThreadBlocksTheSignals() throws {
        try requirePreload()
        let p = try PolicyEnv()
        let tb = Testbed()
        _ = tb.addLaptop(acOnline: true, batteryStatus: "Charging")
        let d = try SessionDaemon(policy: p, preload: true)
        let pid = try #require(d.daemon?.process.processIdentifier)
        let threads = try FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")
        #expect(threads.count >= 2)   // the main loop and GDBus's worker at least
        for tid in threads {
            let status = try String(contentsOfFile: "/proc/\(pid)/task/\(tid)/status", encoding: .utf8)
            let line = try #require(status.split(separator: "\n").first { $0.hasPrefix("SigBlk:") })
            let mask = try #require(UInt64(line.dropFirst("SigBlk:".count).trimmingCharacters(in: .whitespaces), radix: 16))
            let name = (try? String(contentsOfFile: "/proc/\(pid)/task/\(tid)/comm", encoding: .utf8)) ?? tid
            #expect(mask & (1 << (UInt64(SIGCHLD) - 1)) != 0, "thread \(name) does not block SIGCHLD")
            #expect(mask & (1 << (UInt64(SIGTERM) - 1)) != 0, "thread \(name) does not block SIGTERM")
        }
    }
}

extension UmockdevIntegrationTests {
    @Test("daemon.max_pending_per_app: one more than the limit is refused (exit 75, the limit named); replacing a pending request at the limit is not; a freed place is counted again")
    func pendingLimitPerApp() throws {
        try requirePreload()
        let p = try PolicyEnv()
        try p.userPolicy("60-limit.toml", "[daemon]\nmax_pending_per_app = 2\n")
        let tb = Testbed()
        _ = tb.addLaptop(acOnline: false)
        let d = try SessionDaemon(policy: p, preload: true)
        for id in ["a", "b"] {
            #expect(try d.bgtask(["submit", "--id", id, "--requires-external-power", "--", "true"]).0 == 0)
        }
        let over = try d.bgtask(["submit", "--id", "c", "--requires-external-power", "--", "true"])
        #expect(over.0 == 75 && over.2.contains("max_pending_per_app"), "\(over)")
        #expect(try d.bgtask(["submit", "--id", "a", "--requires-external-power", "--", "true"]).0 == 0, "a resubmit replaces")
        #expect(try d.bgtask(["cancel", "b"]).0 == 0)
        #expect(try d.bgtask(["submit", "--id", "c", "--requires-external-power", "--", "true"]).0 == 0)
        #expect(try d.pending().compactMap { $0["id"] as? String }.sorted() == ["a", "c"])
    }
}

extension UmockdevIntegrationTests {
    @Test("a task resting on a thermal verdict keeps the zones read: it starts once the zone cools, though no supervisor of it is awake")
    func restingTaskStillWatchesTheTemperature() throws {
        try requirePreload()
        let p = try PolicyEnv()
        try p.userPolicy("50-cool.toml", """
        [[rule]]
        id = "test.too-warm"
        when = 'thermal.state >= "serious"'
        verdict = "defer"
        reason = "too warm"
        """)
        let tb = Testbed()
        let laptop = tb.addLaptop(acOnline: true, batteryStatus: "Charging", zoneMilliC: 90_000)
        let d = try SessionDaemon(policy: p, preload: true)
        #expect(try d.bgtask(["submit", "--id", "cool", "--", "true"]).0 == 0)
        let waiting = try #require(d.said("cool: waiting"), "\(d.daemon?.stderr ?? "")")
        #expect(waiting.contains("test.too-warm"), "\(waiting)")
        let entry = try #require(try d.pending().first { $0["id"] as? String == "cool" })
        #expect(entry["rule"] as? String == "test.too-warm")
        // Zones are polled, not announced: no uevent here. The daemon reads them because a resting task's verdict
        // depends on them.
        tb.set(laptop.zone, "temp", "40000")
        let started = d.said("cool: started", within: 40)
        #expect(started != nil, "still waiting after the zone cooled: \(d.daemon?.stderr ?? "")")
    }
}

extension PolicyCommandTests {
    @Test("bgtaskd starting with a broken policy layer does not exit: the file is left out with a warning at file:line, the other layers are in force, and fixing it clears the warning")
    func daemonStartsWithABrokenLayer() throws {
        let p = try PolicyEnv()
        try p.userPolicy("60-typo.toml", "[[rule]]\nid = \"typo\"\nwhen = 'battery.prcent < 5'\nverdict = \"defer\"\n")
        let d = try SessionDaemon(policy: p, preload: false)
        _ = try #require(d.said("60-typo.toml:3"), "\(d.daemon?.stderr ?? "")")
        let (_, text, _) = try d.bgtask(["pending"])
        #expect(text.contains("warning: a policy layer does not load and is left out") && text.contains("60-typo.toml:3"), "\(text)")
        // The default layer is in force: a task waits for the network on the recorded machine, which is not online.
        #expect(try d.bgtask(["submit", "--id", "net", "--requires-network", "--", "true"]).0 == 0)
        #expect(try d.pending().first { $0["id"] as? String == "net" } != nil)

        try p.userPolicy("60-typo.toml", "[[rule]]\nid = \"typo\"\nwhen = 'battery.percent < 5'\nverdict = \"defer\"\n")
        // bgtaskd may have read the fixed file by itself already (it watches the directory): either way it is in force.
        let (s, said, _) = try d.bgtask(["policy", "reload"])
        #expect(s == 0 && (said.contains("rules added: typo") || said.contains("nothing changed")), "\(said)")
        let (_, after, _) = try d.bgtask(["pending"])
        #expect(!after.contains("warning:"), "\(after)")
    }
}

extension PolicyCommandTests {
    @Test("bgtaskd reads storage.* for the task's working directory (here the home directory), not for its own working directory")
    func daemonStorageIsTheHomeDirectory() throws {
        let p = try PolicyEnv()
        try p.userPolicy("50-storage.toml", "[storage]\nlow_mb = 100000000\n")
        let home = p.dir.appendingPathComponent("home")
        try FileManager.default.createDirectory(at: home, withIntermediateDirectories: true)
        let d = try SessionDaemon(policy: p, preload: false, daemonEnv: ["HOME": home.path])
        #expect(try d.bgtask(in: home, ["submit", "--id", "big", "--", "true"]).0 == 0)
        let t = try #require(try d.pending().first { $0["id"] as? String == "big" })
        #expect((t["reason"] as? String)?.contains("storage low on \(home.path) (") == true, "\(t)")
    }
}

@Suite("bgtaskd's decisions in a running journald")
struct JournaldTests {
    @Test("journalctl BGTASK_TASK=… finds a task's decisions with their fields",
          .enabled(if: access("/run/systemd/journal/socket", W_OK) == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/journalctl"),
                   "journald does not run here (no /run/systemd/journal/socket): the guest checks it (scripts/check-vm.sh)"))
    func journalHasTheFields() throws {
        let p = try PolicyEnv()
        let d = try SessionDaemon(policy: p, preload: false)
        let id = "journal-\(UUID().uuidString.prefix(8))"
        #expect(try d.bgtask(["submit", "--id", id, "--ignore-idle", "--", "true"]).0 == 0)
        _ = try #require(d.said("\(id): finished"), "\(d.daemon?.stderr ?? "")")
        // journald writes asynchronously: read until the entry is there, or give up at the deadline.
        let end = Date().addingTimeInterval(10)
        var out = ""
        repeat {
            out = try Child.run("/usr/bin/journalctl", ["--no-pager", "-o", "export", "BGTASK_TASK=\(id)", "BGTASK_EVENT=finished"], deadline: 10).1
            if out.contains("BGTASK_EVENT=finished") { break }
            usleep(100_000)
        } while Date() < end
        #expect(out.contains("BGTASK_TASK=\(id)") && out.contains("MESSAGE_ID=cb0de88e28224280972d93079cee5ed6")
                && out.contains("BGTASK_EXIT_STATUS=0"), "\(out)")
    }
}

extension UmockdevIntegrationTests {
    @Test("bgtaskd keeps the charger's history as it changes (no wake-up of its own) and a task waiting for it says when it will likely start — or that there is not enough history yet")
    func chargerHistoryAndEstimate() throws {
        try requirePreload()
        let p = try PolicyEnv()
        try p.userPolicy("50-fast.toml", immediatePowerRule)
        let tb = Testbed()
        let laptop = tb.addLaptop(acOnline: false)
        let d = try SessionDaemon(policy: p, preload: true)
        #expect(try d.bgtask(["submit", "--id", "backup", "--ignore-idle", "--requires-external-power", "--", "true"]).0 == 0)
        _ = try #require(d.said("backup: waiting"), "\(d.daemon?.stderr ?? "")")
        let waiting = try #require(try d.pending().first { $0["id"] as? String == "backup" })
        #expect((waiting["likely"] as? String)?.hasPrefix("no estimate of when the charger comes: not enough history yet") == true, "\(waiting)")
        let (_, long, _) = try d.bgtask(["pending", "--long"])
        #expect(long.contains("no estimate of when the charger comes"), "\(long)")

        tb.plug(laptop, true)
        _ = try #require(d.said("backup: finished"), "\(d.daemon?.stderr ?? "")")
        tb.plug(laptop, false)
        #expect(try d.bgtask(["submit", "--id", "again", "--ignore-idle", "--requires-external-power", "--", "true"]).0 == 0)
        _ = try #require(d.said("again: waiting"), "\(d.daemon?.stderr ?? "")")
        // The history in the state database: false (at start), true (plugged), false (unplugged).
        let db = p.dir.appendingPathComponent("state/queue.sqlite").path
        let (s, rows, e) = try Child.run("/usr/bin/python3", ["-c", """
            import sqlite3, sys
            c = sqlite3.connect('file:' + sys.argv[1] + '?mode=ro', uri=True)
            print(' '.join(v for (v,) in c.execute("SELECT value FROM transition WHERE name = 'power.external' ORDER BY time")))
            """, db], deadline: 20)
        #expect(s == 0 && rows.trimmingCharacters(in: .whitespacesAndNewlines) == "false true false", "\(rows) \(e)")
    }
}

extension UmockdevIntegrationTests {
    @Test("state files held only by an open descriptor: queue.sqlite and audit.sqlite removed, or the queue replaced by an older copy, under a running bgtaskd: what it acknowledged afterwards survives a restart, and why still tells it")
    func stateFilesAreNotHeldOnlyByADescriptor() throws {
        try requirePreload()
        let p = try PolicyEnv()
        let tb = Testbed()
        _ = tb.addLaptop(acOnline: false)
        let d = try SessionDaemon(policy: p, preload: true)
        let state = p.dir.appendingPathComponent("state")
        let queue = state.appendingPathComponent("queue.sqlite").path
        func submit(_ id: String) throws {
            let (s, _, e) = try d.bgtask(["submit", "--id", id, "--requires-external-power", "--", "true"])
            #expect(s == 0, "\(id): \(e)")
        }
        try submit("before")
        // Removed, with its WAL (as `rm queue.sqlite*` does), and the trail too.
        for name in ["queue.sqlite", "queue.sqlite-wal", "queue.sqlite-shm", "audit.sqlite", "audit.sqlite-wal", "audit.sqlite-shm"] {
            unlink(state.appendingPathComponent(name).path)
        }
        try submit("after-removal")
        #expect(d.said("queue.sqlite was removed under its writer; what was held is written back to it", within: 10) != nil, "\(d.daemon?.stderr ?? "")")
        // Replaced by an older copy of itself (a restored backup): moved aside, the queue held written back.
        let copy = p.dir.appendingPathComponent("old-queue.sqlite").path
        let (rc, _, err) = try Child.run("/usr/bin/python3", ["-c", "import sqlite3, sys; sqlite3.connect(sys.argv[1]).backup(sqlite3.connect(sys.argv[2]))", queue, copy], deadline: 20)
        try #require(rc == 0, "\(err)")
        try submit("before-replacement")
        #expect(rename(copy, queue) == 0)
        try submit("after-replacement")
        #expect(d.said("queue.sqlite was replaced under its writer", within: 10) != nil, "\(d.daemon?.stderr ?? "")")
        let aside = try FileManager.default.contentsOfDirectory(atPath: state.path).filter { $0.hasPrefix("queue.sqlite.replaced-") && !$0.hasSuffix("-wal") && !$0.hasSuffix("-shm") }
        #expect(aside.count == 1, "the file that took the path is kept aside: \(aside)")

        try d.restart()
        let ids = Set(try d.pending().compactMap { $0["id"] as? String })
        #expect(ids == ["before", "after-removal", "before-replacement", "after-replacement"], "\(ids)")
        let (ws, why, we) = try d.bgtask(["why", "after-removal"])
        #expect(ws == 0 && why.contains("waiting"), "\(ws) \(why) \(we)")
    }
}

extension UmockdevIntegrationTests {
    @Test("memory kept per reload: 300 SIGHUPs (each waited for: its 'policy reloaded' line) leave bgtaskd's resident memory where 20 did")
    func memoryIsNotKeptPerReload() throws {
        let p = try PolicyEnv()
        let d = try SessionDaemon(policy: p, preload: false)
        let pid = try #require(d.daemon?.process.processIdentifier)
        func rssKB() -> Int {
            let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
            return status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") }.flatMap { Int($0.split(separator: " ")[1]) } ?? 0
        }
        func reload(_ n: Int) throws {
            for i in 0..<n {
                kill(pid, SIGHUP)
                _ = try #require(d.said("policy reloaded", within: 10), "reload \(i): \(d.daemon?.stderr.suffix(500) ?? "")")
            }
        }
        try reload(20)   // the first reloads fill caches and the allocator's arenas
        let before = rssKB()
        try reload(300)
        let grown = rssKB() - before
        // TOMLKit keeps every table it parses (about 23 kB for the shipped policy): 300 parses would be about 7 MB.
        #expect(grown < 2048, "bgtaskd grew \(grown) kB over 300 reloads")
    }
}
