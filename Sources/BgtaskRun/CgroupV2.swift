#if canImport(Glibc)
@preconcurrency import Glibc
#endif

/// cgroup v2 in a delegated subtree (`systemd-run --user -p Delegate=yes`, or root): a child cgroup per
/// task with `cpu.max` for the cap and `cgroup.freeze` for pausing. v2 forbids enabling a controller for
/// the children of a cgroup that holds processes, so bgtask first moves itself into a leaf of its own
/// (`bgtask-<pid>`), then enables `+cpu` on the delegated cgroup. Used only when all of that works;
/// otherwise bgtask falls back to v1 or signals and says which it used.
final class CgroupV2 {
    let directory: String

    /// The delegated cgroup this process runs in, if it can host task cgroups with the cpu controller.
    /// `root` is where cgroup2 is mounted (injectable for tests), `own` the path from /proc/self/cgroup.
    static func delegated(root: String, own: String, pid: pid_t = getpid()) -> String? {
        let base = own == "/" ? root : root + own
        guard access(base + "/cgroup.procs", W_OK) == 0, access(base + "/cgroup.subtree_control", W_OK) == 0,
              let controllers = ProcStat.read(base + "/cgroup.controllers"),
              controllers.split(whereSeparator: { $0 == " " || $0 == "\n" }).contains("cpu") else { return nil }
        let enabled = ProcStat.read(base + "/cgroup.subtree_control") ?? ""
        if !enabled.split(whereSeparator: { $0 == " " || $0 == "\n" }).contains("cpu") {
            // Leave the delegated cgroup for a leaf of our own, then enable cpu for its children.
            let me = base + "/bgtask-\(pid)"
            mkdir(me, 0o755)
            guard CgroupV1.write(me + "/cgroup.procs", "\(pid)"), CgroupV1.write(base + "/cgroup.subtree_control", "+cpu") else {
                return nil
            }
        }
        return base
    }

    /// The cgroup this process was started in (its own, or the parent of the leaf it moved itself to).
    static func currentBase() -> String? {
        guard let (root, own) = locate() else { return nil }
        var o = own
        if o.hasSuffix("/bgtask-\(getpid())") { o = String(o.dropLast("/bgtask-\(getpid())".count)) }
        return o == "/" || o.isEmpty ? root : root + o
    }

    /// Where cgroup2 is mounted and which cgroup this process is in, from /proc.
    static func locate() -> (root: String, own: String)? {
        guard let r = mountRoot(), let cg = ProcStat.readAll("/proc/self/cgroup") else { return nil }
        let own = cg.split(separator: "\n").first { $0.hasPrefix("0::") }.map { String($0.dropFirst(3)) }
        return own.map { (r, $0) }
    }

    /// Where cgroup2 is mounted, from /proc/self/mountinfo.
    static func mountRoot() -> String? {
        guard let f = fopen("/proc/self/mountinfo", "r") else { return nil }
        defer { fclose(f) }
        var root: String?
        var line = [CChar](repeating: 0, count: 4096)
        while fgets(&line, Int32(line.count), f) != nil {
            let s = String(decoding: line.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            let parts = s.split(separator: " ")
            if let dash = parts.firstIndex(of: "-"), dash + 1 < parts.count, parts[dash + 1] == "cgroup2", parts.count > 4 {
                root = String(parts[4])
                break
            }
        }
        return root
    }

    /// `weight`: `cpu.weight`, set before the process is moved in.
    static func create(under base: String, name: String, pid: pid_t, weight: Int? = nil) -> CgroupV2? {
        let dir = base + "/" + name
        guard mkdir(dir, 0o755) == 0 || errno == EEXIST else { return nil }
        if let w = weight { CgroupV1.write(dir + "/cpu.weight", String(w)) }
        guard CgroupV1.write(dir + "/cgroup.procs", "\(pid)") else { rmdir(dir); return nil }
        return CgroupV2(directory: dir)
    }

    init(directory: String) { self.directory = directory }

    /// `cpu.max` is "QUOTA PERIOD" in µs, or "max" for no cap.
    func quota(_ percent: Int?) {
        CgroupV1.write(directory + "/cpu.max", percent.map { "\($0 * 1000) 100000" } ?? "max 100000")
    }

    func freeze(_ on: Bool) { CgroupV1.write(directory + "/cgroup.freeze", on ? "1" : "0") }

    func usageNanoseconds() -> UInt64? {
        guard let stat = ProcStat.read(directory + "/cpu.stat"), stat.hasPrefix("usage_usec ") else { return nil }
        return UInt64(stat.dropFirst("usage_usec ".count).prefix { $0.isNumber }).map { $0 * 1000 }
    }

    func remove() {
        freeze(false)
        rmdir(directory)
    }
}

/// The CPU time of the cgroup a process is in, read from its `cpu.stat` on cgroup v2 — for a systemd unit's
/// processes, what the unit's `CPUUsageNSec` says, without a blocking D-Bus call per unit on bgtaskd's loop.
public enum ProcessCgroup {
    /// The cgroup v2 directory `pid` is in (its `0::` line under the cgroup2 mount); nil on cgroup v1 or when gone.
    public static func directory(of pid: pid_t) -> String? {
        guard let root = CgroupV2.mountRoot(), let cg = ProcStat.readAll("/proc/\(pid)/cgroup"),
              let path = cg.split(separator: "\n").first(where: { $0.hasPrefix("0::/") }).map({ String($0.dropFirst(3)) }),
              !path.split(separator: "/").contains("..") else { return nil }
        return root + path
    }

    /// Its CPU time in seconds, from `cpu.stat`'s `usage_usec`; nil when the cgroup is gone or keeps no count.
    public static func cpuSeconds(directory: String) -> Double? {
        CgroupV2(directory: directory).usageNanoseconds().map { Double($0) / 1e9 }
    }
}
