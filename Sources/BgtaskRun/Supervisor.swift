#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskConfig
import BgtaskCore
import BgtaskPolicy
import BgtaskProbes
@preconcurrency import CLinux

/// What stands in for a process when the task runs inside an app (bgtaskd's app tasks): the app is told to
/// start and to stop, and says when it is done (`Supervisor.appCompleted`).
public protocol AppTaskHooks: AnyObject {
    /// Delivers the task to its app (launching the app first if it is not running); says what was done. Throws
    /// when the app cannot be launched: the run then ends as failed, never reported as started.
    func start(_ s: Supervisor) throws(AppStartError) -> String
    /// Tells the app its task expires (its expiration handler runs).
    func expire(_ s: Supervisor, reason: String)
    /// The grace is over and the app has not completed the task: ends it; says what was done.
    func kill(_ s: Supervisor) -> String
}

/// Why an app task could not start: its app could not be launched (its command not found or not executable, or
/// bgtaskd stopped relaunching it). The run ends as failed with `status`, as a command that cannot be spawned.
public struct AppStartError: Error, CustomStringConvertible {
    public var description: String
    public var status: Int32
    public init(_ description: String, status: Int32) {
        self.description = description
        self.status = status
    }
}

/// Starts a task's command other than as this process's child (bgtaskd: a transient systemd unit).
public protocol TaskLauncher: AnyObject {
    /// The started command, or nil when this way is not available now (the supervisor then spawns it itself).
    /// Throws `SpawnError` for a command that cannot run at all (not found, not executable).
    func launch(_ s: Supervisor, argv: [String], background: Bool, directory: String?, environment: [String]) throws -> TaskProcess?
}

/// One policy that many supervisors refer to (bgtaskd's thousands of waiting tasks): a reference, where a `Policy`
/// stored in each supervisor is a 260-byte copy per task.
public final class PolicyRef: Sendable {
    public let policy: Policy
    public init(_ policy: Policy) { self.policy = policy }
}

/// One task under supervision: the core's `TaskMachine` and the process it drives. It receives events
/// (conditions, the clock, signals, its child's exit), gives them to the machine, and carries out the
/// machine's actions on the process; it records each one, then says it. An `EventLoop` runs any number
/// of these; it holds no scheduling rule of its own.
public final class Supervisor {
    let options: RunOptions
    let policyRef: PolicyRef
    var policy: Policy { policyRef.policy }
    let observer: RunObserver?
    let state: ActiveTasks?
    let enqueuedAt: Double
    public private(set) var machine: TaskMachine { didSet { refreshCache() } }
    /// What loops over thousands of supervisors read each round, kept current on every change of the machine
    /// (reading `machine` from outside copies the whole struct).
    public private(set) var phaseCode = 0
    var machineDone = false
    var machineWake: Double?
    var sampleDue: Double?
    /// Whether any rule reads what tells one task from another (id, age): then no sharing of answers.
    let rulesReadIdentity: Bool
    var process: TaskProcess?
    var conditions: [String: PolicyValue]?
    /// Why it waits, as last told in its story (recorded, and said unless quiet): a wait told again in the same words
    /// is neither. A supervisor that takes up a story told before starts from its last words (`resume`, `continues`).
    public private(set) var lastSaid = ""
    /// The earliest date `lastSaid` told of, if it told of one.
    private var toldUntil: Double?
    /// Whether this supervisor has told a wait itself (then `quietFirstWait` no longer applies).
    var toldAWait = false
    var dutyAt: Double?
    /// What the run cost (`EnergyMeter`): sampled when the command starts and ends, every `energyInterval` while
    /// a power source answers, and whenever the loop wakes for something else `energyMinimum` after the last
    /// sample (a condition change: the charger went, and the battery now tells the draw). With no source, waiting
    /// costs no wake-up for it.
    public private(set) var energy = EnergyMeter()
    var energyDue: Double?
    var energyRunning = false
    var lastEnergySample = -Double.infinity
    /// Why there is no power source, as last found (for "energy unknown: …").
    public private(set) var energyWhy = ""
    var batteryFullWh: Double?
    static let energyInterval = 60.0
    static let energyMinimum = 10.0
    var spawnFailure: Int32?
    /// Set only when a rule reads the clock or the task's age in a way the core cannot foresee: each second.
    var tickAt: Double?
    /// The scheduler's gate (the daemon's limits): nil lets one more task like this start, else why not.
    public var slot: ((TaskFields) -> String?)?
    /// Told after each event is recorded (the daemon keeps its queue in step).
    public var onEvent: ((Supervisor, RunEvent.Kind) -> Void)?
    /// Asked right before a command is spawned (the daemon writes its intent to the queue first, so that a
    /// crash at any instant after can find the run): nil to go ahead, else why it must not start now.
    public var beforeSpawn: ((Supervisor) -> String?)?
    /// Why the last start was refused by `beforeSpawn` (the request is not spent: it waits to try again).
    public private(set) var startRefused: String?
    /// What its messages on stderr start with.
    public var speaker = "bgtask"
    /// Set for a task that runs inside an app: no process is spawned for it.
    public var app: AppTaskHooks?
    /// Set where commands run as units of a service manager (bgtaskd with a systemd user manager).
    public weak var launcher: TaskLauncher?
    /// Why it waits, as last said (the rule and its file:line, or what held back a start the policy allowed).
    public private(set) var waitingReason = ""
    /// The rule behind `waitingReason` and its file:line (nil when something other than a rule holds it back).
    public private(set) var waitingRule: (id: String, location: String)?
    /// Said on stderr only when it changes, and not at all for the first decision of a task restored from the
    /// queue (a daemon restart must not say 10,000 times what every task already waited for).
    public var quietFirstWait = false

    public convenience init(options: RunOptions, policy: Policy, observer: RunObserver?, state: ActiveTasks?, enqueuedAt: Double) {
        self.init(options: options, policy: PolicyRef(policy), observer: observer, state: state, enqueuedAt: enqueuedAt)
    }

    public init(options: RunOptions, policy policyRef: PolicyRef, observer: RunObserver?, state: ActiveTasks?, enqueuedAt: Double) {
        self.options = options
        self.policyRef = policyRef
        let policy = policyRef.policy
        self.observer = observer
        self.state = state
        self.enqueuedAt = enqueuedAt
        machine = TaskMachine(task: options.task, enqueuedAt: enqueuedAt, limits: options.limits(policy.settings))
        // The core foresees when `name OP constant` rules on the clock or the task's age change; only a
        // use it cannot foresee needs a look each second.
        tickAt = policy.time.opaque ? enqueuedAt + 1 : nil
        rulesReadIdentity = policy.rules.contains { $0.names.contains { $0 == "task.id" || $0.hasPrefix("task.waited") || $0.hasPrefix("task.running") } }
        refreshCache()
        // The cap mechanism is chosen now (once per process), not between the event that starts it and the spawn.
        TaskProcess.prepare(prefer: options.mechanism)
    }

    func refreshCache() {
        phaseCode = machine.phase.code
        machineDone = machine.isDone
        machineWake = machine.nextWake
        sampleDue = machine.cpuSampleDue
    }

    public var isDone: Bool { spawnFailure != nil || machineDone }
    /// The process group it runs, once started and known (for reaping; a unit's, once systemd has said).
    public var pid: pid_t? { process.flatMap { $0.pid > 0 ? $0.pid : nil } }
    /// The process it runs, once started.
    public var taskProcess: TaskProcess? { process }
    public var id: String { options.task.id }
    public var runOptions: RunOptions { options }
    /// When it was started, on the monotonic clock.
    public var startedAt: Double? { machine.startedAt }

    /// When it must be woken even if nothing happens.
    public var nextDeadline: Double? {
        func earlier(_ a: Double?, _ b: Double?) -> Double? {
            guard let a else { return b }
            guard let b else { return a }
            return min(a, b)
        }
        return earlier(earlier(earlier(machineWake, dutyAt), earlier(tickAt, sampleDue)), energyDue)
    }

    /// One reading for the energy meter: the machine's draw from its best source, the task's and the machine's CPU time.
    func sampleEnergy(now: Double, finalCPU: Double? = nil) {
        lastEnergySample = now
        let root = options.probe.root
        let supplies = DeviceReader(root: root).powerSupplies()
        let (draw, why) = SystemPower.read(root: root, supplies: supplies)
        energyWhy = why
        let full = supplies.filter { $0.isSystemBattery && $0.present != false }.compactMap(\.energyFullWh)
        if !full.isEmpty { batteryFullWh = full.reduce(0, +) }
        let taskCPU = process?.cpuSeconds() ?? finalCPU
        energy.add(EnergyMeter.Sample(time: now, taskCPU: taskCPU, machineCPU: SystemPower.busyCPUSeconds(root: root),
                                      watts: draw?.watts, counterJoules: draw?.counterJoules, counterRange: draw?.counterRangeJoules,
                                      source: draw?.source, uncertainty: draw?.uncertainty))
        energyDue = energyRunning && draw != nil ? now + Supervisor.energyInterval : nil
    }

    /// A sample taken on a wake that came for something else (a condition change, a timer, someone asking for
    /// the live figure), if the last is `energyMinimum` old.
    public func sampleEnergyIfDue(now: Double) {
        if energyRunning, process != nil, !isDone, now - lastEnergySample >= Supervisor.energyMinimum { sampleEnergy(now: now) }
    }

    /// What the run used, for its end in the audit trail: the summary, or why it is unknown.
    public var energySummary: String {
        energy.summary(batteryFullWh: batteryFullWh) ?? "energy unknown: " + (energyWhy.isEmpty ? "no power reading during the run" : energyWhy)
    }

    /// The exit status of `bgtask run`, once it is done.
    public var endStatus: Int32 { spawnFailure ?? machine.exitStatus ?? 1 }

    /// Cleans up and returns the exit status of `bgtask run`.
    public func finish() -> Int32 {
        process?.cleanUp()
        state?.remove()
        return endStatus
    }

    func say(_ s: String) {
        if !options.quiet { fputs(Terminal.safe("\(speaker): \(options.task.id): \(s)") + "\n", stderr) }
    }

    func record(_ kind: RunEvent.Kind, _ detail: String, decision: Decision? = nil, status: Int32? = nil, energy withEnergy: Bool = false,
                cpuSeconds: Double? = nil) {
        // The crash-recovery record first: what is said has happened, and a kill right after finds it written.
        if process != nil, kind != .finished { state?.update(state: machine.phase.state, task: machine.task) }
        var event = RunEvent(kind: kind, monotonic: monotonic(), detail: detail, decision: decision,
                             conditions: conditions ?? [:], exitStatus: status)
        if withEnergy {
            event.energyWh = energy.wattHours
            event.energy = energySummary
            event.cpuSeconds = cpuSeconds
        }
        // A run's end is told to the daemon first, so that its queue has it before anything says it (the audit
        // trail, the journal): a daemon killed in between then finds the run over, not interrupted.
        if kind == .finished { onEvent?(self, kind) }
        observer?.record(event, task: machine.task)
        if kind != .finished { onEvent?(self, kind) }
    }

    func explain(_ d: Decision?) -> String {
        guard let m = d?.matches.first else { return "no rule applies" }
        return "\(m.reason) — rule \(m.ruleID) (\(m.location))"
    }

    /// Whether a temperature could change this task's verdict now (see `TaskMachine.dependsOnThermal`).
    public var dependsOnThermal: Bool {
        guard let c = conditions else { return true }   // nothing known yet: read everything once
        return machine.dependsOnThermal(policy, conditions: c, time: localTime())
    }

    // MARK: Events

    /// New readings from the watcher.
    public func conditionsChanged(_ c: [String: PolicyValue], now: Double) {
        conditions = c
        sampleEnergyIfDue(now: now)
        evaluate(now: now)
    }

    /// The same, for one of many supervisors given the same readings (bgtaskd): `shared` is one evaluator for
    /// all of them. A task that waits, with no hold running, whose standing (its verdict and which rules match: no
    /// reasons, no holds) is still the one it was decided on is not decided in full again: 10,000 waiting tasks
    /// cost one fast pass, not 10,000 decisions, when the battery drops a percent.
    public func conditionsChanged(_ c: [String: PolicyValue], now: Double, shared: Policy.Evaluator) {
        conditions = c
        sampleEnergyIfDue(now: now)
        // Its standing, not only its verdict: a rule behind the deciding one that stops (or starts) matching must
        // start its hold now and change what the task is told, though the verdict stays.
        if let last = waitsForACondition, shared.standing(machine.task) == last.standing { return }
        evaluate(now: now, evaluator: shared)
    }

    /// The last decision, if it keeps the task waiting and only a change of conditions can end that: no hold
    /// running, no earliest date or time rule to wake for, no slot it waits for.
    var waitsForACondition: Decision? {
        guard machine.phase == .waiting, machine.startBlock == nil, let last = machine.lastDecision, last.nextChangeAt == nil,
              last.verdict != .run, last.verdict != .throttle, machine.nextWake == nil, tickAt == nil else { return nil }
        return last
    }

    /// The last decision, if the policy would run the task and only a slot keeps it waiting: no hold running, no
    /// earliest date or time rule to wake for. The scheduler wakes it when a slot frees (`Scheduler.nextForSlot`).
    var waitsForASlot: Decision? {
        guard machine.phase == .waiting, case .noSlot? = machine.startBlock, let last = machine.lastDecision, last.nextChangeAt == nil,
              last.verdict == .run || last.verdict == .throttle, machine.nextWake == nil, tickAt == nil else { return nil }
        return last
    }

    /// What a waiting task keeps when its supervisor is let go (bgtaskd's resting tasks: 10,000 tasks waiting for
    /// the charger need a row and a verdict each, not a supervisor each). A new supervisor takes it up again with
    /// `resume(_:)` and decides as this one would have.
    public struct Rest: RestState {
        public let hold: HoldState
        public let decision: Decision
        public let reason: String
        public let rule: (id: String, location: String)?
        /// Why no slot is free, when a slot is all it waits for.
        public let slot: String?
        public var verdict: Verdict { decision.verdict }
        /// A supervisor that takes up a rest decides by its holds and its decision's verdict (it rests with no hold
        /// running and no change pending); the reason, the rule and the readings only tell why. Tasks alike whose
        /// holds agree rest together, told by the newest.
        public func sharesGroup(with other: Rest) -> Bool {
            hold == other.hold && decision.verdict == other.decision.verdict && decision.pending == other.decision.pending
        }
    }

    /// Its state to rest on, when only a change of conditions or a free slot can start it and nothing tells it from
    /// tasks alike (no rule reads its id or age: the queue's fast verdict then decides for it); nil otherwise.
    public var rest: Rest? {
        guard !rulesReadIdentity, conditions != nil, !isDone, process == nil, app == nil,
              let last = waitsForACondition ?? waitsForASlot else { return nil }
        var slot: String?
        if case .noSlot(let why)? = machine.startBlock { slot = why }
        return Rest(hold: machine.hold, decision: last, reason: waitingReason, rule: waitingRule, slot: slot)
    }

    /// Takes up a rest: the holds and decision go back into the machine, and what was said is not said again.
    public func resume(_ r: Rest) {
        machine.resumeWaiting(hold: r.hold, lastDecision: r.decision)
        waitingReason = r.reason
        waitingRule = r.rule
        lastSaid = r.reason
        toldAWait = true
    }

    /// Carries on a story whose last words were `told` (a task restored after a restart, supervised again after a
    /// resume or a reload): a first decision that tells the same wait is not recorded or said again, so 100,000
    /// waiting tasks do not write 100,000 entries, evicting the trail's history, each time the daemon starts.
    public func continues(told: String) {
        lastSaid = told
    }

    /// A key under which tasks whose thermal dependence must be the same share one answer (the phase, the kind
    /// and the flags), or nil when a rule reads what tells tasks apart (their id, their age).
    public var thermalKey: Int? {
        rulesReadIdentity ? nil : Supervisor.thermalKey(machine.task, phaseCode: phaseCode)
    }

    public static func thermalKey(_ t: TaskFields, phaseCode: Int) -> Int {
        let kind = TaskKind.allCases.firstIndex(of: t.kind)!    // 0 to 3: the two bits `* 4` leaves
        let flags = [t.requiresExternalPower, t.requiresNetwork, t.requiresUnmetered, t.cpuHeavy, t.userInitiated]
            .enumerated().reduce(0) { $0 | ($1.element ? 1 << $1.offset : 0) }
        return (phaseCode * 4 + kind) * 32 + flags
    }

    /// The loop woke at or after `nextDeadline`: the duty cycle, the CPU monitor, holds and deadlines.
    public func timersDue(now: Double) {
        if let t = dutyAt, now >= t { dutyAt = process?.dutyCycle(now: now) }
        if let t = energyDue, now >= t { energyDue = nil }   // re-armed by the sample, while a source answers
        sampleEnergyIfDue(now: now)
        var changed = false
        if let t = machine.cpuSampleDue, now >= t {
            let cpu = process?.cpuSeconds()
            let onBattery = conditions?["power.external"] == .bool(false) && cpu != nil
            let marked = machine.cpuSample(cpuSeconds: cpu ?? 0, onBattery: onBattery, now: now)
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
        if changed || due { evaluate(now: now) }
    }

    /// A signal the supervisor received (forwarded to the command, or ending the wait).
    public func signal(_ sig: Int32, now: Double) {
        perform(machine.signal(sig, terminating: [SIGHUP, SIGINT, SIGQUIT, SIGTERM].contains(sig)), machine.lastDecision, now: now)
    }

    /// Its command exited with this wait status.
    public func childExited(waitStatus status: Int32, cpuSeconds finalCPU: Double? = nil) {
        // What it left running may still be writing: cut without a copy that would lose their lines.
        if let out = options.outputPath { OutputFile.dropFront(out) }
        let code = exitCode(status)
        // The last interval, while its CPU time can still be read (a cgroup outlives its processes).
        if energyRunning { sampleEnergy(now: monotonic(), finalCPU: finalCPU) }
        energyRunning = false
        energyDue = nil
        machine.exited(status: code)
        let how = (status & 0x7f) == 0 ? "exit \(code)" : "killed by signal \(status & 0x7f)"
        record(.finished, how, status: code, energy: true, cpuSeconds: process?.cpuSeconds() ?? finalCPU)
        say("finished (\(how))")
    }

    func evaluate(now: Double, evaluator shared: Policy.Evaluator? = nil) {
        guard let c = conditions, !isDone else { return }
        let evaluator = shared ?? Policy.Evaluator(policy: policy, conditions: c, time: localTime())
        // Holds say when they let go as a time of day, not as a monotonic instant.
        evaluator.timeLabel = { t, now in clockText(wallClockNow() + (t - now)) }
        let wasWaiting = machine.phase == .waiting
        let (d, actions) = machine.step(evaluator, now: now, slot: machine.phase == .waiting ? slot?(machine.task) : nil)
        if wasWaiting, machine.startBlock != nil || (d.verdict != .run && d.verdict != .throttle) {
            let text: String
            switch machine.startBlock {
            // Not "the policy would run it now": read an hour before the date, that sounded like "it runs now".
            case .earliest(let e)?: text = "not before \(untilText(wallClockNow() + (e - now))) (\(options.earliestCause)); no rule holds it back"
            case .noSlot(let why)?: text = "\(why); no rule holds it back"
            case nil: text = explain(d)
            }
            // Shared with the tasks before it in this evaluation that wait for the same reason.
            waitingReason = evaluator.shared(text)
            waitingRule = machine.startBlock == nil ? d.matches.first.map { ($0.ruleID, evaluator.shared($0.location.description)) } : nil
            var until: Double?
            if case .earliest(let e)? = machine.startBlock { until = e }
            // Not the same date told again in other words (its countdown, a second of clock jitter); the words are
            // compared without the countdown only when they differ, off the path of a wait told as it was.
            if text != lastSaid, until == nil || until != toldUntil, !Supervisor.sameWait(text, lastSaid) {
                let first = !toldAWait
                toldAWait = true
                lastSaid = waitingReason
                toldUntil = until
                record(.deferred, text, decision: d)
                // With --no-wait nothing waits: the run ends at once, so the words say it did not start.
                if !(first && quietFirstWait) { say((machine.limits.noWait ? "not started: " : "waiting: ") + text) }
            }
        }
        perform(actions, d, now: now)
    }

    /// Two wordings of one wait: the same once the countdown to a date is left out ("not before 20:43:35, in 15m"
    /// and "…, in 14m50s"). The date does not change from one evaluation to the next; the countdown always does.
    static func sameWait(_ a: String, _ b: String) -> Bool { withoutCountdown(a) == withoutCountdown(b) }

    /// `s` with each ", in DURATION" left out: a compact duration (`formatDuration`: "15m", "1h2m30s") that ends
    /// the text or is followed by a space, ")" or ";".
    static func withoutCountdown(_ s: String) -> String {
        var out = ""
        var rest = Substring(s)
        while let r = rest.range(of: ", in ") {
            var end = r.upperBound
            while end < rest.endIndex, rest[end].isASCII, rest[end].isNumber || "dhms".contains(rest[end]) { end = rest.index(after: end) }
            let token = rest[r.upperBound..<end]
            let duration = token.first?.isNumber == true && token.last.map { "dhms".contains($0) } == true
                && (end == rest.endIndex || " );".contains(rest[end]))
            out += rest[..<(duration ? r.lowerBound : r.upperBound)]
            rest = rest[(duration ? end : r.upperBound)...]
        }
        return out + rest
    }

    /// The app says its task is done (`setTaskCompleted(success:)`), or it went away without saying so.
    public func appCompleted(success: Bool, detail: String) { appEnded(status: success ? 0 : 1, detail: detail) }

    /// The app's run is over with `status`: its completion, or a launch of the app for it that failed once it was
    /// under way (a relaunch: 127 for a command not found, 126 for one that cannot be executed, as shells say).
    public func appEnded(status code: Int32, detail: String) {
        guard !machine.isDone, machine.startedAt != nil else { return }
        machine.exited(status: code)
        record(.finished, detail, status: code)
        say("finished (\(detail))")
    }

    /// A start that did not happen: recorded and said as failed, with the status the run ends with.
    func startFailed(_ why: String, status: Int32) {
        record(.failed, why, status: status)
        say(why)
        spawnFailure = status
    }

    /// Re-evaluates now (the daemon: a slot came free, the policy was reloaded, the machine resumed).
    public func reevaluate(now: Double) { evaluate(now: now) }

    /// Starts it now whatever the policy says (`bgtask debug launch`); recorded as such.
    public func launchNow(now: Double) {
        let actions = machine.launchNow(now: now)
        perform(actions, nil, now: now, note: "launched by bgtask debug launch, whatever the conditions")
    }

    /// Expires it now (`bgtask debug expire`, `bgtask cancel` of a running task): SIGTERM, the grace, SIGKILL.
    public func expireNow(now: Double, why: String) {
        let actions = machine.expire(now: now)
        guard !actions.isEmpty else { return }
        if let a = app {
            a.expire(self, reason: why)
            record(.expired, "the app was told: \(why); it has \(formatDuration(machine.limits.expireGrace)) to complete")
            say("expired (\(why)); the app has \(formatDuration(machine.limits.expireGrace)) to complete")
            return
        }
        process?.thawForSignal()
        process?.signal(SIGTERM)
        dutyAt = nil
        record(.expired, "\(why); SIGTERM, grace \(formatDuration(machine.limits.expireGrace))")
        say("expired (\(why)); SIGTERM, SIGKILL in \(formatDuration(machine.limits.expireGrace))")
    }

    /// Carries out the core's actions on the process; what is done is recorded, then said.
    func perform(_ actions: [TaskAction], _ d: Decision?, now: Double, note: String? = nil) {
        for a in actions {
            switch a {
            case .start where app != nil:
                let what: String
                do { what = try app!.start(self) } catch { return startFailed(error.description, status: error.status) }
                let waited = now - enqueuedAt
                record(.started, "\(what), waited \(formatDuration(waited))" + (note.map { "; \($0)" } ?? ""), decision: d)
                say("started" + (waited >= 1 ? " after waiting \(formatDuration(waited))" : "") + ": \(what)")
            case .start:
                if let why = beforeSpawn?(self) {
                    startRefused = why
                    record(.failed, "not started: \(why)", status: ExitStatus.tempFail)
                    say("not started: \(why)")
                    spawnFailure = ExitStatus.tempFail
                    return
                }
                if let out = options.outputPath { OutputFile.rotate(out) }
                do {
                    let background = !machine.task.userInitiated
                    let environment = options.environment + (options.runToken.map { ["\(RunProcesses.variable)=\($0)"] } ?? [])
                    let p = try launcher?.launch(self, argv: options.argv, background: background, directory: options.workingDirectory,
                                                 environment: environment)
                        ?? TaskProcess.spawn(options.argv, background: background,
                                             cgroupName: "\(StatePaths.safeName(options.task.id))-\(getpid())", prefer: options.mechanism,
                                             output: options.outputPath, directory: options.workingDirectory,
                                             environment: environment)
                    process = p
                    state?.started(pgid: p.pid, cgroup: p.containment, runID: options.runID, task: machine.task,
                                   grace: machine.limits.expireGrace)
                    let waited = now - enqueuedAt
                    let what = p.handle.description
                    record(.started, "\(what), waited \(formatDuration(waited))" + (note.map { "; \($0)" } ?? ""), decision: d)
                    say("started" + (waited >= 1 ? " after waiting \(formatDuration(waited))" : "") + " (\(what))")
                    energyRunning = true
                    sampleEnergy(now: now)
                } catch let e as SpawnError {
                    return startFailed(e.description, status: e.exitCode)
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
            case .expire(let grace, let why) where app != nil:
                let reason: String
                switch why {
                case .verdict: reason = explain(d)
                case .budget(let b): reason = "budget used up (\(formatDuration(b)))"
                }
                app!.expire(self, reason: reason)
                record(.expired, "the app was told: \(reason); it has \(formatDuration(grace)) to complete", decision: d)
                say("expired: \(reason); the app has \(formatDuration(grace)) to complete")
            case .kill where app != nil:
                let what = app!.kill(self)
                record(.killed, what)
                say(what)
                appCompleted(success: false, detail: "not completed after its expiration and grace")
            case .expire(let grace, let why):
                process?.thawForSignal()
                process?.signal(SIGTERM)
                dutyAt = nil
                switch why {
                case .verdict:
                    record(.expired, "SIGTERM, grace \(formatDuration(grace))", decision: d)
                    say("expired: \(explain(d)); SIGTERM, SIGKILL in \(formatDuration(grace))")
                case .budget(let b):
                    record(.expired, "its \(formatDuration(b)) budget ran out")
                    say("budget used up; SIGTERM, SIGKILL in \(formatDuration(grace))")
                }
            case .kill:
                process?.signal(SIGKILL)
                record(.killed, "SIGKILL after the grace period")
            case .giveUp(let reason):
                record(.gaveUp, reason.description, decision: d)
                switch reason {
                case .maxWait(let m): say("gave up waiting after \(formatDuration(m))")
                case .signal: say("interrupted by \(reason)")
                case .noWait: break
                }
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
}

func exitCode(_ status: Int32) -> Int32 {
    let sig = status & 0x7f
    return sig == 0 ? (status >> 8) & 0xff : 128 + sig
}
