import BgtaskPolicy

/// What a resting task's supervisor knew (bgtaskd: its holds, last decision, why it waits), kept once per group of
/// tasks alike (`Scheduler.rest`).
public protocol RestState {
    /// Whether a task resting on `self` may join the group resting on `other`: a task woken from the group takes up
    /// the group's state as its own, so what decides (holds) must agree; what only tells (the readings in a reason)
    /// may differ, and the group keeps the newest.
    func sharesGroup(with other: Self) -> Bool
}

/// The queue in memory, pure: which tasks wait, which of those rest, which run, and the rules between them that
/// are not one task's conditions — admission (per-app and per-kind limits, the submit rate), slots
/// (`daemon.max_running`, CPU-heavy work, one run of an id at a time), an app's daily battery budget and its
/// standing, and what follows a run's end (`RunEnd`). Times are given, never read, so its tests drive it in
/// virtual time as `TaskMachine`'s do. bgtaskd keeps one, with an `Item` (its supervisor and stored row) per awake
/// task and a `Rest` (what a supervisor knew: holds, decision, reason) per group of resting tasks alike.
///
/// What it costs follows what changes: counts per app are kept, not counted; a freed slot re-decides only the tasks
/// a slot or a budget held back; a change of conditions asks one verdict per class of resting tasks alike (`wake`);
/// and a resting task is an id and its submission time in its group, nothing more (its row is the caller's store's).
public struct Scheduler<Item, Rest: RestState> {
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
        /// A resting task's job: its group's fields (any task's of the class) under its own id.
        init(class fields: TaskFields, id: String, app: String?, submitted: Double) {
            var f = fields
            f.id = id
            self.init(fields: f, app: app, submitted: submitted)
        }
    }

    /// Waiting tasks that are awake (the ones a change of conditions, a timer or a midnight must be told of), and
    /// the tasks running now, by id. An id can be waiting and running at once: a request submitted while its
    /// previous run is still running waits for that run's end. Resting tasks are in `groups`.
    public private(set) var awake: [String: Item] = [:]
    public private(set) var running: [String: Item] = [:]
    private var awakeJobs: [String: Job] = [:]
    private var runningJobs: [String: Job] = [:]
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
    /// Resting tasks, in groups alike (see `rest`, `wake`): few, found by a scan.
    @usableFromInline internal var groups: [Group] = []
    /// Resting groups made so far (each group's number): a count that moves when a task rests in a new group.
    public private(set) var groupsMade = 0
    /// Beyond this many groups a task that could rest stays awake: tasks that each rest on a state of their own
    /// (holds begun at different times) would make a group each, and every look-up a scan of them.
    public static var maxGroups: Int { 64 }

    private struct Counts {
        var perApp: [String: Int] = [:]
        var commands = 0
        var perAppKind: [AppKind: Int] = [:]
    }

    /// Resting tasks of one class and app that rest on one verdict and on rests that share a group: a change of
    /// conditions asks the class's verdict once, and the tasks are told apart by their id and submission time alone.
    @usableFromInline internal struct Group {
        /// Its own number, for the life of the scheduler: tasks woken from it say where they came from.
        @usableFromInline var number: Int
        var key: RestKey
        var app: String?
        var rest: Rest
        /// One task's fields of the class, for its verdict (any does: no rule that reads identity lets a task rest).
        var fields: TaskFields
        /// Its tasks: id → when submitted.
        @usableFromInline var ids: [String: Double] = [:]
        func job(_ id: String, submitted: Double) -> Job { Job(class: fields, id: id, app: app, submitted: submitted) }
        /// What its tasks share, made once for all of them when it wakes.
        func origin() -> Origin { Origin(fields: fields, app: app, rest: rest, number: number) }
        func woken(_ id: String, submitted: Double) -> Woken { Woken(origin: origin(), id: id, submitted: submitted) }
    }

    /// What the tasks woken from one group share: one value for the group, not a copy of its fields for each task
    /// (a plug that wakes 100,000 tasks made 100,000 copies before the first could start).
    public final class Origin {
        let fields: TaskFields
        let app: String?
        public let rest: Rest
        public let number: Int
        init(fields: TaskFields, app: String?, rest: Rest, number: Int) {
            self.fields = fields
            self.app = app
            self.rest = rest
            self.number = number
        }
    }

    /// A resting task taken out of its group (`wake`, `wakeOne`, `nextForSlot`): it has left the queue's books until
    /// `add`ed again, or put back to rest (`rest(_:like:)`).
    public struct Woken {
        let origin: Origin
        public let id: String
        public let submitted: Double
        public var job: Job { Job(class: origin.fields, id: id, app: origin.app, submitted: submitted) }
        public var rest: Rest { origin.rest }
        /// The group it was woken from: tasks of one group decide alike.
        public var group: Int { origin.number }
    }

    /// What `removeWaiting` took out: an awake task's item, or a resting task's rest.
    public enum Removed {
        case awake(Item)
        case resting(Rest)
        public var item: Item? { if case .awake(let i) = self { return i } else { return nil } }
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

    /// A group rests on its class and on its standing: the verdict and every rule and requirement that matched
    /// (`Standing`), so that a rule behind the deciding one that stops matching (the charger plugged while the
    /// network is down) wakes the group and its hold starts from that change, not from the deciding rule's.
    struct RestKey: Hashable {
        var rest: RestClass
        var standing: Standing
        var verdict: Verdict { standing.verdict }
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
    public mutating func add(_ job: Job, _ item: Item) -> Removed? {
        let old = removeWaiting(job.id)
        awake[job.id] = item
        awakeJobs[job.id] = job
        count(job, +1)
        return old
    }

    private mutating func count(_ job: Job, _ n: Int) { count(app: job.app, kind: job.fields.kind, n) }

    private mutating func count(_ w: Woken, _ n: Int) { count(app: w.origin.app, kind: w.origin.fields.kind, n) }

    private mutating func count(app: String?, kind: TaskKind, _ n: Int) {
        if let a = app {
            counts.perApp[a] = (counts.perApp[a] ?? 0) + n > 0 ? (counts.perApp[a] ?? 0) + n : nil
            let k = AppKind(app: a, kind: kind)
            counts.perAppKind[k] = (counts.perAppKind[k] ?? 0) + n > 0 ? (counts.perAppKind[k] ?? 0) + n : nil
        } else {
            counts.commands += n
        }
    }

    /// Takes a waiting request out, awake or resting (cancelled, replaced, or supervised anew).
    @discardableResult
    public mutating func removeWaiting(_ id: String) -> Removed? {
        if let item = takeAwake(id) {
            count(awakeJobs.removeValue(forKey: id)!, -1)
            return .awake(item)
        }
        guard let w = takeResting(id) else { return nil }
        count(w, -1)
        return .resting(w.rest)
    }

    /// An awake task out of the awake indexes (its job stays, for the caller to move or drop).
    private mutating func takeAwake(_ id: String) -> Item? {
        guard let item = awake.removeValue(forKey: id), awakeJobs[id] != nil else { return nil }
        heldBack.remove(id)
        return item
    }

    /// A resting task out of its group (an emptied group goes).
    private mutating func takeResting(_ id: String) -> Woken? {
        guard let g = groups.firstIndex(where: { $0.ids[id] != nil }), let submitted = groups[g].ids.removeValue(forKey: id) else { return nil }
        let w = groups[g].woken(id, submitted: submitted)
        if groups[g].ids.isEmpty { groups.remove(at: g) }
        return w
    }

    /// A waiting request started: it runs now, and takes a slot.
    public mutating func start(_ id: String) {
        guard let job = awakeJobs[id], let item = takeAwake(id) else { return }
        awakeJobs[id] = nil
        count(job, -1)
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
        let again = heldBack.filter { awake[$0] != nil }
        heldBack = []
        return (item, Array(again))
    }

    /// What the queue's rules read of a waiting (awake or resting) or running task.
    public func job(_ id: String) -> Job? {
        if let j = awakeJobs[id] ?? runningJobs[id] { return j }
        for g in groups { if let t = g.ids[id] { return g.job(id, submitted: t) } }
        return nil
    }

    /// Whether `id` waits, awake or resting.
    public func isWaiting(_ id: String) -> Bool { awake[id] != nil || isResting(id) }

    /// Every waiting id of `app` (nil: the command tasks), awake or resting, in no order.
    public func waitingIDs(app: String?) -> [String] {
        awakeJobs.values.filter { $0.app == app }.map(\.id) + groups.filter { $0.app == app }.flatMap(\.ids.keys)
    }


    /// How many tasks wait, awake or resting.
    public var waitingCount: Int { awake.count + restingCount }

    // MARK: Admission

    /// How many requests of `app` wait (nil: command tasks).
    public func waitingCount(app: String?) -> Int { app.map { counts.perApp[$0] ?? 0 } ?? counts.commands }

    /// nil if `job` may be queued now, else why not: the per-app limit (`daemon.max_pending_per_app`) and, for an
    /// app, Apple's limits per kind. A request replacing its own waiting one does not count twice.
    public func refusal(for job: Job) -> String? {
        let replaced = isWaiting(job.id) ? self.job(job.id) : nil
        let replaces = replaced != nil
        let app = job.app ?? "cli"
        if let a = job.app {
            let sameKind = counts.perAppKind[AppKind(app: a, kind: job.fields.kind)] ?? 0
            let replacesSameKind = replaced?.fields.kind == job.fields.kind
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
            if awakeJobs[id] != nil { heldBack.insert(id) }
            return Scheduler.previousRunStill
        }
        guard let job = awakeJobs[id] else { return nil }
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
        return Array(awake.keys)
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

    /// The awake waiting task `id` rests on `rest` (whose verdict is `verdict`): only a change of conditions that
    /// changes the verdict of its class can start it, so it is not told of anything else. It joins the group of its
    /// class, app and verdict whose rest it shares (`RestState`), which keeps `rest` as the newest; its item goes
    /// (returned): the caller keeps nothing of it but its store's row. nil, and it stays awake, where there is no
    /// such group and no room for one (`maxGroups`). (The caller decides that it may rest: no rule reads its identity.)
    @discardableResult
    public mutating func rest(_ id: String, verdict: Verdict, rest: Rest) -> Item? {
        self.rest(id, standing: Standing(verdict: verdict), rest: rest)
    }

    /// The same, on a standing (its verdict and what matched): the group wakes when the standing of its class
    /// changes (`wake(standing:)`).
    @discardableResult
    public mutating func rest(_ id: String, standing: Standing, rest: Rest) -> Item? {
        guard let job = awakeJobs[id] else { return nil }
        let key = RestKey(rest: RestClass(job.fields), standing: standing)
        var g = groups.firstIndex { $0.key == key && $0.app == job.app && rest.sharesGroup(with: $0.rest) }
        if let i = g {
            groups[i].rest = rest
        } else {
            guard groups.count < Self.maxGroups else { return nil }
            groupsMade += 1
            groups.append(Group(number: groupsMade, key: key, app: job.app, rest: rest, fields: job.fields))
            g = groups.count - 1
        }
        let item = takeAwake(id)
        awakeJobs[id] = nil
        groups[g!].ids[id] = job.submitted
        return item
    }

    public func isResting(_ id: String) -> Bool { group(of: id) != nil }
    /// The rest of the group the resting task `id` is in (what its supervisor knew: why it waits).
    public func rest(of id: String) -> Rest? { group(of: id).flatMap(rest(ofGroup:)) }
    /// The number of the group the resting task `id` is in: tasks listed with the same number are told the same.
    @inlinable public func group(of id: String) -> Int? {
        // By index, and only the number out: a listing asks for each of its tasks, and a group copied whole (its
        // rest, its fields, its dictionary of ids) was most of the look-up. Inlinable: specialized in the daemon,
        // not a generic function reaching the dictionary through witness tables.
        for i in groups.indices where groups[i].ids[id] != nil { return groups[i].number }
        return nil
    }
    /// The rest of the group numbered `number`, while it has tasks.
    public func rest(ofGroup number: Int) -> Rest? {
        for i in groups.indices where groups[i].number == number { return groups[i].rest }
        return nil
    }
    public var restingCount: Int { groups.reduce(0) { $0 + $1.ids.count } }

    /// The conditions changed: every resting group whose class's verdict (`verdict`, asked once per class) is not the
    /// one it rests on wakes. Returns its tasks, taken out of the queue's books: the caller `add`s each again with a
    /// supervisor that takes up its rest and decides in full.
    public mutating func wake(verdict: (TaskFields) -> Verdict) -> [Woken] {
        wake(standing: { Standing(verdict: verdict($0)) })
    }

    /// The conditions changed: every resting group whose class's standing (`standing`, asked once per class: the
    /// verdict and every rule and requirement that matches) is not the one it rests on wakes, as `wake(verdict:)`.
    public mutating func wake(standing: (TaskFields) -> Standing) -> [Woken] {
        var now: [RestClass: Standing] = [:]
        var woken: [Woken] = []
        var counted: [(app: String?, kind: TaskKind, n: Int)] = []
        groups.removeAll { g in
            let v: Standing
            if let known = now[g.key.rest] { v = known } else {
                v = standing(g.fields)
                now[g.key.rest] = v
            }
            guard v != g.key.standing else { return false }
            woken.reserveCapacity(woken.count + g.ids.count)
            let origin = g.origin()
            for (id, t) in g.ids { woken.append(Woken(origin: origin, id: id, submitted: t)) }
            counted.append((g.app, g.fields.kind, g.ids.count))
            return true
        }
        for c in counted { count(app: c.app, kind: c.kind, -c.n) }
        return woken
    }

    /// The resting task `id` is woken by something else (a call about it, a reload): taken out of the queue's books
    /// as `wake` does, for the caller to `add` again.
    public mutating func wakeOne(_ id: String) -> Woken? {
        guard let w = takeResting(id) else { return nil }
        count(w, -1)
        return w
    }

    /// A woken task put back to rest beside `other`, a task woken from the same group that was decided in full and
    /// rested again: tasks of one group are told apart by nothing the policy reads, so they decide alike, and the
    /// others of a group that wakes need no supervisor once one of them has rested. false if `other` does not rest.
    @discardableResult
    public mutating func rest(_ w: Woken, like other: String) -> Bool {
        guard let g = groups.firstIndex(where: { $0.ids[other] != nil }) else { return false }
        groups[g].ids[w.id] = w.submitted
        count(w, +1)
        return true
    }

    /// The resting task that waits only for a slot and may take one now, first in submission order: taken out of
    /// its group for the caller to decide (nil: none, or no slot free for any). Tasks rest on a slot when the policy
    /// would run them (their group's verdict is run or throttle); the class says which slot they need.
    public mutating func nextForSlot() -> Woken? {
        var best: (g: Int, id: String, submitted: Double)?
        for (i, g) in groups.enumerated() where g.key.verdict == .run || g.key.verdict == .throttle {
            guard limits.slot(for: g.fields, load: load) == nil else { continue }
            for (id, t) in g.ids where running[id] == nil {
                if best == nil || (t, id) < (best!.submitted, best!.id) { best = (i, id, t) }
            }
        }
        guard let b = best else { return nil }
        return wakeOne(b.id)
    }

    /// Every resting task woken (a reload: each is supervised anew under the new policy).
    public mutating func wakeAll() -> [Woken] {
        let woken = groups.flatMap { g in
            let origin = g.origin()
            return g.ids.map { Woken(origin: origin, id: $0.key, submitted: $0.value) }
        }
        groups = []
        for w in woken { count(w, -1) }
        return woken
    }

    /// Whether some resting class answers `check` (asked once per class): e.g. whether a temperature could
    /// change the verdict of some resting task.
    public func anyRestingClass(_ check: (TaskFields) -> Bool) -> Bool {
        var asked: Set<RestClass> = []
        return groups.contains { asked.insert($0.key.rest).inserted && check($0.fields) }
    }
}
