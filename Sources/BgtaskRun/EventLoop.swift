#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskCore
import BgtaskPolicy
import BgtaskProbes
import CLinux
import Synchronization
import BgtaskFiles

/// One poll loop on the calling thread for any number of supervisors: the condition watcher's wake pipe,
/// a signalfd (every catchable terminating signal, and SIGCHLD), and a timeout at the earliest deadline any
/// supervisor asked for. Nothing polls: with nothing due, the loop sleeps until an event.
public final class EventLoop {
    let sigfd: Int32
    let wake: WakePipe
    /// The newest snapshot, written by the watcher's thread (a class box: a Mutex cannot be shared by copy).
    final class Latest: Sendable { let value = Mutex<ConditionSnapshot?>(nil) }
    let latest = Latest()
    /// The condition watcher (nil: none, the readings are given: bgtaskd in a test).
    let handle: WatchHandle?
    /// The poll interval the watcher was started with: the shortest the loop will ask for.
    let thermalMinimumMs: Int32?
    var thermalAsked: Int32?
    var lastPhases: [Int] = []

    public struct SetupError: Error, CustomStringConvertible {
        public var description: String
    }

    /// Thermal zones are read (every 2 s) only if a policy reads `thermal.*`.
    public static func watchOptions(_ probe: ProbeOptions, policies: [Policy]) -> WatchOptions {
        let readsThermal = policies.contains { $0.rules.contains { $0.names.contains { $0.hasPrefix("thermal.") } } }
        return WatchOptions(probe: probe, thermalIntervalMs: readsThermal ? 2000 : nil)
    }

    /// `watch` nil: no watcher (the readings come from elsewhere); `signals` false: the process's signals are left
    /// alone (a loop inside a test process, which is not the process's only user of signals).
    public init(watch: WatchOptions?, signals: Bool = true) throws {
        // Signals first, so the watcher's threads inherit the mask and only the signalfd sees them.
        let fd = signals ? bgt_signalfd_forwarded() : -1
        guard fd >= 0 || !signals else { throw SetupError(description: "cannot set up signal handling: \(String(cString: strerror(-fd)))") }
        sigfd = fd
        thermalMinimumMs = watch?.thermalIntervalMs
        thermalAsked = watch?.thermalIntervalMs
        do {
            wake = try WakePipe()
            let latest = self.latest, wake = self.wake
            handle = try watch.map { w throws(SystemError) in
                try ConditionWatcher.start(w, deliver: { u in
                    let snap = u.snapshot
                    latest.value.withLock { $0 = snap }
                    wake.wake()
                    return true
                })
            }
        } catch {
            if fd >= 0 { close(fd) }
            throw SetupError(description: "cannot start watching the conditions: \(error)")
        }
    }

    deinit {
        handle?.stop()
        if sigfd >= 0 { close(sigfd) }
    }

    /// Runs until every supervisor is done (`bgtask run`: signals go to the supervisors).
    public func run(_ supervisors: [Supervisor]) {
        // Start-up's pages are given back once everything has waited a while (see `Memory`).
        var quiet = Memory.QuietSpell()
        while !supervisors.allSatisfy(\.isDone) {
            let now0 = monotonic()
            if quiet.observe(quiet: supervisors.allSatisfy({ $0.phaseCode == TaskPhase.waiting.code && $0.conditions != nil }), now: now0) {
                Memory.releaseFreedHeap()
                Memory.releaseStartupPages()
            }
            let deadline = [nextDeadline(supervisors), quiet.deadline].compactMap { $0 }.min()
            let timeout: Int32 = deadline.map { Int32(max(0, min(3_600_000, ($0 - now0) * 1000).rounded(.up))) } ?? -1
            var fds = [pollfd(fd: wake.readFD, events: Int16(POLLIN), revents: 0), pollfd(fd: sigfd, events: Int16(POLLIN), revents: 0)]
            _ = poll(&fds, nfds_t(fds.count), timeout)
            let now = monotonic()
            if fds[1].revents != 0 {
                for sig in readSignals() {
                    if sig == SIGCHLD { reap(supervisors) } else {
                        for s in supervisors where !s.isDone { s.signal(sig, now: now) }
                    }
                }
            }
            var changed = false
            if fds[0].revents != 0, let values = takeConditions() {
                changed = true
                for s in supervisors where !s.isDone { s.conditionsChanged(values, now: now) }
            }
            timersDue(supervisors, now: now)
            afterEvents(supervisors, conditionsChanged: changed)
        }
    }

    /// The descriptors a loop must watch: the watcher's wake pipe and the signalfd.
    public var wakeFD: Int32 { wake.readFD }
    public var signalFD: Int32 { sigfd }

    /// The earliest instant any live supervisor must be woken, on the monotonic clock.
    public func nextDeadline(_ supervisors: [Supervisor]) -> Double? {
        supervisors.filter { !$0.isDone }.compactMap(\.nextDeadline).min()
    }

    /// Every signal waiting on the signalfd.
    /// A reloaded policy's thresholds for the readings (battery, thermal, idle, storage).
    public func setProbeOptions(_ probe: ProbeOptions) { handle?.setProbeOptions(probe) }

    public func readSignals() -> [Int32] {
        var out: [Int32] = []
        guard sigfd >= 0 else { return [] }
        var sig = bgt_signalfd_read(sigfd)
        while sig != 0 { out.append(sig); sig = bgt_signalfd_read(sigfd) }
        return out
    }

    /// The newest readings, once the wake pipe said there are new ones (drains it).
    public func takeConditions() -> [String: PolicyValue]? {
        wake.drain()
        return latest.value.withLock({ $0 }).map { ConditionConversion.values($0.conditions) }
    }

    /// The readings as last delivered (nil before the first).
    public var currentConditions: [String: PolicyValue]? {
        latest.value.withLock({ $0 }).map { ConditionConversion.values($0.conditions) }
    }

    public func timersDue(_ supervisors: [Supervisor], now: Double) {
        for s in supervisors where !s.isDone {
            if let d = s.nextDeadline, now >= d { s.timersDue(now: now) }
        }
    }

    /// Whether thermal zones are being read now (always, when the readings are given rather than watched).
    public var readsThermal: Bool { handle == nil || thermalAsked != nil }

    /// After a round of events: re-decides how often zones are read, only when something it depends on
    /// may have changed (not on each tick of a signal duty cycle).
    /// `others`: whether work outside these supervisors depends on a temperature (bgtaskd's resting tasks).
    public func afterEvents(_ supervisors: [Supervisor], conditionsChanged: Bool, others: () -> Bool = { false }) {
        let phases = supervisors.map(\.phaseCode)
        if conditionsChanged || phases != lastPhases {
            lastPhases = phases
            adjustThermalReads(supervisors, others: others)
        }
    }

    /// Zones are read only while a temperature can change some task's verdict, and then less often the
    /// farther the hottest reading is from a boundary: a run waiting for the charger reads none.
    func adjustThermalReads(_ supervisors: [Supervisor], others: () -> Bool) {
        guard let minimum = thermalMinimumMs, let snap = latest.value.withLock({ $0 }) else { return }
        // Tasks alike (same phase, kind and flags) depend alike: asked once per kind of task, not per task.
        var memo: [Int: Bool] = [:]
        let matters = supervisors.contains { s in
            guard !s.isDone else { return false }
            guard let k = s.thermalKey else { return s.dependsOnThermal }
            if let v = memo[k] { return v }
            let v = s.dependsOnThermal
            memo[k] = v
            return v
        } || others()
        let want = matters ? ThermalAnalysis.readInterval(snap.zones, states: snap.zoneStates, fallback: snap.options.thermal,
                                                          minimumMs: minimum, maximumMs: max(minimum, 30_000)) : nil
        if want != thermalAsked {
            thermalAsked = want
            handle?.setThermalInterval(ms: want)
        }
    }

    /// Reaps every exited child that belongs to a supervisor (others are left to whoever started them).
    public func reap(_ supervisors: [Supervisor]) {
        for s in supervisors where !s.isDone {
            guard let pid = s.pid else { continue }
            var status: Int32 = 0
            var usage = rusage()
            // The leader's rusage counts the children it reaped: the group's CPU time once /proc has no entry for it.
            if wait4(pid, &status, WNOHANG, &usage) == pid {
                let cpu = Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
                s.childExited(waitStatus: status, cpuSeconds: cpu)
            }
        }
    }
}
