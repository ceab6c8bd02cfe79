import BgtaskPolicy

/// Where a task is in its life.
public enum TaskPhase: Sendable, Equatable {
    case waiting
    case running(cpuCap: Int?)
    /// Frozen; the cap it had still applies when it resumes.
    case paused(cpuCap: Int?)
    case expired
    case finished(status: Int32)

    public var name: String {
        switch self {
        case .waiting: return "waiting"
        case .running(let cap?): return "running (capped at \(cap)%)"
        case .running(nil): return "running"
        case .paused: return "paused"
        case .expired: return "expired"
        case .finished(let s): return "finished (exit \(s))"
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
    case expire(grace: Double)
}

/// The scheduler core for one task: a pure state machine over (conditions, task, now) → actions.
/// `bgtask run`, `policy simulate` and the daemon drive the same code; time is whatever `now` says.
public struct TaskMachine: Sendable {
    public private(set) var task: TaskFields
    public private(set) var phase: TaskPhase = .waiting
    public private(set) var hold: HoldState = [:]
    public private(set) var lastDecision: Decision?
    public let enqueuedAt: Double
    public private(set) var startedAt: Double?

    public init(task: TaskFields, enqueuedAt: Double) {
        self.task = task
        self.enqueuedAt = enqueuedAt
    }

    public var isDone: Bool {
        switch phase { case .expired, .finished: return true; default: return false }
    }

    /// The task measured CPU-heavy by the CPU monitor: rules about `task.cpu_heavy` apply from now on.
    public mutating func markCPUHeavy() { task.cpuHeavy = true }

    public mutating func finished(status: Int32) { phase = .finished(status: status) }

    /// Expiry has begun outside a verdict (the budget ran out, the user asked): from now on nothing can
    /// pause or freeze the task, so the SIGKILL after the grace always finds it able to die.
    public mutating func beginExpiry() {
        if case .finished = phase { return }
        phase = .expired
    }

    /// Evaluates the policy at `now` and returns what must change.
    public mutating func step(_ evaluator: Policy.Evaluator, now: Double) -> (Decision, [TaskAction]) {
        if let s = startedAt {
            task.running = max(0, now - s)
        } else {
            task.waited = max(0, now - enqueuedAt)
        }
        let d = evaluator.decide(task, now: now, hold: &hold)
        lastDecision = d
        return (d, apply(d, now: now))
    }

    mutating func apply(_ d: Decision, now: Double) -> [TaskAction] {
        switch (phase, d.verdict) {
        case (.expired, _), (.finished, _):
            return []
        // Not started: anything but run/throttle keeps it waiting (an expire verdict cannot stop what has not begun).
        case (.waiting, .run):
            phase = .running(cpuCap: nil); startedAt = now
            return [.start]
        case (.waiting, .throttle):
            let cap = d.cpuPercent ?? 100
            phase = .running(cpuCap: cap); startedAt = now
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
        case (.running(let cap), .defer), (.running(let cap), .pause):
            phase = .paused(cpuCap: cap)
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
            phase = .expired
            return [.expire(grace: d.grace ?? 10)]
        }
    }
}
