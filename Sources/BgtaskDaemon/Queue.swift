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

/// The queue's entries: taking up the stored queue at start, adding, waking and resting tasks, and the supervisor
/// of each.
extension QueueDriver {
    /// A slice of start-up's taking up of the stored queue: pages of this many rows ...
    static let restorePage = 100
    /// ... for at most this long of the loop, so that a call is answered within it (a slice of 500 rows was about
    /// 60 ms on a slow day: most of a first reply's 100 ms).
    static let restoreSliceSeconds = 0.005

    /// Takes up stored requests a slice at a time, each slice after what the bus has queued. A call that reads or
    /// changes the queue takes up the rest first (`restoreAll`), so no caller sees a partial queue.
    func restoreSlice(schedulingNext: Bool = true) {
        if rounds.restoring == nil {
            let n = (try? store.count(state: "pending")) ?? 0
            if n > 0 { say("\(n) pending in the queue") }
            rounds.restoring = (nil, n == 0)
        }
        guard rounds.restoring?.done == false else { return }
        // Pages of the stored queue read through its index: a page costs the same whatever the queue holds, and a
        // slice ends once its time is up, so the first call is answered after one slice at most.
        let started = monotonic()
        // One evaluator for the slice: tasks alike then share their decision's storage (see `Policy.Evaluator`).
        let shared = evaluator()
        repeat {
            let after = rounds.restoring!.after
            let rows = (try? store.page(state: "pending", after: after, limit: QueueDriver.restorePage)) ?? []
            // Each story goes on from its last words: a wait told before the restart is not told again.
            let told = (try? audit.lastDeferrals(of: rows.map { ($0.id, QueueDriver.runID(of: $0)) })) ?? [:]
            for row in rows where !queue.isWaiting(row.id) {
                add(row, restored: true, evaluator: shared, told: told[QueueDriver.runID(of: row)])
            }
            rounds.restoring = (rows.last.map { ($0.submitted, $0.id) } ?? after, rows.count < QueueDriver.restorePage)
        } while !rounds.restoring!.done && monotonic() - started < QueueDriver.restoreSliceSeconds
        if rounds.restoring!.done {
            // The audit trail and the readings' history are pruned once the queue is taken up, in a round of their
            // own: before the first slice, a prune of 100,000 entries held the first reply back 100 ms.
            loop.after(0) { [unowned self] in
                try? self.audit.prune(now: wallClockNow())
                try? self.store.pruneTransitions(before: wallClockNow() - ReadingHistory.days * 86_400)
            }
            if schedulingNext { host.actOnChanges() }
        } else if schedulingNext {
            loop.after(0) { [unowned self] in self.restoreSlice() }
        }
    }

    /// The whole stored queue, taken up now.
    func restoreAll() {
        while rounds.restoring?.done != true { restoreSlice(schedulingNext: false) }
    }

    /// Starts supervising a pending request (its machine waits until the policy and the limits allow it); `told`:
    /// its story's last words, when a supervisor before this one told its wait.
    @discardableResult
    func add(_ row: QueuedTask, restored: Bool = false, evaluator: Policy.Evaluator? = nil, told: String? = nil, decide: Bool = true) -> Entry {
        rounds.kept.take(row.id)   // a row kept for it while it rested is not the one it has now
        let e = Entry(row: row, supervisor: supervisor(for: row, restored: restored), filesystem: ownFilesystem(row))
        if let t = told { e.supervisor.continues(told: t) }
        queue.add(job(of: row), e)
        if decide { self.decide(e, evaluator: evaluator) }
        return e
    }

    /// A new entry's first verdict on the readings (it may begin to rest). Done in `add`, or for a Submit just after
    /// its reply (`decide: false`): the caller does not wait for it.
    func decide(_ e: Entry, evaluator: Policy.Evaluator? = nil) {
        guard let c = conditions, let shared = evaluator ?? self.evaluator() else { return }
        give(e, c, now: monotonic(), shared: shared)
        rest(e)
    }

    func job(of row: QueuedTask) -> Scheduler<Entry, Supervisor.Rest>.Job {
        Scheduler.Job(fields: row.fields, app: row.isAppTask ? row.app : nil, submitted: row.submitted)
    }

    /// A resting task awake again (woken by the scheduler, whose books it left): a supervisor that takes up the holds
    /// and decision it rested on (nothing is said or recorded anew: its story goes on). The caller decides it.
    @discardableResult
    func awaken(_ row: QueuedTask, _ rest: Supervisor.Rest) -> Entry {
        rounds.kept.take(row.id)
        let s = supervisor(for: row, restored: true)
        s.resume(rest)
        let e = Entry(row: row, supervisor: s, filesystem: ownFilesystem(row))
        queue.add(job(of: row), e)
        return e
    }

    /// The waiting task `id` awake, resting or not (a call about it); nil if it does not wait, or its row is gone.
    func awakeEntry(_ id: String) -> Entry? {
        if let e = queue.awake[id] { return e }
        guard let w = queue.wakeOne(id), let row = restingRow(id) else { return nil }
        return awaken(row, w.rest)
    }

    /// Every waiting task supervised anew (a reloaded policy, a resume from sleep): its row as it holds it, or
    /// the queue's, read a page at a time.
    func superviseAllAgain(evaluator shared: Policy.Evaluator?) {
        // What each told last: a wait the new policy or the resumed clock leaves as it was is not told again.
        var resting: [String: String] = [:]
        for w in queue.wakeAll() { resting[w.id] = w.rest.reason }
        var after: (submitted: Double, id: String)?
        while true {
            let rows = (try? store.page(state: "pending", after: after, limit: 500)) ?? []
            for r in rows {
                if let e = queue.awake[r.id] { add(e.row, restored: true, evaluator: shared, told: e.supervisor.lastSaid) }
                else if let told = resting[r.id] { add(r, restored: true, evaluator: shared, told: told) }
            }
            guard rows.count == 500, let last = rows.last else { break }
            after = (last.submitted, last.id)
        }
    }

    /// A request's run id: the one it was stored with, or, for a row stored without one (an older bgtask's), one
    /// made from the row alone — the same each time the task is supervised anew, so its story stays one.
    static func runID(of row: QueuedTask) -> String {
        row.runID ?? "\(row.id)-r\(String(row.submitted.bitPattern, radix: 36))"
    }

    /// The supervisor of a stored request.
    func supervisor(for row: QueuedTask, restored: Bool) -> Supervisor {
        let wall = wallClockNow(), mono = monotonic()
        rounds.supervisorsMade += 1
        var o = RunOptions(argv: row.command, task: row.fields, probe: probe)
        o.budget = row.budget
        o.cpuMonitor = !row.requiresExternalPower
        // One run id from submission to the end, across daemon restarts: `why` tells the whole wait.
        o.runID = QueueDriver.runID(of: row)
        o.earliest = row.earliest.map { mono + ($0 - wall) }
        o.earliestCause = QueueDriver.earliestCause(row)
        o.workingDirectory = row.directory
        if let d = row.directory { o.probe.storagePath = d }
        o.outputPath = row.isAppTask ? nil : outputPath(row.id)
        o.pauseExpires = row.isAppTask
        o.environment = ["BGTASK_TASK_ID=\(row.id)", "BGTASK_LAUNCHED_FOR_BACKGROUND=1"]
        if !row.isAppTask { o.runToken = RunProcesses.newToken(sequence: rounds.supervisorsMade) }
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
        if row.isAppTask { s.app = host.appTask(for: row) } else { s.launcher = host.launcher }
        return s
    }

    static func newRunID(_ id: String) -> String {
        RunID.make(task: id, pid: getpid(), now: wallClockNow(), random: RunID.randomBits())
    }

    /// Lets a waiting task's supervisor and entry go if it may rest (see `Supervisor.rest`, `Scheduler.rest`). A new
    /// supervisor carries on the same story: its run id is the stored row's, or made from the row alone
    /// (`QueueDriver.runID(of:)`). Its row was written before: the queue's is the one it is woken with.
    @discardableResult
    func rest(_ e: Entry) -> Bool {
        let groups = queue.groupsMade
        // Its storage.* are its own filesystem's: a group's one standing on the shared readings would not be its.
        guard e.filesystem == nil, let r = e.supervisor.rest, queue.rest(e.id, standing: r.decision.standing, rest: r) != nil else { return false }
        // Only a new group can change whether resting tasks need the zones read: a task joining its group (each
        // Submit of work like the rest) leaves the answer as it was, and asking again cost a Submit a tenth of its CPU.
        if queue.groupsMade != groups { rounds.newlyResting = true }
        if let g = queue.group(of: e.id) { rounds.kept.keep(e.row, group: g, perGroup: max(1, limits.maxRunning)) }
        return true
    }

    /// The row of a resting task that wakes: kept since it began to rest, or read back from the queue.
    func restingRow(_ id: String) -> QueuedTask? {
        rounds.kept.take(id) ?? (try? store.get(id, state: "pending")) ?? nil
    }

    /// Gives every task the conditions as they are now.
    func deliver(now: Double) {
        guard let c = conditions else { queue.account(now: now, day: localDay()); return }
        queue.setOnBattery(c["power.external"] == .bool(false), now: now, day: localDay())
        let shared = Policy.Evaluator(policy: policy, conditions: c, time: localTime())
        // Resting groups whose class's standing (verdict, and every rule that matches) has not changed stay at rest;
        // the rest is decided in full. Not the verdict alone: a rule behind the deciding one that stops matching (the
        // charger plugged while the network is down) must start its hold now, and stop being told.
        let woken = queue.wake { shared.standing($0) }
        for e in running.values { give(e, c, now: now, shared: shared) }
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
                give(e, c, now: now, shared: shared)
                // Not a task whose own previous run still runs: that slot is its alone.
                if e.row.state != "running", rest(e), running[e.id] == nil { restedLike[w.group] = e.id }
            } else if let awake = queue.awake[o.id] {
                give(awake, c, now: now, shared: shared)
                if awake.row.state != "running" { rest(awake) }
            }
        }
    }
}
