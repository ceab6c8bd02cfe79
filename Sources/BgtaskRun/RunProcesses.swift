#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskConfig
import BgtaskCore
import BgtaskPolicy
import BgtaskProbes
import BgtaskFiles

/// Every process of one run: the command and whatever it started — daemons too, which leave its process
/// group (setsid, a double fork) but keep its environment. bgtaskd gives each spawn a token
/// (`BGTASK_RUN=…`) that its processes inherit, writes it to the queue before the spawn, and finds the run's
/// processes by it: after a crash (even one between the spawn and the queue's "running"), on cancel and
/// expiry, and when the command's main process has exited. A process that clears its environment
/// (`env -i`) is followed only by a cgroup or a systemd unit, which bgtask uses where it can.
public enum RunProcesses {
    public static let variable = "BGTASK_RUN"

    /// A token no other spawn of this boot has: daemon pid, a counter, the time, random bits.
    public static func newToken(sequence: Int) -> String {
        let r = UInt64.random(in: 0 ... .max)
        return "\(getpid())-\(sequence)-\(Int(wallClockNow()))-\(String(r, radix: 36))"
    }

    /// This user's processes whose environment carries `token` (`/proc/PID/environ`, read only for our own).
    public static func find(_ token: String, proc: String = "/proc") -> [pid_t] {
        guard !token.isEmpty, let names = FileIO.names(proc) else { return [] }
        let needle = Array("\(variable)=\(token)".utf8) + [0]
        let me = getpid(), uid = geteuid()
        var found: [pid_t] = []
        for name in names {
            guard let pid = pid_t(name), pid != me else { continue }
            var st = stat()
            guard stat("\(proc)/\(pid)", &st) == 0, st.st_uid == uid else { continue }
            guard case .success(let env) = FileIO.readBytes("\(proc)/\(pid)/environ", limit: 256 * 1024) else { continue }
            if contains(env, needle) { found.append(pid) }
        }
        return found
    }

    /// Whether `haystack` (NUL-separated `KEY=VALUE` entries) holds the entry `needle` (with its NUL).
    static func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
        var start = 0
        while start < haystack.count {
            let end = haystack[start...].firstIndex(of: 0) ?? haystack.count
            if end - start + 1 == needle.count, haystack[start..<end].elementsEqual(needle.dropLast()) { return true }
            start = end + 1
        }
        return false
    }

    /// One run to end: its process group (0 when never known), the group leader's start time (0: unknown),
    /// its cgroup record, its token.
    public struct Target: Sendable {
        public var pgid: pid_t
        public var childStart: UInt64
        public var containment: Containment
        public var token: String?
        public init(pgid: pid_t, childStart: UInt64, containment: Containment, token: String?) {
            self.pgid = pgid
            self.childStart = childStart
            self.containment = containment
            self.token = token
        }
    }

    /// Ends many runs at once — thawed, SIGTERM to each, one grace for all (at most 5 s), SIGKILL to what is
    /// left — so eight commands that ignore SIGTERM cost one grace, not eight. What was done, per target.
    public static func endAll(_ targets: [Target], grace: Double) -> [Ended] {
        struct Live { var leader: pid_t?; var cg: TaskCgroup?; var pids: [pid_t] }
        var live: [Live] = targets.map { t in
            let cg = Recovery.cgroup(t.containment)
            let leaderAlive = t.pgid > 0 && (ProcInfo.isSame(t.pgid, start: t.childStart) || (t.childStart == 0 && isAlive(t.pgid)))
            return Live(leader: leaderAlive ? t.pgid : nil, cg: cg, pids: t.token.map { find($0) } ?? [])
        }
        let found = live.map(\.pids)
        for l in live where l.leader != nil || !l.pids.isEmpty {
            l.cg?.freeze(false)
            if let g = l.leader { kill(-g, SIGCONT); kill(-g, SIGTERM) }
            for p in l.pids { kill(p, SIGCONT); kill(p, SIGTERM) }
        }
        let g = min(5, max(0, grace))
        let deadline = monotonic() + g
        var how = [String](repeating: "SIGTERM", count: targets.count)
        for (i, t) in targets.enumerated() where live[i].leader != nil || !live[i].pids.isEmpty {
            let left = (live[i].leader.map { [$0] } ?? []) + live[i].pids
            if !left.allSatisfy({ Recovery.waitExit($0, seconds: max(0, deadline - monotonic())) }) {
                if let g = live[i].leader { kill(-g, SIGKILL) }
                live[i].pids = t.token.map { find($0) } ?? []
                for p in live[i].pids { kill(p, SIGKILL) }
                how[i] += ", SIGKILL after \(formatDuration(g))"
                for p in left + live[i].pids { _ = Recovery.waitExit(p, seconds: 1) }
            }
        }
        return targets.indices.map { i in
            live[i].cg?.remove()
            let others = found[i].filter { $0 != targets[i].pgid }.count
            if live[i].leader == nil && others == 0 { return Ended(signals: nil, description: "its command had already ended") }
            if live[i].leader == nil { return Ended(signals: how[i], description: "its \(others) process(es), found by their run token, were ended (\(how[i]))") }
            return Ended(signals: how[i], description: "its command was thawed and ended (\(how[i]))" + (others > 0 ? ", with \(others) other process(es) it started" : ""))
        }
    }

    /// What `endAll` did to one target: the signals sent ("SIGTERM", "SIGTERM, SIGKILL after 5s"; nil when
    /// nothing was left to end), and the whole of it in words.
    public struct Ended: Sendable, CustomStringConvertible {
        public let signals: String?
        public let description: String
    }
}
