import BgtaskPolicy

/// Why a task gave up without starting.
public enum GiveUpCause: Sendable, Equatable, CustomStringConvertible {
    /// `--no-wait`: it could not start now.
    case noWait
    /// `--max-wait`: it waited this long.
    case maxWait(Double)
    /// A signal came while it waited.
    case signal(Int32)

    /// "--no-wait", "--max-wait 1h", "signal 2 while waiting": as the audit trail records it.
    public var description: String {
        switch self {
        case .noWait: return "--no-wait"
        case .maxWait(let m): return "--max-wait \(formatDuration(m))"
        case .signal(let s): return "signal \(s) while waiting"
        }
    }
}

/// Where a task is in its life.
public enum TaskPhase: Sendable, Equatable {
    case waiting
    case running(cpuCap: Int?)
    /// Frozen; the cap it had still applies when it resumes.
    case paused(cpuCap: Int?)
    /// SIGTERM sent; SIGKILL due at `killAt` (already sent when `killed`). Nothing pauses it now.
    case expiring(killAt: Double, killed: Bool)
    case finished(status: Int32)
    /// It never started: waited too long (`--max-wait`), could not start now (`--no-wait`), or was interrupted.
    case gaveUp(reason: GiveUpCause)

    /// A number per phase (and cap), cheap to compare across 10,000 tasks.
    public var code: Int {
        switch self {
        case .waiting: return 0
        case .running(let cap): return 1 + (cap ?? 0) * 8
        case .paused(let cap): return 2 + (cap ?? 0) * 8
        case .expiring(_, let killed): return killed ? 3 : 4
        case .finished: return 5
        case .gaveUp: return 6
        }
    }

    /// Its one word (and cap), as bgtaskd's TaskChanged and ListRunning say it and the crash record keeps it.
    public var state: String {
        switch self {
        case .waiting: return "pending"
        case .running(let cap?): return "throttled \(cap)%"
        case .running(nil): return "running"
        case .paused: return "paused"
        case .expiring: return "expiring"
        case .finished: return "finished"
        case .gaveUp: return "gave up"
        }
    }

    /// In words, with the detail a person reads (`status`, `log`).
    public var name: String {
        switch self {
        case .waiting: return "waiting"
        case .running(let cap?): return "running (capped at \(cap)%)"
        case .running(nil): return "running"
        case .paused: return "paused"
        case .expiring(_, let killed): return killed ? "expiring (SIGKILL sent)" : "expiring"
        case .finished(let s): return "finished (exit \(s))"
        case .gaveUp(let r): return "gave up (\(r))"
        }
    }
}

/// What the executors must do to the task's process.
public enum TaskAction: Sendable, Equatable {
    case start
    case throttle(cpuPercent: Int)
    case unthrottle
    case pause
    case resume
    /// Thaw if frozen, SIGTERM, and expect `kill` after `grace`.
    case expire(grace: Double, why: ExpiryCause)
    /// The grace is over: SIGKILL.
    case kill
    /// Never started; the run ends with EX_TEMPFAIL (or 128+N for a signal).
    case giveUp(reason: GiveUpCause)
    /// A signal the supervisor received, for the command's group; `thaw` for those meant to end it.
    case forward(signal: Int32, thaw: Bool)
    /// The CPU monitor found undeclared heavy work (share of a CPU, percent): rules on task.cpu_heavy apply.
    case markedCPUHeavy(percent: Double)
}

/// Why a task is being expired.
public enum ExpiryCause: Sendable, Equatable {
    /// The policy's verdict (its rule is in the decision).
    case verdict
    /// It ran for its budget (`--budget`, or `run.refresh_budget` for refresh work).
    case budget(Double)
}

/// Limits a task carries besides the policy: from the command line, the kind, and the policy's [run].
public struct TaskLimits: Sendable, Equatable {
    /// Seconds of running before it expires.
    public var budget: Double?
    /// Give up waiting after this long.
    public var maxWait: Double?
    /// Give up at once if it cannot start at its first decision.
    public var noWait = false
    /// Between SIGTERM and SIGKILL when nothing in the decision says otherwise (`run.expire_grace`).
    public var expireGrace = 10.0
    /// The CPU monitor's threshold, percent of one CPU; nil turns it off.
    public var cpuMonitorPercent: Double?
    /// How often the monitor samples while it matters.
    public var cpuMonitorInterval = 1.0
    /// Not started before this instant (Apple's `earliestBeginDate`: a floor, not a time), on the machine's clock.
    public var earliest: Double?
    /// A defer or pause verdict expires the running task instead of freezing it: an app's task runs inside
    /// the app, which cannot be frozen for one of its tasks (the app's expiration handler runs instead).
    public var pauseExpires = false

    public init(budget: Double? = nil, maxWait: Double? = nil, noWait: Bool = false, expireGrace: Double = 10,
                cpuMonitorPercent: Double? = nil) {
        self.budget = budget
        self.maxWait = maxWait
        self.noWait = noWait
        self.expireGrace = expireGrace
        self.cpuMonitorPercent = cpuMonitorPercent
    }

    /// The limits the policy's settings give a task of this kind, with the command line's on top.
    public static func from(settings: PolicySettings, task: TaskFields, budget: Double? = nil, maxWait: Double? = nil,
                            noWait: Bool = false, cpuMonitor: Bool = true) -> TaskLimits {
        var l = TaskLimits(budget: budget ?? (task.kind == .refresh ? settings.number("run.refresh_budget") : nil),
                           maxWait: maxWait, noWait: noWait, expireGrace: settings.number("run.expire_grace"))
        // As on iOS: work that waits for the charger is not watched for CPU use.
        if cpuMonitor && !task.requiresExternalPower { l.cpuMonitorPercent = settings.number("run.cpu_monitor_percent") }
        return l
    }
}

/// The scheduler core for one task: a pure state machine. Its inputs are events — conditions evaluated
/// (`step`), the clock reaching an instant it asked for (`step` again), a CPU-time sample, the process
/// exiting, a signal — and its outputs are actions for the executors and the next instant it must be
/// woken (`nextWake`). It owns every rule about a task's life: waiting and holds, start, throttle, pause
/// and resume, budgets, giving up, the CPU monitor's verdict, and expiry (SIGTERM, the grace, SIGKILL),
/// during which no verdict can pause the task. `bgtask run`, `policy simulate` and the daemon drive this
/// same code; time is whatever `now` says, so it is tested in virtual time.
public struct TaskMachine: Sendable {
    public private(set) var task: TaskFields
    public private(set) var phase: TaskPhase = .waiting
    public private(set) var hold: HoldState = [:]
    public private(set) var lastDecision: Decision?
    public let enqueuedAt: Double
    public let limits: TaskLimits
    public private(set) var startedAt: Double?
    /// Seconds spent paused in pauses that have ended, and the start of the pause under way: a budget and
    /// `task.running` count seconds of running (docs/protocol.md), not the time since the start.
    public private(set) var pausedFor: Double = 0
    var pausedAt: Double?
    /// Expired by bgtask (a verdict or the budget), so its end is EX_TEMPFAIL whatever the command said.
    public private(set) var expiredByUs = false
    /// The rule whose expire verdict ended the run (the conditions, not the task, ended it), if one did.
    public private(set) var expiredByRule: String?
    /// The signal that ended the wait, if one did (the run then exits 128+N).
    var interruptedBy: Int32?
    var monitor: (at: Double, cpu: Double)?
    var monitorDue: Double?
    /// The next instant a rule on the clock or the task's age can change (from the last step).
    var timeWake: Double?
    /// Why the policy's "run" did not start it at the last step, if something outside the policy held it back.
    public private(set) var startBlock: StartBlock?
    /// Started by `bgtask debug launch`, whatever the policy said.
    public private(set) var forced = false

    /// What keeps a task the policy would start from starting.
    public enum StartBlock: Sendable, Equatable {
        /// Its earliest begin date has not come.
        case earliest(Double)
        /// Every slot the scheduler has for work like it is taken (`daemon.max_running`…).
        case noSlot(String)
    }

    public init(task: TaskFields, enqueuedAt: Double, limits: TaskLimits = .init()) {
        self.task = task
        self.enqueuedAt = enqueuedAt
        self.limits = limits
    }

    public var isDone: Bool {
        switch phase { case .finished, .gaveUp: return true; default: return false }
    }

    /// A waiting machine made anew for a task whose machine was let go while it waited (bgtaskd's resting
    /// tasks) takes up the holds and the decision it had, so the next step decides as the old machine would have.
    public mutating func resumeWaiting(hold: HoldState, lastDecision: Decision) {
        guard phase == .waiting, startedAt == nil else { return }
        self.hold = hold
        self.lastDecision = lastDecision
    }

    public var isExpiring: Bool { if case .expiring = phase { return true }; return false }

    /// Seconds the command has run by `now`: from its start, less every pause.
    public func runningTime(now: Double) -> Double? {
        guard let s = startedAt else { return nil }
        return max(0, now - s - pausedFor - (pausedAt.map { max(0, now - $0) } ?? 0))
    }

    /// The instant from which `runningTime` counts as if the run had never paused; nil while it is paused
    /// (its running time stands still) or before it started.
    var runClockStart: Double? {
        guard let s = startedAt, pausedAt == nil else { return nil }
        return s + pausedFor
    }

    /// A pause that ended by any path (a verdict, a thaw to deliver a signal, an expiry) is counted once the
    /// machine is next looked at.
    mutating func settlePause(now: Double) {
        if case .paused = phase { return }
        if let p = pausedAt { pausedFor += max(0, now - p); pausedAt = nil }
    }

    /// The instant the machine must be looked at again even if no condition changes: a hold elapsing, the
    /// budget, the give-up time, the SIGKILL after a grace, the CPU monitor's next sample.
    public var nextWake: Double? {
        var times: [Double] = []
        switch phase {
        case .waiting:
            if let n = lastDecision?.nextChangeAt { times.append(n) }
            if let m = limits.maxWait { times.append(enqueuedAt + m) }
            if let t = timeWake { times.append(t) }
            if let e = limits.earliest, case .earliest? = startBlock { times.append(e) }
        case .running, .paused:
            if let n = lastDecision?.nextChangeAt { times.append(n) }
            if let t = timeWake { times.append(t) }
            if let b = limits.budget, let s = runClockStart { times.append(s + b) }
            if let m = monitorDue { times.append(m) }
        case .expiring(let killAt, let killed):
            if !killed { times.append(killAt) }
        case .finished, .gaveUp:
            break
        }
        return times.min()
    }

    /// The CPU monitor wants a sample at this instant (running, on battery, not yet heavy), else nil.
    public var cpuSampleDue: Double? { monitorDue }

    /// What the command (or the app) itself said when it ended, whoever ended it: 0 is work done even if it was
    /// expired on the way.
    public var ownStatus: Int32? { if case .finished(let st) = phase { return st }; return nil }

    /// The exit status a `bgtask run` of this task ends with, once it is done.
    public var exitStatus: Int32? {
        switch phase {
        case .finished(let s): return expiredByUs ? 75 : s
        case .gaveUp: return interruptedBy.map { 128 + $0 } ?? 75
        default: return nil
        }
    }

    /// Evaluates the policy at `now` (new conditions, or the clock reaching `nextWake`) and returns what must change.
    /// `slot` is the scheduler's answer to "may one more task like this start now?": nil yes, else why not.
    public mutating func step(_ evaluator: Policy.Evaluator, now: Double, slot: String? = nil) -> (Decision, [TaskAction]) {
        settlePause(now: now)
        if let r = runningTime(now: now) { task.running = r } else { task.waited = max(0, now - enqueuedAt) }
        let d = evaluator.decide(task, now: now, hold: &hold)
        lastDecision = d
        startBlock = nil
        if phase == .waiting, d.verdict == .run || d.verdict == .throttle {
            if let e = limits.earliest, now < e { startBlock = .earliest(e) }
            else if let why = slot { startBlock = .noSlot(why) }
        }
        var actions = startBlock == nil ? apply(d, now: now) : []
        actions += deadlines(now: now)
        timeWake = nextTimeChange(evaluator.policy.time, now: now, time: evaluator.time)
        if case .running = phase, monitorDue == nil, limits.cpuMonitorPercent != nil, !task.cpuHeavy {
            monitorDue = now + limits.cpuMonitorInterval
        }
        return (d, actions)
    }

    /// A sample of the CPU time the task's processes have used, taken at `now`. On battery (the
    /// conditions' `power.external` is false), a share above the threshold marks the task CPU-heavy;
    /// the caller then steps the machine so the rules for heavy work apply.
    public mutating func cpuSample(cpuSeconds: Double, onBattery: Bool, now: Double) -> [TaskAction] {
        guard let threshold = limits.cpuMonitorPercent, !task.cpuHeavy, case .running = phase else {
            monitorDue = nil
            monitor = nil
            return []
        }
        monitorDue = now + limits.cpuMonitorInterval
        guard onBattery else { monitor = nil; return [] }
        defer { monitor = (now, cpuSeconds) }
        guard let m = monitor, now > m.at else { return [] }
        let share = (cpuSeconds - m.cpu) / (now - m.at) * 100
        guard share.isFinite, share > threshold else { return [] }
        task.cpuHeavy = true
        monitorDue = nil
        return [.markedCPUHeavy(percent: min(share, 100_000))]
    }

    /// The command has exited (or was killed) with this status.
    public mutating func exited(status: Int32) {
        phase = .finished(status: status)
        monitorDue = nil
    }

    /// A signal the supervisor received: while waiting it ends the wait; later it goes to the command,
    /// thawed first if it is one meant to end it (a stopped process cannot act on SIGTERM).
    public mutating func signal(_ sig: Int32, terminating: Bool) -> [TaskAction] {
        switch phase {
        case .waiting:
            interruptedBy = sig
            phase = .gaveUp(reason: .signal(sig))
            return [.giveUp(reason: .signal(sig))]
        case .running, .paused, .expiring:
            if terminating, case .paused(let cap) = phase { phase = .running(cpuCap: cap) }
            return [.forward(signal: sig, thaw: terminating)]
        case .finished, .gaveUp:
            return []
        }
    }

    /// Starts a waiting task now whatever the policy says (`bgtask debug launch`); from then on only run and
    /// throttle verdicts apply to it (`apply`): the conditions that would have kept it waiting do not end it.
    public mutating func launchNow(now: Double) -> [TaskAction] {
        guard phase == .waiting else { return [] }
        phase = .running(cpuCap: nil); startedAt = now; task.running = 0; forced = true; startBlock = nil
        return [.start]
    }

    /// Expiry from outside the policy (the user, the daemon's debug command): SIGTERM, the grace, SIGKILL.
    public mutating func expire(now: Double, grace: Double? = nil) -> [TaskAction] {
        switch phase {
        case .running, .paused:
            let g = grace ?? limits.expireGrace
            phase = .expiring(killAt: now + g, killed: false)
            expiredByUs = true
            monitorDue = nil
            return [.expire(grace: g, why: .verdict)]
        default:
            return []
        }
    }

    /// The first instant after `now` at which a comparison of the clock or the task's age with a constant
    /// can change its outcome (a millisecond past it, so `>` has flipped). nil when no rule reads them, or
    /// reads them in a way that cannot be foreseen (`TimeDependence.opaque`: the caller looks each second).
    func nextTimeChange(_ dep: TimeDependence, now: Double, time: TimeFields) -> Double? {
        guard !dep.opaque else { return nil }
        let eps = 0.001
        var c: [Double] = []
        // Its own window opens or closes.
        if let w = task.window { c.append(now + w.untilChange(from: time) + eps) }
        switch phase {
        case .waiting: c += dep.waited.map { enqueuedAt + $0 + eps }
        case .running, .paused: if let s = runClockStart { c += dep.running.map { s + $0 + eps } }
        default: return nil
        }
        // Each by the local calendar (TimeFields.secondsUntil): a day of 23 or 25 hours moves them.
        let sod = time.secondsSinceMidnight
        if dep.readsHour { c.append(now + time.secondsUntil(((sod / 3600).rounded(.down) + 1).truncatingRemainder(dividingBy: 24) * 3600) + eps) }
        if dep.readsWeekday { c.append(now + time.secondsUntil(0) + eps) }
        for l in dep.ofDay { c.append(now + time.secondsUntil(l) + eps) }
        return c.filter { $0 > now }.min()
    }

    /// Budgets, giving up, and the SIGKILL after a grace: what time alone decides.
    mutating func deadlines(now: Double) -> [TaskAction] {
        settlePause(now: now)
        switch phase {
        case .waiting:
            if limits.noWait, let d = lastDecision, (d.verdict != .run && d.verdict != .throttle) || startBlock != nil {
                phase = .gaveUp(reason: .noWait)
                return [.giveUp(reason: .noWait)]
            }
            if let m = limits.maxWait, now - enqueuedAt >= m {
                phase = .gaveUp(reason: .maxWait(m))
                return [.giveUp(reason: .maxWait(m))]
            }
        case .running, .paused:
            if let b = limits.budget, let r = runningTime(now: now), pausedAt == nil, r >= b {
                phase = .expiring(killAt: now + limits.expireGrace, killed: false)
                expiredByUs = true
                monitorDue = nil
                return [.expire(grace: limits.expireGrace, why: .budget(b))]
            }
        case .expiring(let killAt, false) where now >= killAt:
            phase = .expiring(killAt: killAt, killed: true)
            return [.kill]
        default:
            break
        }
        return []
    }

    mutating func apply(_ d: Decision, now: Double) -> [TaskAction] {
        switch (phase, d.verdict) {
        case (.expiring, _), (.finished, _), (.gaveUp, _):
            return []
        // A debug launch (Apple's _simulateLaunchForTaskWithIdentifier) runs whatever the conditions say: a
        // defer, pause or expire verdict does not end it; its budget, an explicit expiry and cancel still do.
        case (.running, .defer) where forced, (.running, .pause) where forced, (.running, .expire) where forced:
            return []
        // Not started: anything but run/throttle keeps it waiting (an expire verdict cannot stop what has not begun).
        case (.waiting, .run):
            phase = .running(cpuCap: nil); startedAt = now; task.running = 0
            return [.start]
        case (.waiting, .throttle):
            let cap = d.cpuPercent ?? 100
            phase = .running(cpuCap: cap); startedAt = now; task.running = 0
            return [.start, .throttle(cpuPercent: cap)]
        case (.waiting, _):
            return []
        case (.running(let cap), .run):
            phase = .running(cpuCap: nil)
            return cap == nil ? [] : [.unthrottle]
        case (.running(let cap), .throttle):
            let new = d.cpuPercent ?? 100
            phase = .running(cpuCap: new)
            return cap == new ? [] : [.throttle(cpuPercent: new)]
        // (A `where` binds only the last pattern of a case: one pattern, checked once.)
        case (.running, let v) where limits.pauseExpires && (v == .defer || v == .pause):
            let g = d.grace ?? limits.expireGrace
            phase = .expiring(killAt: now + g, killed: false)
            expiredByUs = true
            expiredByRule = d.matches.first?.ruleID
            monitorDue = nil
            return [.expire(grace: g, why: .verdict)]
        case (.running(let cap), .defer), (.running(let cap), .pause):
            phase = .paused(cpuCap: cap)
            pausedAt = now
            return [.pause]
        case (.paused(let cap), .run):
            phase = .running(cpuCap: nil)
            return cap == nil ? [.resume] : [.unthrottle, .resume]
        case (.paused(let cap), .throttle):
            let new = d.cpuPercent ?? 100
            phase = .running(cpuCap: new)
            return cap == new ? [.resume] : [.throttle(cpuPercent: new), .resume]
        case (.paused, .defer), (.paused, .pause):
            return []
        case (.running, .expire), (.paused, .expire):
            let g = d.grace ?? limits.expireGrace
            phase = .expiring(killAt: now + g, killed: false)
            expiredByUs = true
            expiredByRule = d.matches.first { $0.verdict == .expire }?.ruleID
            monitorDue = nil
            return [.expire(grace: g, why: .verdict)]
        }
    }
}

extension TaskMachine {
    static let thermalStates: [PolicyValue] = ["nominal", "fair", "serious", "critical"].map(PolicyValue.string) + [.null]

    /// Whether any temperature could change what the policy decides for this task now: if its verdict is
    /// the same whatever `thermal.state` reads, the zones need not be read at all (a task waiting for the
    /// charger cannot be started by a cooler CPU). Rules that read `thermal.celsius` or `thermal.zone`
    /// in a condition are taken to always depend on it.
    public func dependsOnThermal(_ policy: Policy, conditions: [String: PolicyValue], time: TimeFields) -> Bool {
        switch phase {
        case .finished, .gaveUp, .expiring: return false
        default: break
        }
        return TaskMachine.dependsOnThermal(task, waiting: phase == .waiting, policy, conditions: conditions, time: time)
    }

    /// The same for a task in no machine (bgtaskd's resting tasks): waiting, or not yet started.
    public static func dependsOnThermal(_ task: TaskFields, waiting: Bool, _ policy: Policy, conditions: [String: PolicyValue],
                                        time: TimeFields) -> Bool {
        if policy.rules.contains(where: { $0.names.contains("thermal.celsius") || $0.names.contains("thermal.zone") }) { return true }
        guard policy.rules.contains(where: { $0.names.contains("thermal.state") }) else { return false }
        var seen: Set<String> = []
        var c = conditions
        for s in TaskMachine.thermalStates {
            c["thermal.state"] = s
            let d = Policy.Evaluator(policy: policy, conditions: c, time: time).decideNow(task)
            // What the verdict would do: for a task not yet started, only whether (and how capped) it starts.
            let starts = d.verdict == .run || d.verdict == .throttle
            seen.insert(waiting && !starts ? "stays waiting" : "\(d.verdict.rawValue) \(d.cpuPercent ?? 0)")
            if seen.count > 1 { return true }
        }
        return false
    }
}
