import BgtaskPolicy

/// The queue in memory, pure: which tasks wait, which of those rest, which run, and the rules between them that
/// are not one task's conditions — admission (per-app and per-kind limits, the submit rate), slots
/// (`daemon.max_running`, CPU-heavy work, one run of an id at a time), an app's daily battery budget and its
/// standing, and what follows a run's end (`RunEnd`). Times are given, never read, so its tests drive it in
/// virtual time as `TaskMachine`'s do. bgtaskd keeps one, with an `Item` (its supervisor and stored row) per task.
///
/// What it costs follows what changes: counts per app are kept, not counted; a freed slot re-decides only the tasks
/// a slot or a budget held back; a change of conditions asks one verdict per class of resting tasks alike (`wake`).
public struct Scheduler<Item> {
    /// What the queue's rules read of a task; its process, story and stored row stay with `Item`.
    public struct Job: Sendable, Equatable {
        public var fields: TaskFields
        /// The app that asked; nil for a command task.
        public var app: String?
        /// When it was submitted: waiting work takes free slots, and is listed, in this order.
        public var submitted: Double
        public init(fields: TaskFields, app: String? = nil, submitted: Double = 0) {
            self.fields = fields
            self.app = app
            self.submitted = submitted
        }
        public var id: String { fields.id }
    }

    /// Waiting tasks, and the tasks running now, by id. An id can be in both: a request submitted while its
    /// previous run is still running waits for that run's end.
    public private(set) var waiting: [String: Item] = [:]
    public private(set) var running: [String: Item] = [:]
    private var waitingJobs: [String: Job] = [:]
    private var runningJobs: [String: Job] = [:]
    /// Every waiting id in submission order (then by id), kept sorted as requests come and go: listings page
    /// through it and slots are offered in it without sorting the queue.
    private var order: [Position] = []
    /// Waiting ids that do not rest: the ones a change of conditions, a timer or a midnight must be told of.
    public private(set) var awake: Set<String> = []
    /// Waiting requests counted per app and per app and kind (admission asks these on every submit).
    private var counts = Counts()
    public private(set) var load = Schedule.Load()
    public var limits: Schedule.Limits
    public private(set) var batteryUse: Schedule.BatteryUse
    /// Per app: tasks the system had to end, not made good since (docs/porting.md, "counts against the app").
    public private(set) var standing: [String: Int]
    public private(set) var onBattery = false
    private var accountedAt: Double
    private var submitRate: SubmitRate
    /// Waiting ids that a slot or a budget held back when they asked (`slot`): re-decided when one frees.
    private var heldBack: Set<String> = []
    /// Resting tasks, by class and the verdict they rest on (see `wake`).
    private var rests = Rests()

    private struct Counts {
        var perApp: [String: Int] = [:]
        var commands = 0
        var perAppKind: [AppKind: Int] = [:]
    }

    private struct Rests {
        var byKey: [RestKey: Set<String>] = [:]
        var keyOf: [String: RestKey] = [:]
        /// One task of each class, for its verdict (any does: no rule that reads identity lets a task rest).
        var fields: [RestClass: TaskFields] = [:]
    }

    /// A place in the submission order, and the cursor of a listing's page.
    public struct Position: Sendable, Hashable, Comparable {
        public var submitted: Double
        public var id: String
        public init(submitted: Double, id: String) {
            self.submitted = submitted
            self.id = id
        }
        public static func < (a: Position, b: Position) -> Bool { (a.submitted, a.id) < (b.submitted, b.id) }

        /// Its text form, for a client to hand back (`submitted|id`: a number's text has no `|`).
        public var cursor: String { "\(submitted)|\(id)" }
        public init?(cursor: String) {
            guard let bar = cursor.firstIndex(of: "|"), let t = Double(cursor[..<bar]), t.isFinite else { return nil }
            self.init(submitted: t, id: String(cursor[cursor.index(after: bar)...]))
        }
    }

    private struct AppKind: Hashable {
        var app: String
        var kind: TaskKind
    }

    /// Tasks the queue's fast verdict cannot tell apart: same kind, flags and window.
    struct RestClass: Hashable {
        var kind: TaskKind
        var flags: UInt8
        var windowStart: Double
        var windowEnd: Double
        init(_ t: TaskFields) {
            kind = t.kind
            flags = (t.requiresExternalPower ? 1 : 0) | (t.requiresNetwork ? 2 : 0) | (t.requiresUnmetered ? 4 : 0)
                | (t.cpuHeavy ? 8 : 0) | (t.userInitiated ? 16 : 0)
            windowStart = t.window?.start ?? -1
            windowEnd = t.window?.end ?? -1
        }
    }

    private struct RestKey: Hashable {
        var rest: RestClass
        var verdict: Verdict
    }

    /// `day` is the local day (days since the epoch, local time) whose battery use `usage` is; `now` the
    /// monotonic clock from which battery time is counted.
    public init(limits: Schedule.Limits, now: Double, day: Int, usage: [String: Double] = [:], standing: [String: Int] = [:],
                submitsPerSecond: Double, submitBurst: Double) {
        self.limits = limits
        accountedAt = now
        batteryUse = Schedule.BatteryUse(day: day)
        batteryUse.seconds = usage
        self.standing = standing.filter { $0.value > 0 }
        submitRate = SubmitRate(perSecond: submitsPerSecond, burst: submitBurst)
    }

    // MARK: Entries

    /// A waiting request, awake; one already waiting under its id is replaced (and returned).
    @discardableResult
    public mutating func add(_ job: Job, _ item: Item) -> Item? {
        let old = removeWaiting(job.id)
        waiting[job.id] = item
        waitingJobs[job.id] = job
        let p = Position(submitted: job.submitted, id: job.id)
        // New requests come last in the order (they were submitted now): an append, not a search.
        if let last = order.last, p < last { order.insert(p, at: firstIndex(notBefore: p)) } else { order.append(p) }
        awake.insert(job.id)
        if let a = job.app {
            counts.perApp[a, default: 0] += 1
            counts.perAppKind[AppKind(app: a, kind: job.fields.kind), default: 0] += 1
        } else {
            counts.commands += 1
        }
        return old
    }

    /// Takes a waiting request out (cancelled, replaced, or supervised anew).
    @discardableResult
    public mutating func removeWaiting(_ id: String) -> Item? {
        guard let item = waiting.removeValue(forKey: id), let job = waitingJobs.removeValue(forKey: id) else { return nil }
        let p = Position(submitted: job.submitted, id: id)
        let i = firstIndex(notBefore: p)
        if i < order.count, order[i] == p { order.remove(at: i) }
        unrest(id)
        awake.remove(id)
        heldBack.remove(id)
        if let a = job.app {
            counts.perApp[a] = counts.perApp[a]! > 1 ? counts.perApp[a]! - 1 : nil
            let k = AppKind(app: a, kind: job.fields.kind)
            counts.perAppKind[k] = counts.perAppKind[k]! > 1 ? counts.perAppKind[k]! - 1 : nil
        } else {
            counts.commands -= 1
        }
        return item
    }

    /// A waiting request started: it runs now, and takes a slot.
    public mutating func start(_ id: String) {
        guard let job = waitingJobs[id], let item = removeWaiting(id) else { return }
        running[id] = item
        runningJobs[id] = job
        load.running += 1
        if job.fields.cpuHeavy { load.heavy += 1 }
    }

    /// A run is over: its slot is free. Returns the waiting ids to decide again, in no order: those a slot or a
    /// budget held back.
    public mutating func finish(_ id: String) -> (item: Item?, decideAgain: [String]) {
        guard let item = running.removeValue(forKey: id), let job = runningJobs.removeValue(forKey: id) else { return (nil, []) }
        load.running -= 1
        if job.fields.cpuHeavy { load.heavy -= 1 }
        let again = heldBack.filter { awake.contains($0) }
        heldBack = []
        return (item, Array(again))
    }

    public func job(_ id: String) -> Job? { waitingJobs[id] ?? runningJobs[id] }

    /// The index of the first position not before `p` in the submission order.
    private func firstIndex(notBefore p: Position) -> Int {
        var lo = 0, hi = order.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if order[mid] < p { lo = mid + 1 } else { hi = mid }
        }
        return lo
    }

    /// At most `limit` waiting ids after `after` (from the first if nil), in submission order, and whether more
    /// follow: one page of a listing, found by a binary search, whatever came and went since the last page.
    public func waitingInOrder(after: Position? = nil, limit: Int = .max) -> (ids: [String], more: Bool) {
        var i = 0
        if let a = after {
            i = firstIndex(notBefore: a)
            if i < order.count, order[i] == a { i += 1 }
        }
        let end = limit >= order.count - i ? order.count : i + max(0, limit)
        return (order[i..<end].map(\.id), end < order.count)
    }
    public var waitingCount: Int { waiting.count }

    // MARK: Admission

    /// How many requests of `app` wait (nil: command tasks).
    public func waitingCount(app: String?) -> Int { app.map { counts.perApp[$0] ?? 0 } ?? counts.commands }

    /// nil if `job` may be queued now, else why not: the per-app limit (`daemon.max_pending_per_app`) and, for an
    /// app, Apple's limits per kind. A request replacing its own waiting one does not count twice.
    public func refusal(for job: Job) -> String? {
        let replaces = waitingJobs[job.id] != nil
        let app = job.app ?? "cli"
        if let a = job.app {
            let sameKind = counts.perAppKind[AppKind(app: a, kind: job.fields.kind)] ?? 0
            let replacesSameKind = waitingJobs[job.id]?.fields.kind == job.fields.kind
            if let why = limits.pendingOfKind(job.fields.kind, app: a, pending: sameKind - (replacesSameKind ? 1 : 0)) { return why }
        }
        if !replaces, waitingCount(app: job.app) >= limits.maxPendingPerApp {
            return "\(app) has \(limits.maxPendingPerApp) pending requests, the most daemon.max_pending_per_app allows"
        }
        return nil
    }

    /// Whether `sender` may submit one more now (a token bucket per sender: see `SubmitRate`).
    public mutating func allowSubmit(_ sender: String, now: Double) -> Bool { submitRate.allow(sender, now: now) }
    /// A sender left the bus.
    public mutating func forgetSender(_ sender: String) { submitRate.forget(sender) }

    // MARK: Slots and budgets

    /// nil if the waiting task `id` may take a slot now, else why not (in the words `pending` shows). Work the
    /// user started is not held back by the background limits; one run of an id at a time, whoever started it.
    public mutating func slot(for id: String) -> String? {
        if running[id] != nil {
            if waitingJobs[id] != nil { heldBack.insert(id) }
            return Scheduler.previousRunStill
        }
        guard let job = waitingJobs[id] else { return nil }
        let why = limits.slot(for: job.fields, load: load)
            ?? job.app.flatMap { limits.budget(app: $0, used: batteryUse.seconds[$0] ?? 0, onBattery: onBattery) }
        if why != nil { heldBack.insert(id) }
        return why
    }

    public static var previousRunStill: String { "its previous run is still running" }

    /// Whether a task like `fields` would find a free slot now (for a request that must start at once).
    public func slotFree(for fields: TaskFields) -> Bool { limits.slot(for: fields, load: load) == nil }

    /// Counts the stretch since the last count against every app that had a task running, if on battery over it.
    /// `day` is the local day now: a new day starts the budgets again.
    public mutating func account(now: Double, day: Int) {
        let apps = Set(runningJobs.values.compactMap(\.app))
        batteryUse.add(now - accountedAt, apps: apps, onBattery: onBattery, day: day)
        accountedAt = now
    }

    /// The charger came or went (nil: unknown, counted as not on battery). What ran until now is counted first.
    public mutating func setOnBattery(_ b: Bool, now: Double, day: Int) {
        account(now: now, day: day)
        onBattery = b
    }

    /// Local midnight: the budgets start again. Returns the waiting tasks to decide again (the awake ones: a budget
    /// or a rule of the clock may have held them; resting tasks wait on a condition only).
    public mutating func midnight(now: Double, day: Int) -> [String] {
        account(now: now, day: day)
        return Array(awake)
    }

    /// An app's task was ended by the system: it counts against the app. Returns its new standing.
    public mutating func endedBySystem(app: String) -> Int {
        let n = min(Schedule.maxStanding, (standing[app] ?? 0) + 1)
        standing[app] = n
        return n
    }

    /// An app completed a task in time: one of its ended tasks is made good. Returns its new standing, nil if it
    /// had none.
    public mutating func madeGood(app: String) -> Int? {
        guard let n = standing[app], n > 0 else { return nil }
        standing[app] = n > 1 ? n - 1 : nil
        return n - 1
    }

    /// How long a refresh request of `app` is held back for its standing (0: not at all).
    public func refreshHoldBack(app: String) -> Double { Schedule.refreshHoldBack(ended: standing[app] ?? 0) }

    // MARK: Run ends

    /// What follows the end of a run of `request`, under the limits' retry backoff.
    public func next(_ request: RunEnd.Request, _ outcome: RunEnd.Outcome, now: Double) -> RunEnd.Next {
        RunEnd.next(request, outcome, now: now, backoff: limits.retryBackoff, backoffMax: limits.retryBackoffMax)
    }

    // MARK: Rest and wake

    /// The waiting task `id` rests on `verdict`: only a change of conditions that changes the verdict of its class
    /// can start it, so it is not told of anything else. (The caller decides it may: no rule reads its identity.)
    public mutating func rest(_ id: String, verdict: Verdict) {
        guard let job = waitingJobs[id] else { return }
        unrest(id)
        let c = RestClass(job.fields)
        let key = RestKey(rest: c, verdict: verdict)
        rests.byKey[key, default: []].insert(id)
        rests.keyOf[id] = key
        if rests.fields[c] == nil { rests.fields[c] = job.fields }
        awake.remove(id)
        heldBack.remove(id)
    }

    public func isResting(_ id: String) -> Bool { rests.keyOf[id] != nil }
    public var restingCount: Int { rests.keyOf.count }

    /// The conditions changed: every resting class whose verdict (`verdict`, asked once per class) is not the one
    /// it rests on wakes. Returns the ids woken, now awake; the caller decides them in full.
    public mutating func wake(verdict: (TaskFields) -> Verdict) -> [String] {
        var now: [RestClass: Verdict] = [:]
        var woken: [String] = []
        for key in Array(rests.byKey.keys) {
            let v: Verdict
            if let known = now[key.rest] { v = known } else {
                v = rests.fields[key.rest].map(verdict) ?? key.verdict
                now[key.rest] = v
            }
            guard v != key.verdict, let ids = rests.byKey.removeValue(forKey: key) else { continue }
            for id in ids {
                rests.keyOf[id] = nil
                awake.insert(id)
                woken.append(id)
            }
        }
        if !woken.isEmpty {
            let left = Set(rests.byKey.keys.map(\.rest))
            rests.fields = rests.fields.filter { left.contains($0.key) }
        }
        return woken
    }

    /// Whether some resting class answers `check` (asked once per class): e.g. whether a temperature could
    /// change the verdict of some resting task.
    public func anyRestingClass(_ check: (TaskFields) -> Bool) -> Bool {
        rests.fields.values.contains(where: check)
    }

    /// The resting task `id` is woken by something else (a call about it, a reload): it is awake again.
    public mutating func unrest(_ id: String) {
        guard let key = rests.keyOf.removeValue(forKey: id) else { return }
        rests.byKey[key]?.remove(id)
        if rests.byKey[key]?.isEmpty == true {
            rests.byKey[key] = nil
            if !rests.byKey.keys.contains(where: { $0.rest == key.rest }) { rests.fields[key.rest] = nil }
        }
        if waiting[id] != nil { awake.insert(id) }
    }
}
