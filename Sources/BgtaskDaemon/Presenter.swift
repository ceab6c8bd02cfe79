#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskBus
import BgtaskCore
import BgtaskPolicy
import BgtaskRun

/// What the person sees of a continued task (Apple's Live Activity): KDE's job view where its server is on
/// the bus, else a desktop notification updated in place, with a Cancel that expires the task ("cancelled by
/// the user"). Updates go out at most once a second; a stalled task says so, then is expired. All calls are
/// asynchronous: a slow notification server never holds up the scheduler.
final class Presenter {
    /// What the presenter asks of bgtaskd: it knows nothing else of the daemon.
    struct Host {
        let bus: BusConnection
        let loop: MainLoop
        let say: (String) -> Void
        /// The policy's settings in force (how long a stalled task is shown, then expired).
        let settings: () -> PolicySettings
        /// The person pressed Cancel on the task `key`'s surface (`who`: "the user (notification)").
        let cancel: (_ key: String, _ who: String) -> Void
        /// The task `key` made no progress for too long: it expires (`why`).
        let expire: (_ key: String, _ why: String) -> Void
    }
    let host: Host
    var bus: BusConnection { host.bus }
    var shown: [String: Shown] = [:]
    var subscribed = false
    /// After a task completes, its notification stays this long (with the outcome), then is closed.
    static let linger = 4.0

    static let notifications = (name: "org.freedesktop.Notifications", path: "/org/freedesktop/Notifications",
                                interface: "org.freedesktop.Notifications")
    static let jobServer = (name: "org.kde.JobViewServer", path: "/JobViewServer", interface: "org.kde.JobViewServer")
    static let jobView = "org.kde.JobViewV2"

    enum Surface { case none, notification, jobView }

    final class Shown {
        let key: String
        let appName: String
        let appID: String
        var title: String
        var subtitle: String
        var completed: UInt64 = 0
        var total: UInt64 = 0
        var watch: ProgressWatch
        var throttle = UpdateThrottle(interval: 1)
        var surface = Surface.none
        var actions = true
        /// The server reads markup in the body (`body-markup`): the body is escaped.
        var markup = false
        var notificationID: UInt32 = 0
        /// A Notify is on its way: the next update waits for its id, so one task never makes two notifications.
        var inFlight = false
        var dirty = false
        var dismissed = false
        var jobPath: String?
        var stalledShown = false
        var checkAt: Double?
        var ended = false
        init(key: String, appID: String, appName: String, title: String, subtitle: String, watch: ProgressWatch) {
            self.key = key
            self.appID = appID
            self.appName = appName
            self.title = title
            self.subtitle = subtitle
            self.watch = watch
        }
    }

    init(_ host: Host) { self.host = host }

    func subscribe() {
        guard !subscribed else { return }
        subscribed = true
        bus.subscribe(sender: Presenter.notifications.name, interface: Presenter.notifications.interface, member: "ActionInvoked",
                      path: Presenter.notifications.path) { [unowned self] _, args in
            guard args.count == 2, let id = args[0].number.map(UInt32.init), let action = args[1].string,
                  let s = self.shown.values.first(where: { $0.notificationID == id && $0.surface == .notification }) else { return }
            self.action(s, action)
        }
        bus.subscribe(sender: Presenter.notifications.name, interface: Presenter.notifications.interface, member: "NotificationClosed",
                      path: Presenter.notifications.path) { [unowned self] _, args in
            guard args.count == 2, let id = args[0].number.map(UInt32.init), let reason = args[1].number,
                  let s = self.shown.values.first(where: { $0.notificationID == id && $0.surface == .notification }) else { return }
            // Dismissed by the person (2): no new notification for every update; the task goes on.
            if reason == 2, !s.ended { s.dismissed = true }
        }
        bus.subscribe(sender: Presenter.jobServer.name, interface: Presenter.jobView, member: "cancelRequested") { [unowned self] path, _, _ in
            guard let s = self.shown.values.first(where: { $0.jobPath == path }) else { return }
            self.action(s, "cancel")
        }
    }

    func action(_ s: Shown, _ action: String) {
        switch action {
        case "cancel":
            // Only the run this surface shows: once it has ended, a Cancel on a lingering notification must not
            // reach a newer request with the same identifier.
            guard !s.ended, shown[s.key] === s else { return }
            let surface = s.surface == .jobView ? "job view" : "notification"
            host.say("\(s.key): cancelled by the user (\(surface))")
            host.cancel(s.key, "the user (\(surface))")
        case "continue":
            s.watch.keepGoing(now: monotonic())
            s.stalledShown = false
            update(s, force: true)
            scheduleCheck(s)
        default:
            break
        }
    }

    // MARK: From the daemon

    /// A continued task was handed to its app.
    func show(key: String, appID: String, appName: String, title: String, subtitle: String) {
        subscribe()
        let settings = host.settings()
        let s = Shown(key: key, appID: appID, appName: appName, title: title, subtitle: subtitle,
                      watch: ProgressWatch(start: monotonic(), stalledAfter: settings.number("run.progress_stalled"),
                                           expireAfter: settings.number("run.progress_expire")))
        shown[key] = s
        if bus.hasOwner(Presenter.jobServer.name) {
            s.surface = .jobView
            s.inFlight = true
            bus.callAsync("requestView", [.string(appName), .string(""), .int32(1)], destination: Presenter.jobServer.name,
                          path: Presenter.jobServer.path, interface: Presenter.jobServer.interface) { [weak self, weak s] r in
                guard let self, let s else { return }
                s.inFlight = false
                if case .success(let v) = r, let path = v.first?.string { s.jobPath = path; self.update(s, force: true) }
                else { self.host.say("\(key): KDE's job view refused the job; progress shown only by bgtask tasks") }
            }
        } else if bus.hasOwner(Presenter.notifications.name) {
            s.surface = .notification
            s.inFlight = true
            bus.callAsync("GetCapabilities", [], destination: Presenter.notifications.name, path: Presenter.notifications.path,
                          interface: Presenter.notifications.interface, timeoutMs: 2_000) { [weak self, weak s] r in
                guard let self, let s else { return }
                s.inFlight = false
                if case .success(let v) = r, let caps = v.first?.strings {
                    s.actions = caps.contains("actions")
                    s.markup = caps.contains("body-markup")
                }
                self.update(s, force: true)
            }
        } else {
            host.say("\(key): no notification server or job view on the session bus; progress is shown by bgtask tasks only")
        }
        scheduleCheck(s)
    }

    func progress(key: String, completed: UInt64, total: UInt64) {
        guard let s = shown[key], !s.ended else { return }
        s.completed = completed
        s.total = total
        s.watch.report(completed: completed, total: total, now: monotonic())
        if s.stalledShown, case .moving = s.watch.state(now: monotonic()) { s.stalledShown = false }
        update(s)
    }

    func retitle(key: String, title: String, subtitle: String) {
        guard let s = shown[key], !s.ended else { return }
        s.title = title
        s.subtitle = subtitle
        update(s)
    }

    /// The task is over: the outcome is shown briefly, then the notification goes.
    func finish(key: String, success: Bool, detail: String) {
        guard let s = shown[key], !s.ended else { return }
        s.ended = true
        if success, s.total > 0 { s.completed = s.total }
        switch s.surface {
        case .jobView:
            if let p = s.jobPath {
                bus.callAsync("terminate", [.string(success ? "" : detail)], destination: Presenter.jobServer.name, path: p,
                              interface: Presenter.jobView) { _ in }
            }
            shown[key] = nil
        case .notification:
            send(s, body: success ? "Done" : "Stopped: \(detail)", actions: [], timeoutMs: Int32(Presenter.linger * 1000))
            host.loop.after(Presenter.linger) { [weak self] in self?.close(key) }
        case .none:
            shown[key] = nil
        }
    }

    func close(_ key: String) {
        guard let s = shown.removeValue(forKey: key), s.notificationID != 0 else { return }
        bus.callAsync("CloseNotification", [.uint32(s.notificationID)], destination: Presenter.notifications.name,
                      path: Presenter.notifications.path, interface: Presenter.notifications.interface) { _ in }
    }

    // MARK: Stalls

    func scheduleCheck(_ s: Shown) {
        let now = monotonic()
        guard s.checkAt == nil, let next = s.watch.nextCheck(now: now) else { return }
        s.checkAt = next
        host.loop.after(max(0, next - now)) { [weak self, weak s] in
            guard let self, let s, !s.ended else { return }
            s.checkAt = nil
            self.check(s)
        }
    }

    func check(_ s: Shown) {
        let now = monotonic()
        switch s.watch.state(now: now) {
        case .moving:
            break
        case .stalled:
            if !s.stalledShown {
                s.stalledShown = true
                host.say("\(s.key): no progress for \(formatDuration(now - s.watch.lastChange, .words)); shown as stalled")
                update(s, force: true)
            }
        case .expire(let since):
            host.say("\(s.key): no progress for \(formatDuration(now - since, .words)); expiring it")
            host.expire(s.key, "no progress for \(formatDuration(now - since, .words)) (run.progress_expire)")
            return
        }
        scheduleCheck(s)
    }

    // MARK: Sending

    func update(_ s: Shown, force: Bool = false) {
        guard !s.ended else { return }
        if s.inFlight { s.dirty = true; return }
        if !force {
            switch s.throttle.offer(now: monotonic()) {
            case .sendNow: break
            case .alreadyScheduled: return
            case .sendAt(let t):
                host.loop.after(max(0, t - monotonic())) { [weak self, weak s] in
                    guard let self, let s, !s.ended else { return }
                    s.throttle.sent(now: monotonic())
                    self.push(s)
                }
                return
            }
        } else {
            s.throttle.sent(now: monotonic())
        }
        push(s)
    }

    func push(_ s: Shown) {
        let stalledFor: Double? = s.stalledShown ? monotonic() - s.watch.lastChange : nil
        switch s.surface {
        case .notification:
            if s.dismissed { return }
            var actions = ["cancel", "Cancel"]
            if s.stalledShown { actions = ["continue", "Keep going", "cancel", "Stop"] }
            send(s, body: ProgressText.body(subtitle: s.subtitle, completed: s.completed, total: s.total, stalledFor: stalledFor),
                 actions: s.actions ? actions : [], timeoutMs: 0)
        case .jobView:
            guard let p = s.jobPath else { return }
            let calls: [(String, [BusValue])] = [
                ("setInfoMessage", [.string(s.stalledShown ? "\(s.title) — no progress" : s.title)]),
                ("setDescriptionField", [.uint32(0), .string(s.subtitle), .string("")]),
                ("setTotalAmount", [.uint64(s.total), .string("items")]),
                ("setProcessedAmount", [.uint64(s.completed), .string("items")]),
                ("setPercent", [.uint32(UInt32(ProgressText.percent(completed: s.completed, total: s.total) ?? 0))]),
            ]
            for (m, a) in calls {
                bus.callAsync(m, a, destination: Presenter.jobServer.name, path: p, interface: Presenter.jobView) { _ in }
            }
        case .none:
            break
        }
    }

    func send(_ s: Shown, body: String, actions: [String], timeoutMs: Int32) {
        var hints: [String: BusValue] = ["urgency": .byte(1), "category": .string("transfer"), "desktop-entry": .string(s.appID),
                                         "transient": .bool(false)]
        if let p = ProgressText.percent(completed: s.completed, total: s.total) { hints["value"] = .int32(Int32(p)) }
        s.inFlight = true
        let text = s.markup ? ProgressText.markupEscaped(body) : body
        bus.callAsync("Notify", [.string(s.appName), .uint32(s.notificationID), .string(""), .string(s.title), .string(text),
                                 .strings(actions), .dict(hints), .int32(timeoutMs)],
                      destination: Presenter.notifications.name, path: Presenter.notifications.path,
                      interface: Presenter.notifications.interface) { [weak self, weak s] r in
            guard let self, let s else { return }
            s.inFlight = false
            switch r {
            case .success(let v): if let id = v.first?.number { s.notificationID = UInt32(id) }
            case .failure(let e): self.host.say("\(s.key): the notification server refused it: \(e.message)")
            }
            if s.dirty, !s.ended { s.dirty = false; self.update(s) }
        }
    }
}
