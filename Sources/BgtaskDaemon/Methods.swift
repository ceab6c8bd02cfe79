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
import BgtaskStorage
import BgtaskRun

/// The commands the bus service's methods ask for (`BusService` takes the call and gives the reply).
extension QueueDriver: ServiceCommands {
    func takeUpQueue() { restoreAll() }

    var listingStamp: Int { store.changes }

    func debugLaunch(_ id: String) -> Result<Void, BusError> {
        guard queue.isWaiting(id) else { return .failure(SchedulerError.noSuchTask("no pending task \(id)")) }
        if running[id] != nil { return .failure(SchedulerError.immediateRunIneligible("\(id): \(Scheduler<Entry, Supervisor.Rest>.previousRunStill)")) }
        guard let e = awakeEntry(id) else { return .failure(SchedulerError.noSuchTask("no pending task \(id)")) }
        e.supervisor.launchNow(now: monotonic())
        return .success(())
    }

    func debugExpire(_ id: String) -> Result<Void, BusError> {
        guard let e = running[id], !e.supervisor.isDone else { return .failure(SchedulerError.noSuchTask("no running task \(id)")) }
        e.supervisor.expireNow(now: monotonic(), why: "bgtask debug expire")
        return .success(())
    }

    func reloadPolicy() -> (ok: Bool, said: String) { host.reloadPolicy() }

    var status: DaemonStatus {
        DaemonStatus(version: bgtaskVersion, pid: UInt32(getpid()), pending: UInt32(queue.waitingCount), running: UInt32(running.count),
                     stateDirectory: stateDir, policyWarning: policyWarning)
    }

    func allowSubmit(_ sender: String) -> Bool { queue.allowSubmit(sender, now: monotonic()) }

    func submit(_ opts: SubmitOptions, _ argv: [String]) -> Result<String, BusError> {
        func bad(_ m: String) -> Result<String, BusError> { .failure(SchedulerError.invalidArgs(m)) }
        if argv.isEmpty || argv[0].isEmpty { return bad("the command is empty") }
        if argv.count > RequestBounds.maxArguments { return bad("the command has \(argv.count) arguments, over \(RequestBounds.maxArguments)") }
        if argv.reduce(0, { $0 + $1.utf8.count + 1 }) > RequestBounds.maxCommandBytes { return bad("the command is over \(RequestBounds.maxCommandBytes) bytes") }
        if let why = CommandCheck.oversizeArgument(argv) { return bad(why) }
        let id = opts.id ?? TaskID.fromCommand(argv[0])
        if let why = TaskID.problem(id) { return bad(why) }
        guard let kind = TaskKind(rawValue: opts.kind ?? "processing") else { return bad("kind '\(opts.kind ?? "")': one of \(TaskKind.names)") }
        let now = wallClockNow()
        var row = QueuedTask(id: id, kind: kind, argv: argv, submitted: now)
        row.runID = QueueDriver.newRunID(id)
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
        // Found as a start will look for it (bgtaskd's PATH, or the working directory): what cannot run is refused
        // now, as systemd-run refuses it, not found missing at each start. A file removed later still fails then.
        if let why = CommandCheck.notRunnable(argv[0], directory: row.directory, path: CommandCheck.searchPath) { return bad(why) }
        if let why = queue.refusal(for: Scheduler.Job(fields: row.fields)) { return .failure(SchedulerError.tooManyPending(why)) }
        do { try store.put(row) } catch {
            return .failure(SchedulerError.unavailable("cannot store the request (nothing was queued): \(DiskSpace.explain(error, file: store.path) ?? "\(error)")"))
        }
        let replaced = queue.removeWaiting(id) != nil
        // In the queue now; its first verdict (the policy's evaluation, its "waiting" line, its rest), what it says
        // and its signal follow the reply, before the next call is handled (`BusService.followUps`): the caller
        // waits for none of them, and stored is queued.
        let entry = add(row, decide: false)
        // Told pending before it is decided: a start then follows it ("running" after "pending"), never the reverse.
        host.afterReply { [unowned self] in
            self.say("\(id): submitted\(replaced ? " (replacing the pending request)" : "")")
            self.announce.emit(.taskChanged, [.string(id), .string("pending")])
            if queue.awake[id] === entry { decide(entry) }
        }
        return .success(id)
    }

    /// Removes the pending request `id` and expires its running task, for good: the run's end is the request's end
    /// (no retry, no next period or elapse), and the queue says so before the reply, so neither a crash's recovery
    /// nor a restart brings it back. `by` is who asked, as the audit trail records it ("bgtask cancel", "the app
    /// (cancelAllTaskRequests)", …): never the user for what an app did.
    func cancel(_ id: String, by who: String) -> Result<String, BusError> {
        let waiting = queue.isWaiting(id)
        let run = running[id].flatMap { $0.supervisor.isDone ? nil : $0 }
        guard waiting || run != nil else { return .failure(SchedulerError.noSuchTask("no task \(id)")) }
        // A resting task's row is the queue's alone: read before it goes, for the story's run id and fields.
        let restingRow = waiting && queue.awake[id] == nil ? restingRow(id) : nil
        do { try store.cancel(id, by: who) } catch {
            return .failure(SchedulerError.unavailable("\(id): the cancel cannot be written to the queue (nothing was cancelled): \(error)"))
        }
        var done: [String] = []
        if waiting, let removed = queue.removeWaiting(id) {
            let row = removed.item?.row ?? restingRow
            recordEvent(RunEvent(kind: .gaveUp, monotonic: monotonic(), detail: "cancelled (\(who))", decision: nil,
                                  conditions: [:], exitStatus: nil, runID: removed.item?.supervisor.runOptions.runID ?? row.map(QueueDriver.runID(of:))),
                        task: row?.fields ?? TaskFields(id: id))
            done.append("removed the pending request")
        }
        if let e = run {
            e.row.cancelled = who
            e.supervisor.expireNow(now: monotonic(), why: "cancelled by \(who)")
            done.append("expired the running task")
        }
        announce.emit(.taskChanged, [.string(id), .string("cancelled")])
        return .success(done.joined(separator: "; "))
    }

    /// The caller's own pending requests: the command tasks (an app's go with `AppCancelAll` or `apps disable`).
    func cancelAll() -> Int {
        let ids = queue.waitingIDs(app: nil).sorted()
        for id in ids { _ = cancel(id, by: "bgtask cancel --all") }
        return ids.count
    }
}
