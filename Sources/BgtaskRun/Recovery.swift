#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskConfig
import BgtaskCore
import BgtaskPolicy
import BgtaskProbes
import CLinux
import BgtaskFiles

/// A task whose supervisor (`bgtask run`) is gone: killed, crashed, or its machine's session ended.
public struct Orphan: Sendable {
    public var record: SupervisorRecord
    public var path: String
    /// The command's process group leader is still there: the same process, still ours.
    public var alive: Bool

    /// What the dead supervisor left, in words.
    public var left: String {
        let what: String
        switch record.state {
        case "paused": what = "frozen"
        case "expiring": what = "expiring (SIGTERM sent)"
        case let s where s.hasPrefix("throttled"): what = "running, \(s)"
        default: what = "running"
        }
        return alive ? "the command (process group \(record.pgid)) was left \(what)" : "the command (process group \(record.pgid)) has exited too"
    }
}

/// Finds what killed supervisors left and puts it right: never a frozen process nobody will thaw, never a
/// signal to a process that is not the one recorded.
public enum Recovery {
    /// Records of supervisors that are gone. Records from an earlier boot, malformed ones, and ones not
    /// ours are removed (they describe nothing that can be acted on); live supervisors' are left alone.
    public static func scan(runtimeDirectory: String) -> (orphans: [Orphan], notes: [String]) {
        let dir = runtimeDirectory + "/active"
        var notes: [String] = []
        do { try SecureDirectory.verify(dir) } catch {
            if access(dir, F_OK) == 0 { notes.append("crash-recovery records not read: \(error)") }
            return ([], notes)
        }
        guard let names = FileIO.names(dir) else { return ([], notes) }
        let boot = ProcInfo.bootID()
        var orphans: [Orphan] = []
        for n in names {
            var path = dir + "/" + n
            // `<pid>.rec`; `<pid>.rec.tmp` while being written; `<pid>.rec.<claimer>.claim` while a recoverer works on it.
            let parts = n.split(separator: ".").map(String.init)
            guard parts.count >= 2, parts[1] == "rec", let owner = pid_t(parts[0]), owner > 1 else { continue }
            if parts.count == 3 && parts[2] == "tmp" { if !isAlive(owner) { unlink(path) }; continue }
            if parts.count == 4 && parts[3] == "claim" {
                guard let claimer = pid_t(parts[2]), !isAlive(claimer) else { continue }   // another recoverer's
            } else if parts.count != 2 { continue }
            do { try SecureDirectory.checkFile(path) } catch { notes.append("ignored \(error)"); continue }
            guard case .success(let bytes) = FileIO.readBytes(path, limit: SupervisorRecord.maxBytes + 1, noFollow: true),
                  bytes.count <= SupervisorRecord.maxBytes,
                  let r = SupervisorRecord.parse(String(decoding: bytes, as: UTF8.self)), r.supervisorPID == owner else {
                notes.append("removed a malformed crash-recovery record \(path)")
                unlink(path)
                continue
            }
            if r.bootID != boot || r.uid != geteuid() {
                unlink(path)   // an earlier boot's PIDs mean nothing now
                continue
            }
            if owner == getpid() || ProcInfo.isSame(owner, start: r.supervisorStart) { continue }
            // The supervisor is gone. A clean exit removes the record before the process ends, so if the
            // record is still there it was not clean; claiming it by rename means one recoverer acts, not two.
            let claimed = dir + "/\(owner).rec.\(getpid()).claim"
            guard rename(path, claimed) == 0 else { continue }
            path = claimed
            let alive = ProcInfo.isSame(r.pgid, start: r.childStart) && ProcInfo.owner(r.pgid) == geteuid()
            orphans.append(Orphan(record: r, path: path, alive: alive))
        }
        return (orphans, notes)
    }

    /// Applies the policy's current decision to an orphan, then forgets it. Nothing will supervise it
    /// again, so it is never left frozen: if the policy lets it run it is thawed (a cgroup cap stays);
    /// if not, it is expired as the policy would have expired it: SIGTERM, a grace (at most 5 s here),
    /// SIGKILL. Returns what was done, in words.
    public static func resolve(_ o: Orphan, decision: Decision?) -> String {
        defer { unlink(o.path) }
        let cg = cgroup(o.record.cgroup)
        guard o.alive else {
            cg?.remove()
            return "nothing to do: \(o.left)"
        }
        let pgid = o.record.pgid
        func thaw() {
            if let c = cg { c.freeze(false) }
            kill(-pgid, SIGCONT)
        }
        let verdict = o.record.state == "expiring" ? .expire : (decision?.verdict ?? .run)
        let because = decision?.matches.first.map { "\($0.reason) — rule \($0.ruleID) (\($0.location))" } ?? "no rule applies"
        switch verdict {
        case .run:
            cg?.quota(nil)
            thaw()
            return "resumed it (policy says run: \(because)); it runs on unsupervised until it exits"
        case .throttle:
            thaw()
            if let c = cg, let p = decision?.cpuPercent {
                c.quota(p)
                return "resumed it capped at \(p)% by its cgroup (\(because)); it runs on unsupervised"
            }
            return "resumed it without a cap (the signal duty cycle needs a supervisor): \(because)"
        case .defer, .pause, .expire:
            // The one escalation (thawed, SIGTERM, the grace up to 5 s, SIGKILL, the cgroup removed).
            let ended = RunProcesses.endAll([.init(pgid: pgid, childStart: o.record.childStart, containment: o.record.cgroup, token: nil)],
                                            grace: o.record.grace)[0]
            let how = ended.signals ?? "it had already ended"
            let why = o.record.state == "expiring" ? "it was expiring when its supervisor died" : "policy says \(verdict.rawValue): \(because)"
            return "stopped it (\(how)): \(why)"
        }
    }

    /// Waits (bounded) for a process that is not our child to exit: a pidfd is readable when it does.
    static func waitExit(_ pid: pid_t, seconds: Double) -> Bool {
        let fd = bgt_pidfd_open(pid)
        guard fd >= 0 else { return !isAlive(pid) }
        defer { close(fd) }
        var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        let deadline = monotonic() + seconds
        while true {
            let left = deadline - monotonic()
            if left <= 0 { return !isAlive(pid) }
            let n = poll(&p, 1, Int32(left * 1000) + 1)
            if n > 0 { return true }
            if n < 0 && errno != EINTR { return !isAlive(pid) }
        }
    }

    /// A recorded cgroup, only if it is bgtask's own: a v1 name under `bgtask/` (no slashes), or a v2
    /// directory under the cgroup2 mount whose last part is a bgtask task name, owned by us.
    static func cgroup(_ record: Containment, cgroup2Root: String? = CgroupV2.locate()?.root) -> TaskCgroup? {
        switch record {
        case .cgroupV1(let name):
            guard validName(name) else { return nil }
            return .v1(CgroupV1(cpu: CgroupV1.root + "/cpu/bgtask/" + name, freezer: CgroupV1.root + "/freezer/bgtask/" + name))
        case .cgroupV2(let dir):
            guard let root = cgroup2Root else { return nil }
            let parts = dir.split(separator: "/").map(String.init)
            guard dir.hasPrefix(root + "/"), !parts.contains(".."), !parts.contains("."), let last = parts.last, validName(last) else { return nil }
            var st = stat()
            guard lstat(dir, &st) == 0, (st.st_mode & S_IFMT) == S_IFDIR, st.st_uid == geteuid() else { return nil }
            return .v2(CgroupV2(directory: dir))
        case .processGroup, .unit:
            return nil
        }
    }

    /// `<task id>-<pid>`: letters, digits, '.', '_', '-', ending in a PID.
    static func validName(_ n: String) -> Bool {
        guard !n.isEmpty, n.utf8.count <= 255, n != ".", n != "..",
              n.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "._-".contains($0)) }),
              let dash = n.lastIndex(of: "-"), pid_t(n[n.index(after: dash)...]) != nil else { return false }
        return true
    }

    /// Removes empty cgroups left by runs whose supervisor is gone (v1 `bgtask/<id>-<pid>`; v2 task
    /// cgroups and `bgtask-<pid>` leaves in the delegated cgroup). A populated one is left: rmdir refuses.
    @discardableResult
    public static func sweepCgroups() -> [String] { sweepCgroups(v1Root: CgroupV1.root, v2Base: CgroupV2.currentBase()) }

    static func sweepCgroups(v1Root: String, v2Base: String?) -> [String] {
        var removed: [String] = []
        var dirs = [v1Root + "/cpu/bgtask", v1Root + "/freezer/bgtask"]
        if let b = v2Base { dirs.append(b) }
        for dir in dirs {
            guard let names = FileIO.names(dir, directoriesOnly: true) else { continue }
            // In the v2 delegated cgroup, only bgtask's own (`bgtask-…`); v1's `bgtask/` directory is all ours.
            for n in names where validName(n) && (dir.hasSuffix("/bgtask") || n.hasPrefix("bgtask-")) {
                guard let dash = n.lastIndex(of: "-"), let pid = pid_t(n[n.index(after: dash)...]), pid != getpid(), !isAlive(pid) else { continue }
                if rmdir(dir + "/" + n) == 0 { removed.append(dir + "/" + n) }
            }
        }
        return removed
    }
}


extension Recovery {
    /// Finds every orphan, records in the audit trail that its supervisor is gone and what was done, and
    /// applies the policy (`decide` is asked only when there is an orphan whose command is still alive,
    /// so the common case reads one directory). Returns lines for stderr.
    public static func recoverAll(runtimeDirectory: String, observer: RunObserver?,
                                  decide: (TaskFields) -> Decision?) -> [String] {
        let (orphans, notes) = scan(runtimeDirectory: runtimeDirectory)
        var lines = notes
        for o in orphans {
            let lost = "bgtask (pid \(o.record.supervisorPID)) is gone; \(o.left)"
            observer?.record(RunEvent(kind: .lost, monotonic: monotonic(), detail: lost, decision: nil, conditions: [:],
                                      exitStatus: nil, runID: o.record.runID), task: o.record.task)
            var task = o.record.task
            task.running = ProcInfo.age(start: o.record.childStart) ?? 0   // rules on task.running see its real age
            let decision = o.alive ? decide(task) : nil
            let done = resolve(o, decision: decision)
            observer?.record(RunEvent(kind: .recovered, monotonic: monotonic(), detail: done, decision: decision, conditions: [:],
                                      exitStatus: nil, runID: o.record.runID), task: o.record.task)
            lines.append("\(o.record.task.id): \(lost); \(done)")
        }
        sweepCgroups()   // empty cgroups of runs that are gone, crashed or not (a v2 leaf outlives its run)
        return lines
    }

    /// The start time (clock ticks after boot) of a process, to tell it from a later one with its pid.
    public static func startTime(of pid: pid_t) -> UInt64? { ProcInfo.startTime(pid) }
}
