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

/// What the queue asks of the daemon around it: the adapters it does not hold. The daemon answers (`DaemonHost.swift`).
protocol QueueHost: AnyObject {
    /// A round of the loop now: what a call or an app's leaving changed is acted on (slots, timers, delay locks).
    func actOnChanges()
    /// The policy read again (`bgtask policy reload`): whether it loaded, and what changed or why not.
    func reloadPolicy() -> (ok: Bool, said: String)
    /// Where a command task is started: a transient unit of the systemd user manager (nil: bgtaskd's child).
    var launcher: TaskLauncher? { get }
    /// An app task's handle: a launch of the app through the broker.
    func appTask(for row: QueuedTask) -> AppTask
    /// An app task's run ended with `status`: the broker and the presenter are told.
    func appTaskEnded(_ e: Entry, status: Int32)
    /// What the app told of a running task of its own (title, progress), for `ListRunning`.
    func appTaskView(_ key: String) -> AppTaskView?
    /// Continued tasks as the person sees them.
    var presenter: Presenter { get }
    /// The systemd user manager, for the units a dead daemon or a stop leaves (nil: none here).
    var units: SystemdUnits? { get }
    /// What a call does once its reply has gone (a message, a signal).
    func afterReply(_ f: @escaping () -> Void)
    /// A bus name left: the bus service forgets the caller.
    func callerLeft(_ name: String)
}

/// bgtaskd's queue: the one `Scheduler` (rest/wake, slots, retries, periods, budgets, admission), its rows in SQLite,
/// the supervisor of each awake task, and the rounds that act on them. It serves the bus service's commands
/// (`Methods.swift`, `Listings.swift`) and the app broker's (`AppCommands.swift`); the daemon composes it with
/// the adapters (`QueueHost`).
final class QueueDriver {
    /// Its state directory, lock, queue, audit trail and journal.
    let files: StateFiles
    var store: QueueStore { files.store }
    var audit: AuditLog { files.audit }
    var journal: Journal { files.journal }
    var stateDir: String { files.directory }
    let options: DaemonOptions
    let loop: MainLoop
    /// The readings' watcher, the timers and signals of the supervisors.
    let events: EventLoop
    /// The policy in force, what is wrong with its layers, the watch on their directories.
    let configuration: PolicyInForce
    var policyRef: PolicyRef { configuration.ref }
    var policy: Policy { configuration.ref.policy }
    var policyWarning: String? { configuration.warning?.text }
    /// The queue in memory: awake, resting and running tasks, admission, slots, budgets, what follows a run.
    var queue: Scheduler<Entry, Supervisor.Rest>
    var limits: Schedule.Limits { queue.limits }
    var running: [String: Entry] { queue.running }
    /// Start-up's progress, the stop, the quiet spell: what the loop keeps between rounds.
    var rounds = RoundState()
    /// The newest readings, their merge with the daemon's own conditions, the history kept of them.
    let current = CurrentReadings()
    var readings: [String: PolicyValue]? {
        get { current.latest }
        set { current.latest = newValue }
    }
    /// logind says the machine is about to sleep (`system.preparing_sleep`).
    var preparingSleep = false { didSet { current.merged = nil } }
    /// The scheduler's signals to all, sent once the round that made them is done.
    let announce: Announcements
    /// Running command tasks' output files, kept bounded while written.
    lazy var outputWatch = OutputWatch(loop: loop) { [unowned self] in self.say($0) }
    /// The daemon around it (it outlives the queue's every callback).
    unowned var host: QueueHost!

    init(files: StateFiles, options: DaemonOptions, loop: MainLoop, events: EventLoop, configuration: PolicyInForce, bus: BusConnection) {
        self.files = files
        self.options = options
        self.loop = loop
        self.events = events
        self.configuration = configuration
        let p = configuration.ref.policy
        queue = Scheduler(limits: Schedule.Limits(p.settings), now: monotonic(), day: QueueDriver.localDay(),
                          usage: (try? files.store.usage(day: QueueDriver.localDay())) ?? [:], standing: (try? files.store.standing()) ?? [:],
                          submitsPerSecond: RequestBounds.submitsPerSecond, submitBurst: RequestBounds.submitBurst)
        announce = Announcements(bus: bus, loop: loop)
        readings = options.readings
    }

    func say(_ s: String) {
        if !options.quiet { fputs(Terminal.safe("bgtaskd: \(s)") + "\n", stderr) }
    }

    /// An event of the daemon's own (a cancel, a recovery) into the audit trail and the journal.
    func recordEvent(_ e: RunEvent, task: TaskFields) {
        audit.record(e, task: task)
        journal.send(e, task: task, runID: e.runID ?? task.id)
    }

    var probe: ProbeOptions { QueueDriver.probe(options.probe, policy.settings) }

    /// The readings' options, for the watcher and for each task: the policy's thresholds, and the filesystem the
    /// watcher reads storage.* on — the home directory, where tasks run unless told otherwise (not bgtaskd's own
    /// working directory, `/` under systemd). A task whose working directory is elsewhere has its own
    /// (`ownFilesystem`, `conditions(onFilesystem:directory:)`).
    static func probe(_ base: ProbeOptions, _ settings: PolicySettings) -> ProbeOptions {
        var o = base.applying(settings)
        if o.storagePath == nil { o.storagePath = getenv("HOME").map { String(cString: $0) } ?? "/" }
        return o
    }

    func outputPath(_ id: String) -> String { StatePaths.outputFile(stateDirectory: stateDir, id: id) }

    // MARK: Readings

    /// New readings from the watcher: every task is given them, then their history is kept.
    func readingsChanged(_ values: [String: PolicyValue]) {
        readings = values
        deliver(now: monotonic())
        // After the tasks it starts: a start waits for no write of the history.
        recordHistory(values)
        let c = appConditions
        if c != current.announced {
            current.announced = c
            announce.emit(.conditionsChanged, [.dict(c.variant)])
        }
    }

    /// Keeps what changed of the readings whose history is kept (`ReadingHistory`).
    func recordHistory(_ values: [String: PolicyValue]) {
        let changes = current.history.changes(values, now: wallClockNow(), unread: current.thermalRead ? [] : ReadingHistory.thermalNames)
        guard !changes.isEmpty else { return }
        rounds.historyDue += changes
        if !rounds.spawnedThisRound { writeHistory() }
    }

    /// The zones began or stopped being read: the history says so (a stretch no zone was read is then "not
    /// read" in `bgtask report`, not the last temperature stretched over it).
    func thermalReadChanged(_ read: Bool) {
        guard read != current.thermalRead else { return }
        current.thermalRead = read
        if let values = readings { recordHistory(values) }
    }

    /// bgtaskd stops reading anything: the history says so, written now.
    func historyStopped() {
        rounds.historyDue += current.history.stopped(now: wallClockNow())
        writeHistory()
    }

    func writeHistory() {
        guard !rounds.historyDue.isEmpty else { return }
        let changes = rounds.historyDue
        rounds.historyDue = []
        do { try store.recordTransitions(changes) } catch { say("cannot keep the readings' history: \(error)") }
    }

    /// The readings and the daemon's own conditions (`system.preparing_sleep`), as every task sees them.
    /// Made once per change and kept: every supervisor then holds the same dictionary storage (copy on write),
    /// where a fresh merge per task cost each of 10,000 pending tasks its own copy.
    var conditions: [String: PolicyValue]? {
        if let c = current.merged { return c }
        guard var c = readings ?? events.currentConditions else { return nil }
        c["system.preparing_sleep"] = .bool(preparingSleep)
        // Before the first readings the watcher's own may still change under us: not kept.
        if readings != nil { current.merged = c }
        return c
    }
    /// The filesystem of `row`'s working directory, when it is not the one the watcher's storage.* describe: such a
    /// task is judged on its own directory's storage, as `bgtask run` there would judge it. nil: the shared readings.
    /// Only while some rule reads storage.*: otherwise where a task runs changes no verdict, and it may rest as any.
    func ownFilesystem(_ row: QueuedTask) -> UInt64? {
        guard let dir = row.directory, policy.rules.contains(where: { $0.names.contains { $0.hasPrefix("storage.") } }) else { return nil }
        guard let fs = current.directories[dir] ?? StorageReading.device(of: dir) else { return nil }
        current.directories[dir] = fs
        if current.watchedFilesystem == nil { current.watchedFilesystem = probe.storagePath.flatMap(StorageReading.device(of:)) }
        return fs == current.watchedFilesystem ? nil : fs
    }

    /// The conditions with storage.* read on filesystem `fs` (through `directory`, a directory on it): one statvfs
    /// per filesystem and change of readings, however many tasks are on it. nil `fs`: the shared conditions.
    func conditions(onFilesystem fs: UInt64?, directory: String?) -> [String: PolicyValue]? {
        guard var c = conditions else { return nil }
        guard let fs, let directory else { return c }
        if let known = current.byFilesystem[fs] { return known }
        for (name, v) in StorageReading.read(path: directory, lowBytes: probe.storageLowBytes).conditions { c[name] = ConditionConversion.value(v) }
        current.byFilesystem[fs] = c
        return c
    }

    /// Gives an entry the conditions as they are now: the shared ones (`shared` their one evaluator), or its own
    /// filesystem's, decided in full.
    func give(_ e: Entry, _ c: [String: PolicyValue], now: Double, shared: Policy.Evaluator) {
        if e.filesystem != nil, let own = conditions(onFilesystem: e.filesystem, directory: e.row.directory) {
            e.supervisor.conditionsChanged(own, now: now)
        } else {
            e.supervisor.conditionsChanged(c, now: now, shared: shared)
        }
    }

    /// What ProcessInfo's thermalState and isLowPowerModeEnabled read in an app (GetConditions, ConditionsChanged).
    var appConditions: Conditions {
        var c = Conditions()
        if case .string(let s)? = readings?["thermal.state"] { c.thermalState = s }
        if case .bool(let b)? = readings?["system.power_saver"] { c.lowPowerMode = b }
        return c
    }

    /// One evaluation of the conditions as they are now, for many tasks (nil before the first readings).
    func evaluator() -> Policy.Evaluator? {
        conditions.map { Policy.Evaluator(policy: policy, conditions: $0, time: localTime()) }
    }

    /// Whether a temperature could change the verdict of some resting task (they have no supervisor to ask):
    /// asked once per class of resting tasks, as `EventLoop` asks supervisors once per kind.
    func restingDependOnThermal() -> Bool {
        guard let c = conditions else { return false }
        let time = localTime()
        return queue.anyRestingClass { TaskMachine.dependsOnThermal($0, waiting: true, policy, conditions: c, time: time) }
    }

    /// Awake waiting entries among `ids`, in submission order (the order in which waiting work may take a free slot).
    func inOrder<S: Sequence>(_ ids: S) -> [Entry] where S.Element == String {
        ids.compactMap { queue.awake[$0] }.sorted { ($0.row.submitted, $0.id) < ($1.row.submitted, $1.id) }
    }
    /// Every supervisor, in no particular order: for what is done to each alike. Resting tasks have none.
    var supervisors: [Supervisor] { running.values.map(\.supervisor) + queue.awake.values.map(\.supervisor) }

    // MARK: Rounds

    /// The queue's part of a round: ends what is done, lets waiting work take freed slots, then its housekeeping
    /// and the audit trail's write.
    func settle(now: Double) {
        writeUnwritten(now: now)
        events.timersDue(supervisors, now: now)
        queue.account(now: now, day: localDay())
        let decideAgain = finishDone()
        // A freed slot: the tasks a slot or a budget held back are decided again, in submission order, then resting
        // tasks that wait only for a slot, first in line first, while one is free.
        for e in inOrder(decideAgain) where e.isWaiting {
            if case .noSlot? = e.supervisor.machine.startBlock {
                e.supervisor.reevaluate(now: now)
                rest(e)
            }
        }
        while let c = conditions, let w = queue.nextForSlot() {
            guard let row = restingRow(w.id) else { continue }
            let e = awaken(row, w.rest)
            // An evaluator only when a slot is given: most rounds give none.
            give(e, c, now: now, shared: Policy.Evaluator(policy: policy, conditions: c, time: localTime()))
            // Not started after all (a condition changed since it rested): it waits again, and the next free slot asks.
            if e.isWaiting { rest(e); break }
        }
        housekeeping()            // off a start's path: once the round's work is done, or shortly after a spawn
        audit.flush()             // before the delay lock goes: what was done is on disk when the machine sleeps
    }

    /// Ends what is done: runs over, and waits that could not be spawned or gave up. Returns the waiting tasks a
    /// freed slot is to decide again.
    @discardableResult
    func finishDone() -> Set<String> {
        var decideAgain: Set<String> = []
        for (id, e) in running where e.supervisor.isDone {
            decideAgain.formUnion(queue.finish(id).decideAgain)
            finished(e)
        }
        for (id, e) in queue.awake where e.supervisor.isDone {   // could not be spawned, or gave up
            queue.removeWaiting(id)
            finished(e)
        }
        return decideAgain
    }

    /// How long after a round that spawned a task its housekeeping waits: long enough for the new process to be
    /// under way (its exec and first instructions took 0.6–0.8 ms here), short beside anything a person sees.
    static let housekeepingDelay = 0.01

    /// What prepares for later — the next spare output file, the readings' history — now, or shortly after a
    /// round that spawned a task: with two cores, the filesystem's making of a file (0.8 ms of CPU on ext4 without
    /// a journal) beside the bus and watcher threads kept the new task, at idle priority, off both.
    func housekeeping() {
        let now = { [unowned self] in
            // Every start so far has its running row, unless one could not be written (its line stays for a crash).
            if !self.rounds.unwritten.hasStart { self.files.intents.clear() }
            self.writeHistory()
            OutputFile.prepareSpare(in: self.files.output)
        }
        guard rounds.spawnedThisRound else { return now() }
        rounds.spawnedThisRound = false
        guard !rounds.housekeepingDue else { return }
        rounds.housekeepingDue = true
        loop.after(QueueDriver.housekeepingDelay) { [unowned self] in
            self.rounds.housekeepingDue = false
            now()
        }
    }

    /// Once nothing has run for a while, what start-up or the last run used is given back: SQLite's caches, the
    /// heap, code pages (see `Memory`).
    func release() {
        store.releaseMemory()
        audit.releaseMemory()
        Memory.releaseFreedHeap()
        Memory.releaseStartupPages()
    }

    /// A policy that loaded is in force: the slots follow it, the readings its thresholds, and waiting work is
    /// supervised again under it (running work keeps the policy it started under).
    func policyChanged(_ p: Policy) {
        configuration.ref = PolicyRef(p)
        queue.limits = Schedule.Limits(p.settings)
        events.setProbeOptions(probe)
        superviseAllAgain(evaluator: evaluator())
    }

    // MARK: A task's start

    /// A supervisor recorded an event.
    func event(_ s: Supervisor, _ kind: RunEvent.Kind) {
        let id = s.id
        switch kind {
        case .started:
            guard let e = queue.awake[id], e.supervisor === s else { return }
            queue.start(id)
            rounds.spawnedThisRound = true
            let from = e.row.state   // "pending", or "running" when its intent went to the queue
            e.row.state = "running"
            e.row.runID = s.runOptions.runID
            e.row.pgid = s.pid
            e.row.childStart = s.pid.flatMap { Recovery.startTime(of: $0) }.map { Int64($0) }
            e.row.cgroup = s.taskProcess?.containment
            e.row.started = wallClockNow()
            let row = e.row
            do { try store.markRunning(row, from: from) } catch {
                // Spawned all the same: its line in `starting` stays (a crash finds the run by its token) and the row
                // is written by a retry; its end, if it comes first, removes the request whatever its state.
                say("\(id): cannot record its start in the queue now (\(error)); tried again in \(Int(UnwrittenWrites.retryInterval)) s")
                rounds.unwritten.add(.init(id: id, isStart: true) { try $0.markRunning(row, from: from) }, now: monotonic())
            }
            if !e.row.isAppTask, s.taskProcess?.unitName == nil { outputWatch.watch(outputPath(id)) }
            announce.emit(.taskChanged, [.string(id), .string("running")])
        case .finished:
            // Told before the audit trail and the journal are (`Supervisor.record`): the end is in the queue first.
            guard let e = running[id] ?? queue.awake[id], e.supervisor === s else { return }
            persistEnd(e)
        case .throttled, .unthrottled, .paused, .resumed, .expired, .killed:
            announce.emit(.taskChanged, [.string(id), .string(s.machine.phase.state)])
        default:
            break
        }
    }

    /// Before a command is spawned, its start is written down (its run token, no pid yet): in `StartIntents`, one
    /// write, or else in the queue as its running row. A crash at any instant after the spawn finds it at the next
    /// start, by its token. If neither can be written, nothing is spawned (the request waits to try again), so no
    /// restart can run it twice.
    func recordIntent(_ s: Supervisor) -> String? {
        guard let e = queue.awake[s.id], e.supervisor === s else { return nil }
        var r = e.row
        r.runID = s.runOptions.runID
        r.token = s.runOptions.runToken
        r.pgid = nil; r.childStart = nil; r.cgroup = nil
        r.started = wallClockNow()
        if let runID = r.runID, let token = r.token, files.intents.record(.init(id: r.id, runID: runID, token: token)) == nil {
            e.row = r   // still pending in the queue: its running row is written once it is spawned (`event`)
            return nil
        }
        r.state = "running"
        do { try store.markRunning(r, from: "pending") } catch { return "its start cannot be written to the queue (\(error))" }
        e.row = r
        return nil
    }

    /// A transient unit's main process, as systemd told it: into the queue's row (crash recovery ends it by process
    /// group, as any command).
    func unitMainPID(_ s: Supervisor, _ pid: pid_t) {
        guard let e = running[s.id], e.supervisor === s else { return }
        e.row.pgid = pid
        e.row.childStart = Recovery.startTime(of: pid).map { Int64($0) }
        do { try store.markRunning(e.row, from: "running") } catch { say("\(s.id): cannot record its start in the queue: \(error)") }
    }
}
