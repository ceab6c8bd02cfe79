#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskAudit
import BgtaskBus
import BgtaskProtocol
import BgtaskConfig
import BgtaskCore
import BgtaskPolicy
import BgtaskProbes
import BgtaskQueue
import BgtaskRun
@preconcurrency import CLinux

public struct DaemonOptions {
    /// The bus to serve on (nil: the session bus, `$DBUS_SESSION_BUS_ADDRESS`).
    public var busAddress: String?
    public var probe: ProbeOptions
    /// The policy files named on the command line (on top of the layers).
    public var policyFiles: [String] = []
    public var quiet = false
    /// Watch logind on the system bus for sleep and shutdown (off with `--no-dbus`).
    public var watchSleep = true
    /// Run command tasks as transient units where a systemd user manager runs (off with `--no-systemd-units`).
    public var systemdUnits = true
    /// Where its configuration and state are, when not where the user's environment says (nil: there).
    public var places: DaemonPlaces?
    /// The readings, when given rather than watched (nil: the condition watcher reads the machine).
    public var readings: [String: PolicyValue]?
    /// Whether the process's terminating signals and SIGCHLD are bgtaskd's (a signalfd); false in a process that
    /// has other users of signals.
    public var ownsSignals = true
    /// Starts command tasks (nil: a transient systemd unit where a manager runs, else a child process).
    public var launcher: TaskLauncher?
    public init(probe: ProbeOptions) { self.probe = probe }
}

/// A daemon's own files, in place of the user's configuration and state directories: a daemon run inside a test
/// process reads and writes only these.
public struct DaemonPlaces {
    public var stateDirectory: String
    public var policySources: [PolicySource]
    public var appDirectories: [String]
    public init(stateDirectory: String, policySources: [PolicySource], appDirectories: [String]) {
        self.stateDirectory = stateDirectory
        self.policySources = policySources
        self.appDirectories = appDirectories
    }
}

public struct DaemonError: Error, CustomStringConvertible {
    public var message: String
    public var status: Int32
    public var description: String { message }
}

/// A task the daemon knows: its stored request and the supervisor driving it — or, while it rests, what its
/// supervisor knew. A waiting task that only a change of conditions can start (waiting for the charger, say)
/// rests: its supervisor is let go and the scheduler asks the fast verdict of its class on each change
/// (`Scheduler.wake`); when that verdict changes, a new supervisor takes up its holds and decision and decides in
/// full (`Daemon.wake`). 10,000 tasks waiting for power then cost a row each, and one verdict per class.
final class Entry {
    var row: QueuedTask
    private(set) var awake: Supervisor?
    private(set) var rest: Supervisor.Rest?
    init(row: QueuedTask, supervisor: Supervisor) {
        self.row = row
        awake = supervisor
    }

    /// Its supervisor: running tasks always have one, waiting ones once woken (`Daemon.wake`).
    var supervisor: Supervisor { awake! }
    var isResting: Bool { awake == nil }

    /// Lets the supervisor go if it may rest (see `Supervisor.rest`); the run id goes into the row, as a new
    /// supervisor must carry on the same story.
    func sleepIfIdle() -> Verdict? {
        guard let s = awake, let r = s.rest else { return nil }
        row.runID = s.runOptions.runID
        rest = r
        awake = nil
        return r.verdict
    }

    func wake(_ s: Supervisor) {
        if let r = rest { s.resume(r) }
        rest = nil
        awake = s
    }

    /// Why it waits, as `pending` says it, awake or not.
    var waitingReason: String { awake?.waitingReason ?? rest?.reason ?? "" }
    var waitingRule: (id: String, location: String)? { awake != nil ? awake!.waitingRule : rest?.rule }
    var isWaiting: Bool { awake.map { $0.machine.phase == .waiting } ?? true }
}

/// Gives each task's events its own run id in the shared audit trail, and sends them to the journal too.
final class TaskObserver: RunObserver {
    let audit: AuditLog
    let journal: Journal
    let runID: String
    init(audit: AuditLog, journal: Journal, runID: String) {
        self.audit = audit
        self.journal = journal
        self.runID = runID
    }
    func record(_ event: RunEvent, task: TaskFields) {
        var e = event
        if e.runID == nil { e.runID = runID }
        audit.record(e, task: task)
        journal.send(e, task: task, runID: e.runID ?? runID)
    }
}

/// bgtaskd: the queue (SQLite), one supervisor per task in one event loop (the GLib main loop, which
/// also serves the D-Bus interface), driven by the same core as `bgtask run`.
public final class Daemon {
    /// Which readings' changes go into the history (for the start estimate and `bgtask report`).
    var history = ReadingHistory()
    /// The wall-clock timer of local midnight (`scheduleMidnight`), -1 until set.
    var midnightFD: Int32 = -1
    /// Where decisions also go, for journalctl and log shippers (nothing when journald does not listen).
    let journal = Journal()
    let options: DaemonOptions
    let loop = MainLoop()
    var events: EventLoop!
    let bus: BusConnection
    var object: BusObject?
    let store: QueueStore
    let audit: AuditLog
    /// The policy in force, as every supervisor refers to it (one reference each, not a copy).
    var policyRef: PolicyRef
    var policy: Policy {
        get { policyRef.policy }
        set { policyRef = PolicyRef(newValue) }
    }
    var policyWarning: String?
    /// The queue in memory: waiting, resting and running tasks, admission, slots, budgets, what follows a run.
    var queue: Scheduler<Entry>
    var limits: Schedule.Limits { queue.limits }
    var pending: [String: Entry] { queue.waiting }
    var running: [String: Entry] { queue.running }
    let stateDir: String
    let outputDir: String
    var lockFD: Int32 = -1
    var sequence = 0
    var stopping = false
    /// How far start-up has taken up the stored queue: after which row, and whether all of it (nil: not begun).
    var restoring: (after: (submitted: Double, id: String)?, done: Bool)?
    /// Callers identified so far, by unique name (`caller(of:)`).
    var callers: [String: Caller] = [:]
    /// logind's sleep and shutdown, and the delay locks held while work runs.
    lazy var sleep = SleepWatch { [unowned self] in self.say($0) }
    var apps: [String: AppManifest] = [:]
    var manifestErrors: [PolicyError] = []
    var disabledApps: Set<String> = []
    var clients: [String: AppClient] = [:]
    var views: [String: AppTaskView] = [:]
    /// Running command tasks' output files, kept bounded while written.
    lazy var outputWatch = OutputWatch(loop: loop) { [unowned self] in self.say($0) }
    /// Continued tasks as the person sees them (notifications, KDE's job view).
    lazy var presenter = Presenter(Presenter.Host(
        bus: bus, loop: loop, say: { [unowned self] in self.say($0) }, settings: { [unowned self] in self.policy.settings },
        cancel: { [unowned self] key, who in _ = self.cancel(key, by: who) },
        expire: { [unowned self] key, why in
            self.running[key]?.supervisor.expireNow(now: monotonic(), why: why)
            self.afterRound(conditionsChanged: false)
        }))
    /// Why each app task was last expired (shown when it ends).
    var expiredReasons: [String: String] = [:]
    /// The user's systemd manager, where one runs: command tasks are its transient units (nil: bgtaskd's children).
    var systemd: SystemdUnits?
    /// App processes bgtaskd started for background work, by app id.
    var launchedApps: [String: TaskProcess] = [:]
    /// The policy layers' and manifests' directories, watched (nil without inotify).
    var configWatch: ConfigWatch?
    /// The configuration directories as they were when first read (`watchConfiguration`).
    var configurationAtStart: [String] = []
    /// The newest readings from the watcher (before the daemon's own conditions are added).
    var readings: [String: PolicyValue]? { didSet { mergedConditions = nil } }
    public private(set) var exitStatus: Int32 = 0

    public init(options: DaemonOptions) throws {
        self.options = options
        do {
            stateDir = try options.places.map { p throws(PathError) in try SecureDirectory.prepare(p.stateDirectory) } ?? StatePaths.preparedStateDirectory()
            outputDir = try SecureDirectory.prepare(stateDir + "/output")
        } catch { throw DaemonError(message: "state directory \(error)", status: ExitStatus.cantCreate) }
        // One daemon per user and state directory, whatever bus it is on.
        lockFD = open(stateDir + "/bgtaskd.lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard lockFD >= 0, flock(lockFD, LOCK_EX | LOCK_NB) == 0 else {
            throw DaemonError(message: "another bgtaskd is running for \(stateDir) (its lock bgtaskd.lock is held)", status: ExitStatus.tempFail)
        }
        do {
            store = try QueueStore(path: stateDir + "/" + QueueStore.file)
            audit = try AuditLog(path: stateDir + "/" + StatePaths.auditFile)
            audit.batching = true
        } catch { throw DaemonError(message: "\(error)", status: ExitStatus.cantCreate) }
        let atStart = ConfigWatch.fingerprint(Daemon.configurationDirectories(options))
        let (p, errors) = PolicyLayers.load(Daemon.policySources(options))
        // A broken layer in a policy directory is left out with a warning, the others in force: a daemon that
        // exited would leave the user with no background work after the next login. A file named on the command
        // line is what was asked for: without it, nothing.
        let named = Set(options.policyFiles.flatMap { [$0, PolicyLayers.display($0)] })
        if errors.contains(where: { named.contains($0.location.file) }) {
            throw DaemonError(message: errors.map(\.description).joined(separator: "\n") + "\nbgtaskd: the policy does not load; fix the file above (bgtask policy check)",
                              status: ExitStatus.config)
        }
        if !errors.isEmpty {
            policyWarning = "a policy layer does not load and is left out (the other layers are in force until it is fixed): "
                + errors.map(\.description).joined(separator: "; ")
        }
        policyRef = PolicyRef(p)
        configurationAtStart = atStart
        queue = Scheduler(limits: Schedule.Limits(p.settings), now: monotonic(), day: Daemon.localDay(),
                          usage: (try? store.usage(day: Daemon.localDay())) ?? [:], standing: (try? store.standing()) ?? [:],
                          submitsPerSecond: RequestBounds.submitsPerSecond, submitBurst: RequestBounds.submitBurst)
        // Signals are blocked and read from a signalfd before any other thread exists (GDBus starts one): a
        // thread that does not block SIGCHLD or SIGTERM would take them, and a child's exit would go unseen.
        let watch = options.readings == nil ? EventLoop.watchOptions(Daemon.probe(options.probe, p.settings), policies: [p]) : nil
        do { events = try EventLoop(watch: watch, signals: options.ownsSignals) } catch {
            throw DaemonError(message: "\(error)", status: ExitStatus.failure)
        }
        do { bus = try BusConnection(address: options.busAddress) } catch {
            throw DaemonError(message: "cannot connect to the session bus: \(error.message)", status: ExitStatus.unavailable)
        }
        readings = options.readings
    }

    /// The policy's sources: the layers and the files named on the command line, or the places' own.
    static func policySources(_ options: DaemonOptions) -> [PolicySource] {
        options.places?.policySources ?? PolicyLayers.sources(extra: options.policyFiles)
    }

    /// Keeps what changed of the readings whose history is kept (`ReadingHistory`).
    func recordHistory(_ values: [String: PolicyValue]) {
        let changes = history.changes(values, now: wallClockNow())
        guard !changes.isEmpty else { return }
        do { try store.recordTransitions(changes) } catch { say("cannot keep the readings' history: \(error)") }
    }

    /// An event of the daemon's own (a cancel, a recovery) into the audit trail and the journal.
    func recordEvent(_ e: RunEvent, task: TaskFields) {
        audit.record(e, task: task)
        journal.send(e, task: task, runID: e.runID ?? task.id)
    }

    func say(_ s: String) {
        if !options.quiet { fputs(Terminal.safe("bgtaskd: \(s)") + "\n", stderr) }
    }

    var probe: ProbeOptions { Daemon.probe(options.probe, policy.settings) }

    /// The readings' options, for the watcher and for each task: the policy's thresholds, and one filesystem for
    /// every task's storage.* — the home directory, where they run unless told otherwise (not bgtaskd's own
    /// working directory, `/` under systemd).
    static func probe(_ base: ProbeOptions, _ settings: PolicySettings) -> ProbeOptions {
        var o = base.applying(settings)
        if o.storagePath == nil { o.storagePath = getenv("HOME").map { String(cString: $0) } ?? "/" }
        return o
    }

    /// Recovers what a previous daemon left, loads the queue, takes the bus name, and serves until SIGTERM.
    public func run() throws -> Int32 {
        try prepare()
        loop.run()
        return exitStatus
    }

    /// All of `run` but the loop: recovery, the apps, the bus name, the watches; the first round.
    public func prepare() throws {
        scheduleMidnight()
        loadApps()
        systemd = options.systemdUnits ? SystemdUnits.connect(session: bus) : nil
        systemd?.after = { [unowned self] seconds, f in self.loop.after(seconds, f) }
        systemd?.onManagerSilent = { [unowned self] n in
            self.say("the systemd user manager closed its connection while \(n) unit(s) ran; asking it again (a re-execution?)")
        }
        systemd?.onManagerBack = { [unowned self] n in
            self.say("the systemd user manager answers again: its \(n) unit(s) followed on")
            self.loop.after(0) { [unowned self] in self.afterRound(conditionsChanged: false) }
        }
        systemd?.onManagerGone = { [unowned self] n in
            self.say("the systemd user manager went away while \(n) unit(s) ran: their tasks are over")
            self.loop.after(0) { [unowned self] in self.afterRound(conditionsChanged: false) }
        }
        if let m = systemd { say("tasks run as transient units of the systemd user manager (\(m.how)) in background.slice") }
        recoverInterrupted()
        audit.flush()

        do {
            object = try BusObject(connection: bus, path: SchedulerBus.path, xml: SchedulerBus.xml) { [unowned self] call in
                let r = self.handle(call)
                // A long listing's memory (its GVariants, freed once a bus thread has written the reply) goes
                // back when the daemon has been quiet again for a while, not kept for good.
                if case .success(let v) = r, case .dicts(let list)? = v.first, list.count >= Daemon.largeReply {
                    self.quiet.rearm(now: monotonic())
                }
                // The reply goes first; what the call changed is acted on and written 2 ms after it, so that the
                // audit trail's write does not take a core from the bus threads carrying the reply (2 cores here).
                self.loop.after(0.002) { [unowned self] in self.afterRound(conditionsChanged: false) }
                return r
            }
            // So does a call refused for its size: GDBus had read all of it before it was seen.
            object!.onOversized = { [unowned self] in
                self.quiet.rearm(now: monotonic())
                self.loop.after(0.002) { [unowned self] in self.afterRound(conditionsChanged: false) }
            }
            guard try object!.ownName(SchedulerBus.name) else {
                throw DaemonError(message: "\(SchedulerBus.name) is already owned on this bus: another bgtaskd runs", status: ExitStatus.tempFail)
            }
        } catch let e as BusError {
            throw DaemonError(message: "cannot serve on the bus: \(e.message)", status: ExitStatus.unavailable)
        }
        // Work starts only once the daemon answers on the bus: a client never sees a task it cannot ask about.
        // The queue is taken up in slices between calls, so a daemon with 10,000 waiting tasks answers at once.
        say("serving \(SchedulerBus.name) (pid \(getpid()))")
        if let w = policyWarning { say(w) }
        loop.after(0) { [unowned self] in
            try? self.audit.prune(now: wallClockNow())
            try? self.store.pruneTransitions(before: wallClockNow() - ReadingHistory.days * 86_400)
            self.restoreSlice()
        }
        if events.signalFD >= 0 { loop.watch(fd: events.signalFD) { [unowned self] in self.signals() } }
        loop.watch(fd: events.wakeFD) { [unowned self] in
            if let values = self.events.takeConditions() {
                self.readings = values
                self.recordHistory(values)
                self.deliver(now: monotonic())
                let c = self.appConditions
                if c != self.announcedConditions {
                    self.announcedConditions = c
                    self.bus.emit(.conditionsChanged, [.dict(c.variant)])
                }
            }
            self.afterRound(conditionsChanged: true)
        }
        watchSleep()
        if options.places == nil { watchConfiguration() }
        watchAppConnections()
        afterRound(conditionsChanged: false)
    }

    /// Waiting entries among `ids`, in submission order (the order in which waiting work may take a free slot).
    func inOrder<S: Sequence>(_ ids: S) -> [Entry] where S.Element == String {
        ids.compactMap { pending[$0] }.sorted { ($0.row.submitted, $0.row.id) < ($1.row.submitted, $1.row.id) }
    }
    /// Every pending entry, resting or not, in submission order.
    var allPending: [Entry] { queue.waitingInOrder().ids.compactMap { pending[$0] } }
    /// Every supervisor, in no particular order: for what is done to each alike. Resting tasks have none.
    var supervisors: [Supervisor] { running.values.map(\.supervisor) + queue.awake.compactMap { pending[$0]?.awake } }

    // MARK: The queue

    /// Takes up stored requests 500 at a time, each slice after what the bus has queued. A call that reads or
    /// changes the queue takes up the rest first (`restoreAll`), so no caller sees a partial queue.
    func restoreSlice(schedulingNext: Bool = true) {
        if restoring == nil {
            let n = (try? store.count(state: "pending")) ?? 0
            if n > 0 { say("\(n) pending in the queue") }
            restoring = (nil, n == 0)
        }
        guard let r = restoring, !r.done else { return }
        // A page of the stored queue read through its index: a slice costs the same whatever the queue holds, so the
        // first call is answered after one slice at most.
        let rows = (try? store.page(state: "pending", after: r.after, limit: 500)) ?? []
        // One evaluator for the slice: tasks alike then share their decision's storage (see `Policy.Evaluator`).
        let shared = evaluator()
        for row in rows where pending[row.id] == nil { add(row, restored: true, evaluator: shared) }
        restoring = (rows.last.map { ($0.submitted, $0.id) } ?? r.after, rows.count < 500)
        if restoring!.done {
            if schedulingNext { afterRound(conditionsChanged: false) }
        } else if schedulingNext {
            loop.after(0) { [unowned self] in self.restoreSlice() }
        }
    }

    /// The whole stored queue, taken up now.
    func restoreAll() {
        while restoring?.done != true { restoreSlice(schedulingNext: false) }
    }

    /// Starts supervising a pending request (its machine waits until the policy and the limits allow it).
    @discardableResult
    func add(_ row: QueuedTask, restored: Bool = false, evaluator: Policy.Evaluator? = nil) -> Entry {
        let e = Entry(row: row, supervisor: supervisor(for: row, restored: restored))
        queue.add(Scheduler.Job(fields: row.fields, app: row.isAppTask ? row.app : nil, submitted: row.submitted), e)
        if let c = conditions, let shared = evaluator ?? self.evaluator() {
            e.supervisor.conditionsChanged(c, now: monotonic(), shared: shared)
            rest(e)
        }
        return e
    }

    /// A resting task's supervisor again, with the holds and decision it rested on (nothing is said or recorded
    /// anew: its story goes on).
    @discardableResult
    func wake(_ e: Entry) -> Supervisor {
        if let s = e.awake { return s }
        let s = supervisor(for: e.row, restored: true)
        e.wake(s)
        queue.unrest(e.row.id)
        return s
    }

    /// The supervisor of a stored request.
    func supervisor(for row: QueuedTask, restored: Bool) -> Supervisor {
        let wall = wallClockNow(), mono = monotonic()
        sequence += 1
        var o = RunOptions(argv: row.command, task: row.fields, probe: probe)
        o.budget = row.budget
        o.cpuMonitor = !row.requiresExternalPower
        // One run id from submission to the end, across daemon restarts: `why` tells the whole wait.
        o.runID = row.runID ?? "\(row.id)-d\(getpid())-\(Int(wall))-\(sequence)"
        o.earliest = row.earliest.map { mono + ($0 - wall) }
        o.workingDirectory = row.directory
        o.outputPath = row.isAppTask ? nil : outputPath(row.id)
        o.pauseExpires = row.isAppTask
        o.environment = ["BGTASK_TASK_ID=\(row.id)", "BGTASK_LAUNCHED_FOR_BACKGROUND=1"]
        if !row.isAppTask { o.runToken = RunProcesses.newToken(sequence: sequence) }
        o.mechanism = CapMechanism.preference(Environment.get("BGTASK_CAP_MECHANISM"))
        o.quiet = options.quiet
        let s = Supervisor(options: o, policy: policyRef, observer: TaskObserver(audit: audit, journal: journal, runID: o.runID), state: nil,
                           enqueuedAt: mono - max(0, wall - row.submitted))
        s.speaker = "bgtaskd"
        s.quietFirstWait = restored
        let id = row.id
        // One run of an id at a time: a request submitted while it runs waits for that run's end (even a finished
        // one, until the round has taken it out of `running`), never starts beside it.
        s.slot = { [unowned self] _ in self.queue.slot(for: id) }
        s.onEvent = { [unowned self] s, kind in self.event(s, kind) }
        if !row.isAppTask { s.beforeSpawn = { [unowned self] s in self.recordIntent(s) } }
        if row.isAppTask { s.app = AppTask(broker: self, app: row.app, identifier: identifierOf(row.id, app: row.app)) }
        else if let l = options.launcher { s.launcher = l }
        else if systemd != nil { s.launcher = self }
        return s
    }

    static func newRunID(_ id: String) -> String {
        RunID.make(task: id, pid: getpid(), now: wallClockNow(), random: RunID.randomBits())
    }

    /// The readings and the daemon's own conditions (`system.preparing_sleep`), as every task sees them.
    /// Made once per change and kept: every supervisor then holds the same dictionary storage (copy on write),
    /// where a fresh merge per task cost each of 10,000 pending tasks its own copy.
    var conditions: [String: PolicyValue]? {
        if let c = mergedConditions { return c }
        guard var c = readings ?? events?.currentConditions else { return nil }
        c["system.preparing_sleep"] = .bool(sleep.preparing)
        // Before the first readings the watcher's own may still change under us: not kept.
        if readings != nil { mergedConditions = c }
        return c
    }
    /// What ProcessInfo's thermalState and isLowPowerModeEnabled read in an app (GetConditions, ConditionsChanged).
    var appConditions: Conditions {
        var c = Conditions()
        if case .string(let s)? = readings?["thermal.state"] { c.thermalState = s }
        if case .bool(let b)? = readings?["system.power_saver"] { c.lowPowerMode = b }
        return c
    }
    /// How many apps were connected at the last round (a change re-decides how often zones are read).
    var clientsAtLastRound = 0
    /// The last ConditionsChanged sent.
    var announcedConditions = Conditions()
    /// Dropped whenever `readings` or `sleeping` change.
    var mergedConditions: [String: PolicyValue]?

    /// One evaluation of the conditions as they are now, for many tasks (nil before the first readings).
    func evaluator() -> Policy.Evaluator? {
        conditions.map { Policy.Evaluator(policy: policy, conditions: $0, time: localTime()) }
    }

    /// Gives every task the conditions as they are now.
    func deliver(now: Double) {
        guard let c = conditions else { queue.account(now: now, day: localDay()); return }
        queue.setOnBattery(c["power.external"] == .bool(false), now: now, day: localDay())
        let shared = Policy.Evaluator(policy: policy, conditions: c, time: localTime())
        // Resting classes whose fast verdict has not changed stay at rest; the rest is decided in full.
        _ = queue.wake { shared.verdict($0) }
        for e in Array(running.values) + inOrder(queue.awake) {
            wake(e).conditionsChanged(c, now: now, shared: shared)
            if e.row.state != "running" { rest(e) }
        }
    }

    /// Whether a temperature could change the verdict of some resting task (they have no supervisor to ask):
    /// asked once per class of resting tasks, as `EventLoop` asks supervisors once per kind.
    func restingDependOnThermal() -> Bool {
        guard let c = conditions else { return false }
        let time = localTime()
        return queue.anyRestingClass { TaskMachine.dependsOnThermal($0, waiting: true, policy, conditions: c, time: time) }
    }

    func outputPath(_ id: String) -> String { StatePaths.outputFile(stateDirectory: stateDir, id: id) }

    /// A supervisor recorded an event.
    func event(_ s: Supervisor, _ kind: RunEvent.Kind) {
        let id = s.id
        switch kind {
        case .started:
            guard let e = pending[id], e.awake === s else { return }
            queue.start(id)
            e.row.state = "running"
            e.row.runID = s.runOptions.runID
            e.row.pgid = s.pid
            e.row.childStart = s.pid.flatMap { Recovery.startTime(of: $0) }.map { Int64($0) }
            e.row.cgroup = s.taskProcess?.containment
            e.row.started = wallClockNow()
            do { try store.markRunning(e.row) } catch { say("\(id): cannot record its start in the queue: \(error)") }
            if !e.row.isAppTask, s.taskProcess?.unitName == nil { outputWatch.watch(outputPath(id)) }
            bus.emit(.taskChanged, [.string(id), .string("running")])
        case .throttled, .unthrottled, .paused, .resumed, .expired, .killed:
            bus.emit(.taskChanged, [.string(id), .string(stateName(s))])
        default:
            break
        }
    }

    /// Before a command is spawned, the queue says it runs (its run token, no pid yet): a crash at any instant
    /// after the spawn finds it at the next start, by its token if its pid was never written. If the queue
    /// cannot be written, nothing is spawned (the request waits to try again), so no restart can run it twice.
    func recordIntent(_ s: Supervisor) -> String? {
        guard let e = pending[s.id], e.awake === s else { return nil }
        var r = e.row
        r.state = "running"
        r.runID = s.runOptions.runID
        r.token = s.runOptions.runToken
        r.pgid = nil; r.childStart = nil; r.cgroup = nil
        r.started = wallClockNow()
        do { try store.markRunning(r) } catch { return "its start cannot be written to the queue (\(error))" }
        e.row = r
        return nil
    }

    func stateName(_ s: Supervisor) -> String {
        switch s.machine.phase {
        case .waiting: return "pending"
        case .running(let cap?): return "throttled \(cap)%"
        case .running(nil): return "running"
        case .paused: return "paused"
        case .expiring: return "expiring"
        case .finished: return "finished"
        case .gaveUp: return "gave up"
        }
    }

    /// What a call does once its reply has gone (messages and signals the caller does not wait for).
    var afterReply: [() -> Void] = []

    /// Set when a task began to rest since the last round: whether zones must be read is asked again then (a
    /// resting task has no supervisor for the loop to ask).
    var newlyResting = false

    /// Lets a waiting task's supervisor go if it may rest (see `Entry.sleepIfIdle`).
    func rest(_ e: Entry) {
        guard let v = e.sleepIfIdle() else { return }
        queue.rest(e.row.id, verdict: v)
        newlyResting = true
    }

    /// Once nothing has run for a while, what start-up or the last run used is given back: SQLite's caches, the
    /// heap, code pages (see `Memory`).
    var quiet = Memory.QuietSpell()
    /// A reply of this many tasks or more is given back (`quiet.rearm`) once the daemon has been quiet again.
    static let largeReply = 1_000
    func release() {
        store.releaseMemory()
        audit.releaseMemory()
        Memory.releaseFreedHeap()
        Memory.releaseStartupPages()
    }

    /// After every round of events: ends what is done, lets waiting work take freed slots, re-arms the timer.
    func afterRound(conditionsChanged: Bool) {
        if !afterReply.isEmpty {
            let due = afterReply
            afterReply = []
            for f in due { f() }
        }
        let now = monotonic()
        events.timersDue(supervisors, now: now)
        queue.account(now: now, day: localDay())
        var decideAgain: Set<String> = []
        for (id, e) in running where e.supervisor.isDone {
            decideAgain.formUnion(queue.finish(id).decideAgain)
            finished(e)
        }
        for id in queue.awake where pending[id]?.awake?.isDone == true {   // could not be spawned, or gave up
            let e = queue.removeWaiting(id)!
            finished(e)
        }
        // A freed slot: the tasks a slot or a budget held back are decided again, in submission order.
        for e in inOrder(decideAgain) where e.awake?.machine.phase == .waiting {
            if case .noSlot? = e.supervisor.machine.startBlock {
                e.supervisor.reevaluate(now: now)
                rest(e)
            }
        }
        let sups = supervisors
        audit.flush()             // before the delay lock goes: what was done is on disk when the machine sleeps
        updateInhibitor()
        // Resting tasks are not among the supervisors: when one begins to rest, the zones' need is asked again.
        // An app that is connected reads ProcessInfo.thermalState: the zones are read for it too (2–30 s, by distance).
        events.afterEvents(sups, conditionsChanged: conditionsChanged || newlyResting || clients.count != clientsAtLastRound) { [unowned self] in
            !self.clients.isEmpty || self.restingDependOnThermal()
        }
        clientsAtLastRound = clients.count
        newlyResting = false
        let releasing = quiet.observe(quiet: running.isEmpty, now: now)
        let next = [events.nextDeadline(sups), quiet.deadline, sleep.deadline].compactMap { $0 }.min()
        loop.setTimer(in: next.map { max(0, $0 - monotonic()) }) { [unowned self] in self.afterRound(conditionsChanged: false) }
        // Last, so that little code runs between giving pages back and the loop's sleep: every page touched after
        // it is faulted in again with its neighbours (the kernel maps 64 KB around a fault).
        if releasing { release() }
    }

    func localDay() -> Int { Daemon.localDay() }

    static func localDay() -> Int {
        var t = time_t(wallClockNow())
        var parts = tm()
        localtime_r(&t, &parts)
        return Int((wallClockNow() + Double(parts.tm_gmtoff)) / 86_400)
    }

    /// At local midnight the budgets start again: work they held back is looked at anew.
    /// Local midnight, on the wall clock: a CLOCK_REALTIME timerfd set to the instant itself (it fires on time after
    /// a suspend, and a clock or time-zone change cancels it so it is set again) — not a monotonic delay, which
    /// stops while the machine sleeps, and not an hourly look, which would wake an idle daemon for nothing.
    func scheduleMidnight() {
        if midnightFD < 0 {
            midnightFD = timerfd_create(CLOCK_REALTIME, Int32(TFD_NONBLOCK | TFD_CLOEXEC))
            guard midnightFD >= 0 else { say("cannot set the midnight timer (timerfd: \(String(cString: strerror(errno))))"); return }
            loop.watch(fd: midnightFD) { [unowned self] in
                var expirations: UInt64 = 0
                let n = read(self.midnightFD, &expirations, 8)
                // ECANCELED: the wall clock was set; the next midnight is another instant now.
                if n == 8 { self.midnight() }
                self.armMidnight()
            }
        }
        armMidnight()
    }

    func armMidnight() {
        var spec = itimerspec()
        spec.it_value.tv_sec = time_t(RunEnd.nextLocalMidnight(after: wallClockNow()))
        if timerfd_settime(midnightFD, Int32(TFD_TIMER_ABSTIME) | Int32(TFD_TIMER_CANCEL_ON_SET), &spec, nil) != 0 {
            say("cannot set the midnight timer (timerfd_settime: \(String(cString: strerror(errno))))")
        }
    }

    func midnight() {
        try? store.pruneTransitions(before: wallClockNow() - ReadingHistory.days * 86_400)
        // Resting tasks wait for a condition only (no budget, no time rule): nothing to look at for them.
        for e in inOrder(queue.midnight(now: monotonic(), day: localDay())) where e.awake?.machine.phase == .waiting {
            e.supervisor.reevaluate(now: monotonic())
        }
        afterRound(conditionsChanged: false)
    }

    /// A task's run is over: retried, rescheduled (`--every`) or removed from the queue.
    func finished(_ e: Entry) {
        if e.row.isAppTask { try? store.saveUsage(day: queue.batteryUse.day, seconds: queue.batteryUse.seconds) }
        let s = e.supervisor
        let status = s.finish()
        if let why = s.startRefused {
            // Nothing ran: the request is not spent. It waits out the retry backoff and tries again.
            var r = e.row
            guard case .tryAgain(let notBefore) = queue.next(.init(kind: r.kind, submitted: r.submitted), .notStarted(why: why), now: wallClockNow()) else { return }
            r.earliest = notBefore
            say("\(r.id): not started (\(why)); it tries again not before \(untilText(r.earliest!))")
            if pending[r.id] == nil { add(r) }
            return
        }
        // Units included: a manager that crashed leaves its units' processes running.
        if let token = s.runOptions.runToken { endLeftovers(of: e.row.id, token: token) }
        if e.row.isAppTask {
            if e.row.kind == .continued {
                presenter.finish(key: e.row.id, success: status == 0, detail: expiredReasons.removeValue(forKey: e.row.id) ?? "not completed")
            }
            views[e.row.id] = nil
            endLaunchedAppIfIdle(e.row.app, except: e.row.id)
        }
        if !e.row.isAppTask { outputWatch.unwatch(outputPath(e.row.id)) }
        let wasRunning = e.row.state == "running"
        let request = RunEnd.Request(kind: e.row.kind, retry: e.row.retry, failures: e.row.failures, calendar: e.row.calendar,
                                     every: e.row.every, anchor: e.row.anchor, submitted: e.row.submitted, started: e.row.started)
        var next: QueuedTask?
        var r = e.row
        switch queue.next(request, .ended(status: status, expiredByRule: s.machine.expiredByRule, ownStatus: s.machine.ownStatus), now: wallClockNow()) {
        case .retry(let attempt, let notBefore):
            r.failures = attempt
            r.earliest = notBefore
            next = r
            say("\(e.row.id): failed (status \(status)); retry \(attempt) of \(r.retry) not before \(untilText(notBefore))")
        case .waitAgain(let rule):
            next = r
            say("\(e.row.id): ended by rule \(rule); queued again, to run when its conditions hold")
        case .calendar(let at), .period(let at):
            r.failures = 0
            r.earliest = at
            next = r
        case .calendarEnded(let reason):
            say("\(e.row.id): \(reason); not queued again")
        case .done, .tryAgain:
            break
        }
        do {
            if wasRunning { try store.remove(e.row.id, state: "running") } else { try store.remove(e.row.id, state: "pending") }
            // A request submitted while it ran takes precedence over its own rescheduling.
            if let n = next, pending[n.id] == nil {
                var r = n.requeued(runID: Daemon.newRunID(n.id))
                r.submitted = wallClockNow()
                try store.put(r)
                add(r)
            }
        } catch { say("\(e.row.id): cannot update the queue: \(error)") }
        bus.emit(.taskChanged, [.string(e.row.id), .string(next != nil && pending[e.row.id] != nil ? "pending" : "finished")])
    }

    /// A task is all its processes: what its command started and left running when it exited (a daemon that
    /// left the process group) is ended with it, as systemd ends a service's control group.
    func endLeftovers(of id: String, token: String) {
        let left = RunProcesses.find(token)
        guard !left.isEmpty else { return }
        say("\(id): ended \(left.count) process(es) its command left running (pid \(left.map(String.init).joined(separator: ", ")))")
        end(grace: min(5, policy.settings.number("run.expire_grace"))) { RunProcesses.find(token) }
    }

    /// The one way bgtaskd ends processes it does not wait for: SIGCONT and SIGTERM now, SIGKILL after `grace` to
    /// whatever `targets` still finds then (a negative number is a process group) — on the loop, never blocking it.
    func end(grace: Double, _ targets: @escaping () -> [pid_t]) {
        for p in targets() { kill(p, SIGCONT); kill(p, SIGTERM) }
        loop.after(grace) { for p in targets() { kill(p, SIGKILL) } }
    }

    /// What a daemon that died left running: ended (never left frozen, never run twice at once), recorded,
    /// and re-queued if it is processing work; refresh work is dropped, as on iOS.
    func recoverInterrupted() {
        guard let rows = try? store.all(state: "running"), !rows.isEmpty else { return }
        // A transient unit (its row says `unit NAME`): thawed through systemd first; if its main process was
        // never known, systemd stops the whole unit.
        let units = rows.map { $0.cgroup?.unitName }
        for (r, unit) in zip(rows, units) {
            let lost = "bgtaskd was gone while it ran (" + (r.pgid.map { "pid \($0)" } ?? "its start was recorded, its pid not yet") + ")"
            recordEvent(RunEvent(kind: .lost, monotonic: monotonic(), detail: lost, decision: nil, conditions: [:], exitStatus: nil,
                                  runID: r.runID ?? "\(r.id)-recovered"), task: r.fields)
            if let u = unit, let m = systemd { if r.pgid == nil { m.stopLeftover(u) } else { m.thawLeftover(u) } }
        }
        // All at once, found by process group and by run token: one grace for every task, not one each.
        let ended = RunProcesses.endAll(rows.map { RunProcesses.Target(pgid: $0.pgid ?? 0, childStart: UInt64(max(0, $0.childStart ?? 0)),
                                                                       containment: $0.cgroup ?? .processGroup, token: $0.token) },
                                        grace: policy.settings.number("run.expire_grace"))
        for (i, r) in rows.enumerated() {
            var done = ended[i].description
            if let u = units[i] {
                if r.pgid == nil { done = systemd == nil ? "its unit \(u) could not be reached (no systemd manager now)" : "its unit \(u) was stopped" }
                else { systemd?.forgetLeftover(u) }
            }
            let requeue = RunEnd.requeuedAfterCrash(kind: r.kind)
            let pendingExists = (try? store.get(r.id, state: "pending")) != nil
            let what = "interrupted: \(done); " + (requeue ? (pendingExists ? "a newer request is pending" : "queued again") : "refresh work is dropped")
            recordEvent(RunEvent(kind: .recovered, monotonic: monotonic(), detail: what, decision: nil, conditions: [:], exitStatus: nil,
                                  runID: r.runID ?? "\(r.id)-recovered"), task: r.fields)
            say("\(r.id): \(what)")
            do {
                try store.remove(r.id, state: "running")
                if requeue, !pendingExists {
                    try store.put(r.requeued(runID: r.runID ?? Daemon.newRunID(r.id)))
                }
            } catch { say("\(r.id): cannot update the queue: \(error)") }
        }
    }

    // MARK: Signals

    func signals() {
        for sig in events.readSignals() {
            switch sig {
            case SIGCHLD:
                events.reap(running.values.map(\.supervisor))
                reapApps()
            case SIGHUP:
                loadApps()
                reload()
            default:
                shutdown(signal: sig)
            }
        }
        afterRound(conditionsChanged: false)
    }

    /// SIGHUP, a file changed, or `bgtask policy reload`: the policy is read again; a broken file keeps the last
    /// good policy in force, and says so. Returns whether it loaded, and what changed (or why not).
    @discardableResult
    func reload() -> (ok: Bool, said: String) {
        let sources = Daemon.policySources(options)
        let (p, errors) = PolicyLayers.load(sources)
        if !errors.isEmpty {
            policyWarning = "the policy does not load (the last good policy stays in force): " + errors.map(\.description).joined(separator: "; ")
            say(policyWarning!)
            return (false, policyWarning!)
        }
        policyWarning = nil
        let changes = p.changes(from: policy)
        policy = p
        queue.limits = Schedule.Limits(p.settings)
        // The readings follow the new thresholds too ([battery], [thermal], [idle] after, [storage]).
        events.setProbeOptions(probe)
        // Waiting work is supervised again under the new policy; running work keeps the policy it started under.
        let shared = evaluator()
        for e in allPending { add(e.row, restored: true, evaluator: shared) }
        // Which files are in force now: for the journal reader, and for a test to know it sees its own file's reload.
        let files = "policy reloaded: " + sources.map(\.name).joined(separator: ", ")
        say(files)
        return (true, files + "\n" + (changes.isEmpty ? "nothing changed" : changes.joined(separator: "\n")))
    }

    /// SIGTERM (logout, `systemctl --user stop`): running work is ended and re-queued, nothing left running
    /// unsupervised — all at once, within one grace of at most 5 s (under the unit's TimeoutStopSec=30).
    func shutdown(signal sig: Int32) {
        guard !stopping else { return }
        stopping = true
        say("stopping (signal \(sig)); \(running.count) running task(s) end and wait in the queue")
        let entries = running.values.sorted { $0.row.id < $1.row.id }
        for e in entries {
            if e.supervisor.pid == nil, let u = e.supervisor.taskProcess?.unitName { systemd?.stopLeftover(u) }
            e.supervisor.taskProcess?.thawForSignal()
        }
        let ended = RunProcesses.endAll(entries.map { e in
            RunProcesses.Target(pgid: e.supervisor.pid ?? 0, childStart: UInt64(max(0, e.row.childStart ?? 0)),
                                containment: e.supervisor.taskProcess?.containment ?? .processGroup, token: e.supervisor.runOptions.runToken)
        }, grace: entries.map(\.supervisor.machine.limits.expireGrace).max() ?? 0)
        for (e, done) in zip(entries, ended) {
            if let pid = e.supervisor.pid {
                var status: Int32 = 0
                _ = waitpid(pid, &status, WNOHANG)
            }
            recordEvent(RunEvent(kind: .recovered, monotonic: monotonic(), detail: "interrupted: bgtaskd stopped; \(done)",
                                  decision: nil, conditions: [:], exitStatus: nil, runID: e.row.runID), task: e.row.fields)
            do {
                try store.remove(e.row.id, state: "running")
                if e.row.kind != .refresh, pending[e.row.id] == nil {
                    try store.put(e.row.requeued(runID: e.row.runID ?? Daemon.newRunID(e.row.id)))
                }
            } catch { say("\(e.row.id): cannot update the queue: \(error)") }
        }
        for e in entries { _ = queue.finish(e.row.id) }
        audit.flush()
        updateInhibitor()
        bus.flush()
        loop.quit()
    }
}
