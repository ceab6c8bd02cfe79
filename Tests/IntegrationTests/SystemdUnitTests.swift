import BgtaskTestSupport
import Foundation
import Testing

/// A unit's name from bgtaskd's "started (systemd unit NAME)" line.
func startedUnit(_ line: String) -> String? {
    guard let r = line.range(of: "(systemd unit ") else { return nil }
    let name = line[r.upperBound...].prefix { $0 != ")" && $0 != "," }
    return name.isEmpty ? nil : String(name)
}

/// A number a command wrote to a file once it started (bounded: a file has no event here).
func numberWritten(to url: URL, within seconds: Double) -> Int32? {
    var n: Int32?
    _ = polled(within: seconds) {
        n = (try? String(contentsOf: url, encoding: .utf8)).flatMap { Int32($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
        return n != nil
    }
    return n
}

/// How many sockets a process holds (its /proc fd links): for a connection that must come and go.
func socketCount(_ pid: Int32) -> Int {
    let dir = "/proc/\(pid)/fd"
    return ((try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []).filter {
        (try? FileManager.default.destinationOfSymbolicLink(atPath: dir + "/" + $0))?.hasPrefix("socket:") == true
    }.count
}

let capRule = """
[[rule]]
id = "test.cap"
when = 'task.id == "capped"'
verdict = "throttle"
cpu_percent = 20
reason = "capped by the test"
"""

extension UmockdevIntegrationTests {
    @Test("with a systemd user manager, bgtaskd runs each command as a transient unit in background.slice: exit status, CPUQuota, pause and resume, cancel, output in the journal, a connection to the manager only while units run, and a crash leaves nothing frozen")
    func tasksRunAsTransientUnits() throws {
        try requirePreload()
        let manager = try UserManager()
        let p = try PolicyEnv()
        try p.userPolicy("50-fast.toml", immediatePowerRule)
        try p.userPolicy("60-cap.toml", capRule)
        let tb = Testbed()
        let laptop = tb.addLaptop(acOnline: true, batteryStatus: "Charging")
        let d = try SessionDaemon(policy: p, preload: true,
                                  daemonEnv: ["BGTASK_SYSTEMD_UNITS": "1", "XDG_RUNTIME_DIR": manager.runtimeDirectory.path])
        #expect(d.daemon?.stderr.contains("tasks run as transient units of the systemd user manager") == true, "\(d.daemon?.stderr ?? "")")

        // Idle, bgtaskd holds no connection to the manager: it is opened for a unit and closed after the last one.
        let daemonPID = try #require(d.daemon?.process.processIdentifier)
        let idleSockets = socketCount(daemonPID)

        // A command's exit status comes back through systemd; it ran in background.slice; `why` and `output` say where.
        let cg = p.dir.appendingPathComponent("cgroup")
        #expect(try d.bgtask(["submit", "--id", "exit3", "--", "sh", "-c", "cat /proc/self/cgroup > '\(cg.path)'; echo to-the-journal; exit 3"]).0 == 0)
        let started = try #require(d.said("exit3: started"), "\(d.daemon?.stderr ?? "")")
        let unit = try #require(startedUnit(started), "\(started)")
        #expect(unit.hasPrefix("bgtask-exit3-") && unit.hasSuffix(".service"))
        let finished = try #require(d.said("exit3: finished"), "\(d.daemon?.stderr ?? "")")
        #expect(finished.contains("exit 3"), "\(finished)")
        let cgroups = try String(contentsOf: cg, encoding: .utf8)
        #expect(cgroups.contains("/background.slice/\(unit)"), "\(cgroups)")
        let (_, why, _) = try d.bgtask(["why", "exit3"])
        #expect(why.contains("systemd unit \(unit)"), "\(why)")
        #expect(polled(within: 5) { socketCount(daemonPID) == idleSockets }, "the connection to the manager stayed open: \(socketCount(daemonPID)) sockets, \(idleSockets) before")
        let (_, _, outputErr) = try d.bgtask(["output", "exit3"])
        #expect(outputErr.contains("ran as the systemd unit \(unit)"), "\(outputErr)")

        // Throttled by the unit's CPUQuota=; cancelled through the unit.
        #expect(try d.bgtask(["submit", "--id", "capped", "--", "sleep", "300"]).0 == 0)
        let cappedLine = try #require(d.said("capped: started"), "\(d.daemon?.stderr ?? "")")
        let cappedUnit = try #require(startedUnit(cappedLine))
        _ = try #require(d.said("capped: throttled to 20%"), "\(d.daemon?.stderr ?? "")")
        #expect(socketCount(daemonPID) > idleSockets, "no connection to the manager while a unit runs")
        // Its CPU time, as `tasks` shows it, read from the unit's cgroup (cpu.stat), not asked of the manager.
        let (_, tasks, _) = try d.bgtask(["tasks", "--json"])
        #expect(tasks.contains("\"cpu_share\"") && tasks.contains(cappedUnit), "\(tasks)")
        let (_, quota, _) = try manager.systemctl(["show", "-p", "CPUQuotaPerSecUSec", cappedUnit])
        #expect(quota.trimmingCharacters(in: .whitespacesAndNewlines) == "CPUQuotaPerSecUSec=200ms", "\(quota)")
        #expect(try d.bgtask(["cancel", "capped"]).0 == 0)
        let cappedEnd = try #require(d.said("capped: finished"), "\(d.daemon?.stderr ?? "")")
        #expect(cappedEnd.contains("signal 15"), "\(cappedEnd)")

        // Paused and resumed through systemd (FreezeUnit, or SIGSTOP where systemd cannot freeze).
        let pidFile = p.dir.appendingPathComponent("pid")
        #expect(try d.bgtask(["submit", "--id", "sync", "--requires-external-power", "--", "sh", "-c", "echo $$ > '\(pidFile.path)'; exec sleep 300"]).0 == 0)
        let syncLine = try #require(d.said("sync: started"), "\(d.daemon?.stderr ?? "")")
        let syncUnit = try #require(startedUnit(syncLine))
        let pid = try #require(numberWritten(to: pidFile, within: 10))
        func frozen() throws -> Bool {
            let (_, state, _) = try manager.systemctl(["show", "-p", "FreezerState", syncUnit])
            return liveState(pid) == "T" || state.contains("FreezerState=frozen")
        }
        tb.plug(laptop, false)
        _ = try #require(d.said("sync: paused"), "\(d.daemon?.stderr ?? "")")
        let stopped = try reaches(pid, "T", within: 5) || frozen()
        #expect(stopped, "state \(liveState(pid) ?? "gone")")
        tb.plug(laptop, true)
        _ = try #require(d.said("sync: resumed"), "\(d.daemon?.stderr ?? "")")
        #expect(try !frozen(), "still stopped after resume")

        // A daemon killed while it is paused: the restart thaws and ends it through the unit; it waits again.
        tb.plug(laptop, false)
        _ = try #require(d.said("sync: paused"), "\(d.daemon?.stderr ?? "")")
        d.crash()
        tb.plug(laptop, true)
        try d.restart()
        #expect(gone(pid, within: 10), "the paused command was left behind: state \(liveState(pid) ?? "gone")")
        let (_, syncWhy, _) = try d.bgtask(["why", "sync"])
        #expect(syncWhy.contains("interrupted"), "\(syncWhy)")
        let again = try #require(d.said("sync: started"), "not run again: \(d.daemon?.stderr ?? "")")
        #expect(startedUnit(again) != syncUnit, "a new run is a new unit")
        #expect(try d.bgtask(["cancel", "sync"]).0 == 0)
    }
}

extension UmockdevIntegrationTests {
    /// A real `systemd --user` of the test's own, a laptop on the charger, and bgtaskd running tasks as its units.
    func daemonOnAUserManager() throws -> (UserManager, PolicyEnv, Testbed, SessionDaemon) {
        try requirePreload()
        let manager = try UserManager()
        let p = try PolicyEnv()
        let tb = Testbed()
        _ = tb.addLaptop(acOnline: true, batteryStatus: "Charging")
        let d = try SessionDaemon(policy: p, preload: true,
                                  daemonEnv: ["BGTASK_SYSTEMD_UNITS": "1", "XDG_RUNTIME_DIR": manager.runtimeDirectory.path])
        return (manager, p, tb, d)
    }

    @Test("the systemd user manager killed while a unit runs: bgtaskd is told by its connection closing, the task is over, and what the unit left running is ended by the run token")
    func managerGoneWhileAUnitRuns() throws {
        let (manager, p, tb, d) = try daemonOnAUserManager()
        _ = tb
        let pidFile = p.dir.appendingPathComponent("pid")
        #expect(try d.bgtask(["submit", "--id", "orphaned", "--", "sh", "-c", "echo $$ > '\(pidFile.path)'; exec sleep 300"]).0 == 0)
        let started = try #require(d.said("orphaned: started"), "\(d.daemon?.stderr ?? "")")
        #expect(started.contains("systemd unit"), "\(started)")
        let pid = try #require(numberWritten(to: pidFile, within: 10))
        // A crash, not a stop: the manager cannot end its units, and sends no last state.
        kill(manager.managerPID, SIGKILL)
        _ = try #require(d.said("closed its connection while 1 unit(s) ran; asking it again"), "\(d.daemon?.stderr ?? "")")
        _ = try #require(d.said("the systemd user manager went away while 1 unit(s) ran", within: 20), "\(d.daemon?.stderr ?? "")")
        _ = try #require(d.said("orphaned: finished"), "\(d.daemon?.stderr ?? "")")
        #expect(gone(pid, within: 15), "the unit's command outlived its manager and its task")
        #expect(try d.pending().isEmpty)
    }

    @Test("the systemd user manager re-executed while a unit runs (as a systemd upgrade does): bgtaskd asks it again, follows the unit on, and records the command's own exit")
    func managerReexecutedWhileAUnitRuns() throws {
        let (manager, p, tb, d) = try daemonOnAUserManager()
        _ = tb
        let go = p.dir.appendingPathComponent("go")
        #expect(try d.bgtask(["submit", "--id", "survivor", "--", "sh", "-c", "while [ ! -e '\(go.path)' ]; do sleep 0.1; done; exit 7"]).0 == 0)
        let started = try #require(d.said("survivor: started"), "\(d.daemon?.stderr ?? "")")
        #expect(started.contains("systemd unit"), "\(started)")
        let reexec = try manager.systemctl(["daemon-reexec"])
        #expect(reexec.0 == 0, "\(reexec.2)")
        _ = try #require(d.said("closed its connection while 1 unit(s) ran"), "\(d.daemon?.stderr ?? "")")
        _ = try #require(d.said("answers again: its 1 unit(s) followed on"), "\(d.daemon?.stderr ?? "")")
        // Ended only now, by its own hand: the status is the command's, not a kill's.
        #expect(FileManager.default.createFile(atPath: go.path, contents: nil))
        let finished = try #require(d.said("survivor: finished"), "\(d.daemon?.stderr ?? "")")
        #expect(finished.contains("exit 7"), "\(finished)")
        let said = d.daemon?.stderr ?? ""
        #expect(!said.contains("went away"), "\(said)")
    }
}
