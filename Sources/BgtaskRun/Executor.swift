#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskConfig
import BgtaskProbes
import CLinux
import Synchronization
import BgtaskFiles

/// How a task's CPU is capped and its process tree frozen, best first: cgroup v2 `cpu.max` and
/// `cgroup.freeze` in a delegated subtree, else a cgroup v1 `cpu` quota and `freezer` (as root), else
/// SIGSTOP/SIGCONT of the process group (a duty cycle for a cap, as BOINC and cpulimit do).
public enum CapMechanism: String, Sendable {
    case cgroupV2 = "cgroup v2 cpu.max + cgroup.freeze"
    case cgroupV1 = "cgroup v1 cpu quota + freezer"
    case signals = "SIGSTOP/SIGCONT of the process group"
    /// bgtaskd with a systemd user manager: the task is a transient service in background.slice, capped by its
    /// `CPUQuota=` and frozen by `FreezeUnit` (SIGSTOP to the unit's processes where systemd cannot freeze).
    case systemdUnit = "systemd transient unit: CPUQuota= and FreezeUnit"

    /// `BGTASK_CAP_MECHANISM`: `signals`, `cgroup-v1` or `cgroup-v2` to insist on one (tests, debugging).
    public static func preference(_ s: String?) -> CapMechanism? {
        switch s { case "signals": return .signals; case "cgroup-v1", "cgroup": return .cgroupV1; case "cgroup-v2": return .cgroupV2; default: return nil }
    }
}

extension CapMechanism {
    /// What a CPU cap would use here, read without changing anything (`bgtask doctor`): a delegated cgroup v2
    /// subtree with the cpu controller, the v1 cpu and freezer hierarchies as root, else the signal duty cycle.
    public static func availableHere() -> (mechanism: String, detail: String) {
        if let (root, own) = CgroupV2.locate() {
            let base = own == "/" ? root : root + own
            let controllers = ProcStat.read(base + "/cgroup.controllers") ?? ""
            if access(base + "/cgroup.subtree_control", W_OK) == 0, controllers.split(whereSeparator: { $0 == " " || $0 == "\n" }).contains("cpu") {
                return ("cgroup v2", "a delegated subtree with the cpu controller (\(base))")
            }
            if CgroupV1.available() { return ("cgroup v1", "cpu and freezer hierarchies, as root") }
            return ("signals", "cgroup v2 at \(root), but \(base) is not delegated to this user with the cpu controller: "
                    + "caps use a SIGSTOP/SIGCONT duty cycle (run under systemd --user, or use bgtaskd with a user manager)")
        }
        if CgroupV1.available() { return ("cgroup v1", "cpu and freezer hierarchies, as root") }
        return ("signals", "no cgroup hierarchy this user may write: caps use a SIGSTOP/SIGCONT duty cycle")
    }
}

/// The cgroup a task was put in, of either version.
enum TaskCgroup {
    case v1(CgroupV1)
    case v2(CgroupV2)

    func quota(_ p: Int?) { switch self { case .v1(let c): c.quota(p); case .v2(let c): c.quota(p) } }
    func freeze(_ on: Bool) { switch self { case .v1(let c): c.freeze(on); case .v2(let c): c.freeze(on) } }
    func usageNanoseconds() -> UInt64? { switch self { case .v1(let c): return c.usageNanoseconds(); case .v2(let c): return c.usageNanoseconds() } }
    func remove() { switch self { case .v1(let c): c.remove(); case .v2(let c): c.remove() } }

    /// For the crash-recovery record: kind and where.
    var record: Containment {
        switch self {
        case .v1(let c): return .cgroupV1(name: String(c.cpu.split(separator: "/").last ?? ""))
        case .v2(let c): return .cgroupV2(directory: c.directory)
        }
    }

    /// Chosen before the spawn: v2 delegation (bgtask moved to a leaf of its own, `+cpu` enabled for the
    /// delegated cgroup's children) must be set up while bgtask is alone in its cgroup — once the child is
    /// there too, the kernel refuses to enable a controller (EBUSY, "no internal processes").
    enum Plan {
        case v2(base: String)
        case v1
        case none

        /// Chosen once per process and kept (one per preference): choosing reads /proc/self/mountinfo and
        /// /proc/self/cgroup and probes cgroup files — work for before a wait, not for between the uevent that
        /// ends it and the spawn. The layout does not change under a running bgtask; a `create` that fails
        /// forgets the choice, so the next spawn looks again.
        static func prepared(prefer: CapMechanism?) -> Plan {
            if let p = chosen.withLock({ $0[prefer.map(\.rawValue) ?? ""] }) { return p }
            let p = choose(prefer: prefer)
            chosen.withLock { $0[prefer.map(\.rawValue) ?? ""] = p }
            return p
        }

        static func forget() { chosen.withLock { $0 = [:] } }

        var usesCgroups: Bool {
            if case .none = self { return false }
            return true
        }

        private static let chosen = Mutex<[String: Plan]>([:])

        static func choose(prefer: CapMechanism?) -> Plan {
            if prefer == .signals { return .none }
            if prefer == nil || prefer == .cgroupV2, let (root, own) = CgroupV2.locate(),
               let base = CgroupV2.delegated(root: root, own: own) {
                return .v2(base: base)
            }
            if prefer == nil || prefer == .cgroupV1, CgroupV1.available() { return .v1 }
            return .none
        }

        /// After the spawn: the task's cgroup, with the child moved in; nil falls back to signals.
        /// Background work gets the lowest CPU weight, so under contention it yields as SCHED_IDLE work
        /// does with the signal mechanism: on both, a cap is a ceiling, not a guarantee.
        func create(for pid: pid_t, name: String, background: Bool) -> TaskCgroup? {
            switch self {
            // Prefixed: the delegated cgroup may hold others' cgroups, and the sweep removes only bgtask's.
            case .v2(let base):
                return CgroupV2.create(under: base, name: "bgtask-" + name, pid: pid, weight: background ? 1 : nil).map(TaskCgroup.v2)
            case .v1:
                return CgroupV1.create(name: name, pid: pid, shares: background ? 2 : nil).map(TaskCgroup.v1)
            case .none: return nil
            }
        }
    }
}

public struct SpawnError: Error, CustomStringConvertible {
    /// The command, or the file or directory that stopped it (then `detail` says which).
    public var command: String
    public var errno: Int32
    public var detail: String?
    public init(command: String, errno: Int32, detail: String? = nil) {
        self.command = command
        self.errno = errno
        self.detail = detail
    }
    public var description: String { "cannot run \(command): \(detail ?? String(cString: strerror(errno)))" }
    /// 127 for a command not found, 126 for one that cannot be executed, as shells do.
    public var exitCode: Int32 { errno == ENOENT && detail == nil ? 127 : 126 }
}

/// A started task as its supervisor acts on it, whatever runs it: a process group this process spawned (with its
/// cgroups where it could make them: `ProcessGroup`), a transient unit of the user's systemd manager (bgtaskd's
/// `RunningUnit`), or, in a test, a fake that writes down what was done. `TaskProcess` keeps what was done (the
/// cap, a pause, the signal duty cycle) and asks the handle for the rest.
public protocol TaskHandle: AnyObject {
    /// Its process group, once known (a unit's main process once its manager has said; services start in a
    /// session of their own); nil while there is none to wait for or to read.
    var pid: pid_t? { get }
    var mechanism: CapMechanism { get }
    /// What the crash-recovery record keeps of it.
    var containment: Containment { get }
    /// In words, for the story: "pid 123", "systemd unit bgtask-backup-1.service".
    var description: String { get }
    /// A signal to every process of the task.
    func signal(_ sig: Int32)
    /// Caps CPU at `percent` of one CPU (nil lifts it); false when the handle has no cap of its own (the
    /// supervisor then runs the SIGSTOP/SIGCONT duty cycle).
    @discardableResult func setCap(_ percent: Int?) -> Bool
    /// Freezes or thaws every process of the task; false when it cannot (SIGSTOP/SIGCONT then).
    @discardableResult func freeze(_ on: Bool) -> Bool
    /// CPU seconds used by the task's processes, if known.
    func cpuSeconds() -> Double?
    /// The run is over: what holds it may go (its cgroups, the manager's unit).
    func release()
}

/// A command this process spawned in a process group of its own, in cgroups where it could make them.
public final class ProcessGroup: TaskHandle {
    let pgid: pid_t
    let cgroups: TaskCgroup?
    init(pgid: pid_t, cgroups: TaskCgroup?) {
        self.pgid = pgid
        self.cgroups = cgroups
    }
    public var pid: pid_t? { pgid }
    public var mechanism: CapMechanism {
        switch cgroups {
        case .v2?: return .cgroupV2
        case .v1?: return .cgroupV1
        case nil: return .signals
        }
    }
    public var containment: Containment { cgroups?.record ?? .processGroup }
    public var description: String { "pid \(pgid)" }
    public func signal(_ sig: Int32) { kill(-pgid, sig) }
    public func setCap(_ percent: Int?) -> Bool {
        guard let cg = cgroups else { return false }
        cg.quota(percent)
        return true
    }
    public func freeze(_ on: Bool) -> Bool {
        guard let cg = cgroups else { return false }
        cg.freeze(on)
        return true
    }
    /// CPU seconds used by the group's processes (user + system, children reaped included).
    public func cpuSeconds() -> Double? {
        if let cg = cgroups, let ns = cg.usageNanoseconds() { return Double(ns) / 1e9 }
        return ProcStat.groupCPUSeconds(pgid: pgid)
    }
    public func release() { cgroups?.remove() }
}

/// The running command: the handle it runs under and what has been done to it.
public final class TaskProcess {
    public let handle: any TaskHandle
    /// Its process group; 0 while none is known (a unit whose main process its manager has not said yet).
    public var pid: pid_t { handle.pid ?? 0 }
    public var mechanism: CapMechanism { handle.mechanism }
    /// The transient unit it runs as, if a service manager runs it.
    public var unitName: String? { handle.containment.unitName }
    public private(set) var paused = false
    public private(set) var cap: Int?
    /// The duty cycle's state, when capping with signals.
    var dutyStopped = false
    /// Share of each period the group runs; corrected every half second toward the cap from the CPU time it
    /// really got, since a loaded machine (or a late wake-up of ours) makes an open-loop cycle undershoot.
    var onFraction = 0.0
    var feedback: (wall: Double, cpu: Double)?

    public init(handle: any TaskHandle) { self.handle = handle }

    /// The environment a command gets: this process's own, less `dropping` and what `extra` sets, then `extra`.
    public static func environment(adding extra: [String], dropping: Set<String> = []) -> [String] {
        let overridden = Set(extra.map(variableName)).union(dropping)
        return ownEnvironment().compactMap { overridden.contains($0.name) ? nil : $0.entry } + extra
    }

    private static func variableName(_ entry: String) -> String {
        entry.split(separator: "=", maxSplits: 1).first.map(String.init) ?? ""
    }

    /// This process's environment, read into strings once and again only if `environ` changed (its array or an
    /// entry's address: setenv replaces them): bgtaskd's does not after start-up, and reading it took about 90 µs
    /// of every start.
    private static let ownEnvironmentRead = Mutex<(addresses: [UInt], entries: [(name: String, entry: String)])>(([], []))

    private static func ownEnvironment() -> [(name: String, entry: String)] {
        var addresses: [UInt] = []
        var e = environ
        while let p = e.pointee {
            addresses.append(UInt(bitPattern: p))
            e += 1
        }
        return ownEnvironmentRead.withLock { read in
            if read.addresses != addresses {
                read.entries = addresses.map { a in
                    let entry = String(cString: UnsafePointer<CChar>(bitPattern: a)!)
                    return (variableName(entry), entry)
                }
                read.addresses = addresses
            }
            return read.entries
        }
    }

    /// Chooses the cap mechanism ahead of a spawn (see `TaskCgroup.Plan.prepared`): call it before waiting.
    public static func prepare(prefer: CapMechanism?) {
        _ = TaskCgroup.Plan.prepared(prefer: prefer)
    }

    /// Spawns in a new process group; background work gets SCHED_IDLE, nice 10 and the idle I/O class.
    /// `output`: a file for stdout and stderr (appended to, created 0600, not followed if a link), stdin from /dev/null.
    public static func spawn(_ argv: [String], background: Bool, cgroupName: String, prefer: CapMechanism? = nil,
                             output: String? = nil, directory: String? = nil, environment: [String] = []) throws -> TaskProcess {
        let cargv = argv.map { strdup($0) } + [nil]
        let env = TaskProcess.environment(adding: environment).map { strdup($0) } + [nil]
        defer { (cargv + env).forEach { free($0) } }
        var outFD: Int32 = -1
        if let path = output { outFD = try OutputFile.open(path) }
        defer { if outFD >= 0 { close(outFD) } }
        // A missing working directory is said as such (the child's chdir would fail as ENOENT, read as "no such command").
        if let d = directory {
            var st = stat()
            let e: Int32 = stat(d, &st) != 0 ? errno : ((st.st_mode & S_IFMT) != S_IFDIR ? ENOTDIR : 0)
            if e != 0 {
                let what = e == ENOENT ? "does not exist" : "cannot be used (" + String(cString: strerror(e)) + ")"
                throw SpawnError(command: argv[0], errno: e, detail: "its working directory \(d) \(what)")
            }
        }
        let plan = TaskCgroup.Plan.prepared(prefer: prefer)
        let pid = directory.map { d in d.withCString { bgt_spawn(cargv, env, background ? 1 : 0, outFD, $0) } }
            ?? bgt_spawn(cargv, env, background ? 1 : 0, outFD, nil)
        guard pid > 0 else { throw SpawnError(command: argv[0], errno: -pid) }
        if background {
            _ = bgt_nice_group(pid, 10)
            _ = bgt_ioprio_idle(pid)
        }
        // Into the cgroups right after spawn; a child that forks in the first instant keeps its children out.
        let cg = plan.create(for: pid, name: cgroupName, background: background)
        // A cgroup that could not be made: the layout changed under us, so the next spawn chooses again.
        if cg == nil, plan.usesCgroups { TaskCgroup.Plan.forget() }
        return TaskProcess(handle: ProcessGroup(pgid: pid, cgroups: cg))
    }

    /// What the crash-recovery record keeps of it.
    public var containment: Containment { handle.containment }

    /// Signals every process of the task: its process group (the command and what it started), or its unit.
    public func signal(_ sig: Int32) { handle.signal(sig) }

    public func pause() {
        guard !paused else { return }
        paused = true
        if !handle.freeze(true) { signal(SIGSTOP) }
    }

    public func resume() {
        guard paused else { return }
        paused = false
        if !handle.freeze(false), !dutyStopped { signal(SIGCONT) }
    }

    /// Caps CPU at `percent` of one CPU. With signals, `dutyCycle(now:)` must be called at the times it returns.
    public func throttle(_ percent: Int) {
        cap = percent
        onFraction = Double(percent) / 100
        feedback = nil
        handle.setCap(percent)
    }

    public func unthrottle() {
        cap = nil
        handle.setCap(nil)
        if dutyStopped {
            dutyStopped = false
            if !paused { signal(SIGCONT) }
        }
    }

    /// The signal duty cycle: a 100 ms period, running `cap` % of it. Returns when to call again.
    public func dutyCycle(now: Double) -> Double? {
        guard mechanism == .signals, let c = cap, !paused else { return nil }
        let period = 0.1
        if let f = feedback, now - f.wall >= 0.5, let cpu = cpuSeconds() {
            let share = (cpu - f.cpu) / (now - f.wall)
            let target = Double(c) / 100
            onFraction = min(1, max(target / 4, onFraction + (target - share)))
            feedback = (now, cpu)
        } else if feedback == nil, let cpu = cpuSeconds() {
            feedback = (now, cpu)
        }
        if dutyStopped {
            dutyStopped = false
            signal(SIGCONT)
            return now + period * onFraction
        } else {
            dutyStopped = true
            signal(SIGSTOP)
            return now + period * (1 - onFraction)
        }
    }

    /// Before a signal meant to end it: a stopped process cannot act on SIGTERM.
    public func thawForSignal() {
        if paused || dutyStopped, !handle.freeze(false) { signal(SIGCONT) }
        paused = false
        dutyStopped = false
    }

    /// CPU seconds of every process in a process group (from /proc).
    public static func groupCPUSeconds(pgid: pid_t) -> Double? { ProcStat.groupCPUSeconds(pgid: pgid) }

    /// CPU seconds used by the task's processes (user + system, children reaped included).
    public func cpuSeconds() -> Double? { handle.cpuSeconds() }

    public func cleanUp() { handle.release() }
}

enum ProcStat {
    static let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))

    /// Sums utime+stime+cutime+cstime of every process whose process group is `pgid`.
    static func groupCPUSeconds(pgid: pid_t) -> Double? {
        guard let names = FileIO.names("/proc") else { return nil }
        var total = 0.0
        var found = false
        for name in names {
            guard let pid = Int32(name), let stat = read("/proc/\(pid)/stat"),
                  let close = stat.lastIndex(of: ")") else { continue }
            // Fields after the command name: state ppid pgrp ... utime(14) stime(15) cutime(16) cstime(17).
            let f = stat[stat.index(after: close)...].split(separator: " ")
            guard f.count > 15, Int32(f[2]) == pgid else { continue }
            found = true
            total += [f[11], f[12], f[13], f[14]].compactMap { Double($0) }.reduce(0, +) / ticks
        }
        return found ? total : nil
    }

    /// A whole small file (several lines).
    static func readAll(_ path: String) -> String? {
        guard let f = fopen(path, "r") else { return nil }
        defer { fclose(f) }
        var out = ""
        var buf = [CChar](repeating: 0, count: 1024)
        while fgets(&buf, Int32(buf.count), f) != nil {
            out += String(decoding: buf.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
        return out
    }

    /// The first line of a file.
    static func read(_ path: String) -> String? {
        guard let f = fopen(path, "r") else { return nil }
        defer { fclose(f) }
        var buf = [CChar](repeating: 0, count: 1024)
        guard fgets(&buf, Int32(buf.count), f) != nil else { return nil }
        return String(decoding: buf.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

/// cgroup v1 `cpu` and `freezer` hierarchies, as root: /sys/fs/cgroup/{cpu,freezer}/bgtask/<name>.
final class CgroupV1 {
    let cpu: String
    let freezer: String

    static let root = "/sys/fs/cgroup"

    static func available() -> Bool {
        geteuid() == 0 && access(root + "/cpu/cpu.cfs_quota_us", W_OK) == 0 && access(root + "/freezer/cgroup.procs", W_OK) == 0
    }

    /// `shares`: the CPU weight, set before the process is moved in.
    static func create(name: String, pid: pid_t, shares: Int? = nil) -> CgroupV1? {
        guard available() else { return nil }
        let cpu = root + "/cpu/bgtask/" + name, freezer = root + "/freezer/bgtask/" + name
        for d in [root + "/cpu/bgtask", root + "/freezer/bgtask", cpu, freezer] { mkdir(d, 0o755) }
        // Shares count among siblings: the child's 2 competes only inside bgtask/, which beside the user's
        // work weighs its default 1024 — so the parent is given 2 as well, and bgtask's work yields to the rest.
        write(root + "/cpu/bgtask/cpu.shares", "2")
        if let s = shares { write(cpu + "/cpu.shares", String(s)) }
        guard write(cpu + "/cgroup.procs", "\(pid)"), write(freezer + "/cgroup.procs", "\(pid)") else {
            rmdir(cpu); rmdir(freezer)
            return nil
        }
        return CgroupV1(cpu: cpu, freezer: freezer)
    }

    init(cpu: String, freezer: String) {
        self.cpu = cpu
        self.freezer = freezer
    }

    func quota(_ percent: Int?) {
        _ = CgroupV1.write(cpu + "/cpu.cfs_period_us", "100000")
        _ = CgroupV1.write(cpu + "/cpu.cfs_quota_us", percent.map { String($0 * 1000) } ?? "-1")
    }

    func freeze(_ on: Bool) { _ = CgroupV1.write(freezer + "/freezer.state", on ? "FROZEN" : "THAWED") }

    func usageNanoseconds() -> UInt64? {
        // cpuacct may be a separate hierarchy; the cpu one has cpuacct.usage only when co-mounted.
        ProcStat.read(cpu + "/cpuacct.usage").flatMap { UInt64($0.filter(\.isNumber)) }
    }

    func remove() {
        freeze(false)
        rmdir(cpu)
        rmdir(freezer)
    }

    @discardableResult
    static func write(_ path: String, _ value: String) -> Bool {
        let fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC)   // as `echo VALUE > FILE` does
        guard fd >= 0 else { return false }
        defer { close(fd) }
        return Glibc.write(fd, value, value.utf8.count) == value.utf8.count
    }
}
