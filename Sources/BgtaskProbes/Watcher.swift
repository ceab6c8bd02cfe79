#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import CUPower
import Synchronization
import BgtaskFiles

/// A snapshot and what changed in it, and the event that caused it.
public struct ConditionUpdate: Sendable {
    public var snapshot: ConditionSnapshot
    public var changes: [ConditionChange]
    public var initial: Bool
    public var trigger: String
}

public struct WatchOptions: Sendable {
    public var probe: ProbeOptions
    /// Thermal zones raise no events for temperature: they are read this often, and only while
    /// watching and only when a zone has a usable temperature. nil: never.
    public var thermalIntervalMs: Int32?

    public init(probe: ProbeOptions = .init(), thermalIntervalMs: Int32? = 2000) {
        self.probe = probe
        self.thermalIntervalMs = thermalIntervalMs
    }
}

func monotonicNanos() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
}

/// Watches every condition source and streams snapshots as they change: the udev netlink monitor
/// (power_supply, thermal, net), rtnetlink (links, routes), UPower, NetworkManager and
/// power-profiles-daemon signals on a GLib thread, and a thermal poll only where zones exist.
/// Nothing wakes the process while nothing changes, apart from that thermal poll.
///
/// Updates are delivered on the watcher's own thread. Swift concurrency on Linux costs a wake-up a
/// second (libdispatch's worker-pool monitor), so long waits (`bgtask watch`, `bgtask run`) use
/// `start(_:deliver:)` from plain threads; `updates(_:)` is the same stream for async code.
public enum ConditionWatcher {
    /// Starts watching; `deliver` gets every update on the watcher thread until it returns false or
    /// the handle is stopped. `finished` runs once when the watcher ends.
    @discardableResult
    /// Throws when its pipe or threads cannot be made (a process at its descriptor or thread limit).
    public static func start(_ options: WatchOptions = .init(),
                             deliver: @escaping @Sendable (ConditionUpdate) -> Bool,
                             finished: @escaping @Sendable () -> Void = {}) throws(SystemError) -> WatchHandle {
        let engine = WatchEngine(options: options, wake: try WakePipe(), deliver: deliver, finished: finished)
        try engine.start()
        return WatchHandle(engine: engine)
    }

    /// `finished` runs once the watcher has stopped (after the consumer stops iterating, or on its own).
    public static func updates(_ options: WatchOptions = .init(),
                               finished: @escaping @Sendable () -> Void = {}) -> AsyncThrowingStream<ConditionUpdate, any Error> {
        AsyncThrowingStream(bufferingPolicy: .unbounded) { continuation in
            do {
                let handle = try start(options, deliver: { update in
                    if case .terminated = continuation.yield(update) { return false }
                    return true
                }, finished: { continuation.finish(); finished() })
                continuation.onTermination = { _ in handle.stop() }
            } catch {
                continuation.finish(throwing: error)
                finished()
            }
        }
    }
}

public struct WatchHandle: Sendable {
    let engine: WatchEngine
    public func stop() { engine.stop() }

    /// New thresholds (a reloaded policy's `[battery]`, `[thermal]`, `[idle] after`, `[storage]`): the readings
    /// are made again with them at once, and the desktop's idle watch is moved to the new `after`.
    public func setProbeOptions(_ probe: ProbeOptions) { engine.setProbe(probe) }

    /// Changes how often thermal zones are read (nil: not at all) — a scheduler reads them only while a
    /// temperature can change an outcome, and less often the farther it is from a threshold.
    public func setThermalInterval(ms: Int32?) { engine.setThermalInterval(ms: ms) }
}

/// Unchecked: what other threads change is behind a Mutex or an Atomic (`dbus`, `glibLoop`, `thermalInterval`,
/// `probeBox`, `probeChanged`, `glibSide`, `stopped`); everything else is set in `init` and only read.
final class WatchEngine: @unchecked Sendable {
    let options: WatchOptions
    let deliver: @Sendable (ConditionUpdate) -> Bool
    let finished: @Sendable () -> Void
    let wake: WakePipe
    let stopped = Atomic<Bool>(false)
    /// Written by the GLib thread, read by the poll thread.
    let dbus: Mutex<(readings: DBusReadings?, dirty: Bool)> = Mutex((nil, false))
    /// The GLib main loop, as a bit pattern (pointers are not Sendable).
    let glibLoop = Mutex<Int>(0)
    /// The thermal poll interval in ms, -1 for none; changed from other threads.
    let thermalInterval: Atomic<Int32>
    /// The probes' thresholds: replaced from other threads when the policy is reloaded (`probe` reads them).
    let probeBox: Mutex<ProbeOptions>
    let probeChanged = Atomic<Bool>(false)
    /// The GLib side's context and itself, as bit patterns, while it runs: to ask it to read again.
    let glibSide = Mutex<(context: Int, side: Int)>((0, 0))
    var probe: ProbeOptions { probeBox.withLock { $0 } }

    init(options: WatchOptions, wake: WakePipe, deliver: @escaping @Sendable (ConditionUpdate) -> Bool,
         finished: @escaping @Sendable () -> Void) {
        self.options = options
        self.wake = wake
        self.deliver = deliver
        self.finished = finished
        thermalInterval = Atomic(options.thermalIntervalMs ?? -1)
        probeBox = Mutex(options.probe)
    }

    func setProbe(_ new: ProbeOptions) {
        let changed = probeBox.withLock { p -> Bool in
            guard p != new else { return false }
            p = new
            return true
        }
        guard changed else { return }
        probeChanged.store(true, ordering: .sequentiallyConsistent)
        wake.wake()
        glibSide.withLock { s in
            guard let ctx = OpaquePointer(bitPattern: s.context), let side = UnsafeMutableRawPointer(bitPattern: s.side) else { return }
            cup_invoke_idle(ctx, { Unmanaged<GLibSide>.fromOpaque($0!).takeUnretainedValue().changed() }, side)
        }
    }

    func setThermalInterval(ms: Int32?) {
        let new = ms ?? -1
        if thermalInterval.exchange(new, ordering: .sequentiallyConsistent) != new { wake.wake() }
    }

    func start() throws(SystemError) {
        if options.probe.useDBus {
            try startThread { [self] in GLibSide(engine: self).run() }
        } else {
            dbus.withLock { $0 = (.notConsulted(options.probe.noDBusReason), true) }
        }
        do { try startThread { [self] in pollLoop() } } catch {
            stop()   // the GLib side, if it started, ends
            throw error
        }
    }

    func stop() {
        stopped.store(true, ordering: .sequentiallyConsistent)
        wake.wake()
        glibLoop.withLock { bits in if let l = OpaquePointer(bitPattern: bits) { g_main_loop_quit(l) } }
    }

    /// Called on the GLib thread with fresh readings.
    func publish(_ r: DBusReadings) {
        dbus.withLock { $0 = (r, true) }
        wake.wake()
    }

    private func pollLoop() {
        let prober = Prober(options: options.probe)
        let reader = prober.reader
        // The udev monitor only exists on the live system (real or umockdev); a recorded tree has no events.
        let udev = options.probe.root.isLiveSystem ? UdevMonitor(subsystems: ["power_supply", "thermal", "net"]) : nil
        let routes = options.probe.root.isLiveSystem ? RouteMonitor() : nil

        // Wait (bounded) for the first D-Bus readings so the first snapshot is complete.
        let deadline = monotonicNanos() + 3_000_000_000
        while dbus.withLock({ $0.readings == nil }) && monotonicNanos() < deadline && !stopped.load(ordering: .relaxed) {
            var p = pollfd(fd: wake.readFD, events: Int16(POLLIN), revents: 0)
            _ = poll(&p, 1, 100)
            wake.drain()
        }
        var dbusReadings = dbus.withLock { s -> DBusReadings in
            s.dirty = false
            return s.readings ?? .notConsulted("D-Bus did not answer within 3 s")
        }

        var supplies = reader.powerSupplies()
        var zones = reader.thermalZones(fallback: probe.thermal)
        var (routeList, routesReadable) = reader.defaultRoutes()
        var links = reader.networkLinks(routes: routeList)
        var zoneStates: [String: ThermalState] = [:]
        var differ = ConditionDiffer()

        func emit(trigger: String, initial: Bool, force: Bool = false) {
            let snap = ConditionSnapshot.assemble(
                supplies: supplies, zones: zones, previousZoneStates: zoneStates, links: links,
                routesReadable: routesReadable, cpuPressure: reader.cpuPressure(), dbus: dbusReadings, options: probe)
            zoneStates = snap.zoneStates
            differ.storageSize(snap.storage.sizeBytes)
            let changes = differ.changes(to: snap.conditions)
            if initial || force || !changes.isEmpty {
                let more = deliver(ConditionUpdate(snapshot: snap, changes: changes, initial: initial, trigger: trigger))
                if !more { stop() }
            }
        }
        emit(trigger: "start", initial: true)

        var nextThermal: UInt64?
        var scheduledInterval: Int32 = thermalInterval.load(ordering: .relaxed)
        func scheduleThermal() {
            let ms = thermalInterval.load(ordering: .relaxed)
            // Reads turned back on: the last reading may be old, so read at once.
            let resumed = scheduledInterval <= 0 && ms > 0
            scheduledInterval = ms
            guard ms > 0, zones.contains(where: \.isUsable) else { nextThermal = nil; return }
            nextThermal = monotonicNanos() + (resumed ? 0 : UInt64(ms) * 1_000_000)
        }
        scheduleThermal()

        while !stopped.load(ordering: .relaxed) {
            var fds = [pollfd(fd: wake.readFD, events: Int16(POLLIN), revents: 0)]
            if let u = udev { fds.append(pollfd(fd: u.fd, events: Int16(POLLIN), revents: 0)) }
            if let r = routes { fds.append(pollfd(fd: r.fd, events: Int16(POLLIN), revents: 0)) }
            var timeout: Int32 = -1
            if let t = nextThermal {
                let now = monotonicNanos()
                timeout = t > now ? Int32(min(UInt64(Int32.max), (t - now + 999_999) / 1_000_000)) : 0
            }
            let n = poll(&fds, nfds_t(fds.count), timeout)
            let at = monotonicNanos()
            if n < 0 && errno != EINTR { break }
            if stopped.load(ordering: .relaxed) { break }

            var powerDirty = false, thermalDirty = false, netDirty = false, dbusDirty = false
            // `change` events of supplies already known need no enumeration; add, remove, or an unknown one does.
            var enumerateSupplies = false
            var overflowed = false
            var triggers: [String] = []
            if fds[0].revents != 0 {
                wake.drain()
                // A new interval takes effect now: sooner if it shrank, later (or never) if it grew.
                if thermalInterval.load(ordering: .relaxed) != scheduledInterval { scheduleThermal() }
                if probeChanged.exchange(false, ordering: .sequentiallyConsistent) {
                    thermalDirty = true      // the zones' fallback trip points may have changed
                    triggers.append("new thresholds")
                }
                if let r = dbus.withLock({ s -> DBusReadings? in defer { s.dirty = false }; return s.dirty ? s.readings : nil }) {
                    dbusReadings = r
                    dbusDirty = true
                    triggers.append("D-Bus signal")
                }
            }
            if let u = udev, fds.first(where: { $0.fd == u.fd })?.revents ?? 0 != 0 {
                let (events, overflow) = u.receiveAll()
                if overflow {
                    overflowed = true
                    triggers.append("udev monitor overflow (ENOBUFS): re-read everything")
                }
                for ev in events {
                    switch ev.subsystem {
                    case "power_supply":
                        powerDirty = true
                        if ev.action != "change" || !supplies.contains(where: { $0.path == ev.path }) { enumerateSupplies = true }
                    case "thermal": thermalDirty = true
                    case "net": netDirty = true
                    default: break
                    }
                    triggers.append("uevent \(ev.action) \(ev.subsystem)/\(ev.name)")
                }
            }
            if let r = routes, fds.first(where: { $0.fd == r.fd })?.revents ?? 0 != 0 {
                let (got, overflow) = r.drain()
                if overflow {
                    overflowed = true
                    triggers.append("rtnetlink overflow (ENOBUFS): re-read everything")
                } else if got {
                    netDirty = true
                    triggers.append("rtnetlink")
                }
            }
            // Lost events could have been about anything: read every source again.
            if overflowed { powerDirty = true; thermalDirty = true; netDirty = true; enumerateSupplies = true }
            if let t = nextThermal, at >= t {
                thermalDirty = true
                triggers.append("thermal poll")
            }

            if powerDirty {
                if enumerateSupplies {
                    supplies = reader.powerSupplies()
                } else {
                    // Without enumerating (libudev's scan was most of the cost), every known supply is read
                    // again, not only the one in the event: a charger and its battery change together but
                    // their uevents arrive apart, and reading one alone would report "discharging although
                    // AC is online" in between.
                    supplies = supplies.map { reader.powerSupply(at: $0.path) }
                }
            }
            if thermalDirty {
                zones = reader.thermalZones(fallback: probe.thermal)
                scheduleThermal()
            }
            if netDirty {
                (routeList, routesReadable) = reader.defaultRoutes()
                links = reader.networkLinks(routes: routeList)
            }
            if powerDirty || thermalDirty || netDirty || dbusDirty {
                // After an overflow the update goes out even if nothing differs, so a follower knows it was re-read.
                emit(trigger: triggers.joined(separator: ", "), initial: false, force: overflowed)
            }
        }
        finished()
    }
}

/// Owns the GLib main context, the UPower client and the D-Bus subscriptions; lives on its own thread.
final class GLibSide {
    unowned let engine: WatchEngine
    var context: OpaquePointer?
    var bus: SystemBus?
    /// Made once, on this thread, and kept until it ends (UPowerClient says why it is never made again).
    var upower: UPowerClient?
    var pending = false
    /// The session bus, for the desktop's idle monitor; nil when there is none.
    var session: SessionBus?
    var desktop: (DesktopIdle?, String) = (nil, "no session D-Bus")
    /// Mutter's watches: idle for `[idle] after`, and the next input after that.
    var idleWatch: UInt32?
    /// The `after` that watch was set at.
    var idleWatchMs: UInt64 = 0
    var activeWatch: UInt32?
    /// logind's sessions, kept up to date from its PropertiesChanged (whose values need no call); nil: list again.
    var logind: LogindSessions?
    /// The one timer presence needs: the instant logind's (or KDE's) idle time reaches the threshold.
    var presenceTimer: UnsafeMutablePointer<GSource>?

    init(engine: WatchEngine) { self.engine = engine }

    var selfPointer: UnsafeMutableRawPointer { Unmanaged.passUnretained(self).toOpaque() }

    func run() {
        let ctx = g_main_context_new()
        g_main_context_push_thread_default(ctx)
        context = ctx
        defer { g_main_context_pop_thread_default(ctx); g_main_context_unref(ctx) }

        switch SystemBus.connect() {
        case .failure(let e):
            engine.publish(.notConsulted(e.message))
            return   // no bus: nothing will ever signal
        case .success(let b):
            bus = b
        }
        connectUPower()
        let onSignal: cup_callback = { Unmanaged<GLibSide>.fromOpaque($0!).takeUnretainedValue().changed() }
        var a: guint = 0, b: guint = 0
        let nm = Services.networkManager
        cup_dbus_watch_properties(bus!.connection, nm.name, nm.path, onSignal, selfPointer, &a, &b)
        for p in Services.powerProfiles {
            cup_dbus_watch_properties(bus!.connection, p.name, p.path, onSignal, selfPointer, &a, &b)
        }
        // upowerd coming, going and coming back: the client follows by itself; this is for a read right away.
        cup_dbus_watch_properties(bus!.connection, "org.freedesktop.UPower", "/org/freedesktop/UPower",
                                  onSignal, selfPointer, &a, &b)
        // Sessions' IdleHint, LockedHint and Active (PropertiesChanged on each session), SessionNew, SessionRemoved;
        // by interface, so that nothing our own calls cause (a mock's MethodCalled) comes back as a change.
        let onLogind: cup_args_callback = { ctx, path, member, params in
            let me = Unmanaged<GLibSide>.fromOpaque(ctx!).takeUnretainedValue()
            me.logindSignal(path: path.map { String(cString: $0) } ?? "", member: member.map { String(cString: $0) } ?? "", params)
        }
        let onLogindOwner: cup_callback = { ctx in
            let me = Unmanaged<GLibSide>.fromOpaque(ctx!).takeUnretainedValue()
            me.logind = nil
            me.changed()
        }
        _ = cup_dbus_watch_args(bus!.connection, Logind.name, "org.freedesktop.DBus.Properties", onLogind, selfPointer)
        _ = cup_dbus_watch_args(bus!.connection, Logind.name, Logind.manager, onLogind, selfPointer)
        _ = cup_dbus_watch_owner(bus!.connection, Logind.name, onLogindOwner, selfPointer)
        connectDesktop()
        refresh()

        let loop = g_main_loop_new(ctx, 0)
        let bits = Int(bitPattern: loop)
        engine.glibLoop.withLock { $0 = bits }
        engine.glibSide.withLock { $0 = (Int(bitPattern: ctx), Int(bitPattern: selfPointer)) }
        defer { engine.glibSide.withLock { $0 = (0, 0) } }
        if !engine.stopped.load(ordering: .relaxed) { g_main_loop_run(loop) }
        engine.glibLoop.withLock { $0 = 0 }
        g_main_loop_unref(loop)
        cancelPresenceTimer()
        upower = nil
        bus = nil
        session = nil
    }

    func connectUPower() {
        upower = try? UPowerClient.connect().get()
        guard let u = upower else { return }
        let cb: cup_callback = { Unmanaged<GLibSide>.fromOpaque($0!).takeUnretainedValue().changed() }
        cup_connect_notify(u.client, "notify", cb, selfPointer)
        cup_connect_device_signal(u.client, "device-added", cb, selfPointer)
        cup_connect_device_signal(u.client, "device-removed", cb, selfPointer)
        watchDisplay()
    }

    /// Subscribes to the display device's changes the first time upowerd answers for it.
    func watchDisplay() {
        guard let u = upower else { return }
        let (display, made) = u.displayDevice()
        guard made, let d = display else { return }
        cup_connect_notify(d, "notify", { Unmanaged<GLibSide>.fromOpaque($0!).takeUnretainedValue().changed() }, selfPointer)
    }

    /// The desktop's idle monitors on the session bus: Mutter's watches fire when the threshold is reached and at
    /// the next input after it; the screen saver's ActiveChanged when the screen locks or unlocks.
    func connectDesktop() {
        let s: SessionBus
        switch SessionBus.connect() {
        case .failure(let e): desktop = (nil, e.message); return
        case .success(let b): s = b; session = b
        }
        let onSignal: cup_callback = { Unmanaged<GLibSide>.fromOpaque($0!).takeUnretainedValue().changed() }
        let onMutterOwner: cup_callback = { ctx in
            let me = Unmanaged<GLibSide>.fromOpaque(ctx!).takeUnretainedValue()
            // gnome-shell restarted (or started): its watches went with it.
            me.idleWatch = nil
            me.activeWatch = nil
            me.changed()
        }
        let onFired: cup_uint_callback = { ctx, id in
            let me = Unmanaged<GLibSide>.fromOpaque(ctx!).takeUnretainedValue()
            if id == me.activeWatch { me.activeWatch = nil }   // Mutter removes a user-active watch once it fires
            me.changed()
        }
        var a: guint = 0, b: guint = 0
        let m = DesktopMonitors.mutter, ss = DesktopMonitors.screenSaver
        cup_dbus_watch_properties(s.connection, m.name, m.path, onMutterOwner, selfPointer, &a, &b)
        _ = cup_dbus_watch_uint_signal(s.connection, m.name, m.path, m.iface, "WatchFired", onFired, selfPointer)
        cup_dbus_watch_sender(s.connection, ss.name, ss.iface, onSignal, selfPointer, &a, &b)
    }

    /// Reads the desktop's idle time and keeps Mutter's watches in place: the idle watch always, the
    /// user-active watch only once the person is away (added while they type, it would fire at every key).
    func readDesktop() {
        guard let s = session else { return }
        desktop = DesktopMonitors.read(s.connection)
        guard let d = desktop.0, d.watched, let ms = d.idleMs else { return }
        let afterMs = UInt64(max(1, engine.probe.idleAfter * 1000))
        let m = DesktopMonitors.mutter
        // A new `[idle] after`: the watch set at the old one goes.
        if let w = idleWatch, idleWatchMs != afterMs {
            _ = DesktopMonitors.call(s.connection, m, "RemoveWatch", cup_params_u(w), reply: "()")
            idleWatch = nil
        }
        idleWatchMs = afterMs
        if idleWatch == nil {
            idleWatch = DesktopMonitors.first(DesktopMonitors.call(s.connection, m, "AddIdleWatch", cup_params_t(guint64(afterMs)), reply: "(u)"),
                                              { g_variant_get_uint32($0) })
        }
        if ms >= afterMs, activeWatch == nil {
            activeWatch = DesktopMonitors.first(DesktopMonitors.call(s.connection, m, "AddUserActiveWatch", reply: "(u)"),
                                                { g_variant_get_uint32($0) })
        }
    }

    /// A session's PropertiesChanged updates the session kept (the changed values are in the signal: the person's
    /// return reaches the scheduler without a round trip to logind); anything else lists the sessions again.
    func logindSignal(path: String, member: String, _ params: OpaquePointer?) {
        var known = false
        if member == "PropertiesChanged", let p = params, cup_variant_is(p, "(sa{sv}as)") != 0,
           let list = logind?.sessions, let i = list.firstIndex(where: { $0.path == path }) {
            let iface = cup_child(p, 0)!, changedProps = cup_child(p, 1)!, invalidated = cup_child(p, 2)!
            defer { g_variant_unref(iface); g_variant_unref(changedProps); g_variant_unref(invalidated) }
            if String(cString: g_variant_get_string(iface, nil)) == Logind.session, g_variant_n_children(invalidated) == 0 {
                logind!.sessions![i].apply(changedProps)
                known = true
            }
        }
        if !known { logind = nil }
        changed()
    }

    /// Bursts of notifications (every property of the display device changes at once) become one read.
    func changed() {
        guard !pending else { return }
        pending = true
        cup_invoke_idle(context, { Unmanaged<GLibSide>.fromOpaque($0!).takeUnretainedValue().refresh() }, selfPointer)
    }

    func refresh() {
        pending = false
        watchDisplay()
        readDesktop()
        let up = upower.map { $0.reading() } ?? .unavailable("UPower client could not be created")
        let readings = DBusProbe.read(bus: bus!, upower: up, desktop: desktop, sessions: logind)
        logind = (readings.presence.sessions, readings.presence.logindReason, readings.presence.managerIdle)
        schedulePresence(readings.presence)
        engine.publish(readings)
    }

    func cancelPresenceTimer() {
        if let t = presenceTimer { g_source_destroy(t); g_source_unref(t) }
        presenceTimer = nil
    }

    /// One timer, only while a person is idle but not yet away by logind's or KDE's clock (Mutter's watch does it
    /// itself); a text session's idle hint, which logind computes without a signal, is read again every
    /// `[idle] after` while one is in use.
    func schedulePresence(_ p: PresenceInputs) {
        cancelPresenceTimer()
        let after = engine.probe.idleAfter
        let reading = PresenceAnalysis.analyze(p, after: after, now: monotonicNanos())
        var wait = reading.crossingIn
        if wait == nil, reading.idle == false,
           p.sessions?.contains(where: { $0.isPersons && $0.type == "tty" && !$0.idle }) == true {
            wait = after
        }
        guard let w = wait else { return }
        let ms = guint(min(Double(UInt32.max / 2), max(1, (w * 1000).rounded(.up) + 5)))
        presenceTimer = cup_timeout(context, ms, { ctx in
            let me = Unmanaged<GLibSide>.fromOpaque(ctx!).takeUnretainedValue()
            // A text session's idle hint changes without a signal: the sessions are listed again, not taken as kept.
            me.logind = nil
            me.changed()
        }, selfPointer)
    }
}
