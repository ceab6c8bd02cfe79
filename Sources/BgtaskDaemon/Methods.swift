#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskBus
import BgtaskConfig
import BgtaskJSON
import BgtaskCore
import BgtaskPolicy
import BgtaskProtocol
import BgtaskQueue
import BgtaskRun

extension Daemon {
    /// What a sandboxed caller may call besides the `App*` methods (for its own app id): nothing of another app's.
    static let sandboxedMethods: Set<SchedulerMethod> = [.getSupportedResources, .listApps]
    /// Calls that neither read nor change the queue: answered while start-up still takes it up.
    static let queueFreeMethods: Set<SchedulerMethod> = [.getStatus, .getSupportedResources, .listApps, .getConditions]

    /// Who sent `call`, established once per connection (unique names are never reused on a bus) and
    /// forgotten when it leaves. Anything that cannot be established is a refusal (`CallerCheck`).
    func caller(of call: BusCall) -> Result<Caller, BusError> {
        if let c = service.callers[call.sender] { return .success(c) }
        let receivedAt = CallerCheck.ticksSinceBoot()
        switch CallerCheck().identify(service.object?.credentials(of: call.sender), receivedAt: receivedAt) {
        case .failure(let why):
            return .failure(SchedulerError.accessDenied("bgtaskd cannot establish who is calling: \(why)"))
        case .success(let c):
            // The session bus is the user's own, but a system-wide bus configured oddly is not: check.
            guard c.uid == getuid() else {
                return .failure(SchedulerError.accessDenied("bgtaskd serves only uid \(getuid())"))
            }
            if service.callers.count >= 4096 { service.callers = [:] }
            service.callers[call.sender] = c
            return .success(c)
        }
    }

    func handle(_ call: BusCall) -> Result<[BusValue], BusError> {
        switch caller(of: call) {
        case .failure(let e): return .failure(e)
        case .success(let who): return handle(call, from: who)
        }
    }

    /// A call from a caller already identified: the service itself, request in, reply out.
    func handle(_ call: BusCall, from who: Caller) -> Result<[BusValue], BusError> {
        // GDBus checked the arguments' types against the interface before this runs; an unknown name is refused too.
        guard let method = SchedulerMethod(rawValue: call.method) else { return .failure(SchedulerError.unknownMethod("no method \(call.method)")) }
        // A sandboxed app reaches the user's queue only through its own app id: a Submit would run a command
        // outside its sandbox, a Cancel or a listing would reach other apps' work.
        if who.sandbox != .none, !call.method.hasPrefix("App"), !Daemon.sandboxedMethods.contains(method) {
            return .failure(SchedulerError.accessDenied(
                                     "\(call.method) is not for a sandboxed caller (\(who.sandbox)): it may use the App* methods for its own app id"))
        }
        // A call that reads or changes the queue sees all of it: what start-up has not taken up yet is taken up now.
        if !Daemon.queueFreeMethods.contains(method) { restoreAll() }
        func str(_ i: Int) -> String? { call.args.count > i ? call.args[i]?.string : nil }
        // Exhaustive: a method the XML gains and nothing here handles fails the build.
        switch method {
        case .getSupportedResources, .listApps, .setAppEnabled, .appRegister, .appReady, .appSubmit, .appCancel, .appCancelAll,
             .appPending, .appLaunchReceived, .appComplete, .appProgress, .appUpdateTitle:
            return handleApp(method, call, who) ?? .failure(SchedulerError.unknownMethod("\(call.method) is not handled"))
        case .submit:
            guard call.args.count == 2, case .dict(let d)? = call.args[0], let argv = call.args[1]?.strings else {
                return .failure(SchedulerError.invalidArgs("Submit takes \(method.signature)"))
            }
            let opts: SubmitOptions
            do { opts = try SubmitOptions(variant: d) } catch { return .failure(error.busError) }
            if !allowSubmit(call.sender) {
                return .failure(SchedulerError.tooManyPending("too many submissions from \(call.sender); slow down"))
            }
            return submit(opts, argv).map { [.string($0)] }
        case .cancel:
            guard let id = str(0) else { return .failure(SchedulerError.invalidArgs("Cancel takes (s id)")) }
            return cancel(id).map { [.string($0)] }
        case .cancelAll:
            let n = cancelAll()
            return .success([.uint32(UInt32(n))])
        case .listPending:
            // The whole queue in one reply, as the interface has always said (clients page with ListPendingPage).
            return .success([.dicts(listPending(allListed()).map(\.variant))])
        case .listPendingPage, .listPendingJSON:
            guard call.args.count == 1, case .dict(let d)? = call.args[0] else { return .failure(SchedulerError.invalidArgs("\(call.method) takes \(method.signature)")) }
            let page: (tasks: [PendingTask], next: String)
            switch pendingPage(d) {
            case .success(let p): page = p
            case .failure(let e): return .failure(e)
            }
            if method == .listPendingPage { return .success([.dicts(page.tasks.map(\.variant)), .string(page.next)]) }
            // Each task as `bgtask pending --json` prints it, one a line: one string for the page.
            var lines = JSONBytes(capacity: page.tasks.count * 512)
            var iso = (second: Double.nan, text: "")
            var lists = BusValue.SharedLists()
            for (i, t) in page.tasks.enumerated() {
                if i > 0 { lines.byte(0x0A) }
                BusValue.writeJSON(object: t.forEachEntry, into: &lines, iso: &iso, lists: &lists)
            }
            return .success([.string(lines.text), .string(page.next)])
        case .listRunning:
            return .success([.dicts(listRunning().map(\.variant))])
        case .debugLaunch:
            guard let id = str(0) else { return .failure(SchedulerError.invalidArgs("DebugLaunch takes (s id)")) }
            guard queue.isWaiting(id) else { return .failure(SchedulerError.noSuchTask("no pending task \(id)")) }
            if running[id] != nil { return .failure(SchedulerError.immediateRunIneligible("\(id): \(Scheduler<Entry, Supervisor.Rest>.previousRunStill)")) }
            guard let e = awakeEntry(id) else { return .failure(SchedulerError.noSuchTask("no pending task \(id)")) }
            e.supervisor.launchNow(now: monotonic())
            return .success([])
        case .debugExpire:
            guard let id = str(0) else { return .failure(SchedulerError.invalidArgs("DebugExpire takes (s id)")) }
            guard let e = running[id], !e.supervisor.isDone else { return .failure(SchedulerError.noSuchTask("no running task \(id)")) }
            e.supervisor.expireNow(now: monotonic(), why: "bgtask debug expire")
            return .success([])
        case .reloadPolicy:
            let (ok, said) = reload()
            afterRound(conditionsChanged: false)
            return .success([.bool(ok), .string(said)])
        case .getConditions:
            return .success([.dict(appConditions.variant)])
        case .getStatus:
            let status = DaemonStatus(version: bgtaskVersion, pid: UInt32(getpid()), pending: UInt32(queue.waitingCount), running: UInt32(running.count),
                                      stateDirectory: stateDir, policyWarning: policyWarning)
            return .success([.dict(status.variant)])
        }
    }

    func allowSubmit(_ sender: String) -> Bool { queue.allowSubmit(sender, now: monotonic()) }

    func submit(_ opts: SubmitOptions, _ argv: [String]) -> Result<String, BusError> {
        func bad(_ m: String) -> Result<String, BusError> { .failure(SchedulerError.invalidArgs(m)) }
        if argv.isEmpty || argv[0].isEmpty { return bad("the command is empty") }
        if argv.count > RequestBounds.maxArguments { return bad("the command has \(argv.count) arguments, over \(RequestBounds.maxArguments)") }
        if argv.reduce(0, { $0 + $1.utf8.count + 1 }) > RequestBounds.maxCommandBytes { return bad("the command is over \(RequestBounds.maxCommandBytes) bytes") }
        let id = opts.id ?? TaskID.fromCommand(argv[0])
        if let why = TaskID.problem(id) { return bad(why) }
        guard let kind = TaskKind(rawValue: opts.kind ?? "processing") else { return bad("kind '\(opts.kind ?? "")': one of \(TaskKind.names)") }
        let now = wallClockNow()
        var row = QueuedTask(id: id, kind: kind, argv: argv, submitted: now)
        row.runID = Daemon.newRunID(id)
        row.requiresExternalPower = opts.requiresExternalPower ?? false
        row.requiresNetwork = opts.requiresNetwork ?? false
        row.requiresUnmetered = opts.requiresUnmetered ?? false
        row.cpuHeavy = opts.cpuHeavy ?? false
        row.userInitiated = opts.userInitiated ?? false
        if row.requiresUnmetered { row.requiresNetwork = true }
        if kind == .continued { row.userInitiated = true }
        func seconds(_ key: String, _ value: Double?, max: Double) -> Result<Double?, BusError> {
            guard let n = value else { return .success(nil) }
            guard n >= 0, n <= max else {
                return .failure(SchedulerError.invalidArgs("\(key) must be a number of seconds from 0 to \(Int(max))"))
            }
            return .success(n)
        }
        do {
            // `earliest` is an absolute time (seconds since the epoch), bounded to ten years ahead.
            row.earliest = try seconds("earliest", opts.earliest, max: now + RequestBounds.farthestAhead).get()
            row.every = try seconds("every", opts.every, max: RequestBounds.farthestAhead).get()
            row.budget = try seconds("budget", opts.budget, max: 86_400).get()
        } catch { return .failure(error) }
        if let r = opts.retry {
            guard r <= 100 else { return bad("retry must be a whole number from 0 to 100") }
            row.retry = Int(r)
        }
        if let s = opts.window {
            guard s.utf8.count <= 32, let window = ClockWindow(s) else { return bad("window must be HH:MM-HH:MM, such as 01:00-06:00") }
            row.window = window.text
        }
        if let s = opts.onCalendar {
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
        if let s = opts.directory {
            guard s.hasPrefix("/"), s.utf8.count <= RequestBounds.maxDirectoryBytes, !s.contains("\0") else {
                return bad("directory must be an absolute path")
            }
            row.directory = s
        }
        if let why = queue.refusal(for: Scheduler.Job(fields: row.fields)) { return .failure(SchedulerError.tooManyPending(why)) }
        do { try store.put(row) } catch {
            return .failure(SchedulerError.unavailable("cannot store the request (nothing was queued): \(error)"))
        }
        let replaced = queue.removeWaiting(id) != nil
        add(row)
        // Said and signalled once the reply is on its way: neither is what the caller waits for.
        service.afterReply.append { [unowned self] in
            self.say("\(id): submitted\(replaced ? " (replacing the pending request)" : "")")
            self.bus.emit(.taskChanged, [.string(id), .string("pending")])
        }
        return .success(id)
    }

    /// Removes the pending request `id` and expires its running task. `by` is who asked, as the audit trail
    /// records it ("bgtask cancel", "the app (cancelAllTaskRequests)", …): never the user for what an app did.
    func cancel(_ id: String, by who: String = "bgtask cancel") -> Result<String, BusError> {
        var done: [String] = []
        if let removed = queue.removeWaiting(id) {
            // A resting task's row is the queue's alone: read before it goes, for the story's run id and fields.
            let row = removed.item?.row ?? (try? store.get(id, state: "pending")) ?? nil
            _ = try? store.remove(id, state: "pending")
            recordEvent(RunEvent(kind: .gaveUp, monotonic: monotonic(), detail: "cancelled (\(who))", decision: nil,
                                  conditions: [:], exitStatus: nil, runID: removed.item?.supervisor.runOptions.runID ?? row.map(Daemon.runID(of:))),
                        task: row?.fields ?? TaskFields(id: id))
            done.append("removed the pending request")
        }
        if let e = running[id], !e.supervisor.isDone {
            e.supervisor.expireNow(now: monotonic(), why: "cancelled by \(who)")
            done.append("expired the running task")
        }
        guard !done.isEmpty else { return .failure(SchedulerError.noSuchTask("no task \(id)")) }
        bus.emit(.taskChanged, [.string(id), .string("cancelled")])
        return .success(done.joined(separator: "; "))
    }

    /// The caller's own pending requests: the command tasks (an app's go with `AppCancelAll` or `apps disable`).
    func cancelAll() -> Int {
        let ids = queue.waitingIDs(app: nil).sorted()
        for id in ids { _ = cancel(id, by: "bgtask cancel --all") }
        return ids.count
    }
}
