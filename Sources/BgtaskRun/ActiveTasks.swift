#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskConfig
import BgtaskFiles
import BgtaskPolicy

/// What a running `bgtask run` supervises, written where it lives only until the next boot
/// (`$XDG_RUNTIME_DIR/bgtask/active/<pid>.rec`, `/run/bgtask` for root): so that a later invocation
/// can tell a killed supervisor from a live one, and undo what it left — a frozen cgroup, a stopped
/// process group, a quota. Each record names the boot and the start times of both processes, so a
/// PID reused after a reboot or a wrap-around is never signalled.
public struct SupervisorRecord: Sendable, Equatable {
    public var bootID: String
    public var supervisorPID: pid_t
    public var supervisorStart: UInt64
    public var uid: uid_t
    public var pgid: pid_t
    public var childStart: UInt64
    public var cgroup: Containment
    public var runID: String
    public var task: TaskFields
    /// running, paused, throttled N%, expiring
    public var state: String
    public var grace: Double

    static let maxBytes = 4096

    var text: String {
        var flags: [String] = []
        if task.requiresExternalPower { flags.append("requires_external_power") }
        if task.requiresNetwork { flags.append("requires_network") }
        if task.requiresUnmetered { flags.append("requires_unmetered") }
        if task.cpuHeavy { flags.append("cpu_heavy") }
        if task.userInitiated { flags.append("user_initiated") }
        return """
        boot_id=\(bootID)
        supervisor_pid=\(supervisorPID)
        supervisor_start=\(supervisorStart)
        uid=\(uid)
        pgid=\(pgid)
        child_start=\(childStart)
        cgroup=\(cgroup.description)
        run_id=\(runID)
        task_id=\(task.id)
        task_kind=\(task.kind.rawValue)
        task_flags=\(flags.joined(separator: ","))
        state=\(state)
        grace=\(grace)

        """
    }

    /// Strict: every field present and well-formed, identifiers bounded and free of control characters.
    static func parse(_ text: String) -> SupervisorRecord? {
        var kv: [String: String] = [:]
        for line in text.split(separator: "\n") {
            guard let eq = line.firstIndex(of: "=") else { return nil }
            kv[String(line[..<eq])] = String(line[line.index(after: eq)...])
        }
        func id(_ k: String) -> String? {
            guard let v = kv[k], !v.isEmpty, v.utf8.count <= 255, v.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value != 0x7F }) else { return nil }
            return v
        }
        guard let boot = id("boot_id"), let sp = kv["supervisor_pid"].flatMap({ pid_t($0) }), sp > 1,
              let ss = kv["supervisor_start"].flatMap({ UInt64($0) }), let uid = kv["uid"].flatMap({ uid_t($0) }),
              let pg = kv["pgid"].flatMap({ pid_t($0) }), pg > 1, let cs = kv["child_start"].flatMap({ UInt64($0) }),
              let cg = id("cgroup").flatMap(Containment.init), let run = id("run_id"), let taskID = id("task_id"), let kind = id("task_kind").flatMap(TaskKind.init(rawValue:)),
              let state = id("state"), let grace = kv["grace"].flatMap({ Double($0) }), grace.isFinite, grace >= 0, grace <= 3600
        else { return nil }
        var task = TaskFields(id: taskID, kind: kind)
        for f in (kv["task_flags"] ?? "").split(separator: ",") {
            switch f {
            case "requires_external_power": task.requiresExternalPower = true
            case "requires_network": task.requiresNetwork = true
            case "requires_unmetered": task.requiresUnmetered = true
            case "cpu_heavy": task.cpuHeavy = true
            case "user_initiated": task.userInitiated = true
            default: return nil
            }
        }
        return SupervisorRecord(bootID: boot, supervisorPID: sp, supervisorStart: ss, uid: uid, pgid: pg, childStart: cs,
                                cgroup: cg, runID: run, task: task, state: state, grace: grace)
    }
}

/// The record of this process's own task, kept current as its state changes.
public final class ActiveTasks {
    let directory: String
    let file: String
    var record: SupervisorRecord?

    /// `runtimeDirectory` must already be checked (`StatePaths.preparedRuntimeDirectory`).
    public init(runtimeDirectory: String) throws(PathError) {
        directory = try SecureDirectory.prepare(runtimeDirectory + "/active")
        file = directory + "/\(getpid()).rec"
    }

    public func started(pgid: pid_t, cgroup: Containment, runID: String, task: TaskFields, grace: Double) {
        record = SupervisorRecord(bootID: ProcInfo.bootID() ?? "unknown", supervisorPID: getpid(),
                                  supervisorStart: ProcInfo.startTime(getpid()) ?? 0, uid: geteuid(), pgid: pgid,
                                  childStart: ProcInfo.startTime(pgid) ?? 0, cgroup: cgroup, runID: runID, task: task,
                                  state: "running", grace: grace)
        write()
    }

    /// running, paused, throttled N, expiring; and the task as it is now (the CPU monitor may mark it heavy).
    public func update(state: String, task: TaskFields? = nil) {
        guard var r = record else { return }
        r.state = state
        if let t = task { r.task = t }
        guard r != record else { return }
        record = r
        write()
    }

    /// Written to a new file and renamed over the old one, so a reader never sees half a record.
    func write() {
        guard let r = record else { return }
        let tmp = file + ".tmp"
        unlink(tmp)
        let fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return }
        let text = r.text
        let ok = text.withCString { Glibc.write(fd, $0, strlen($0)) } == text.utf8.count && fsync(fd) == 0
        close(fd)
        if ok { rename(tmp, file) } else { unlink(tmp) }
    }

    public func remove() { unlink(file) }

    /// The `bgtask run`s of this user whose supervisor is alive now (`bgtask tasks`), by their records in
    /// `runtimeDirectory/active`: this boot's, ours, whose supervisor is still the process recorded (by its start
    /// time, as `Recovery.scan` tells it). Read only: what a dead supervisor left is for the next `bgtask run`, `why`
    /// or `log` to recover, not for a listing to touch. A record being written, claimed, malformed or not ours is
    /// skipped; a run shows once its command has started (a waiting one has no record yet).
    public static func live(runtimeDirectory: String) -> [LiveRun] {
        let dir = runtimeDirectory + "/active"
        guard (try? SecureDirectory.verify(dir)) != nil, let names = FileIO.names(dir) else { return [] }
        let boot = ProcInfo.bootID()
        var runs: [LiveRun] = []
        for n in names.sorted() {
            let parts = n.split(separator: ".")
            guard parts.count == 2, parts[1] == "rec", let owner = pid_t(parts[0]), owner > 1 else { continue }
            let path = dir + "/" + n
            guard (try? SecureDirectory.checkFile(path)) != nil,
                  case .success(let bytes) = FileIO.readBytes(path, limit: SupervisorRecord.maxBytes + 1, noFollow: true),
                  bytes.count <= SupervisorRecord.maxBytes, let r = SupervisorRecord.parse(String(decoding: bytes, as: UTF8.self)),
                  r.supervisorPID == owner, r.bootID == boot, r.uid == geteuid(), ProcInfo.isSame(owner, start: r.supervisorStart)
            else { continue }
            runs.append(LiveRun(record: r, runtime: r.childStart > 0 ? ProcInfo.age(start: r.childStart) : nil))
        }
        return runs
    }
}

/// A `bgtask run` running now, as its record says (`ActiveTasks.live`).
public struct LiveRun: Sendable, Equatable {
    public var record: SupervisorRecord
    /// How long its command has run, in seconds (nil when /proc cannot tell).
    public var runtime: Double?

    /// The cap of a `throttled N%` state, in percent.
    public var cpuCap: UInt32? {
        guard record.state.hasPrefix("throttled "), record.state.hasSuffix("%") else { return nil }
        return UInt32(record.state.dropFirst("throttled ".count).dropLast())
    }
}

/// What `/proc` says of a process: when it started (to tell it from a later one with the same PID) and whose it is.
public enum ProcInfo {
    /// This boot's identity (a random UUID the kernel makes at each boot).
    public static func bootID() -> String? {
        ProcStat.read("/proc/sys/kernel/random/boot_id").map { $0.trimmingCharacters(in: "\n") }
    }

    /// Field 22 of /proc/PID/stat: start time in clock ticks after boot.
    static func startTime(_ pid: pid_t) -> UInt64? {
        guard let stat = ProcStat.read("/proc/\(pid)/stat"), let close = stat.lastIndex(of: ")") else { return nil }
        let f = stat[stat.index(after: close)...].split(separator: " ")
        return f.count > 19 ? UInt64(f[19]) : nil
    }

    /// How long ago a process that started at `start` (clock ticks after boot) started, in seconds.
    static func age(start: UInt64) -> Double? {
        guard let up = ProcStat.read("/proc/uptime")?.split(separator: " ").first.flatMap({ Double($0) }) else { return nil }
        return max(0, up - Double(start) / ProcStat.ticks)
    }

    /// The effective uid a process runs as (the owner of /proc/PID).
    static func owner(_ pid: pid_t) -> uid_t? {
        var st = stat()
        return stat("/proc/\(pid)", &st) == 0 ? st.st_uid : nil
    }

    /// Alive, not a zombie, and the same process that was recorded.
    static func isSame(_ pid: pid_t, start: UInt64) -> Bool {
        guard isAlive(pid), let s = startTime(pid) else { return false }
        return s == start
    }
}

/// A zombie has exited; kill(pid, 0) still succeeds on it.
public func isAlive(_ pid: pid_t) -> Bool {
    guard kill(pid, 0) == 0 || errno == EPERM else { return false }
    guard let stat = ProcStat.read("/proc/\(pid)/stat"), let close = stat.lastIndex(of: ")") else { return true }
    return !stat[stat.index(after: close)...].hasPrefix(" Z")
}
