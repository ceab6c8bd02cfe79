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

/// bgtaskd: the queue (SQLite), one supervisor per task in one event loop (the GLib main loop, which
/// also serves the D-Bus interface), driven by the same core as `bgtask run`.
public final class Daemon {
    /// Its state directory, lock, queue, audit trail and journal.
    let files: StateFiles
    var store: QueueStore { files.store }
    var audit: AuditLog { files.audit }
    var journal: Journal { files.journal }
    var stateDir: String { files.directory }
    let options: DaemonOptions
    let loop = MainLoop()
    var events: EventLoop!
    let bus: BusConnection
    /// The exported object, the callers, what runs after a reply.
    let service = BusService()
    /// The policy in force, what is wrong with its layers, the watch on their directories.
    let configuration: PolicyInForce
    var policyRef: PolicyRef { configuration.ref }
    var policy: Policy {
        get { configuration.ref.policy }
        set { configuration.ref = PolicyRef(newValue) }
    }
    var policyWarning: String? { configuration.warning?.text }
    /// The queue in memory: awake, resting and running tasks, admission, slots, budgets, what follows a run.
    var queue: Scheduler<Entry, Supervisor.Rest>
    var limits: Schedule.Limits { queue.limits }
    var running: [String: Entry] { queue.running }
    /// Start-up's progress, the stop, the quiet spell: what the loop keeps between rounds.
    var rounds = RoundState()
    /// logind's sleep and shutdown, and the delay locks held while work runs.
    lazy var sleep = SleepWatch { [unowned self] in self.say($0) }
    /// The app broker: manifests, switches, who a caller is, the apps on the bus and their methods, launches.
    lazy var apps: AppBroker = {
        let b = AppBroker(bus: bus, loop: loop, stateDirectory: stateDir, appDirectories: options.places?.appDirectories) { [unowned self] in self.say($0) }
        b.queue = self
        return b
    }()
    /// Running command tasks' output files, kept bounded while written.
    lazy var outputWatch = OutputWatch(loop: loop) { [unowned self] in self.say($0) }
    /// The scheduler's signals to all, sent once the round that made them is done.
    lazy var announce = Announcements(bus: bus, loop: loop)
    /// Continued tasks as the person sees them (notifications, KDE's job view).
    lazy var presenter = Presenter(Presenter.Host(
        bus: bus, loop: loop, say: { [unowned self] in self.say($0) }, settings: { [unowned self] in self.policy.settings },
        cancel: { [unowned self] key, who in _ = self.cancel(key, by: who) },
        expire: { [unowned self] key, why in
            self.running[key]?.supervisor.expireNow(now: monotonic(), why: why)
            self.afterRound(conditionsChanged: false)
        }))
    /// The user's systemd manager, where one runs: command tasks are its transient units (nil: bgtaskd's children).
    var systemd: SystemdUnits?
    /// The newest readings, their merge with the daemon's own conditions, the history kept of them.
    let current = CurrentReadings()
    var readings: [String: PolicyValue]? {
        get { current.latest }
        set { current.latest = newValue }
    }

    public init(options: DaemonOptions) throws {
        self.options = options
        files = try StateFiles(options)
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
        let warning = errors.isEmpty ? nil : PolicyWarning(
            what: "a policy layer does not load and is left out (the other layers are in force until it is fixed)", errors: errors)
        configuration = PolicyInForce(p, warning: warning, atStart: atStart)
        queue = Scheduler(limits: Schedule.Limits(p.settings), now: monotonic(), day: Daemon.localDay(),
                          usage: (try? files.store.usage(day: Daemon.localDay())) ?? [:], standing: (try? files.store.standing()) ?? [:],
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
        service.commands = self
    }

    /// The policy's sources: the layers and the files named on the command line, or the places' own.
    static func policySources(_ options: DaemonOptions) -> [PolicySource] {
        options.places?.policySources ?? PolicyLayers.sources(extra: options.policyFiles)
    }

    /// Keeps what changed of the readings whose history is kept (`ReadingHistory`).
    func recordHistory(_ values: [String: PolicyValue]) {
        let changes = current.history.changes(values, now: wallClockNow())
        guard !changes.isEmpty else { return }
        rounds.historyDue += changes
        if !rounds.spawnedThisRound { writeHistory() }
    }

    func writeHistory() {
        guard !rounds.historyDue.isEmpty else { return }
        let changes = rounds.historyDue
        rounds.historyDue = []
        do { try store.recordTransitions(changes) } catch { say("cannot keep the readings' history: \(error)") }
    }

    /// How long after a round that spawned a task its housekeeping waits: long enough for the new process to be
    /// under way (its exec and first instructions took 0.6–0.8 ms here), short beside anything a person sees.
    static let housekeepingDelay = 0.01

    /// What prepares for later — the next spare output file, the readings' history — now, or shortly after a
    /// round that spawned a task: with two cores, the filesystem's making of a file (0.8 ms of CPU on ext4 without
    /// a journal) beside the bus and watcher threads kept the new task, at idle priority, off both.
    func housekeeping() {
        let now = { [unowned self] in
            self.writeHistory()
            OutputFile.prepareSpare(in: self.files.output)
        }
        guard rounds.spawnedThisRound else { return now() }
        rounds.spawnedThisRound = false
        guard !rounds.housekeepingDue else { return }
        rounds.housekeepingDue = true
        loop.after(Daemon.housekeepingDelay) { [unowned self] in
            self.rounds.housekeepingDue = false
            now()
        }
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
        Memory.keepFreedHeapUntilQuiet()
        try prepare()
        loop.run()
        return 0
    }

    /// All of `run` but the loop: recovery, the apps, the bus name, the watches; the first round.
    public func prepare() throws {
        scheduleMidnight()
        apps.load()
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
            let serving = try service.serve(on: bus) { [unowned self] large in
                // A long listing's memory (its GVariants, freed once a bus thread has written the reply) goes
                // back when the daemon has been quiet again for a while, not kept for good.
                if large {
                    self.rounds.quiet.rearm(now: monotonic())
                    // The heap keeps what it frees until the daemon is quiet (`Memory.keepFreedHeapUntilQuiet`), and
                    // it is not quiet while a task runs — for hours, a backup's. So a listing's heap goes back 2 s
                    // after its last page (the rest of start-up's memory, code pages included, waits for quiet).
                    let at = monotonic()
                    self.rounds.lastLargeReply = at
                    self.loop.after(Daemon.listingTrimDelay) { [unowned self] in
                        if self.rounds.lastLargeReply == at { Memory.releaseFreedHeap() }
                    }
                }
                // The reply goes first; what the call changed is acted on and written 2 ms after it, so that the
                // audit trail's write does not take a core from the bus threads carrying the reply (2 cores here).
                self.loop.after(0.002) { [unowned self] in self.afterRound(conditionsChanged: false) }
            }
            guard serving else {
                throw DaemonError(message: "\(SchedulerBus.name) is already owned on this bus: another bgtaskd runs", status: ExitStatus.tempFail)
            }
        } catch let e as BusError {
            throw DaemonError(message: "cannot serve on the bus: \(e.message)", status: ExitStatus.unavailable)
        }
        // Work starts only once the daemon answers on the bus: a client never sees a task it cannot ask about.
        // The queue is taken up in slices between calls, so a daemon with 10,000 waiting tasks answers at once.
        say("serving \(SchedulerBus.name) (pid \(getpid()))")
        if let w = configuration.warning { say(w.line) }
        loop.after(0) { [unowned self] in self.restoreSlice() }
        if events.signalFD >= 0 { loop.watch(fd: events.signalFD) { [unowned self] in self.signals() } }
        loop.watch(fd: events.wakeFD) { [unowned self] in
            if let values = self.events.takeConditions() {
                self.readings = values
                self.deliver(now: monotonic())
                // After the tasks it starts: a start waits for no write of the history.
                self.recordHistory(values)
                let c = self.appConditions
                if c != self.current.announced {
                    self.current.announced = c
                    self.announce.emit(.conditionsChanged, [.dict(c.variant)])
                }
            }
            self.afterRound(conditionsChanged: true)
        }
        watchSleep()
        if options.places == nil { watchConfiguration() }
        apps.watchConnections()
        afterRound(conditionsChanged: false)
    }

    /// Awake waiting entries among `ids`, in submission order (the order in which waiting work may take a free slot).
    func inOrder<S: Sequence>(_ ids: S) -> [Entry] where S.Element == String {
        ids.compactMap { queue.awake[$0] }.sorted { ($0.row.submitted, $0.id) < ($1.row.submitted, $1.id) }
    }
    /// Every supervisor, in no particular order: for what is done to each alike. Resting tasks have none.
    var supervisors: [Supervisor] { running.values.map(\.supervisor) + queue.awake.values.map(\.supervisor) }

    /// The readings and the daemon's own conditions (`system.preparing_sleep`), as every task sees them.
    /// Made once per change and kept: every supervisor then holds the same dictionary storage (copy on write),
    /// where a fresh merge per task cost each of 10,000 pending tasks its own copy.
    var conditions: [String: PolicyValue]? {
        if let c = current.merged { return c }
        guard var c = readings ?? events?.currentConditions else { return nil }
        c["system.preparing_sleep"] = .bool(sleep.preparing)
        // Before the first readings the watcher's own may still change under us: not kept.
        if readings != nil { current.merged = c }
        return c
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

    /// Gives every task the conditions as they are now.
    func deliver(now: Double) {
        guard let c = conditions else { queue.account(now: now, day: localDay()); return }
        queue.setOnBattery(c["power.external"] == .bool(false), now: now, day: localDay())
        let shared = Policy.Evaluator(policy: policy, conditions: c, time: localTime())
        // Resting groups whose class's fast verdict has not changed stay at rest; the rest is decided in full.
        let woken = queue.wake { shared.verdict($0) }
        for e in running.values { e.supervisor.conditionsChanged(c, now: now, shared: shared) }
        // The awake and the woken in submission order, the order in which they may take a slot. A woken task is its
        // index in `woken` (-1: an awake one): no dictionary of them is made on the way to the first start.
        var order: [(submitted: Double, id: String, woken: Int)] = queue.awake.values.map { ($0.row.submitted, $0.id, -1) }
        order.reserveCapacity(order.count + woken.count)
        for (i, w) in woken.enumerated() { order.append((w.submitted, w.id, i)) }
        order.sort { ($0.submitted, $0.id) < ($1.submitted, $1.id) }
        // Tasks woken from one group decide alike: once one of them, decided in full, rests again (on a condition, or
        // on a slot when the slots are taken), the others of its group rest beside it with no supervisor and no row
        // read. So a plug that makes 100,000 tasks due starts the first and decides once more, not 100,000 times.
        var restedLike: [Int: String] = [:]
        // The rows of the woken that need a supervisor are read back from the queue: those first in line for a slot
        // one by one, so that a start waits for no batch, then batches that double (to 256) while tasks still need
        // one; the next of a group usually rests beside the first after one row, and is read alone.
        var rows: [String: QueuedTask] = [:]
        let first = max(1, limits.maxRunning)
        var batch = 1
        func read(from i: Int) {
            let n = i < first ? 1 : batch
            if i >= first { batch = min(256, batch * 2) }
            let ids = order[i...].lazy.compactMap { o in
                o.woken >= 0 && restedLike[woken[o.woken].group] == nil && rows[o.id] == nil ? o.id : nil
            }.prefix(n)
            for r in (try? store.rows(ids: Array(ids), state: "pending")) ?? [] { rows[r.id] = r }
        }
        for (i, o) in order.enumerated() {
            let e: Entry
            if o.woken >= 0 {
                let w = woken[o.woken]
                if let like = restedLike[w.group], queue.rest(w, like: like) { continue }
                if rows[o.id] == nil { if let k = rounds.kept.take(o.id) { rows[o.id] = k } else { read(from: i) } }
                guard let row = rows.removeValue(forKey: o.id) else { continue }   // gone from the file under us: nothing to start
                e = awaken(row, w.rest)
                e.supervisor.conditionsChanged(c, now: now, shared: shared)
                // Not a task whose own previous run still runs: that slot is its alone.
                if e.row.state != "running", rest(e), running[e.id] == nil { restedLike[w.group] = e.id }
            } else if let awake = queue.awake[o.id] {
                awake.supervisor.conditionsChanged(c, now: now, shared: shared)
                if awake.row.state != "running" { rest(awake) }
            }
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
            guard let e = queue.awake[id], e.supervisor === s else { return }
            queue.start(id)
            rounds.spawnedThisRound = true
            e.row.state = "running"
            e.row.runID = s.runOptions.runID
            e.row.pgid = s.pid
            e.row.childStart = s.pid.flatMap { Recovery.startTime(of: $0) }.map { Int64($0) }
            e.row.cgroup = s.taskProcess?.containment
            e.row.started = wallClockNow()
            do { try store.markRunning(e.row) } catch { say("\(id): cannot record its start in the queue: \(error)") }
            if !e.row.isAppTask, s.taskProcess?.unitName == nil { outputWatch.watch(outputPath(id)) }
            announce.emit(.taskChanged, [.string(id), .string("running")])
        case .throttled, .unthrottled, .paused, .resumed, .expired, .killed:
            announce.emit(.taskChanged, [.string(id), .string(s.machine.phase.state)])
        default:
            break
        }
    }

    /// Before a command is spawned, the queue says it runs (its run token, no pid yet): a crash at any instant
    /// after the spawn finds it at the next start, by its token if its pid was never written. If the queue
    /// cannot be written, nothing is spawned (the request waits to try again), so no restart can run it twice.
    func recordIntent(_ s: Supervisor) -> String? {
        guard let e = queue.awake[s.id], e.supervisor === s else { return nil }
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



    /// How long after a large reply the heap is trimmed if no other came (see `prepare`).
    static let listingTrimDelay = 2.0

    /// Once nothing has run for a while, what start-up or the last run used is given back: SQLite's caches, the
    /// heap, code pages (see `Memory`).
    func release() {
        store.releaseMemory()
        audit.releaseMemory()
        Memory.releaseFreedHeap()
        Memory.releaseStartupPages()
    }

    /// After every round of events: ends what is done, lets waiting work take freed slots, re-arms the timer.
    func afterRound(conditionsChanged: Bool) {
        if !service.afterReply.isEmpty {
            let due = service.afterReply
            service.afterReply = []
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
        for (id, e) in queue.awake where e.supervisor.isDone {   // could not be spawned, or gave up
            queue.removeWaiting(id)
            finished(e)
        }
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
            e.supervisor.conditionsChanged(c, now: now, shared: Policy.Evaluator(policy: policy, conditions: c, time: localTime()))
            // Not started after all (a condition changed since it rested): it waits again, and the next free slot asks.
            if e.isWaiting { rest(e); break }
        }
        let sups = supervisors
        housekeeping()            // off a start's path: once the round's work is done, or shortly after a spawn
        audit.flush()             // before the delay lock goes: what was done is on disk when the machine sleeps
        updateInhibitor()
        // Resting tasks are not among the supervisors: when one begins to rest, the zones' need is asked again.
        // An app that is connected reads ProcessInfo.thermalState: the zones are read for it too (2–30 s, by distance).
        events.afterEvents(sups, conditionsChanged: conditionsChanged || rounds.newlyResting || apps.connected != rounds.appsConnected) { [unowned self] in
            self.apps.connected > 0 || self.restingDependOnThermal()
        }
        rounds.appsConnected = apps.connected
        rounds.newlyResting = false
        let releasing = rounds.quiet.observe(quiet: running.isEmpty, now: now)
        let next = [events.nextDeadline(sups), rounds.quiet.deadline, sleep.deadline].compactMap { $0 }.min()
        loop.setTimer(in: next.map { max(0, $0 - monotonic()) }) { [unowned self] in self.afterRound(conditionsChanged: false) }
        // Last, so that little code runs between giving pages back and the loop's sleep: every page touched after
        // it is faulted in again with its neighbours (the kernel maps 64 KB around a fault).
        if releasing { release() }
    }

    // MARK: Signals

    func signals() {
        for sig in events.readSignals() {
            switch sig {
            case SIGCHLD:
                events.reap(running.values.map(\.supervisor))
                apps.reap()
            case SIGHUP:
                apps.load()
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
            let w = PolicyWarning(what: "the policy does not load (the last good policy stays in force)", errors: errors)
            configuration.warning = w
            say(w.line)
            return (false, w.text)
        }
        configuration.warning = nil
        let changes = p.changes(from: policy)
        policy = p
        queue.limits = Schedule.Limits(p.settings)
        // The readings follow the new thresholds too ([battery], [thermal], [idle] after, [storage]).
        events.setProbeOptions(probe)
        // Waiting work is supervised again under the new policy; running work keeps the policy it started under.
        let shared = evaluator()
        superviseAllAgain(evaluator: shared)
        // Which files are in force now: for the journal reader, and for a test to know it sees its own file's reload.
        let files = "policy reloaded: " + sources.map(\.name).joined(separator: ", ")
        say(files)
        return (true, files + "\n" + (changes.isEmpty ? "nothing changed" : changes.joined(separator: "\n")))
    }

}
