#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskPolicy

/// What each `bgtask run` has started, on disk (`<state>/active/<bgtask pid>`: the process group and
/// the cgroup), so that a later run can undo what a killed one left behind: a frozen cgroup, a quota,
/// a stopped process group. (A stopped group whose parent dies is also sent SIGHUP and SIGCONT by the
/// kernel, as an orphaned process group; a frozen cgroup is not, hence this.)
public final class ActiveTasks {
    let file: String

    public init?(stateDirectory: String) {
        let dir = stateDirectory + "/active"
        mkdir(stateDirectory, 0o700)
        mkdir(dir, 0o700)
        guard access(dir, W_OK) == 0 else { return nil }
        file = dir + "/\(getpid())"
    }

    /// `cgroup`: "-", "v1 NAME" or "v2 DIRECTORY".
    public func started(pgid: pid_t, cgroup: String) {
        guard let f = fopen(file, "w") else { return }
        fputs("\(pgid) \(cgroup)\n", f)
        fflush(f)
        fsync(fileno(f))
        fclose(f)
    }

    public func remove() { unlink(file) }

    /// Undoes what runs that are no longer alive left behind; returns what it did, in words.
    public static func recover(stateDirectory: String) -> [String] {
        let dir = stateDirectory + "/active"
        guard let d = opendir(dir) else { return [] }
        var names: [String] = []
        while let e = readdir(d) {
            let n = withUnsafePointer(to: e.pointee.d_name) { $0.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) } }
            if Int32(n) != nil { names.append(n) }
        }
        closedir(d)
        var done: [String] = []
        for n in names {
            let owner = Int32(n)!
            if owner == getpid() || isAlive(owner) { continue }
            let path = dir + "/" + n
            let text = ProcStat.read(path) ?? ""
            let parts = text.split(separator: " ").map { String($0).trimmingCharacters(in: "\n") }
            if let pgid = parts.first.flatMap({ Int32($0) }), pgid > 1 {
                if parts.count > 2, parts[1] == "v1" {
                    let c = CgroupV1(cpu: CgroupV1.root + "/cpu/bgtask/" + parts[2], freezer: CgroupV1.root + "/freezer/bgtask/" + parts[2])
                    c.quota(nil)
                    c.remove()
                } else if parts.count > 2, parts[1] == "v2" {
                    let c = CgroupV2(directory: parts[2])
                    c.quota(nil)
                    c.remove()
                }
                if kill(-pgid, SIGCONT) == 0 {
                    done.append("resumed process group \(pgid), left by bgtask \(owner) which is gone")
                }
            }
            unlink(path)
        }
        return done
    }
}

/// A zombie has exited; kill(pid, 0) still succeeds on it.
func isAlive(_ pid: pid_t) -> Bool {
    guard kill(pid, 0) == 0 || errno == EPERM else { return false }
    guard let stat = ProcStat.read("/proc/\(pid)/stat"), let close = stat.lastIndex(of: ")") else { return true }
    return !stat[stat.index(after: close)...].hasPrefix(" Z")
}

