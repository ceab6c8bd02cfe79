#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskBus
import BgtaskConfig
import BgtaskCore
import BgtaskFiles
import BgtaskJSON
import BgtaskPolicy
import BgtaskProbes
import BgtaskProtocol
import BgtaskQueue
import BgtaskRun

/// The app broker: the apps' manifests and switches, who a caller is (its Flatpak sandbox or its claim), the apps
/// on the bus, the app methods, and the launches that hand an app its started tasks. An `AppTask` asks it to
/// deliver, expire and end.
final class AppBroker: AppTaskBroker {
    let bus: BusConnection
    let loop: MainLoop
    let stateDirectory: String
    /// The app directories read (nil: the user's and the system's; then the user's switches are kept too).
    let appDirectories: [String]?
    let say: (String) -> Void
    /// Its commands to the queue: `QueueDriver`, which the daemon sets here (the queue outlives the broker).
    unowned var queue: (any AppQueue)!
    /// What it knows of apps.
    let roster = AppRoster()

    init(bus: BusConnection, loop: MainLoop, stateDirectory: String, appDirectories: [String]?, say: @escaping (String) -> Void) {
        self.bus = bus
        self.loop = loop
        self.stateDirectory = stateDirectory
        self.appDirectories = appDirectories
        self.say = say
    }

    /// An app's task is kept in the queue as `APP/IDENTIFIER`: identifiers of two apps never collide.
    static func key(_ app: String, _ identifier: String) -> String { app + "/" + identifier }
    static func identifier(of key: String, app: String) -> String {
        key.hasPrefix(app + "/") ? String(key.dropFirst(app.count + 1)) : key
    }

    /// How many apps are on the bus (one connected reads `ProcessInfo.thermalState`: the zones are read for it).
    var connected: Int { roster.clients.count }

    /// Manifests and the user's switches, read at start, on SIGHUP and on `SetAppEnabled`.
    func load() {
        let (found, errors) = AppManifests.load(directories: appDirectories ?? AppManifests.directories())
        roster.manifests = found
        roster.errors = errors
        roster.disabled = appDirectories == nil ? AppManifests.disabled() : []
        for e in errors { say("manifest skipped: \(e.description)") }
    }

    /// Whether a render node exists and this user can open it (`supportedResources` contains `.gpu`).
    var gpuUsable: Bool {
        (FileIO.names("/sys/class/drm") ?? []).contains { $0.hasPrefix("renderD") && access("/dev/dri/" + $0, R_OK | W_OK) == 0 }
    }

    /// Who is calling for `claimed`: a Flatpak app is who its sandbox says, and a caller in a sandbox that names
    /// no app id acts for none; an unsandboxed caller must name an app with a manifest. A disabled app is
    /// `Unavailable`, as Background App Refresh switched off is on iOS.
    func identity(_ who: Caller, claimed: String) -> Result<AppManifest, BusError> {
        switch who.sandbox {
        case .none:
            break
        case .flatpak(let sandboxed):
            if sandboxed != claimed {
                return .failure(SchedulerError.notPermitted("a Flatpak app's id comes from its sandbox (\(sandboxed)), not from the call (\(claimed))"))
            }
        case .snap, .userNamespace:
            return .failure(SchedulerError.accessDenied("a caller in \(who.sandbox) names no app id bgtaskd can check"))
        }
        guard let m = roster.manifests[claimed] else {
            return .failure(SchedulerError.notPermitted("no manifest for \(claimed) (\(AppManifests.directories().first ?? "")/\(claimed).toml)"))
        }
        if roster.disabled.contains(claimed) {
            return .failure(SchedulerError.unavailable("background work of \(claimed) is turned off (bgtask apps enable \(claimed))"))
        }
        return .success(m)
    }

    /// The calling process of `app`: a second process of an app is a client of its own, never the first one's replacement.
    func client(_ app: String, _ call: BusCall, _ who: Caller) -> AppClient {
        let key = AppClient.Key(connection: call.sender, app: app)
        if let c = roster.clients[key] { return c }
        let c = AppClient(id: app, connection: call.sender, pid: who.pid)
        roster.clients[key] = c
        return c
    }

    /// The `App*` methods and the app-facing ones (nil: `method` is not one of them).
    func handle(_ method: SchedulerMethod, _ call: BusCall, _ who: Caller) -> Result<[BusValue], BusError>? {
        func bad(_ m: String) -> Result<[BusValue], BusError> { .failure(SchedulerError.invalidArgs(m)) }
        func str(_ i: Int) -> String? { call.args.count > i ? call.args[i]?.string : nil }
        switch method {
        case .getSupportedResources:
            return .success([.strings(gpuUsable ? ["gpu"] : [])])
        case .listApps:
            // A sandboxed app sees its own manifest only (how the library learns its id), nothing of other apps'.
            let visible = who.sandbox == .none ? Array(roster.manifests.values) : roster.manifests.values.filter { $0.id == who.sandbox.appID }
            var list: [AppInfo] = visible.sorted { $0.id < $1.id }.map { m in
                let standing = queue.standing(app: m.id)
                return AppInfo(id: m.id, name: m.name, path: m.path, command: m.command, identifiers: m.identifiers, kinds: m.kinds.map(\.rawValue).sorted(),
                               resources: m.resources.sorted(), enabled: !roster.disabled.contains(m.id), connected: !roster.clients(of: m.id).isEmpty,
                               endedBySystem: UInt32(standing.ended), refreshHeldBackS: standing.holdBack)
            }
            if who.sandbox == .none { list += roster.errors.map { AppInfo(error: $0.description) } }
            return .success([.dicts(list.map(\.variant))])
        case .setAppEnabled:
            guard let app = str(0), AppManifest.validID(app), call.args.count == 2, let on = call.args[1]?.bool else { return bad("SetAppEnabled takes (s app_id, b enabled)") }
            // A switch for an app with no manifest would only ever grow the file (and hide a typo).
            guard roster.manifests[app] != nil || roster.disabled.contains(app) else {
                return .failure(SchedulerError.invalidArgs("no app \(app): no manifest in \(AppManifests.directories().joined(separator: ", "))"))
            }
            do { try AppManifests.setEnabled(app, on) } catch { return .failure(SchedulerError.unavailable("the switch cannot be written: \(error)")) }
            roster.disabled = AppManifests.disabled()
            if !on { for id in queue.waitingIDs(app: app).sorted() { _ = queue.cancel(id, by: "bgtask apps disable") } }
            say("\(app): background work turned \(on ? "on" : "off")")
            return .success([])
        default:
            break
        }
        guard method.rawValue.hasPrefix("App") else { return nil }
        guard let app = str(0) else { return bad("\(call.method) takes the app id first") }
        let manifest: AppManifest
        switch identity(who, claimed: app) {
        case .failure(let e): return .failure(e)
        case .success(let m): manifest = m
        }
        switch method {
        case .appRegister:
            guard let identifier = str(1) else { return bad("AppRegister takes (s app_id, s identifier)") }
            guard manifest.permits(identifier) else {
                return .failure(SchedulerError.notPermitted("\(identifier) is not among \(app)'s permitted identifiers (\(manifest.path))"))
            }
            client(app, call, who).registered.insert(identifier)
            return .success([])
        case .appReady:
            let c = client(app, call, who)
            if !c.ready { say("\(app): ready for its tasks (\(c.registered.count) handlers\(c.pid.map { ", pid \($0)" } ?? ""))") }
            roster.markReady(c)
            for e in queue.runningTasks(app: app) where !e.supervisor.isDone {
                if let t = e.supervisor.app as? AppTask, !t.delivered { handOver(e, t, "") }
            }
            return .success([])
        case .appSubmit:
            guard call.args.count == 2, case .dict(let d)? = call.args[1] else { return bad("AppSubmit takes \(method.signature)") }
            let request: AppRequest
            do { request = try AppRequest(variant: d) } catch { return .failure(error.busError) }
            return submit(manifest, request, call).map { [] }
        case .appCancel:
            guard let identifier = str(1) else { return bad("AppCancel takes (s app_id, s identifier)") }
            // Its pending request and its running task, as the library's doc promises (Apple's cancel does both).
            _ = queue.cancel(AppBroker.key(app, identifier), by: "the app (cancel(taskRequestWithIdentifier:))")
            return .success([])
        case .appCancelAll:
            for id in queue.waitingIDs(app: app).sorted() { _ = queue.cancel(id, by: "the app (cancelAllTaskRequests)") }
            return .success([])
        case .appPending:
            let mine = queue.pending(app: app).map { (t, row) -> [String: BusValue] in
                var a = AppPendingTask(identifier: AppBroker.identifier(of: t.id, app: app), kind: t.kind, earliest: t.earliest,
                                       requiresNetwork: t.requiresNetwork, requiresExternalPower: t.requiresExternalPower,
                                       reason: t.reason, rule: t.rule, location: t.location)
                if let row {
                    a.title = row.title
                    a.subtitle = row.subtitle
                    a.strategy = row.strategy
                    if row.resources?.contains("gpu") == true { a.resources = ["gpu"] }
                }
                return a.variant
            }
            return .success([.dicts(mine)])
        case .appLaunchReceived:
            guard let identifier = str(1), call.args.count == 4, let handled = call.args[2]?.bool, let reason = str(3) else {
                return bad("AppLaunchReceived takes (s app_id, s identifier, b handled, s reason)")
            }
            // From the process it was handed to: another process of the app has no launch of it under way.
            guard let e = queue.runningTask(AppBroker.key(app, identifier)), let t = e.supervisor.app as? AppTask, t.handedTo == call.sender else {
                return .failure(SchedulerError.noSuchTask("\(identifier) of \(app) is not being launched"))
            }
            if handled { t.handling = true; return .success([]) }
            // The library had nothing to run it with (a handler registered too late): said as the library's, not
            // as "completed by the app, unsuccessfully", which the app never did.
            let why = Terminal.safe(String(reason.prefix(512)))
            say("\(e.id): not handled by \(app): \(why)")
            e.supervisor.appCompleted(success: false, detail: "not handled: \(why)")
            return .success([])
        case .appComplete:
            guard let identifier = str(1), call.args.count == 3, let ok = call.args[2]?.bool else { return bad("AppComplete takes (s app_id, s identifier, b success)") }
            guard let e = queue.runningTask(AppBroker.key(app, identifier)) else {
                return .failure(SchedulerError.noSuchTask("\(identifier) of \(app) is not running"))
            }
            // In time: before bgtaskd ended it (a completion after that has already been counted against the app).
            if !e.supervisor.isDone, (e.supervisor.app as? AppTask)?.endedByUs != true { queue.madeGood(app, by: e.id) }
            e.supervisor.appCompleted(success: ok, detail: ok ? "completed by the app" : "completed by the app, unsuccessfully")
            roster.views[e.id] = nil
            return .success([])
        case .appProgress:
            guard let identifier = str(1), call.args.count == 4, let done = call.args[2]?.number, let total = call.args[3]?.number else {
                return bad("AppProgress takes (s app_id, s identifier, t completed, t total)")
            }
            guard let e = queue.runningTask(AppBroker.key(app, identifier)) else { return .failure(SchedulerError.noSuchTask("\(identifier) is not running")) }
            var v = roster.views[e.id] ?? AppTaskView(title: e.row.title, subtitle: e.row.subtitle)
            v.completed = UInt64(max(0, min(done, 1e18)))
            v.total = UInt64(max(0, min(total, 1e18)))
            roster.views[e.id] = v
            bus.emit(.taskProgress, [.string(e.id), .uint64(v.completed), .uint64(v.total)])
            queue.presenter.progress(key: e.id, completed: v.completed, total: v.total)
            return .success([])
        case .appUpdateTitle:
            guard let identifier = str(1), let title = str(2), let subtitle = str(3) else {
                return bad("AppUpdateTitle takes (s app_id, s identifier, s title, s subtitle)")
            }
            guard title.utf8.count <= 1024, subtitle.utf8.count <= 1024 else { return bad("a title or subtitle is over 1024 bytes") }
            guard let e = queue.runningTask(AppBroker.key(app, identifier)) else { return .failure(SchedulerError.noSuchTask("\(identifier) is not running")) }
            var v = roster.views[e.id] ?? AppTaskView()
            v.title = title
            v.subtitle = subtitle
            roster.views[e.id] = v
            queue.presenter.retitle(key: e.id, title: title, subtitle: subtitle)
            return .success([])
        default:
            return .failure(SchedulerError.unknownMethod("\(call.method) is not handled"))
        }
    }

    /// An app's request, checked against its manifest and Apple's rules, then queued.
    func submit(_ m: AppManifest, _ r: AppRequest, _ call: BusCall) -> Result<Void, BusError> {
        func bad(_ s: String) -> Result<Void, BusError> { .failure(SchedulerError.invalidArgs(s)) }
        let identifier = r.identifier
        if let why = TaskID.problem(identifier) { return bad(why) }
        guard let kind = TaskKind(rawValue: r.kind), AppManifest.allKinds.contains(kind) else { return bad("kind (s) is one of refresh, processing, continued") }
        guard m.permits(identifier) else {
            return .failure(SchedulerError.notPermitted("\(identifier) is not among \(m.id)'s permitted identifiers (\(m.path))"))
        }
        // As in iOS 26: a wildcard (`prefix.*`) permits continued tasks only; refresh and processing work needs its
        // identifier listed as it is.
        guard kind == .continued || m.identifiers.contains(identifier) else {
            return .failure(SchedulerError.notPermitted("\(identifier) matches only a wildcard in \(m.path), which permits continued tasks; list it as it is for \(kind) work"))
        }
        guard m.kinds.contains(kind) else {
            return .failure(SchedulerError.notPermitted("\(m.id)'s manifest does not declare \(kind) tasks (\(m.path))"))
        }
        let key = AppBroker.key(m.id, identifier)
        var row = QueuedTask(id: key, app: m.id, kind: kind, argv: m.command, submitted: wallClockNow())
        if kind == .continued { row.userInitiated = true }
        // Apple's limits per app and kind (a request replacing its own pending one does not count twice).
        if let why = queue.refusal(row, sender: call.sender) { return .failure(SchedulerError.tooManyPending(why)) }
        row.runID = QueueDriver.newRunID(key)
        row.requiresExternalPower = r.requiresExternalPower ?? false
        row.requiresNetwork = r.requiresNetwork ?? false
        if let t = r.earliest {
            guard t >= 0, t <= wallClockNow() + RequestBounds.farthestAhead else { return bad("earliest: seconds since the epoch, at most ten years ahead") }
            row.earliest = t
        }
        // An app with tasks the system had to end gets its refresh work launched less often (Apple: it counts
        // against the app), said in the request's story.
        let standing = queue.standing(app: m.id)
        if kind == .refresh, standing.ended > 0 {
            let notBefore = wallClockNow() + standing.holdBack
            if (row.earliest ?? 0) < notBefore {
                row.earliest = notBefore
                say("\(key): held back \(formatDuration(standing.holdBack)): \(standing.ended) task(s) of \(m.id) the system had to end, not made good")
            }
        }
        for (k, value, path) in [("title", r.title, \QueuedTask.title), ("subtitle", r.subtitle, \.subtitle)] {
            guard let s = value else { continue }
            guard s.utf8.count <= 1024 else { return bad("\(k): a string of at most 1024 bytes") }
            row[keyPath: path] = s
        }
        if let v = r.strategy {
            guard v == "queue" || v == "fail" else { return bad("strategy: queue or fail") }
            row.strategy = v
        }
        if let list = r.resources {
            guard Set(list).isSubset(of: AppManifest.knownResources) else { return bad("resources: a list of gpu") }
            if list.contains("gpu") {
                guard m.resources.contains("gpu") else {
                    return .failure(SchedulerError.notPermitted("\(m.id)'s manifest does not declare the gpu resource"))
                }
                guard gpuUsable else {
                    return .failure(SchedulerError.unavailable("no usable GPU render node (/dev/dri/renderD*) for this user"))
                }
            }
            row.resources = JSONValue.array(list.map { .string($0) }).rendered
        }
        // `.fail`: the app wants to know now whether the work can start now.
        if kind == .continued, row.strategy == "fail", let why = queue.cannotStartNow(row) {
            return .failure(SchedulerError.immediateRunIneligible("\(identifier) cannot start now: \(why)"))
        }
        let queued = queue.enqueue(row)
        if case .success = queued { roster.submitters[key] = call.sender }
        return queued
    }

    // MARK: Expiring, ending (deliveries and launches: AppLaunches.swift)

    func tellExpire(_ t: AppTask, reason: String) {
        let key = AppBroker.key(t.app, t.identifier)
        roster.expiredReasons[key] = reason
        guard let connection = t.handedTo else {
            // Expired before the app took it (it was being launched): it is not handed over later; nothing of it ran.
            loop.after(0) { [weak self] in
                guard let self, let e = self.queue.runningTask(key), !e.supervisor.isDone, (e.supervisor.app as? AppTask) === t else { return }
                e.supervisor.appCompleted(success: false, detail: "expired before \(t.app) took it: \(reason)")
                self.queue.actOnChanges()
            }
            return
        }
        bus.emit(.expire, [.string(t.app), .string(t.identifier), .string(reason)], to: connection)
    }

    /// The app kept a task after its expiration and grace. An app bgtaskd launched is ended (SIGTERM, then
    /// SIGKILL 5 s later); an app the user started is left running. Either way it is recorded against the app.
    func endApp(_ t: AppTask) -> String {
        let against = queue.countAgainst(t.app)
        let holder = roster.clients.values.first { $0.id == t.app && $0.connection == t.handedTo }
        // The process bgtaskd launched, if that is the one that kept it (a process the user started is not ended).
        if let p = roster.launched[t.app], isAlive(p.pid), holder?.pid == nil || holder?.pid == p.pid {
            p.thawForSignal()
            let pid = p.pid
            queue.end(grace: 5) { isAlive(pid) ? [-pid] : [] }
            return "\(t.app) did not complete \(t.identifier) after its expiration: SIGTERM to the app (pid \(pid)), SIGKILL in 5 s; \(against)"
        }
        return "\(t.app) did not complete \(t.identifier) after its expiration; \(against) (it was not launched by bgtaskd, so it is left running)"
    }

    /// A task of the app ended: its view goes, and an app bgtaskd launched is ended once idle. iOS suspends an app
    /// once its background work is done; bgtaskd ends one it launched itself when none of its tasks has run for a
    /// few seconds (SIGTERM). An app the person started is never touched. Returns why it was expired, if it was.
    @discardableResult
    func taskEnded(_ key: String, app: String) -> String? {
        roster.views[key] = nil
        roster.submitters[key] = nil
        let expired = roster.expiredReasons.removeValue(forKey: key)
        guard roster.launched[app] != nil else { return expired }
        loop.after(AppBroker.launchedAppLinger) { [weak self] in
            guard let self, let p = self.roster.launched[app], isAlive(p.pid),
                  !self.queue.runningTasks(app: app).contains(where: { !$0.supervisor.isDone }) else { return }
            self.say("\(app): its background work is done; ending it (pid \(p.pid))")
            p.thawForSignal()
            let pid = p.pid
            self.queue.end(grace: 5) { isAlive(pid) ? [-pid] : [] }
        }
        return expired
    }
    static let launchedAppLinger = 3.0

    /// bgtaskd stops: the apps it launched for background work end with it (thawed, SIGTERM, a grace of at most
    /// 5 s, SIGKILL), as it ends each once its work is done; left running they would outlive the daemon that
    /// launched them and hold their tasks' state nobody serves. An app the person started is never touched.
    func endLaunched() {
        let live = roster.launched.filter { isAlive($0.value.pid) }.sorted { $0.key < $1.key }
        guard !live.isEmpty else { return }
        for (_, p) in live { p.thawForSignal() }
        let ended = RunProcesses.endAll(live.map { RunProcesses.Target(pgid: $0.value.pid, childStart: 0, containment: $0.value.containment, token: nil) },
                                        grace: 5)
        for ((app, p), done) in zip(live, ended) {
            var status: Int32 = 0
            _ = waitpid(p.pid, &status, WNOHANG)
            say("\(app): bgtaskd stops; ending the app it launched (pid \(p.pid)): \(done)")
        }
        roster.launched = [:]
    }
}
