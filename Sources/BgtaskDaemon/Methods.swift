#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskBus
import BgtaskConfig
import BgtaskCore
import BgtaskPolicy
import BgtaskQueue
import BgtaskRun

/// Bounds on what a caller may send: commands and how fast (identifiers: `TaskID.problem`).
public enum RequestBounds {
    public static let maxArguments = 4096
    public static let maxCommandBytes = 256 * 1024
    public static let maxDirectoryBytes = 4096
    /// Submits per caller per second, averaged over a burst of `submitBurst`.
    public static let submitsPerSecond = 200.0
    public static let submitBurst = 1000.0
}

extension Daemon {
    static let submitKeys: Set<String> = ["id", "kind", "requires_external_power", "requires_network", "requires_unmetered",
                                          "cpu_heavy", "user_initiated", "earliest", "every", "retry", "budget", "directory",
                                          "window", "on_calendar"]

    /// What a sandboxed caller may call besides the `App*` methods (for its own app id): nothing of another app's.
    static let sandboxedMethods: Set<String> = ["GetSupportedResources", "ListApps"]
    /// Calls that neither read nor change the queue: answered while start-up still takes it up.
    static let queueFreeMethods: Set<String> = ["GetStatus", "GetSupportedResources", "ListApps", "GetConditions"]

    /// Who sent `call`, established once per connection (unique names are never reused on a bus) and
    /// forgotten when it leaves. Anything that cannot be established is a refusal (`CallerCheck`).
    func caller(of call: BusCall) -> Result<Caller, BusError> {
        if let c = callers[call.sender] { return .success(c) }
        let receivedAt = CallerCheck.ticksSinceBoot()
        switch CallerCheck().identify(object?.credentials(of: call.sender), receivedAt: receivedAt) {
        case .failure(let why):
            return .failure(BusError(SchedulerBus.ErrorName.accessDenied, "bgtaskd cannot establish who is calling: \(why)"))
        case .success(let c):
            // The session bus is the user's own, but a system-wide bus configured oddly is not: check.
            guard c.uid == getuid() else {
                return .failure(BusError(SchedulerBus.ErrorName.accessDenied, "bgtaskd serves only uid \(getuid())"))
            }
            if callers.count >= 4096 { callers = [:] }
            callers[call.sender] = c
            return .success(c)
        }
    }

    func handle(_ call: BusCall) -> Result<[BusValue], BusError> {
        let who: Caller
        switch caller(of: call) {
        case .failure(let e): return .failure(e)
        case .success(let c): who = c
        }
        // A sandboxed app reaches the user's queue only through its own app id: a Submit would run a command
        // outside its sandbox, a Cancel or a listing would reach other apps' work.
        if who.sandbox != .none, !call.method.hasPrefix("App"), !Daemon.sandboxedMethods.contains(call.method) {
            return .failure(BusError(SchedulerBus.ErrorName.accessDenied,
                                     "\(call.method) is not for a sandboxed caller (\(who.sandbox)): it may use the App* methods for its own app id"))
        }
        // A call that reads or changes the queue sees all of it: what start-up has not taken up yet is taken up now.
        if !Daemon.queueFreeMethods.contains(call.method) { restoreAll() }
        func str(_ i: Int) -> String? { call.args.count > i ? call.args[i]?.string : nil }
        if let r = handleApp(call, who) { return r }
        switch call.method {
        case "Submit":
            guard call.args.count == 2, case .dict(let opts)? = call.args[0], let argv = call.args[1]?.strings else {
                return .failure(BusError(SchedulerBus.ErrorName.invalidArgs, "Submit takes (a{sv} options, as command)"))
            }
            if !allowSubmit(call.sender) {
                return .failure(BusError(SchedulerBus.ErrorName.tooManyPending, "too many submissions from \(call.sender); slow down"))
            }
            return submit(opts, argv).map { [.string($0)] }
        case "Cancel":
            guard let id = str(0) else { return .failure(BusError(SchedulerBus.ErrorName.invalidArgs, "Cancel takes (s id)")) }
            return cancel(id).map { [.string($0)] }
        case "CancelAll":
            let n = cancelAll()
            return .success([.uint32(UInt32(n))])
        case "ListPending":
            return .success([.dicts(listPending())])
        case "ListRunning":
            return .success([.dicts(listRunning())])
        case "DebugLaunch":
            guard let id = str(0) else { return .failure(BusError(SchedulerBus.ErrorName.invalidArgs, "DebugLaunch takes (s id)")) }
            guard let e = pending[id] else { return .failure(BusError(SchedulerBus.ErrorName.noSuchTask, "no pending task \(id)")) }
            if running[id] != nil { return .failure(BusError(SchedulerBus.ErrorName.immediateRunIneligible, "\(id): \(Daemon.previousRunStill)")) }
            wake(e).launchNow(now: monotonic())
            return .success([])
        case "DebugExpire":
            guard let id = str(0) else { return .failure(BusError(SchedulerBus.ErrorName.invalidArgs, "DebugExpire takes (s id)")) }
            guard let e = running[id], !e.supervisor.isDone else { return .failure(BusError(SchedulerBus.ErrorName.noSuchTask, "no running task \(id)")) }
            e.supervisor.expireNow(now: monotonic(), why: "bgtask debug expire")
            return .success([])
        case "ReloadPolicy":
            let (ok, said) = reload()
            afterRound(conditionsChanged: false)
            return .success([.bool(ok), .string(said)])
        case "GetConditions":
            return .success([.dict(appConditions)])
        case "GetStatus":
            var d: [String: BusValue] = ["version": .string(bgtaskVersion), "pid": .uint32(UInt32(getpid())),
                                         "pending": .uint32(UInt32(pending.count)), "running": .uint32(UInt32(running.count)),
                                         "state_directory": .string(stateDir)]
            if let w = policyWarning { d["policy_warning"] = .string(w) }
            return .success([.dict(d)])
        default:
            return .failure(BusError("org.freedesktop.DBus.Error.UnknownMethod", "no method \(call.method)"))
        }
    }

    /// A token bucket per sender: a flood of submits cannot grow the queue faster than the disk can keep it.
    func allowSubmit(_ sender: String) -> Bool {
        let now = monotonic()
        var b = buckets[sender] ?? (RequestBounds.submitBurst, now)
        b.tokens = min(RequestBounds.submitBurst, b.tokens + (now - b.at) * RequestBounds.submitsPerSecond)
        b.at = now
        guard b.tokens >= 1 else { buckets[sender] = b; return false }
        b.tokens -= 1
        buckets[sender] = b
        if buckets.count > 1024 { buckets = buckets.filter { now - $0.value.at < 60 } }
        return true
    }

    func submit(_ opts: [String: BusValue], _ argv: [String]) -> Result<String, BusError> {
        func bad(_ m: String) -> Result<String, BusError> { .failure(BusError(SchedulerBus.ErrorName.invalidArgs, m)) }
        if let unknown = opts.keys.sorted().first(where: { !Daemon.submitKeys.contains($0) }) { return bad("unknown option '\(unknown)'") }
        if argv.isEmpty || argv[0].isEmpty { return bad("the command is empty") }
        if argv.count > RequestBounds.maxArguments { return bad("the command has \(argv.count) arguments, over \(RequestBounds.maxArguments)") }
        if argv.reduce(0, { $0 + $1.utf8.count + 1 }) > RequestBounds.maxCommandBytes { return bad("the command is over \(RequestBounds.maxCommandBytes) bytes") }
        guard let id = (opts["id"] ?? .string(TaskID.fromCommand(argv[0]))).string else { return bad("id must be a string") }
        if let why = TaskID.problem(id) { return bad(why) }
        let kind = opts["kind"].map { $0.string ?? "" } ?? "processing"
        guard ["processing", "refresh", "continued", "regular"].contains(kind) else { return bad("kind '\(kind)': one of processing, refresh, continued, regular") }
        let now = wallClockNow()
        var row = QueuedTask(id: id, kind: kind, argv: argv, submitted: now)
        row.runID = Daemon.newRunID(id)
        for (key, path) in [("requires_external_power", \QueuedTask.requiresExternalPower), ("requires_network", \.requiresNetwork),
                            ("requires_unmetered", \.requiresUnmetered), ("cpu_heavy", \.cpuHeavy), ("user_initiated", \.userInitiated)] {
            guard let v = opts[key] else { continue }
            guard let b = v.bool else { return bad("\(key) must be a boolean") }
            row[keyPath: path] = b
        }
        if row.requiresUnmetered { row.requiresNetwork = true }
        if kind == "continued" { row.userInitiated = true }
        func seconds(_ key: String, max: Double) -> Result<Double?, BusError> {
            guard let v = opts[key] else { return .success(nil) }
            guard let n = v.number, n.isFinite, n >= 0, n <= max else {
                return .failure(BusError(SchedulerBus.ErrorName.invalidArgs, "\(key) must be a number of seconds from 0 to \(Int(max))"))
            }
            return .success(n)
        }
        do {
            // `earliest` is an absolute time (seconds since the epoch), bounded to ten years ahead.
            row.earliest = try seconds("earliest", max: now + 3650 * 86_400).get()
            row.every = try seconds("every", max: 3650 * 86_400).get()
            row.budget = try seconds("budget", max: 86_400).get()
            if let r = try seconds("retry", max: 100).get() { row.retry = Int(r) }
        } catch { return .failure(error) }
        if let w = opts["window"] {
            guard let s = w.string, s.utf8.count <= 32, let window = ClockWindow(s) else { return bad("window must be HH:MM-HH:MM, such as 01:00-06:00") }
            row.window = window.text
        }
        if let c = opts["on_calendar"] {
            guard let s = c.string else { return bad("on_calendar must be a string") }
            if row.every != nil { return bad("on_calendar and every exclude each other") }
            let event: CalendarEvent
            do { event = try CalendarEvent(parsing: s) } catch { return bad(error.description) }
            guard let first = event.next(after: max(now, row.earliest ?? now) - 0.001) else { return bad("calendar event '\(s)' never elapses again") }
            row.calendar = s
            row.earliest = first
        }
        if let e = row.every {
            guard e >= 1 else { return bad("every must be at least 1 second") }
            row.anchor = row.earliest ?? now
            if row.earliest == nil { row.earliest = now }
        }
        if let d = opts["directory"] {
            guard let s = d.string, s.hasPrefix("/"), s.utf8.count <= RequestBounds.maxDirectoryBytes, !s.contains("\0") else {
                return bad("directory must be an absolute path")
            }
            row.directory = s
        }
        if pending[id] == nil, pendingCount(app: row.app) >= limits.maxPendingPerApp {
            return .failure(BusError(SchedulerBus.ErrorName.tooManyPending,
                                     "\(row.app) has \(limits.maxPendingPerApp) pending requests, the most daemon.max_pending_per_app allows"))
        }
        do { try store.put(row) } catch {
            return .failure(BusError(SchedulerBus.ErrorName.unavailable, "cannot store the request (nothing was queued): \(error)"))
        }
        let replaced = pending.removeValue(forKey: id) != nil
        add(row)
        // Said and signalled once the reply is on its way: neither is what the caller waits for.
        afterReply.append { [unowned self] in
            self.say("\(id): submitted\(replaced ? " (replacing the pending request)" : "")")
            self.bus.emit("TaskChanged", [.string(id), .string("pending")])
        }
        return .success(id)
    }

    /// Removes the pending request `id` and expires its running task. `by` is who asked, as the audit trail
    /// records it ("bgtask cancel", "the app (cancelAllTaskRequests)", …): never the user for what an app did.
    func cancel(_ id: String, by who: String = "bgtask cancel") -> Result<String, BusError> {
        var done: [String] = []
        if let e = pending.removeValue(forKey: id) {
            try? store.remove(id, state: "pending")
            recordEvent(RunEvent(kind: .gaveUp, monotonic: monotonic(), detail: "cancelled (\(who))", decision: nil,
                                  conditions: [:], exitStatus: nil, runID: e.awake?.runOptions.runID ?? e.row.runID), task: e.row.fields)
            done.append("removed the pending request")
        }
        if let e = running[id], !e.supervisor.isDone {
            e.supervisor.expireNow(now: monotonic(), why: "cancelled by \(who)")
            done.append("expired the running task")
        }
        guard !done.isEmpty else { return .failure(BusError(SchedulerBus.ErrorName.noSuchTask, "no task \(id)")) }
        bus.emit("TaskChanged", [.string(id), .string("cancelled")])
        return .success(done.joined(separator: "; "))
    }

    /// The caller's own pending requests: the command tasks (an app's go with `AppCancelAll` or `apps disable`).
    func cancelAll() -> Int {
        let ids = pending.keys.sorted().filter { pending[$0]?.row.isAppTask == false }
        for id in ids { _ = cancel(id, by: "bgtask cancel --all") }
        return ids.count
    }

    /// When a task waiting for the charger, the person's absence or the network will likely start, from the
    /// machine's own history; nil when it waits for none of them. Each reading's estimate is made once a call.
    func likelyStart(_ e: Entry, wall: Double, cache: inout [String: StartEstimate.Outcome]) -> (at: Double?, text: String)? {
        let r = readings ?? [:]
        var waits: [(name: String, what: String, future: String)] = []
        if e.row.requiresExternalPower && r["power.external"] != .bool(true) { waits.append(("power.external", "the charger came", "the charger comes")) }
        if e.row.kind == "processing" && !e.row.userInitiated && r["user.idle"] == .bool(false) {
            waits.append(("user.idle", "you stepped away", "you step away"))
        }
        if e.row.requiresNetwork && r["network.online"] != .bool(true) { waits.append(("network.online", "the network came", "the network comes")) }
        guard !waits.isEmpty else { return nil }
        var latest: (StartEstimate.Estimate, String)?
        for w in waits {
            let outcome: StartEstimate.Outcome
            if let c = cache[w.name] { outcome = c } else {
                let rows = (try? store.transitions(w.name, since: wall - 56 * 86_400)) ?? []
                let history = rows.compactMap { row -> StartEstimate.Change? in
                    row.value == "true" ? .init(time: row.time, value: true) : row.value == "false" ? .init(time: row.time, value: false) : nil
                }
                outcome = StartEstimate.estimate(history, now: wall)
                cache[w.name] = outcome
            }
            switch outcome {
            case .unknown(let why): return (nil, "no estimate of when \(w.future): \(why)")
            case .likely(let est): if latest == nil || est.at > latest!.0.at { latest = (est, w.what) }
            }
        }
        guard let (est, what) = latest else { return nil }
        return (est.at, StartEstimate.text(est, what: what, now: wall))
    }

    func listPending() -> [[String: BusValue]] {
        let wall = wallClockNow(), mono = monotonic()
        let now = evaluator()
        var estimates: [String: StartEstimate.Outcome] = [:]
        return all.filter(\.isWaiting).map { e in
            var d: [String: BusValue] = ["id": .string(e.row.id), "app": .string(e.row.app), "kind": .string(e.row.kind),
                                         "command": .strings(e.row.command), "submitted": .double(e.row.submitted),
                                         "reason": .string(e.waitingReason.isEmpty ? "not yet evaluated" : e.waitingReason),
                                         "requires_external_power": .bool(e.row.requiresExternalPower),
                                         "requires_network": .bool(e.row.requiresNetwork), "failures": .uint32(UInt32(e.row.failures)),
                                         "requires_unmetered": .bool(e.row.requiresUnmetered), "cpu_heavy": .bool(e.row.cpuHeavy),
                                         "user_initiated": .bool(e.row.userInitiated), "retry": .uint32(UInt32(e.row.retry))]
            if let m = e.waitingRule {
                d["rule"] = .string(m.id)
                d["location"] = .string(m.location)
            }
            if let t = e.row.earliest { d["earliest"] = .double(t) }
            if let t = e.row.every { d["every"] = .double(t) }
            if let c = e.row.calendar { d["calendar"] = .string(c) }
            if let l = likelyStart(e, wall: wall, cache: &estimates) {
                d["likely"] = .string(l.text)
                if let at = l.at { d["likely_start"] = .double(at) }
            }
            if let w = e.row.window { d["window"] = .string(w) }
            d["unmet"] = .dicts(unmet(e, now, wall: wall))
            // When it will next be looked at without any condition changing (a hold, the earliest date, a time rule).
            if let n = e.awake?.nextDeadline { d["next_check"] = .double(wall + (n - mono)) }
            return d
        }
    }

    /// Everything that keeps a waiting task from starting now, not only what decided (dumpsys's "unsatisfied
    /// constraints"): each rule in effect that is not run or throttle (held ones with when they let go), its
    /// earliest begin date, and a full slot.
    func unmet(_ e: Entry, _ evaluator: Policy.Evaluator?, wall: Double) -> [[String: BusValue]] {
        var out: [[String: BusValue]] = []
        let matches = e.awake?.machine.lastDecision?.matches ?? evaluator?.decideNow(e.row.fields).matches ?? []
        for m in matches where m.verdict != .run && m.verdict != .throttle {
            out.append(["what": .string("rule"), "rule": .string(m.ruleID), "location": .string(m.location.description),
                        "reason": .string(m.reason)])
        }
        if let t = e.row.earliest, t > wall {
            let why = e.row.calendar.map { "its calendar event '\($0)'" } ?? (e.row.every != nil ? "its next period" : "its earliest begin date")
            out.append(["what": .string("earliest"), "reason": .string("not before \(untilText(t, now: wall)) (\(why))")])
        }
        if case .noSlot(let why)? = e.awake?.machine.startBlock { out.append(["what": .string("slot"), "reason": .string(why)]) }
        return out
    }

    func listRunning() -> [[String: BusValue]] {
        let mono = monotonic()
        return running.values.sorted { $0.row.id < $1.row.id }.filter { !$0.supervisor.isDone }.map { e in
            let s = e.supervisor
            var d: [String: BusValue] = ["id": .string(e.row.id), "app": .string(e.row.app), "kind": .string(e.row.kind),
                                         "state": .string(stateName(s)), "command": .strings(e.row.command)]
            if let p = s.pid { d["pid"] = .uint32(UInt32(p)) }
            if let t = s.startedAt {
                let runtime = max(0, mono - t)
                d["runtime"] = .double(runtime)
                if let b = s.machine.limits.budget { d["budget_left"] = .double(max(0, b - runtime)) }
                if let cpu = s.taskProcess?.cpuSeconds(), runtime > 0 { d["cpu_share"] = .double(cpu / runtime * 100) }
            }
            if case .running(let cap?) = s.machine.phase { d["cpu_cap"] = .uint32(UInt32(cap)) }
            if let v = views[e.row.id] ?? (e.row.title.map { AppTaskView(title: $0, subtitle: e.row.subtitle) }) {
                if let t = v.title { d["title"] = .string(t) }
                if let t = v.subtitle { d["subtitle"] = .string(t) }
                if v.total > 0 { d["progress_completed"] = .uint64(v.completed); d["progress_total"] = .uint64(v.total) }
            }
            if let m = s.taskProcess?.mechanism { d["mechanism"] = .string(m.rawValue) }
            // Its share of the machine's measured draw over the last interval (absent: no source).
            if let w = s.energy.lastWatts { d["watts"] = .double(w) }
            if let wh = s.energy.wattHours { d["energy_wh"] = .double(wh) }
            // What holds it back while it runs (a throttle, a pause): the deciding rule and its file:line.
            if let dec = s.machine.lastDecision, dec.verdict != .run, let m = dec.matches.first {
                d["reason"] = .string("\(m.reason) — rule \(m.ruleID) (\(m.location))")
            }
            if let u = s.taskProcess?.unit { d["unit"] = .string(u.unitName) }
            return d
        }
    }
}

