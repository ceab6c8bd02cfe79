import BgtaskBus
import BgtaskProtocol
import Foundation
import Synchronization

/// The library's side of the app methods (docs/protocol.md): one private session-bus connection, a thread
/// of its own where `Launch` and `Expire` arrive, the handlers, and the tasks running in this process.
final class DaemonLink: Sendable {
    /// Handlers are the app's closures: called on its queue, as Apple's are (not required to be Sendable).
    struct Registration: @unchecked Sendable {
        let queue: DispatchQueue
        let handler: (BGTask) -> Void
    }

    struct State: Sendable {
        var thread: BusThread?
        var bus: BusConnection?
        var appID: String?
        var handlers: [String: Registration] = [:]
        var running: [String: BGTask] = [:]
        /// Titles of the continued requests this process submitted (the `Launch` signal carries only the kind).
        var titles: [String: (String, String)] = [:]
        var readySent = false
        var readyTimer: UInt32?
        var mainQueueTurnAsked = false
        var samplers: [String: UInt32] = [:]
        var lastProgress: [String: (Int64, Int64)] = [:]
    }
    let state = Mutex(State())
    /// Expiration handlers run here: the launch handler's own queue may be held by the work they stop.
    let expirationQueue = DispatchQueue(label: "BackgroundTasks.expiration", qos: .background)

    static let progressInterval = 0.25
    static let callTimeoutMs: Int32 = 5_000

    var currentAppID: String? { state.withLock { $0.appID } ?? DaemonLink.environmentAppID }

    static var environmentAppID: String? {
        let env = ProcessInfo.processInfo.environment
        return [env["BGTASK_APP_ID"], env["FLATPAK_ID"]].compactMap { $0 }.first { !$0.isEmpty }
    }

    func setAppID(_ id: String?) { state.withLock { $0.appID = id } }

    static func warn(_ message: String) {
        FileHandle.standardError.write(Data("BackgroundTasks: \(message)\n".utf8))
    }

    // MARK: Connecting

    /// The connection, made on first use; nil with the reason when there is no session bus.
    func connection() -> Result<(BusConnection, BusThread), BGTaskScheduler.Error> {
        return state.withLock { s in
            if let b = s.bus, let t = s.thread { return .success((b, t)) }
            let b: BusConnection
            do throws(BusError) { b = try BusConnection(privateSession: true) } catch {
                return .failure(BGTaskScheduler.Error(.unavailable, message: "no session bus: \(error.message)"))
            }
            let t: BusThread
            do throws(BusError) { t = try BusThread() } catch {
                return .failure(BGTaskScheduler.Error(.unavailable, message: error.message))
            }
            s.bus = b
            s.thread = t
            // Subscribed from the bus thread, so the signals are dispatched there.
            t.sync {
                for signal in [SchedulerSignal.launch, .expire] {
                    b.subscribe(signal) { [weak self] _, args in
                        guard let self, args.count == 3, let app = args[0].string, let id = args[1].string, let third = args[2].string else { return }
                        if signal == .launch { self.launch(app: app, identifier: id, kind: third) } else { self.expire(app: app, identifier: id, reason: third) }
                    }
                }
                #if !canImport(Darwin)
                b.subscribe(.conditionsChanged) { _, args in
                    if case .dict(let d)? = args.first { SystemConditions.shared.changed(d) }
                }
                #endif
                // A daemon that restarts has forgotten this app's handlers: tell the new one again.
                b.subscribe(sender: "org.freedesktop.DBus", interface: "org.freedesktop.DBus", member: "NameOwnerChanged",
                            path: "/org/freedesktop/DBus") { [weak self] _, args in
                    guard let self, args.count == 3, args[0].string == SchedulerBus.name, let new = args[2].string, !new.isEmpty else { return }
                    self.daemonRestarted()
                }
            }
            return .success((b, t))
        }
    }

    func call(_ method: SchedulerMethod, _ args: [BusValue]) -> Result<[BusValue], BGTaskScheduler.Error> {
        switch connection() {
        case .failure(let e): return .failure(e)
        case .success(let (b, _)):
            // Bounded well under GDBus's 25 s default: an app's launch must not hang on a stuck daemon (the first
            // call may start bgtaskd by D-Bus activation, which takes a fraction of a second).
            do { return .success(try b.call(method, args, timeoutMs: DaemonLink.callTimeoutMs)) } catch { return .failure(DaemonLink.map(error)) }
        }
    }

    static func map(_ e: BusError) -> BGTaskScheduler.Error {
        switch SchedulerError(rawValue: e.name) {
        case .tooManyPending: return .init(.tooManyPendingTaskRequests, message: e.message)
        case .notPermitted, .invalidArgs: return .init(.notPermitted, message: e.message)
        case .immediateRunIneligible: return .init(.immediateRunIneligible, message: e.message)
        default: return .init(.unavailable, message: e.message)
        }
    }

    /// The app's id: set, from the environment, or the one manifest that permits `identifier`.
    func resolveApp(for identifier: String) -> Result<String, BGTaskScheduler.Error> {
        if let a = currentAppID {
            state.withLock { if $0.appID == nil { $0.appID = a } }
            return .success(a)
        }
        guard case .success(let reply) = call(.listApps, []), case .dicts(let apps)? = reply.first else {
            return .failure(.init(.unavailable, message: "bgtaskd is not reachable on the session bus"))
        }
        let infos = apps.compactMap { try? AppInfo(variant: $0) }
        let candidates = infos.compactMap { a -> String? in
            guard let id = a.id, let idents = a.identifiers else { return nil }
            return idents.contains { IdentifierPattern.permits($0, identifier) } ? id : nil
        }
        switch candidates.count {
        case 1:
            state.withLock { $0.appID = candidates[0] }
            return .success(candidates[0])
        case 0 where infos.allSatisfy({ $0.id == nil }):
            // No manifest at all (or only broken ones): the manifest is what is missing, not an identifier in it.
            let broken = infos.compactMap(\.error)
            return .failure(.init(.notPermitted, message: "no app manifest is installed for this app: create ~/.local/share/bgtask/apps/APP-ID.toml "
                                  + "with permitted_identifiers = [\"\(identifier)\"]" + (broken.isEmpty ? "" : " (skipped: \(broken.joined(separator: "; ")))")))
        case 0:
            return .failure(.init(.notPermitted, message: "no app manifest permits \(identifier) (add it to permitted_identifiers in bgtask/apps/APP-ID.toml)"))
        default:
            return .failure(.init(.notPermitted, message: "several app manifests permit \(identifier) (\(candidates.sorted().joined(separator: ", "))): set BGTASK_APP_ID or BGTaskScheduler.shared.applicationIdentifier"))
        }
    }

    // MARK: Registering and saying ready

    func register(_ identifier: String, queue: DispatchQueue?, handler: @escaping (BGTask) -> Void) -> Bool {
        // Apple stops the app here for refresh and processing work ("All launch handlers must be registered before
        // application finishes launching"): once bgtaskd was told the app is ready, a due task may already have
        // been delivered and missed (bgtaskd records it as not handled). Continued tasks may register later, and
        // the library cannot tell which this is, so it says so loudly and goes on.
        if state.withLock({ $0.readySent }) {
            DaemonLink.warn("register(forTaskWithIdentifier: \(identifier)) after the app finished launching: a refresh or processing "
                            + "handler must be registered before (before the first submit); a launch that came first was not "
                            + "handled (Apple's BGTaskScheduler stops the app at this mistake)")
        }
        if state.withLock({ $0.handlers[identifier] != nil }) {
            DaemonLink.warn("a launch handler for \(identifier) is registered already; the first one stays")
            return false
        }
        let app: String
        switch resolveApp(for: identifier) {
        case .failure(let e):
            DaemonLink.warn("cannot register \(identifier): \(e.errorDescription ?? "")")
            return false
        case .success(let a): app = a
        }
        if case .failure(let e) = call(.appRegister, [.string(app), .string(identifier)]) {
            DaemonLink.warn("cannot register \(identifier): \(e.errorDescription ?? "")")
            return false
        }
        // Apple's default for a nil queue is a background queue; a higher QoS would also have libdispatch try to
        // renice its worker below a background launch's nice 10 (refused, and logged in the journal).
        let q = queue ?? DispatchQueue(label: "BackgroundTasks.\(identifier)", qos: .background)
        state.withLock { $0.handlers[identifier] = Registration(queue: q, handler: handler) }
        scheduleReady()
        return true
    }

    /// "Finished launching" has no event on Linux: the app is ready at its first submit, when its main queue
    /// first turns, or half a second after its last registration, whichever comes first.
    func scheduleReady() {
        guard case .success(let (_, t)) = connection() else { return }
        let askMain = state.withLock { s -> Bool in
            if s.readySent { return false }
            if let old = s.readyTimer { t.cancel(old) }
            s.readyTimer = t.after(0.5) { [weak self] in self?.sendReady() }
            let first = !s.mainQueueTurnAsked
            s.mainQueueTurnAsked = true
            return first
        }
        if askMain { DispatchQueue.main.async { [weak self] in self?.sendReady() } }
    }

    func sendReady() {
        let app: String? = state.withLock { s in
            if s.readySent || s.handlers.isEmpty { return nil }
            s.readySent = true
            if let t = s.readyTimer { s.thread?.cancel(t); s.readyTimer = nil }
            return s.appID
        }
        guard let app else { return }
        if case .failure(let e) = call(.appReady, [.string(app)]) { DaemonLink.warn("cannot tell bgtaskd the app is ready: \(e.errorDescription ?? "")") }
    }

    func daemonRestarted() {
        let (app, ids, wasReady) = state.withLock { ($0.appID, Array($0.handlers.keys), $0.readySent) }
        guard let app, !ids.isEmpty else { return }
        for id in ids.sorted() { _ = call(.appRegister, [.string(app), .string(id)]) }
        if wasReady { _ = call(.appReady, [.string(app)]) }
    }

    // MARK: Launches and expirations (on the bus thread)

    func launch(app: String, identifier: String, kind: String) {
        let (registration, mine) = state.withLock { ($0.handlers[identifier], app == $0.appID && $0.running[identifier] == nil) }
        guard mine else { return }
        let task: BGTask
        switch kind {
        case "refresh": task = BGAppRefreshTask(identifier: identifier, link: self)
        case "continued":
            let (title, subtitle) = state.withLock { $0.titles[identifier] ?? (identifier, "") }
            task = BGContinuedProcessingTask(identifier: identifier, title: title, subtitle: subtitle, link: self)
        default: task = BGProcessingTask(identifier: identifier, link: self)
        }
        guard let registration else {
            // The library's failure, not the app's: said to bgtaskd as such (not as an unsuccessful completion).
            let why = "no launch handler is registered for \(identifier) (register it before the app finishes launching)"
            DaemonLink.warn(why)
            _ = call(.appLaunchReceived, [.string(app), .string(identifier), .bool(false), .string(why)])
            return
        }
        state.withLock { $0.running[identifier] = task }
        // Said before the handler can run (and complete): a process that leaves before this is launched again.
        _ = call(.appLaunchReceived, [.string(app), .string(identifier), .bool(true), .string("")])
        if let c = task as? BGContinuedProcessingTask { sample(c) }
        registration.queue.async { registration.handler(task) }
    }

    func expire(app: String, identifier: String, reason: String) {
        guard let task = state.withLock({ app == $0.appID ? $0.running[identifier] : nil }) else { return }
        let (handler, done) = task.takeExpirationHandler()
        if done { return }
        guard let handler else {
            // Apple: without an expiration handler the task is marked complete and unsuccessful instead.
            DaemonLink.warn("\(identifier) expired (\(reason)) and has no expirationHandler: completed unsuccessfully")
            task.setTaskCompleted(success: false)
            return
        }
        // The app's expiration handler (not @Sendable, as Apple's): taken once, called once on expirationQueue.
        nonisolated(unsafe) let h = handler
        expirationQueue.async { h() }
    }

    /// Samples a continued task's progress a few times a second and sends what changed. On the bus thread,
    /// not the handler's queue: the seeds' handler loops on its queue until it is expired.
    func sample(_ task: BGContinuedProcessingTask) {
        guard case .success(let (_, t)) = connection() else { return }
        let id = t.after(DaemonLink.progressInterval) { [weak self, weak task] in
            guard let self, let task, !task.isCompleted else { return }
            self.sendProgress(task)
            self.sample(task)
        }
        state.withLock { $0.samplers[task.identifier] = id }
    }

    func sendProgress(_ task: BGContinuedProcessingTask) {
        let now = (max(0, task.progress.completedUnitCount), max(0, task.progress.totalUnitCount))
        let app = state.withLock { s -> String? in
            if let last = s.lastProgress[task.identifier], last == now { return nil }
            s.lastProgress[task.identifier] = now
            return s.appID
        }
        guard let app else { return }
        _ = call(.appProgress, [.string(app), .string(task.identifier), .uint64(UInt64(now.0)), .uint64(UInt64(now.1))])
    }

    // MARK: Calls from the app's tasks

    func completed(_ task: BGTask, success: Bool) {
        let (sampler, thread) = state.withLock { s -> (UInt32?, BusThread?) in
            s.running[task.identifier] = nil
            return (s.samplers.removeValue(forKey: task.identifier), s.thread)
        }
        if let s = sampler { thread?.cancel(s) }
        if let c = task as? BGContinuedProcessingTask { sendProgress(c) }
        state.withLock { $0.lastProgress[task.identifier] = nil }
        guard let app = currentAppID else { return }
        // "not running": the daemon ended it already (its grace ran out); nothing is lost.
        if case .failure(let e) = call(.appComplete, [.string(app), .string(task.identifier), .bool(success)]), !e.message.contains("not running") {
            DaemonLink.warn("completing \(task.identifier): \(e.errorDescription ?? "")")
        }
    }

    func updateTitle(_ task: BGContinuedProcessingTask, title: String, subtitle: String) {
        state.withLock { $0.titles[task.identifier] = (title, subtitle) }
        guard let app = currentAppID else { return }
        if case .failure(let e) = call(.appUpdateTitle, [.string(app), .string(task.identifier), .string(title), .string(subtitle)]) {
            DaemonLink.warn("updating the title of \(task.identifier): \(e.errorDescription ?? "")")
        }
    }

    // MARK: Requests

    func submit(_ r: BGTaskRequest) throws(BGTaskScheduler.Error) {
        guard type(of: r) != BGTaskRequest.self else {
            throw BGTaskScheduler.Error(.notPermitted, message: "submit a BGAppRefreshTaskRequest, BGProcessingTaskRequest or BGContinuedProcessingTaskRequest")
        }
        let app: String
        switch resolveApp(for: r.identifier) {
        case .failure(let e): throw e
        case .success(let a): app = a
        }
        var request = AppRequest(identifier: r.identifier, kind: r.kind)
        // Apple ignores a continued request's earliestBeginDate in favour of now.
        if r.kind != "continued", let d = r.earliestBeginDate {
            let now = Date().timeIntervalSince1970
            request.earliest = min(max(0, d.timeIntervalSince1970), now + RequestBounds.farthestAhead - 86_400)
        }
        if let p = r as? BGProcessingTaskRequest {
            request.requiresNetwork = p.requiresNetworkConnectivity
            request.requiresExternalPower = p.requiresExternalPower
        }
        if let c = r as? BGContinuedProcessingTaskRequest {
            request.title = c.title
            request.subtitle = c.subtitle
            request.strategy = c.strategy == .fail ? "fail" : "queue"
            request.resources = c.requiredResources.contains(.gpu) ? ["gpu"] : []
            // The launch can arrive before the reply does.
            state.withLock { $0.titles[c.identifier] = (c.title, c.subtitle) }
        }
        // Ready first: a continued task is delivered as soon as it starts.
        sendReady()
        if case .failure(let e) = call(.appSubmit, [.string(app), .dict(request.variant)]) { throw e }
    }

    func cancel(_ identifier: String) {
        guard case .success(let app) = resolveApp(for: identifier) else { return }
        sendReady()
        if case .failure(let e) = call(.appCancel, [.string(app), .string(identifier)]) {
            DaemonLink.warn("cancelling \(identifier): \(e.errorDescription ?? "")")
        }
    }

    func cancelAll() {
        guard let app = currentAppID else { return }
        sendReady()
        if case .failure(let e) = call(.appCancelAll, [.string(app)]) { DaemonLink.warn("cancelling all: \(e.errorDescription ?? "")") }
    }

    func pending() -> [BGTaskRequest] {
        guard let app = currentAppID else { return [] }
        sendReady()
        guard case .success(let reply) = call(.appPending, [.string(app)]), case .dicts(let rows)? = reply.first else { return [] }
        return rows.compactMap { d -> BGTaskRequest? in
            guard let t = try? AppPendingTask(variant: d) else { return nil }
            let r: BGTaskRequest
            switch t.kind {
            case "refresh": r = BGAppRefreshTaskRequest(identifier: t.identifier)
            case "continued":
                let c = BGContinuedProcessingTaskRequest(identifier: t.identifier, title: t.title ?? "", subtitle: t.subtitle ?? "")
                c.strategy = t.strategy == "fail" ? .fail : .queue
                c.requiredResources = (t.resources ?? []).contains("gpu") ? .gpu : .default
                r = c
            default:
                let p = BGProcessingTaskRequest(identifier: t.identifier)
                p.requiresNetworkConnectivity = t.requiresNetwork ?? false
                p.requiresExternalPower = t.requiresExternalPower ?? false
                r = p
            }
            if let e = t.earliest { r.earliestBeginDate = Date(timeIntervalSince1970: e) }
            return r
        }
    }

    func supportedResources() -> BGContinuedProcessingTaskRequest.Resources {
        guard case .success(let reply) = call(.getSupportedResources, []), let list = reply.first?.strings else { return .default }
        return list.contains("gpu") ? .gpu : .default
    }
}
