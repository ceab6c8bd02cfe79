import BgtaskPolicy

/// One moment of a replayed trace: when, and what every condition read.
public struct TraceRecord: Sendable {
    public var time: Double
    public var conditions: [String: PolicyValue]
    public init(time: Double, conditions: [String: PolicyValue]) {
        self.time = time
        self.conditions = conditions
    }
}

public struct SimulationEvent: Sendable {
    public var time: Double
    public var offset: Double
    public var phase: TaskPhase
    public var decision: Decision
    public var actions: [TaskAction]
    /// Set when a hold elapsed between trace lines, not at one.
    public var holdElapsed: Bool
}

/// Replays conditions through the scheduler core, in trace time.
public enum Simulation {
    /// An event is produced when something happens to the task, when the deciding rule changes, or when
    /// a hold starts or stops counting. Holds that elapse between two lines take effect at their own time;
    /// after the last line conditions are taken to stay until pending holds elapse.
    /// `label` says an instant of the trace's clock in words, for holds' "held until …".
    /// Budgets, give-up and expiry come from `limits`, as in `bgtask run`; a command that is sent SIGTERM is
    /// taken to use its whole grace (the worst case), then to die of the SIGKILL.
    public static func run(policy: Policy, task: TaskFields, records: [TraceRecord], limits: TaskLimits? = nil,
                           time: (Double) -> TimeFields, label: @escaping (Double) -> String = { "t=\($0)" }) -> [SimulationEvent] {
        guard let t0 = records.first?.time else { return [] }
        var machine = TaskMachine(task: task, enqueuedAt: t0,
                                  limits: limits ?? TaskLimits.from(settings: policy.settings, task: task, cpuMonitor: false))
        var events: [SimulationEvent] = []
        var lastKey = ""

        func step(_ conditions: [String: PolicyValue], at now: Double, holdElapsed: Bool) -> Decision {
            let evaluator = Policy.Evaluator(policy: policy, conditions: conditions, time: time(now))
            evaluator.timeLabel = { t, _ in label(t) }
            let (d, actions) = machine.step(evaluator, now: now)
            if actions.contains(.kill) { machine.exited(status: 128 + 9) }
            let key = "\(d.verdict)|\(d.matches.first?.ruleID ?? "")|\(d.cpuPercent ?? 0)|\(d.pending.map(\.ruleID))"
            if !actions.isEmpty || key != lastKey {
                events.append(SimulationEvent(time: now, offset: now - t0, phase: machine.phase, decision: d,
                                              actions: actions, holdElapsed: holdElapsed))
                lastKey = key
            }
            return d
        }

        for (i, r) in records.enumerated() {
            _ = step(r.conditions, at: r.time, holdElapsed: false)
            let horizon = i + 1 < records.count ? records[i + 1].time : Double.infinity
            var steps = 0
            while !machine.isDone, let next = machine.nextWake, next < horizon, steps < 100 {
                _ = step(r.conditions, at: next, holdElapsed: true)
                steps += 1
            }
            if machine.isDone { break }
        }
        return events
    }

    public static func describe(_ a: TaskAction) -> String {
        switch a {
        case .start: return "started"
        case .throttle(let p): return "throttled to \(p)%"
        case .unthrottle: return "cap lifted"
        case .pause: return "paused"
        case .resume: return "resumed"
        case .expire(let g, .verdict): return "expired (grace \(formatDuration(g)))"
        case .expire(let g, .budget(let b)): return "budget \(formatDuration(b)) used up (grace \(formatDuration(g)))"
        case .kill: return "killed (SIGKILL)"
        case .giveUp(let r): return "gave up (\(r))"
        case .forward(let s, _): return "signal \(s) forwarded"
        case .markedCPUHeavy(let p): return "measured CPU-heavy (\(Int(p))%)"
        }
    }
}
