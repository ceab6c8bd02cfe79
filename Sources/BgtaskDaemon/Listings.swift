#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskBus
import BgtaskCore
import BgtaskPolicy
import BgtaskProtocol
import BgtaskQueue
import BgtaskRun

/// What the listings tell of the queue (`ListPending`, `ListPendingPage`, `ListPendingJSON`, `ListRunning`): the
/// stored queue read a page at a time, and what the daemon holds of each task looked up.
extension QueueDriver {
    /// What a listing learns once and tells many tasks: the readings a wait depends on, each reading's estimate,
    /// and the answer for each combination of waits (a page of 2,500 tasks has a few).
    struct LikelyCache {
        var readings: (power: Bool, inUse: Bool, online: Bool)?
        var estimates: [String: StartEstimate.Outcome] = [:]
        var told: [UInt8: (at: Double?, text: String)] = [:]
    }

    /// What a task may wait for that the machine's history can tell the time of, in the order of `likelyStart`'s mask.
    static let waits: [(name: String, what: String, future: String)] = [
        ("power.external", "the charger came", "the charger comes"), ("user.idle", "you stepped away", "you step away"),
        ("network.online", "the network came", "the network comes"),
    ]

    /// When a task waiting for the charger, the person's absence or the network will likely start, from the
    /// machine's own history; nil when it waits for none of them. Each reading's estimate is made once a call.
    func likelyStart(_ row: QueuedTask, wall: Double, cache: inout LikelyCache) -> (at: Double?, text: String)? {
        if cache.readings == nil {
            let r = readings ?? [:]
            cache.readings = (r["power.external"] == .bool(true), r["user.idle"] == .bool(false), r["network.online"] == .bool(true))
        }
        let now = cache.readings!
        var mask: UInt8 = 0
        if row.requiresExternalPower && !now.power { mask |= 1 }
        if row.kind == .processing && !row.userInitiated && now.inUse { mask |= 2 }
        if row.requiresNetwork && !now.online { mask |= 4 }
        guard mask != 0 else { return nil }
        if let told = cache.told[mask] { return told }
        var latest: (StartEstimate.Estimate, String)?
        var answer: (at: Double?, text: String)?
        for (i, w) in QueueDriver.waits.enumerated() where mask & (1 << i) != 0 {
            let outcome: StartEstimate.Outcome
            if let c = cache.estimates[w.name] { outcome = c } else {
                let rows = (try? store.transitions(w.name, since: wall - 56 * 86_400)) ?? []
                let history = rows.compactMap { row -> StartEstimate.Change? in
                    row.value == "true" ? .init(time: row.time, value: true) : row.value == "false" ? .init(time: row.time, value: false) : nil
                }
                outcome = StartEstimate.estimate(history, now: wall)
                cache.estimates[w.name] = outcome
            }
            if case .unknown(let why) = outcome { answer = (nil, "no estimate of when \(w.future): \(why)"); break }
            if case .likely(let est) = outcome, latest == nil || est.at > latest!.0.at { latest = (est, w.what) }
        }
        if answer == nil, let (est, what) = latest { answer = (est.at, StartEstimate.text(est, what: what, now: wall)) }
        cache.told[mask] = answer
        return answer
    }

    /// The page of waiting tasks a `PageRange` asks for (`ListPendingPage`, `ListPendingJSON`), each task given to
    /// `body` as it is made (a page is held once, as the rows read), and the cursor of the page after it (empty after
    /// the last).
    func pendingPage(_ range: PageRange, _ body: (PendingTask) -> Void) -> Result<String, BusError> {
        let limit = range.limit ?? RequestBounds.pageDefault
        guard (1...RequestBounds.pageMost).contains(limit) else {
            return .failure(SchedulerError.invalidArgs("limit: a number of tasks from 1 to \(RequestBounds.pageMost)"))
        }
        var after: Position?
        if let c = range.after, !c.isEmpty {
            guard c.utf8.count <= 512, let p = Position(cursor: c) else {
                return .failure(SchedulerError.invalidArgs("after: a cursor from a previous page's next (submitted|id)"))
            }
            after = p
        }
        if let id = range.id {
            listPending(listed([id])).forEach(body)
            return .success("")
        }
        // A page of the stored queue through its (state, submitted, id) index, one row more than asked to know
        // whether another page follows: what the daemon holds of each is looked up, not listed.
        let rows = (try? store.page(state: "pending", after: after.map { ($0.submitted, $0.id) }, limit: Int(limit) + 1)) ?? []
        let count = min(rows.count, Int(limit))
        var told = Told(self)
        for i in 0..<count {
            if let t = pendingTask(row: rows[i], &told) { body(t) }
        }
        let next = rows.count > count ? Position(submitted: rows[count - 1].submitted, id: rows[count - 1].id).cursor : ""
        return .success(next)
    }
    typealias Position = Scheduler<Entry, Supervisor.Rest>.Position

    /// A waiting task as a listing tells it: its row, and its supervisor if it is awake, else the number of its
    /// resting group (tasks of one group are told the same).
    struct Listed {
        var row: QueuedTask
        var awake: Supervisor?
        var group: Int?
    }

    /// What a listing works out once and tells many tasks (a page of 2,500 has a few groups and a few waits): the
    /// clocks and the policy, the estimates of `likelyStart`, what each resting group is told, the last command read.
    struct Told {
        let wall: Double, mono: Double
        let evaluator: Policy.Evaluator?
        /// When a task could run at the earliest (`next_run`), under the readings as they are now.
        let nextRun: NextRun?
        var likely = LikelyCache()
        var groups: [Int: Group] = [:]
        var command: (argv: String, words: [String])?

        /// What every task of a resting group is told alike, from the group's rest: made at its first task.
        struct Group {
            var rest: Supervisor.Rest?
            /// What its tasks do not meet when no earliest date of their own is still ahead.
            var unmet: [[String: BusValue]]
            /// When its tasks could run, when no earliest date of their own is still ahead.
            var nextRun: Double?
        }

        init(_ d: QueueDriver) {
            wall = wallClockNow()
            mono = monotonic()
            evaluator = d.evaluator()
            let now = wall
            nextRun = d.conditions.map { NextRun(policy: d.policy, conditions: $0, now: now, time: { localTime($0) }) }
        }

        /// The command of `row`, decoded once for a run of tasks with the same one (a batch submitted together).
        mutating func words(_ row: QueuedTask) -> [String] {
            if let c = command, c.argv == row.argv { return c.words }
            let w = row.command
            command = (row.argv, w)
            return w
        }
    }

    /// The stored row `row` as listed, if its task waits here (awake: the row it holds, which may be newer).
    func listed(row: QueuedTask) -> Listed? {
        if let e = queue.awake[row.id] { return Listed(row: e.row, awake: e.supervisor) }
        guard let g = queue.group(of: row.id) else { return nil }
        return Listed(row: row, group: g)
    }

    /// The waiting tasks among `ids`, in submission order; resting tasks' rows read from the queue in one batch.
    func listed(_ ids: [String]) -> [Listed] {
        let resting = ids.filter { queue.awake[$0] == nil && queue.isResting($0) }
        let rows = resting.isEmpty ? [] : (try? store.rows(ids: resting, state: "pending")) ?? []
        return (inOrder(ids).map { Listed(row: $0.row, awake: $0.supervisor) } + rows.compactMap(listed(row:)))
            .sorted { ($0.row.submitted, $0.row.id) < ($1.row.submitted, $1.row.id) }
    }

    /// Every waiting task in submission order (`ListPending`), the stored queue read a page at a time.
    func pendingAll() -> [PendingTask] {
        var out: [PendingTask] = []
        var told = Told(self)
        var after: (submitted: Double, id: String)?
        while true {
            let rows = (try? store.page(state: "pending", after: after, limit: 1_000)) ?? []
            for r in rows { if let t = pendingTask(row: r, &told) { out.append(t) } }
            guard rows.count == 1_000, let last = rows.last else { return out }
            after = (last.submitted, last.id)
        }
    }

    /// What `entries` wait for (those that wait), as `ListPending` tells it.
    func listPending(_ entries: [Listed]) -> [PendingTask] {
        var told = Told(self)
        return entries.compactMap { pendingTask($0, &told) }
    }

    func pendingTask(row: QueuedTask, _ told: inout Told) -> PendingTask? {
        listed(row: row).flatMap { pendingTask($0, &told) }
    }

    /// What the waiting task `e` waits for, nil if it is awake and not waiting (starting, say).
    func pendingTask(_ e: Listed, _ told: inout Told) -> PendingTask? {
        let row = e.row
        let wall = told.wall
        var reason: String, rule: (id: String, location: String)?, unmet: [[String: BusValue]]
        var nextRun: Double?
        var fields = row.fields
        fields.waited = max(0, wall - row.submitted)
        if let s = e.awake {
            guard s.machine.phase == .waiting else { return nil }
            reason = s.waitingReason
            rule = s.waitingRule
            var slot: String?
            if case .noSlot(let why)? = s.machine.startBlock { slot = why }
            var matches = s.machine.lastDecision?.matches ?? told.evaluator?.decideNow(row.fields).matches ?? []
            // Countdowns made now, not at the decision: a window's "it opens in 5h" said at 20:00 is wrong at 23:00.
            if let w = row.window, let i = matches.firstIndex(where: { $0.ruleID == "task.in_window" }) {
                let fresh = Policy.windowReason(w, time: localTime(wall))
                reason = reason.replacingOccurrences(of: matches[i].reason, with: fresh)
                matches[i].reason = fresh
            }
            // Its earliest date by its cause (the calendar event, the retry's backoff …), the countdown left to LEFT.
            if case .earliest(let at)? = s.machine.startBlock {
                // The row's date itself where it has one: through the monotonic clock and back it may read a second early.
                reason = "not before \(clockText(row.earliest ?? wall + (at - told.mono), now: wall)) (\(QueueDriver.earliestCause(row))); no rule holds it back"
            }
            unmet = self.unmet(row, matches, slot: slot, wall: wall)
            // Holds on the monotonic clock, told on the wall clock.
            var holds: [String: Double] = [:]
            for m in matches { if let h = m.heldUntil { holds[m.ruleID] = wall + (h - told.mono) } }
            nextRun = told.nextRun?.earliest(task: fields, blocking: matches, holds: holds, earliest: row.earliest)
        } else {
            // A resting task's last decision is its group's rest's: no decision made per task listed, and what the
            // group does not meet made once, one list shared by its tasks.
            let g = e.group ?? -1
            if told.groups[g] == nil {
                let rest = queue.rest(ofGroup: g)
                let matches = rest?.decision.matches ?? told.evaluator?.decideNow(row.fields).matches ?? []
                // A group rests with no hold running, and no rule its tasks' age decides (what tells them apart).
                told.groups[g] = Told.Group(rest: rest, unmet: self.unmet(nil, matches, slot: rest?.slot, wall: wall),
                                            nextRun: told.nextRun?.earliest(task: fields, blocking: matches, holds: [:], earliest: nil))
            }
            let group = told.groups[g]!
            reason = group.rest?.reason ?? ""
            rule = group.rest?.rule
            if let t = row.earliest, t > wall {
                let matches = group.rest?.decision.matches ?? []
                unmet = self.unmet(row, matches, slot: group.rest?.slot, wall: wall)
                nextRun = told.nextRun?.earliest(task: fields, blocking: matches, holds: [:], earliest: t)
            } else {
                unmet = group.unmet
                nextRun = group.nextRun
            }
        }
        var t = PendingTask(id: row.id, app: row.app, kind: row.kind.rawValue, command: told.words(row), submitted: row.submitted,
                            reason: reason.isEmpty ? "not yet evaluated" : reason,
                            requiresExternalPower: row.requiresExternalPower, requiresNetwork: row.requiresNetwork,
                            requiresUnmetered: row.requiresUnmetered, cpuHeavy: row.cpuHeavy, userInitiated: row.userInitiated,
                            failures: UInt32(row.failures), retry: UInt32(row.retry), unmet: unmet,
                            rule: rule?.id, location: rule?.location,
                            earliest: row.earliest, every: row.every, calendar: row.calendar, window: row.window)
        if let l = likelyStart(row, wall: wall, cache: &told.likely) {
            t.likely = l.text
            t.likelyStart = l.at
        }
        // When it will next be looked at without any condition changing (a hold, the earliest date, a time rule), and
        // when it could run at the earliest (what `pending` shows as NEXT).
        if let n = e.awake?.nextDeadline {
            var check = wall + (n - told.mono)
            // Its earliest date itself, not that date's round trip through the monotonic clock (a microsecond
            // before it: "tomorrow 01:59:59" for a --at 02:00).
            if let at = row.earliest, abs(check - at) < 0.01 { check = at }
            t.nextCheck = check
        }
        t.nextRun = nextRun
        return t
    }

    /// What set a task's earliest date, in the words its wait is told with: not Apple's "earliest begin date" for a
    /// calendar event, a period or a retry's backoff.
    static func earliestCause(_ row: QueuedTask) -> String {
        if row.failures > 0 { return "its retry backoff: retry \(row.failures) of \(row.retry)" }
        if let c = row.calendar { return "its calendar event '\(c)'" }
        if let e = row.every { return "its next period, every \(formatDuration(e))" }
        return row.isAppTask ? "its earliest begin date" : "its start time, --at or --earliest"
    }

    /// Everything that keeps a waiting task from starting now, not only what decided (dumpsys's "unsatisfied
    /// constraints"): each rule in effect that is not run or throttle (held ones with when they let go), its
    /// earliest begin date (of `row`: nil for what a resting group's tasks share), and a full slot.
    func unmet(_ row: QueuedTask?, _ matches: [Match], slot: String?, wall: Double) -> [[String: BusValue]] {
        var out: [[String: BusValue]] = []
        for m in matches where m.verdict != .run && m.verdict != .throttle {
            out.append(["what": .string("rule"), "rule": .string(m.ruleID), "location": .string(m.location.description),
                        "reason": .string(m.reason)])
        }
        if let row, let t = row.earliest, t > wall {
            out.append(["what": .string("earliest"), "reason": .string("not before \(clockText(t, now: wall)) (\(QueueDriver.earliestCause(row)))")])
        }
        if let slot { out.append(["what": .string("slot"), "reason": .string(slot)]) }
        return out
    }

    func listRunning() -> [RunningTask] {
        let mono = monotonic()
        return running.values.sorted { $0.id < $1.id }.filter { !$0.supervisor.isDone }.map { e in
            let s = e.supervisor
            var t = RunningTask(id: e.id, app: e.row.app, kind: e.row.kind.rawValue, state: s.machine.phase.state, command: e.row.command)
            t.pid = s.pid.map { UInt32($0) }
            if let started = s.startedAt, let running = s.machine.runningTime(now: mono) {
                let runtime = max(0, mono - started)
                t.runtime = runtime
                // The budget counts seconds of running; a pause does not use it up.
                t.budgetLeft = s.machine.limits.budget.map { max(0, $0 - running) }
                if let cpu = s.taskProcess?.cpuSeconds(), runtime > 0 { t.cpuShare = cpu / runtime * 100 }
            }
            if case .running(let cap?) = s.machine.phase { t.cpuCap = UInt32(cap) }
            if let v = host.appTaskView(e.id) ?? (e.row.title.map { AppTaskView(title: $0, subtitle: e.row.subtitle) }) {
                t.title = v.title
                t.subtitle = v.subtitle
                if v.total > 0 { t.progressCompleted = v.completed; t.progressTotal = v.total }
            }
            t.mechanism = s.taskProcess?.mechanism.rawValue
            // Its share of the machine's measured draw over the last interval (absent: no source); someone asking is
            // a wake that came anyway, so the figure is made fresh (at most 10 s old) then, not by a timer.
            s.sampleEnergyIfDue(now: mono)
            t.watts = s.energy.lastWatts
            t.energyWh = s.energy.wattHours
            // What holds it back while it runs (a throttle, a pause): the deciding rule and its file:line.
            if let dec = s.machine.lastDecision, dec.verdict != .run, let m = dec.matches.first {
                t.reason = "\(m.reason) — rule \(m.ruleID) (\(m.location))"
            }
            t.unit = s.taskProcess?.unitName
            return t
        }
    }
}
