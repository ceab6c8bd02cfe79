#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskConfig
import BgtaskCore
import BgtaskPolicy
import BgtaskProbes
import CLinux
import Synchronization

public struct RunOptions: Sendable {
    public var argv: [String]
    public var task: TaskFields
    public var noWait = false
    public var maxWait: Double?
    public var budget: Double?
    public var quiet = false
    public var probe: ProbeOptions
    /// Measure CPU use and mark undeclared heavy work (off for tasks that require external power, as on iOS).
    public var cpuMonitor = true
    /// Insist on one mechanism (BGTASK_CAP_MECHANISM); nil picks the best the machine offers.
    public var mechanism: CapMechanism?
    /// The audit trail's name for this run, also kept in the crash-recovery record.
    public var runID = ""

    /// The core's limits for this task: the command line's on top of the policy's settings.
    public func limits(_ settings: PolicySettings) -> TaskLimits {
        TaskLimits.from(settings: settings, task: task, budget: budget, maxWait: maxWait, noWait: noWait, cpuMonitor: cpuMonitor)
    }

    public init(argv: [String], task: TaskFields, probe: ProbeOptions) {
        self.argv = argv
        self.task = task
        self.probe = probe
    }
}

/// One thing that happened to a task, for the audit trail and the messages on stderr.
public struct RunEvent: Sendable {
    public enum Kind: String, Sendable {
        case deferred, started, throttled, unthrottled, paused, resumed, expired, killed
        case gaveUp = "gave-up", finished, signalled, cpuHeavy = "cpu-heavy", failed
        /// The supervisor of a run was found gone; `recovered`: what was then done to its command.
        case lost, recovered
    }
    public var kind: Kind
    public var monotonic: Double
    public var detail: String
    public var decision: Decision?
    public var conditions: [String: PolicyValue]
    public var exitStatus: Int32?
    /// For events about another run than the observer's own (recovery of a dead supervisor's task).
    public var runID: String?

    public init(kind: Kind, monotonic: Double, detail: String, decision: Decision?, conditions: [String: PolicyValue], exitStatus: Int32?,
                runID: String? = nil) {
        self.runID = runID
        self.kind = kind
        self.monotonic = monotonic
        self.detail = detail
        self.decision = decision
        self.conditions = conditions
        self.exitStatus = exitStatus
    }
}

public protocol RunObserver: AnyObject {
    func record(_ event: RunEvent, task: TaskFields)
}


/// What it says on stderr has been recorded first, so the audit trail is never behind the messages.
/// Drives one command through the scheduler core: waits (event-driven) until the policy says run,
/// starts it, and throttles, pauses, resumes or expires it as conditions change. Everything happens on
/// the calling thread in one poll loop; the only timers are holds, deadlines, the signal duty cycle and
/// the CPU monitor, each armed only while it matters.
public final class Runner {
    let options: RunOptions
    let policy: Policy
    let observer: RunObserver?
    let state: ActiveTasks?

    public init(options: RunOptions, policy: Policy, observer: RunObserver?, state: ActiveTasks?) {
        self.options = options
        self.policy = policy
        self.observer = observer
        self.state = state
    }

    func say(_ s: String) {
        if !options.quiet { fputs(Terminal.safe("bgtask: \(options.task.id): \(s)") + "\n", stderr) }
    }

    public func run() -> Int32 {
        // Signals first, so the watcher's threads inherit the mask and only the signalfd sees them.
        let sigfd = bgt_signalfd_forwarded()
        guard sigfd >= 0 else { say("cannot set up signal handling: \(String(cString: strerror(-sigfd)))"); return 1 }
        defer { close(sigfd) }

        let wake = WakePipe()
        let latest = Mutex<ConditionSnapshot?>(nil)
        let readsThermal = policy.rules.contains { $0.names.contains { $0.hasPrefix("thermal.") } }
        let watch = WatchOptions(probe: options.probe, thermalIntervalMs: readsThermal ? 2000 : nil)
        let handle = ConditionWatcher.start(watch, deliver: { u in
            let snap = u.snapshot
            latest.withLock { $0 = snap }
            wake.wake()
            return true
        })
        defer { handle.stop() }

        let start = monotonic()
        // Every rule about the task's life is the core's: this loop only delivers events and carries out actions.
        var machine = TaskMachine(task: options.task, enqueuedAt: start, limits: options.limits(policy.settings))
        var process: TaskProcess?
        var conditions: [String: PolicyValue]?
        var lastSaid = ""
        var dutyAt: Double?
        var spawnFailure: Int32?
        // Rules that read the clock or the task's age have no event: look again each second, only if any exist.
        let readsTime = policy.rules.contains { $0.names.contains { $0.hasPrefix("time.") || $0.hasPrefix("task.waited") || $0.hasPrefix("task.running") } }
        var tickAt: Double? = readsTime ? start + 1 : nil

        func stateName() -> String {
            switch machine.phase {
            case .paused: return "paused"
            case .running(let cap?): return "throttled \(cap)"
            case .expiring: return "expiring"
            default: return "running"
            }
        }
        func record(_ kind: RunEvent.Kind, _ detail: String, decision: Decision? = nil, status: Int32? = nil) {
            // The crash-recovery record first: what is said has happened, and a kill right after finds it written.
            if process != nil, kind != .finished { state?.update(state: stateName(), task: machine.task) }
            observer?.record(RunEvent(kind: kind, monotonic: monotonic(), detail: detail, decision: decision,
                                      conditions: conditions ?? [:], exitStatus: status), task: machine.task)
        }
        func explain(_ d: Decision?) -> String {
            guard let m = d?.matches.first else { return "no rule applies" }
            return "\(m.reason) — rule \(m.ruleID) (\(m.location))"
        }
        func finish() -> Int32 {
            process?.cleanUp()
            state?.remove()
            return spawnFailure ?? machine.exitStatus ?? 1
        }

        /// Carries out the core's actions on the process; what is done is recorded, then said.
        func perform(_ actions: [TaskAction], _ d: Decision?, now: Double) {
            for a in actions {
                switch a {
                case .start:
                    do {
                        let p = try TaskProcess.spawn(options.argv, background: !machine.task.userInitiated,
                                                      cgroupName: "\(options.task.id)-\(getpid())", prefer: options.mechanism)
                        process = p
                        state?.started(pgid: p.pid, cgroup: p.cgroupRecord, runID: options.runID, task: machine.task,
                                       grace: machine.limits.expireGrace)
                        let waited = now - start
                        record(.started, "pid \(p.pid), waited \(formatDuration(waited))", decision: d)
                        say("started" + (waited >= 1 ? " after waiting \(formatDuration(waited))" : "") + " (pid \(p.pid))")
                    } catch let e as SpawnError {
                        record(.failed, e.description, status: e.exitCode)
                        say(e.description)
                        spawnFailure = e.exitCode
                        return
                    } catch { spawnFailure = 1; return }
                case .throttle(let pct):
                    process?.throttle(pct)
                    if process?.mechanism == .signals { dutyAt = now }
                    record(.throttled, "\(pct)%", decision: d)
                    say("throttled to \(pct)% (\(process?.mechanism.rawValue ?? "")): \(explain(d))")
                case .unthrottle:
                    process?.unthrottle()
                    dutyAt = nil
                    record(.unthrottled, "cap lifted", decision: d)
                    say("cap lifted")
                case .pause:
                    process?.pause()
                    record(.paused, "paused", decision: d)
                    say("paused: \(explain(d))")
                case .resume:
                    process?.resume()
                    if process?.cap != nil, process?.mechanism == .signals { dutyAt = now }
                    record(.resumed, "resumed", decision: d)
                    say("resumed")
                case .expire(let grace, let why):
                    process?.thawForSignal()
                    process?.signal(SIGTERM)
                    dutyAt = nil
                    switch why {
                    case .verdict:
                        record(.expired, "SIGTERM, grace \(formatDuration(grace))", decision: d)
                        say("expired: \(explain(d)); SIGTERM, SIGKILL in \(formatDuration(grace))")
                    case .budget(let b):
                        record(.expired, "budget used up (\(formatDuration(b)))")
                        say("budget used up; SIGTERM, SIGKILL in \(formatDuration(grace))")
                    }
                case .kill:
                    process?.signal(SIGKILL)
                    record(.killed, "SIGKILL after the grace period")
                case .giveUp(let reason):
                    record(.gaveUp, reason, decision: d)
                    if reason.hasPrefix("--max-wait ") { say("gave up waiting after \(reason.dropFirst("--max-wait ".count))") }
                    else if reason.hasPrefix("signal ") { say("interrupted by \(reason)") }
                case .forward(let sig, let thaw):
                    if thaw { process?.thawForSignal() }
                    process?.signal(sig)
                    record(.signalled, "forwarded signal \(sig)")
                case .markedCPUHeavy(let pct):
                    record(.cpuHeavy, "\(Int(pct))% of a CPU")
                    say("measured CPU-heavy (\(Int(pct))% of a CPU on battery)")
                }
            }
        }

        func evaluate(now: Double) {
            guard let c = conditions else { return }
            let evaluator = Policy.Evaluator(policy: policy, conditions: c, time: localTime())
            // Holds say when they let go as a time of day, not as a monotonic instant.
            evaluator.timeLabel = { t, now in clockText(wallClockNow() + (t - now)) }
            let wasWaiting = machine.phase == .waiting
            let (d, actions) = machine.step(evaluator, now: now)
            if wasWaiting, d.verdict != .run, d.verdict != .throttle {
                let text = explain(d)
                if text != lastSaid {
                    lastSaid = text
                    record(.deferred, text, decision: d)
                    say("waiting: \(text)")
                }
            }
            perform(actions, d, now: now)
        }

        while true {
            let now0 = monotonic()
            let deadlines = [machine.nextWake, dutyAt, tickAt].compactMap { $0 }
            let timeout: Int32 = deadlines.min().map { Int32(max(0, min(3_600_000, ($0 - now0) * 1000).rounded(.up))) } ?? -1
            var fds = [pollfd(fd: wake.readFD, events: Int16(POLLIN), revents: 0), pollfd(fd: sigfd, events: Int16(POLLIN), revents: 0)]
            _ = poll(&fds, nfds_t(fds.count), timeout)
            let now = monotonic()

            // Signals go to the core (forward, or end the wait); SIGCHLD: reap.
            if fds[1].revents != 0 {
                var sig = bgt_signalfd_read(sigfd)
                while sig != 0 {
                    if sig == SIGCHLD {
                        if let p = process {
                            var status: Int32 = 0
                            if waitpid(p.pid, &status, WNOHANG) == p.pid {
                                let code = exitCode(status)
                                machine.exited(status: code)
                                let how = (status & 0x7f) == 0 ? "exit \(code)" : "killed by signal \(status & 0x7f)"
                                record(.finished, how, status: code)
                                say("finished (\(how))")
                                return finish()
                            }
                        }
                    } else {
                        perform(machine.signal(sig, terminating: [SIGHUP, SIGINT, SIGQUIT, SIGTERM].contains(sig)), machine.lastDecision, now: now)
                        if machine.isDone { return finish() }
                    }
                    sig = bgt_signalfd_read(sigfd)
                }
            }
            var changed = false
            if fds[0].revents != 0 {
                wake.drain()
                if let snap = latest.withLock({ $0 }) {
                    conditions = ConditionConversion.values(snap.conditions)
                    changed = true
                }
            }
            if let t = dutyAt, now >= t { dutyAt = process?.dutyCycle(now: now) }
            if let t = machine.cpuSampleDue, now >= t {
                let onBattery = conditions?["power.external"] == .bool(false)
                let marked = machine.cpuSample(cpuSeconds: process?.cpuSeconds() ?? 0, onBattery: onBattery && process?.cpuSeconds() != nil, now: now)
                if !marked.isEmpty {
                    perform(marked, machine.lastDecision, now: now)
                    changed = true
                }
            }
            var due = machine.nextWake.map { now >= $0 } ?? false
            if let t = tickAt, now >= t {
                due = true
                tickAt = now + 1
            }
            if changed || due, !machine.isDone {
                evaluate(now: now)
                if spawnFailure != nil || machine.isDone { return finish() }
            }
        }
    }

    func exitCode(_ status: Int32) -> Int32 {
        let sig = status & 0x7f
        return sig == 0 ? (status >> 8) & 0xff : 128 + sig
    }
}

func wallClockNow() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_REALTIME, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
}

/// HH:MM:SS local time.
public func clockText(_ epoch: Double) -> String {
    guard epoch.isFinite, abs(epoch) < 1e12 else { return "?" }
    var secs = time_t(epoch)
    var tm = tm()
    localtime_r(&secs, &tm)
    func p(_ v: Int32) -> String { v < 10 ? "0\(v)" : String(v) }
    return "\(p(tm.tm_hour)):\(p(tm.tm_min)):\(p(tm.tm_sec))"
}

func monotonic() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
}

public func localTime(_ epoch: Double? = nil) -> TimeFields {
    var ts = timespec()
    clock_gettime(CLOCK_REALTIME, &ts)
    var t = epoch.map { time_t($0) } ?? ts.tv_sec
    var tm = tm()
    localtime_r(&t, &tm)
    let days = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]
    return TimeFields(hour: Int(tm.tm_hour), secondsSinceMidnight: Double(tm.tm_hour * 3600 + tm.tm_min * 60 + tm.tm_sec),
                      weekday: days[Int(tm.tm_wday)])
}

/// Between the probes' JSON values and the policy's values: the one place the two meet.
public enum ConditionConversion {
    public static func values(_ pairs: [(String, JSONValue)]) -> [String: PolicyValue] {
        var out: [String: PolicyValue] = [:]
        for (k, v) in pairs { out[k] = value(v) }
        return out
    }

    public static func value(_ v: JSONValue) -> PolicyValue {
        switch v {
        case .null, .object: return .null
        case .bool(let b): return .bool(b)
        case .number(let n): return .number(n)
        case .string(let s): return .string(s)
        case .array(let a): return .list(a.map(value))
        }
    }

    public static func json(_ v: PolicyValue) -> JSONValue {
        switch v {
        case .null: return .null
        case .bool(let b): return .bool(b)
        case .number(let n), .duration(let n): return .number(n)
        case .string(let s): return .string(s)
        case .list(let l): return .array(l.map(json))
        }
    }
}
