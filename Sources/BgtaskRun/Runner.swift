#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskConfig
import BgtaskCore
import BgtaskPolicy
import BgtaskProbes

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
    /// Where the command's stdout and stderr go (the daemon keeps them per task); nil: inherited.
    public var outputPath: String?
    /// The command's working directory; nil: inherited.
    public var workingDirectory: String?
    /// Extra environment for the command (NAME=value), on top of the supervisor's own.
    public var environment: [String] = []
    /// The run token its processes carry (`RunProcesses`: the daemon finds them all by it); nil: none.
    public var runToken: String?
    /// Not before this instant, on the monotonic clock (the daemon's `--earliest`).
    public var earliest: Double?
    /// What set `earliest`, as a task's wait names it: "its calendar event 'daily'", "its retry backoff (retry 1
    /// of 3)"; Apple's "its earliest begin date" by default.
    public var earliestCause = "its earliest begin date"
    /// An app's task: a defer or pause verdict expires it (see `TaskLimits.pauseExpires`).
    public var pauseExpires = false

    /// The core's limits for this task: the command line's on top of the policy's settings.
    public func limits(_ settings: PolicySettings) -> TaskLimits {
        var l = TaskLimits.from(settings: settings, task: task, budget: budget, maxWait: maxWait, noWait: noWait, cpuMonitor: cpuMonitor)
        l.earliest = earliest
        l.pauseExpires = pauseExpires
        return l
    }

    public init(argv: [String], task: TaskFields, probe: ProbeOptions) {
        self.argv = argv
        self.task = task
        self.probe = probe
    }
}

/// `bgtask run`: a `Scheduler` of one entry and its supervisor in one event loop (bgtaskd drives the same
/// scheduler, of many, and the same supervisors in its GLib loop).
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

    public func run() -> Int32 {
        let loop: EventLoop
        do { loop = try EventLoop(watch: EventLoop.watchOptions(options.probe, policies: [policy])) } catch {
            if !options.quiet { fputs("bgtask: \(options.task.id): \(error)\n", stderr) }
            return 1
        }
        let supervisor = Supervisor(options: options, policy: policy, observer: observer, state: state, enqueuedAt: monotonic())
        let queue = OneEntry(supervisor)
        loop.run([supervisor])
        let status = supervisor.finish()
        queue.finished()
        return status
    }
}

/// `bgtask run`'s queue: bgtaskd's `Scheduler`, of one entry, asked as bgtaskd asks it — the slot before the start,
/// the start, the end. One slot: the daemon's limits (`daemon.*`) are not a foreground command's.
final class OneEntry {
    var scheduler = Scheduler<Supervisor, Supervisor.Rest>(limits: Schedule.Limits(maxRunning: 1, maxRunningHeavy: 1, maxPendingPerApp: 1),
                                                           now: monotonic(), day: 0, submitsPerSecond: 1, submitBurst: 1)
    let id: String
    init(_ s: Supervisor) {
        id = s.id
        scheduler.add(.init(fields: s.machine.task), s)
        s.slot = { [unowned self] _ in self.scheduler.slot(for: self.id) }
        s.onEvent = { [unowned self] _, kind in if kind == .started { self.scheduler.start(self.id) } }
    }
    func finished() { _ = scheduler.finish(id) }
}

public func monotonic() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
}

