import BgtaskTestSupport
import Foundation
import Testing

/// Field N (1-based, as in proc(5)) of /proc/PID/stat.
func statField(_ pid: Int32, _ n: Int) -> String? {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
          let close = stat.lastIndex(of: ")") else { return nil }
    let f = stat[stat.index(close, offsetBy: 2)...].split(separator: " ")
    return f.indices.contains(n - 3) ? String(f[n - 3]) : nil
}

/// The process state letter (R, S, T for stopped, D, Z).
func processState(_ pid: Int32) -> String? { statField(pid, 3) }

func startedPID(_ line: String) -> Int32? {
    guard let r = line.range(of: "(pid ") else { return nil }
    return Int32(line[r.upperBound...].prefix { $0.isNumber })
}

/// No hold on the power rule, so a test need not wait the shipped 30 s.
let immediatePowerRule = """
[[rule]]
id = "processing.needs-power"
when = 'task.requires_external_power && power.external != true'
verdict = "defer"
reason = "waiting for external power ({power.reason})"
hold = "0s"     # an override without holds would keep the default's hold_off (bgtask-policy(5))
"""

let busyLoop = """
import os, sys, time
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    pass
t = os.times()
print(f"{(t.user + t.system) / float(sys.argv[1]):.3f}")
"""

/// Seconds every CPU of the machine has spent idle since boot, added up (the `cpu` line of /proc/stat).
func idleSeconds() -> Double {
    guard let stat = try? String(contentsOfFile: "/proc/stat", encoding: .utf8),
          let line = stat.split(separator: "\n").first(where: { $0.hasPrefix("cpu ") }) else { return 0 }
    let f = line.split(separator: " ").dropFirst().compactMap { Double($0) }
    // idle and iowait, in USER_HZ ticks (100 a second on Linux, whatever the kernel's HZ).
    return f.count > 4 ? (f[3] + f[4]) / 100 : 0
}

/// Which CPU-cap mechanisms this machine offers to this process.
var capMechanisms: [String] {
    var m = ["signals"]
    if geteuid() == 0, access("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", W_OK) == 0, access("/sys/fs/cgroup/freezer/cgroup.procs", W_OK) == 0 {
        m.append("cgroup")
    }
    return m
}

extension UmockdevIntegrationTests {
    @Test("run waits for AC, starts on the uevent, pauses when AC goes, resumes when it returns; why tells it")
    func runFollowsTheCharger() throws {
        try requirePreload()
        let p = try PolicyEnv()
        try p.userPolicy("50-fast.toml", immediatePowerRule)
        let tb = Testbed()
        let laptop = tb.addLaptop(acOnline: false)
        let env = p.environment(preload: true)
        let run = try Child(Child.bgtaskPath, ["run", "--no-dbus", "--id", "spin", "--requires-external-power", "--",
                                               "sh", "-c", "while :; do :; done"], environment: env)
        defer { run.stop() }
        let waiting = try #require(run.errorLine(within: 10) { $0.contains("waiting:") }, "no waiting line: \(run.stderr)")
        #expect(waiting.contains("rule processing.needs-power (") && waiting.contains("50-fast.toml:2"))

        let t0 = Date()
        tb.plug(laptop, true)
        let started = try #require(run.errorLine(within: 3) { $0.contains("started") }, "did not start: \(run.stderr)")
        #expect(Date().timeIntervalSince(t0) < 3)
        let pid = try #require(startedPID(started))
        // Background work: SCHED_IDLE (policy 5) and nice 10.
        #expect(statField(pid, 41) == "5")
        #expect(statField(pid, 19) == "10")

        tb.plug(laptop, false)
        _ = try #require(run.errorLine(within: 3) { $0.contains("paused") }, "not paused: \(run.stderr)")
        #expect(reaches(pid, "T", within: 5))   // SIGSTOP lands a moment after it is sent

        tb.plug(laptop, true)
        _ = try #require(run.errorLine(within: 3) { $0.contains("resumed") }, "not resumed: \(run.stderr)")
        #expect(processState(pid) != "T")

        run.process.terminate()   // SIGTERM to bgtask: forwarded to the command's group
        let status = run.waitExit(within: 5)
        #expect(status == Int32(128 + 15), "exit status \(String(describing: status))")

        let (rc, story, _) = try Child.run(Child.bgtaskPath, ["why", "spin"], environment: p.env)
        #expect(rc == 0)
        #expect(story.hasPrefix("spin waited "))
        #expect(story.contains("rule processing.needs-power (") && story.contains("50-fast.toml:2"))
        #expect(story.contains("when power.external became true"))
        #expect(story.contains("Paused at ") && story.contains("Resumed at "))
        #expect(story.contains("killed by signal 15") || story.contains("exit 143"))
    }

    @Test("while a hold keeps the task waiting after the charger returns, run and why say it is a hold and when it lets go")
    func holdsExplainThemselves() throws {
        try requirePreload()
        let p = try PolicyEnv()
        try p.userPolicy("50-hold.toml", immediatePowerRule + "\nhold_off = \"2s\"\n")
        let tb = Testbed()
        let laptop = tb.addLaptop(acOnline: false)
        let run = try Child(Child.bgtaskPath, ["run", "--no-dbus", "--id", "held", "--requires-external-power", "--", "true"],
                            environment: p.environment(preload: true))
        defer { run.stop() }
        _ = try #require(run.errorLine(within: 10) { $0.contains("waiting: waiting for external power") }, "\(run.stderr)")
        tb.plug(laptop, true)
        let held = try #require(run.errorLine(within: 3) { $0.contains("waiting:") }, "\(run.stderr)")
        #expect(held.contains("its condition cleared (now power.external = true); held until "), "\(held)")
        #expect(held.contains("unless it changes again (hold_off 2s)") && held.contains("rule processing.needs-power ("), "\(held)")
        #expect(!held.contains("is online"), "a hold must not repeat the cause that is gone: \(held)")
        _ = try #require(run.errorLine(within: 5) { $0.contains("started") }, "\(run.stderr)")
        #expect(run.waitExit(within: 5) == 0)
        let why = try Child.run(Child.bgtaskPath, ["why", "held"], environment: p.env)
        #expect(why.1.contains("held until ") && why.1.contains("hold_off 2s"), "\(why.1)")
    }

    @Test("once the budget's SIGTERM is sent, a pause verdict does not freeze the dying command; SIGKILL ends it")
    func expiryIsNotPaused() throws {
        try requirePreload()
        let p = try PolicyEnv()
        try p.userPolicy("50-expiry.toml", """
        [run]
        expire_grace = "3s"
        [[rule]]
        id = "pause-unplugged"
        when = 'power.external == false'
        verdict = "pause"
        """)
        let tb = Testbed()
        let laptop = tb.addLaptop(acOnline: true, batteryStatus: "Charging")
        let run = try Child(Child.bgtaskPath, ["run", "--no-dbus", "--id", "dying", "--budget", "2s", "--", "sh", "-c",
                                               "trap '' TERM; echo ready; while :; do :; done"],
                            environment: p.environment(preload: true))
        defer { run.stop() }
        let started = try #require(run.errorLine(within: 10) { $0.contains("started") }, "\(run.stderr)")
        _ = try #require(run.line(within: 10) { $0 == "ready" }, "the command never set its trap: \(run.stderr)")
        let pid = try #require(startedPID(started))
        defer { kill(-pid, SIGKILL) }
        _ = try #require(run.errorLine(within: 5) { $0.contains("budget used up") }, "\(run.stderr)")
        tb.plug(laptop, false)
        _ = try #require(run.errorLine(within: 8) { $0.contains("finished") }, "\(run.stderr)")
        #expect(run.waitExit(within: 5) == 75)
        #expect(!run.stderr.contains("paused"), "\(run.stderr)")
        #expect(run.stderr.contains("killed by signal 9"), "\(run.stderr)")
    }

    @Test("the CPU monitor marks undeclared heavy work on battery, and the rules for CPU-heavy work then apply")
    func cpuMonitorMarksHeavyWork() throws {
        try requirePreload()
        let p = try PolicyEnv()
        // User-initiated, so the loop runs at normal priority: background work is SCHED_IDLE, and on a machine
        // busy with other tests it may get too little CPU to be measured heavy (rightly). The shipped rule leaves
        // user-initiated work alone, so the same rule without that term stands in for it.
        try p.userPolicy("50-heavy.toml", """
        [[rule]]
        id = "heavy.any-on-battery"
        when = 'task.cpu_heavy && power.external == false'
        verdict = "throttle"
        cpu_percent = 25
        """)
        let tb = Testbed()
        tb.addLaptop(acOnline: false)
        let run = try Child(Child.bgtaskPath, ["run", "--no-dbus", "--user-initiated", "--id", "hog", "--", "sh", "-c", "while :; do :; done"],
                            environment: p.environment(preload: true))
        defer { run.stop() }
        _ = try #require(run.errorLine(within: 10) { $0.contains("started") }, "\(run.stderr)")
        let measured = try #require(run.errorLine(within: 15) { $0.contains("measured CPU-heavy") }, "\(run.stderr)")
        #expect(measured.contains("% of a CPU on battery"))
        let throttled = try #require(run.errorLine(within: 3) { $0.contains("throttled to 25%") }, "\(run.stderr)")
        #expect(throttled.contains("rule heavy.any-on-battery ("), "\(throttled)")
    }

    @Test("SIGKILL of bgtask while its child is paused: the next invocation records it, and the policy still says pause, so the command is stopped, not left frozen",
          arguments: capMechanisms)
    func crashWhilePausedIsRecorded(mechanism: String) throws {
        let p = try PolicyEnv()
        try p.userPolicy("50-pause.toml", "[[rule]]\nid = \"pause-late\"\nwhen = 'task.running > 300ms'\nverdict = \"pause\"\n")
        let env = p.environment(preload: false, ["BGTASK_CAP_MECHANISM": mechanism])
        let (pid, supervisor) = try startAndKillWhilePaused(p, env)
        defer { kill(-pid, SIGKILL) }

        let next = try Child.run(Child.bgtaskPath, ["run", "--id", "next", "--", "true"], environment: env)
        if mechanism == "cgroup" {
            // bgtask's own parent weighs as little as its children: beside the user's work its tasks yield.
            #expect((try? String(contentsOfFile: "/sys/fs/cgroup/cpu/bgtask/cpu.shares", encoding: .utf8))?.hasPrefix("2\n") == true)
            // The dead run's cgroups are gone with its command, not left behind empty.
            for h in ["cpu", "freezer"] {
                #expect(!FileManager.default.fileExists(atPath: "/sys/fs/cgroup/\(h)/bgtask/frozen-\(supervisor)"), "\(h) cgroup left behind")
            }
        }
        #expect(next.0 == 0)
        #expect(next.2.contains("bgtask: recovered frozen: bgtask (pid "), "\(next.2)")
        #expect(next.2.contains("the command (process group \(pid)) was left frozen"), "\(next.2)")
        #expect(next.2.contains("stopped it (SIGTERM") && next.2.contains("policy says pause") && next.2.contains("rule pause-late ("), "\(next.2)")
        // Gone, not frozen for ever.
        #expect(processState(pid) == nil || processState(pid) == "Z")
        let why = try Child.run(Child.bgtaskPath, ["why", "frozen"], environment: p.env)
        #expect(why.0 == 0)
        #expect(why.1.contains("Paused at ") && why.1.contains("rule pause-late ("), "\(why.1)")
        #expect(why.1.contains("its supervisor was found gone: bgtask (pid ") && why.1.contains("was left frozen"), "\(why.1)")
        #expect(why.1.contains("Recovery at ") && why.1.contains("stopped it (SIGTERM"), "\(why.1)")
        // A second look finds nothing more to do: the record is gone.
        let again = try Child.run(Child.bgtaskPath, ["why", "frozen"], environment: p.env)
        #expect(!again.2.contains("recovered"), "\(again.2)")
    }

    @Test("SIGKILL of bgtask while its child is paused: when the policy now says run, the next invocation resumes it", arguments: capMechanisms)
    func crashWhilePausedIsResumedWhenAllowed(mechanism: String) throws {
        let p = try PolicyEnv()
        try p.userPolicy("50-pause.toml", "[[rule]]\nid = \"pause-late\"\nwhen = 'task.running > 300ms'\nverdict = \"pause\"\n")
        let env = p.environment(preload: false, ["BGTASK_CAP_MECHANISM": mechanism])
        let (pid, _) = try startAndKillWhilePaused(p, env)
        defer { kill(-pid, SIGKILL) }
        try FileManager.default.removeItem(at: p.userDir.appendingPathComponent("50-pause.toml"))

        // `why` alone is enough to notice and put it right.
        let why = try Child.run(Child.bgtaskPath, ["why", "frozen"], environment: env)
        #expect(why.2.contains("was left frozen; resumed it (policy says run"), "\(why.2)")
        #expect(processState(pid) != "T")
        func cpu() -> Double {
            let f = (try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8))?.split(separator: ")").last?.split(separator: " ") ?? []
            return f.count > 12 ? (Double(f[11]) ?? 0) + (Double(f[12]) ?? 0) : 0
        }
        let before = cpu()
        let deadline = Date().addingTimeInterval(5)
        while cpu() <= before && Date() < deadline { usleep(50_000) }   // waiting for the scheduler to run it
        #expect(cpu() > before)
        let story = try Child.run(Child.bgtaskPath, ["why", "frozen"], environment: env)
        #expect(story.1.contains("Recovery at ") && story.1.contains("resumed it"), "\(story.1)")
    }

    /// Starts a busy command that the policy pauses, SIGKILLs bgtask while it is paused; returns the command's pid and bgtask's.
    func startAndKillWhilePaused(_ p: PolicyEnv, _ env: [String: String]) throws -> (pid_t, pid_t) {
        // Ignoring SIGHUP: when its parent dies the kernel sends an orphaned, stopped group SIGHUP and SIGCONT.
        let run = try Child(Child.bgtaskPath, ["run", "--id", "frozen", "--", "sh", "-c", "trap '' HUP; while :; do :; done"], environment: env)
        let started = try #require(run.errorLine(within: 10) { $0.contains("started") }, "\(run.stderr)")
        let pid = try #require(startedPID(started))
        _ = try #require(run.errorLine(within: 5) { $0.contains("paused") }, "\(run.stderr)")
        // Not waited for: Foundation hears of bgtask's death only when the orphaned command (which inherited
        // its watch socket) exits too; kill(0) failing is what matters.
        let bgtask = run.process.processIdentifier
        kill(bgtask, SIGKILL)
        let deadline = Date().addingTimeInterval(5)
        while Date() < deadline, processState(bgtask).map({ $0 != "Z" }) ?? false { usleep(10_000) }   // SIGKILL has no event to wait on
        return (pid, bgtask)
    }
}

@Suite("bgtask run outside umockdev")
struct RunCommandTests {
    @Test("the command comes as nice and timeout take it: without --, its options its own; -- still accepted; an unknown option before it is an error naming it")
    func commandWithoutTerminator() throws {
        let p = try PolicyEnv()
        let env = p.environment(preload: false)
        let bare = try Child.run(Child.bgtaskPath, ["run", "--quiet", "printf", "%s|%s", "-n", "--id"], environment: env)
        #expect(bare.0 == 0, "\(bare.2)")
        #expect(bare.1 == "-n|--id")
        let dashed = try Child.run(Child.bgtaskPath, ["run", "--quiet", "--", "printf", "%s", "--quiet"], environment: env)
        #expect(dashed.0 == 0 && dashed.1 == "--quiet", "\(dashed)")
        let typo = try Child.run(Child.bgtaskPath, ["run", "--requires-externl-power", "true"], environment: env)
        #expect(typo.0 != 0 && typo.2.contains("--requires-externl-power"), "\(typo)")
        let none = try Child.run(Child.bgtaskPath, ["run", "--quiet"], environment: env)
        #expect(none.0 != 0 && none.2.contains("no command given"), "\(none)")
        // bgtask's --help before the command, the command's own after it.
        let help = try Child.run(Child.bgtaskPath, ["run", "--help"], environment: env)
        #expect(help.0 == 0 && help.1.contains("USAGE: bgtask run"), "\(help)")
        let theirs = try Child.run(Child.bgtaskPath, ["run", "--quiet", "printf", "%s", "--help"], environment: env)
        #expect(theirs.0 == 0 && theirs.1 == "--help", "\(theirs)")
    }

    @Test("a 25 % cap holds a busy loop at 25 ± 5 % of a CPU", .serialized, arguments: capMechanisms)
    func throttleAccuracy(mechanism: String) throws {
        let p = try PolicyEnv()
        try p.userPolicy("50-cap.toml", "[[rule]]\nid = \"cap\"\nwhen = 'task.cpu_heavy'\nverdict = \"throttle\"\ncpu_percent = 25\n")
        let script = p.dir.appendingPathComponent("busy.py").path
        try busyLoop.write(toFile: script, atomically: true, encoding: .utf8)
        // The ceiling is the cap and holds whatever else runs. The floor says the cap is not a pause, and means
        // something only where a CPU was there to take: on a machine busy with other tests (group scheduling gives
        // a cgroup one share beside every other runnable task) the loop may rightly get less. So the floor is
        // checked when the machine had at least half a CPU idle over the run, by /proc/stat.
        let idleBefore = idleSeconds(), t0 = Date()
        // User-initiated: normal priority, so the cap is what is measured, not SCHED_IDLE under a busy CI.
        let (rc, out, err) = try Child.run(Child.bgtaskPath, ["run", "--cpu-heavy", "--user-initiated", "--id", "busy", "--", "python3", script, "4"],
                                           environment: p.environment(preload: false, ["BGTASK_CAP_MECHANISM": mechanism]))
        let idleCPUs = (idleSeconds() - idleBefore) / Date().timeIntervalSince(t0)
        #expect(rc == 0, "\(err)")
        #expect(err.contains(mechanism == "cgroup" ? "cgroup v1 cpu quota" : "SIGSTOP/SIGCONT"))
        let share = try #require(Double(out.trimmingCharacters(in: .whitespacesAndNewlines)))
        #expect(share <= 0.30, "\(mechanism): got \(share)")
        if idleCPUs >= 0.5 {
            #expect(share >= 0.20, "\(mechanism): got \(share) with \(idleCPUs) CPUs idle beside it")
        }
    }

    @Test("background work in a cgroup gets the lowest CPU weight (it yields like SCHED_IDLE work); user-initiated work the default",
          .enabled(if: capMechanisms.contains("cgroup")))
    func backgroundCgroupYields() throws {
        let p = try PolicyEnv()
        let env = p.environment(preload: false, ["BGTASK_CAP_MECHANISM": "cgroup-v1"])
        // The command waits until bgtask has moved it into its cgroup (there is no event for that; the gap
        // between spawn and move is documented), then reads the cgroup's weight, set before the move.
        let script = "while ! grep -q ':cpu:/bgtask/' /proc/self/cgroup; do :; done; cat /sys/fs/cgroup/cpu$(sed -n 's/^[0-9]*:cpu:\\(.*\\)$/\\1/p' /proc/self/cgroup)/cpu.shares"
        let bg = try Child.run(Child.bgtaskPath, ["run", "--id", "bgw", "--", "sh", "-c", script], environment: env)
        #expect(bg.0 == 0 && bg.1.trimmingCharacters(in: .whitespacesAndNewlines) == "2", "\(bg.1) \(bg.2)")
        let fg = try Child.run(Child.bgtaskPath, ["run", "--id", "fgw", "--user-initiated", "--", "sh", "-c", script], environment: env)
        #expect(fg.0 == 0 && fg.1.trimmingCharacters(in: .whitespacesAndNewlines) == "1024", "\(fg.1) \(fg.2)")
    }

    @Test("bad input: each a clear message and its documented exit code")
    func badInput() throws {
        let p = try PolicyEnv()
        let unknown = try p.run(["run", "--frobnicate", "--", "true"])
        #expect(unknown.0 == 2 && unknown.2.contains("Unknown option '--frobnicate'"))
        let empty = try p.run(["run"])
        #expect(empty.0 == 2 && empty.2.contains("no command given"))
        let notFound = try p.run(["run", "--", "/nonexistent/command"])
        #expect(notFound.0 == 127 && notFound.2.contains("cannot run /nonexistent/command: No such file or directory"))
        let bad = p.dir.appendingPathComponent("bad.toml")
        try Data("[[rule]]\nid = \"x\"\nwhen = 'battery.pct < 5'\nverdict = \"pause\"\n".utf8).write(to: bad)
        let badPolicy = try p.run(["run", "--policy", bad.path, "--", "true"])
        #expect(badPolicy.0 == 78)
        #expect(badPolicy.2.contains("bad.toml:3:9: in 'when' of rule 'x': unknown name 'battery.pct'"))
        let unwritable = try Child.run(Child.bgtaskPath, ["run", "--", "true"],
                                       environment: p.environment(preload: false, ["BGTASK_STATE_DIR": "/etc/passwd/state"]))
        #expect(unwritable.0 == 73 && unwritable.2.contains("cannot write the audit trail: state directory /etc/passwd: is not a directory"),
                "\(unwritable.2)")
        let ok = try p.run(["run", "--", "sh", "-c", "exit 7"])
        #expect(ok.0 == 7)
    }

    @Test("--no-wait and --max-wait give up with 75 and the reason, and say so in why")
    func givingUp() throws {
        let p = try PolicyEnv()
        try p.userPolicy("50-never.toml", "[[rule]]\nid = \"never\"\nwhen = 'task.id == \"blocked\"'\nverdict = \"defer\"\nreason = \"not today\"\n")
        let now = try p.run(["run", "--id", "blocked", "--no-wait", "--", "true"])
        #expect(now.0 == 75 && now.2.contains("not started: not today — rule never ("), "\(now.2)")
        #expect(!now.2.contains("waiting:"), "\(now.2)")
        let later = try p.run(["run", "--id", "blocked", "--max-wait", "300ms", "--", "true"])
        #expect(later.0 == 75 && later.2.contains("gave up waiting after 300ms"))
        let why = try p.run(["why", "blocked"])
        #expect(why.1.contains("blocked waited ") && why.1.contains("not today — rule never (") && why.1.contains("Gave up at "))
        let list = try p.run(["why"])
        #expect(list.1.contains("blocked: gave up"))
    }

    @Test("bgtask log prints decisions as they are made")
    func logFollows() throws {
        let p = try PolicyEnv()
        _ = try p.run(["run", "--id", "first", "--", "true"])
        let log = try Child(Child.bgtaskPath, ["log", "-f", "-n", "5"], environment: p.env)
        defer { log.stop() }
        _ = try #require(log.line(within: 5) { $0.contains("first finished") }, "\(log.stderr)")
        let second = try p.run(["run", "--id", "second", "--", "sh", "-c", "exit 3"])
        #expect(second.0 == 3, "\(second.2)")
        let line = try #require(log.line(within: 10) { $0.contains("second finished") },
                                "no live line; log said: \(log.stderr); the run said: \(second.2)")
        #expect(line.contains("exit 3"))
    }

    @Test("--budget expires a command that runs too long: SIGTERM, and 75")
    func budgetExpires() throws {
        let p = try PolicyEnv()
        let r = try p.run(["run", "--id", "long", "--budget", "300ms", "--", "sleep", "30"])
        #expect(r.0 == 75)
        #expect(r.2.contains("budget used up"))
        // The story says why it ended, not only the signal that did it.
        let why = try p.run(["why", "long"]).1
        #expect(why.contains("its 300ms budget ran out") && why.contains("by that expiry (killed by signal 15)"), "\(why)")
        // And the list says the same of it, not only the signal.
        let list = try p.run(["why"]).1
        #expect(list.contains("long: expired ") && list.contains(": its 300ms budget ran out; ended ") && list.contains("by that expiry (killed by signal 15)"), "\(list)")
    }
}

extension UmockdevIntegrationTests {
    @Test("energy per run: on battery the run's share of the battery's power_now is recorded, at most 9.5 W × its time; on the charger it is unknown, with why — never zero")
    func energyOfARun() throws {
        try requirePreload()
        let p = try PolicyEnv()
        let tb = Testbed()
        let laptop = tb.addLaptop(acOnline: false)    // BAT0 discharging at power_now 9.5 W
        let env = p.environment(preload: true)
        let spin = ["sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done"]
        let t0 = Date()
        let (s, _, e) = try Child.run(Child.bgtaskPath, ["run", "--no-dbus", "--id", "burn", "--ignore-idle", "--"] + spin, environment: env, deadline: 60)
        let wall = Date().timeIntervalSince(t0)
        #expect(s == 0, "\(e)")
        let (_, why, _) = try Child.run(Child.bgtaskPath, ["why", "--json", "burn"], environment: env, deadline: 30)
        let runs = try #require(try JSONSerialization.jsonObject(with: Data(why.utf8)) as? [[String: Any]], "\(why)")
        let entries = try #require(runs.last?["entries"] as? [[String: Any]])
        let finished = try #require(entries.last { $0["event"] as? String == "finished" }, "\(entries)")
        let wh = try #require(finished["energy_wh"] as? Double, "\(finished)")
        #expect(wh > 0 && wh <= 9.5 * wall / 3600 + 1e-9, "\(wh) Wh in \(wall) s")
        #expect((finished["energy"] as? String)?.contains("source: BAT0 power_now × CPU share") == true, "\(finished)")
        let (_, story, _) = try Child.run(Child.bgtaskPath, ["why", "burn"], environment: env, deadline: 30)
        #expect(story.contains("Used ~") && story.contains("of the battery's full energy"), "\(story)")

        tb.plug(laptop, true)
        #expect(try Child.run(Child.bgtaskPath, ["run", "--no-dbus", "--id", "burn2", "--ignore-idle", "--"] + spin, environment: env, deadline: 60).0 == 0)
        let (_, why2, _) = try Child.run(Child.bgtaskPath, ["why", "--json", "burn2"], environment: env, deadline: 30)
        let runs2 = try #require(try JSONSerialization.jsonObject(with: Data(why2.utf8)) as? [[String: Any]], "\(why2)")
        let f2 = try #require((runs2.last?["entries"] as? [[String: Any]])?.last { $0["event"] as? String == "finished" })
        #expect(f2["energy_wh"] is NSNull, "\(f2)")
        #expect((f2["energy"] as? String)?.hasPrefix("energy unknown: on external power") == true, "\(f2)")
    }
}
