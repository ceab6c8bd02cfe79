#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import CUPower
import BgtaskFiles

/// One logind session as `org.freedesktop.login1.Session` describes it.
public struct LoginSession: Sendable, Equatable {
    public var id: String
    /// Its object path, which logind's PropertiesChanged names.
    public var path = ""
    public var user: String
    public var type: String
    /// Its terminal ("tty2", "pts/3"), empty without one.
    public var tty: String
    public var sessionClass: String
    public var state: String
    public var remote: Bool
    public var active: Bool
    public var idle: Bool
    /// CLOCK_MONOTONIC µs of the last change of the idle hint; 0 when logind does not say.
    public var idleSinceUs: UInt64
    public var locked: Bool

    public init(id: String, user: String = "", type: String = "wayland", tty: String = "", sessionClass: String = "user", state: String = "active",
                remote: Bool = false, active: Bool = true, idle: Bool = false, idleSinceUs: UInt64 = 0, locked: Bool = false) {
        self.id = id; self.user = user; self.type = type; self.tty = tty; self.sessionClass = sessionClass; self.state = state
        self.remote = remote; self.active = active; self.idle = idle; self.idleSinceUs = idleSinceUs; self.locked = locked
    }

    /// Takes what an `a{sv}` of the Session interface says (GetAll's answer, or PropertiesChanged's changes).
    mutating func apply(_ p: OpaquePointer) {
        if let v = OneShot.string(p, "Name") { user = v }
        if let v = OneShot.string(p, "Type") { type = v }
        if let v = OneShot.string(p, "TTY") { tty = v }
        if let v = OneShot.string(p, "Class") { sessionClass = v }
        if let v = OneShot.string(p, "State") { state = v }
        if let v = OneShot.bool(p, "Remote") { remote = v }
        if let v = OneShot.bool(p, "Active") { active = v }
        if let v = OneShot.bool(p, "IdleHint") { idle = v }
        if let v = OneShot.uint64(p, "IdleSinceHintMonotonic") { idleSinceUs = v }
        if let v = OneShot.bool(p, "LockedHint") { locked = v }
    }

    /// A person's session (logind's classes `user`, `user-early`, `user-incomplete`), not a greeter, a lock
    /// screen, cron's background sessions or the user manager's own; one being closed no longer counts, nor one
    /// with neither a terminal nor a display (a command run over ssh, scp, automation).
    public var isPersons: Bool {
        guard sessionClass.hasPrefix("user"), state != "closing" else { return false }
        switch type {
        case "x11", "wayland", "mir": return true
        case "tty": return !tty.isEmpty   // ssh without a terminal is type tty with no TTY (systemd 252)
        default: return type != "unspecified" && !type.isEmpty
        }
    }
}

/// Exact idle time from the desktop of bgtaskd's own session (GNOME's Mutter, KDE's screen saver service).
public struct DesktopIdle: Sendable, Equatable {
    /// "GNOME idle monitor", "KDE screen saver".
    public var source: String
    /// Milliseconds since the last input, when the desktop tells it.
    public var idleMs: UInt64?
    /// The screen saver (lock screen) is active.
    public var locked: Bool?
    /// Its idle time comes with watches (Mutter): no timer is needed to see the threshold crossed.
    public var watched: Bool

    public init(source: String, idleMs: UInt64?, locked: Bool?, watched: Bool) {
        self.source = source; self.idleMs = idleMs; self.locked = locked; self.watched = watched
    }
}

/// What logind and the desktop said, and when (CLOCK_MONOTONIC ns), before any threshold is applied.
public struct PresenceInputs: Sendable, Equatable {
    /// nil: logind could not be asked (`logindReason` says why).
    public var sessions: [LoginSession]?
    public var logindReason: String
    /// logind's own aggregate (the Manager's IdleHint, IdleSinceHintMonotonic µs), when it answered.
    public var managerIdle: ManagerIdle?
    public var desktop: DesktopIdle?
    public var desktopReason: String
    public var readAt: UInt64

    public init(sessions: [LoginSession]?, logindReason: String, desktop: DesktopIdle? = nil, desktopReason: String = "no desktop idle monitor",
                readAt: UInt64) {
        self.sessions = sessions; self.logindReason = logindReason; self.desktop = desktop; self.desktopReason = desktopReason
        self.readAt = readAt
    }

    public static func notConsulted(_ why: String) -> PresenceInputs {
        PresenceInputs(sessions: nil, logindReason: why, desktop: nil, desktopReason: why, readAt: 0)
    }
}

/// Whether a person is using the machine: the `user.*` conditions.
public struct PresenceReading: Sendable, Equatable {
    /// Away: nobody has touched the machine for `[idle] after`, every session is locked, or there is no
    /// session at all. nil when neither logind nor a desktop can say.
    public var idle: Bool?
    /// Seconds since the last input (0 while a session is in use); nil when unknown or nobody is logged in.
    public var idleSeconds: Double?
    public var locked: Bool?
    /// Sessions of people (logind), nil without logind.
    public var sessions: Int?
    public var reason: String
    /// Where the reading came from ("logind IdleHint", "GNOME idle monitor").
    public var sources: [String]
    /// In how many seconds `idle` turns true if nothing else happens (the watcher's one timer), nil when it
    /// cannot without an event or a desktop watch reports it.
    public var crossingIn: Double?
}

public enum PresenceAnalysis {
    /// Applies the `[idle] after` threshold to what was read, as of `now` (CLOCK_MONOTONIC ns).
    public static func analyze(_ inputs: PresenceInputs, after: Double, now: UInt64) -> PresenceReading {
        let elapsed = inputs.readAt > 0 && now > inputs.readAt ? Double(now - inputs.readAt) / 1e9 : 0
        let persons = inputs.sessions?.filter(\.isPersons)
        var sources: [String] = []
        if inputs.sessions != nil { sources.append("logind") }
        if let d = inputs.desktop { sources.append(d.source) }
        let sourceText = sources.joined(separator: ", ")

        if persons == nil && inputs.desktop == nil {
            return PresenceReading(idle: nil, idleSeconds: nil, locked: nil, sessions: nil,
                                   reason: "unknown: \(inputs.logindReason)", sources: [], crossingIn: nil)
        }
        if let p = persons, p.isEmpty, inputs.desktop == nil {
            return PresenceReading(idle: true, idleSeconds: nil, locked: nil, sessions: 0,
                                   reason: "away: nobody at a screen or a terminal (logind: no session with one)", sources: sources, crossingIn: nil)
        }
        let sessionsLocked = persons.map { !$0.isEmpty && $0.allSatisfy(\.locked) }
        let locked: Bool? = inputs.desktop?.locked == true || sessionsLocked == true ? true
            : (inputs.desktop?.locked ?? sessionsLocked)
        // Seconds since the last input, from the most exact source.
        var idleS: Double?
        var exactSince = true
        let lockedBy = inputs.desktop?.locked == true ? inputs.desktop!.source : "logind LockedHint"
        if let d = inputs.desktop, let ms = d.idleMs {
            idleS = Double(ms) / 1000 + elapsed
        } else if let p = persons, !p.isEmpty {
            if let m = inputs.managerIdle, m.idle, p.contains(where: { !$0.idle && !$0.locked }) {
                // logind's own aggregate says idle though a session does not (a mock, or a desktop that sets only it).
                if m.sinceUs == 0 { exactSince = false }
                else { idleS = max(0, Double(Int64(bitPattern: now / 1000) - Int64(bitPattern: m.sinceUs)) / 1e6) }
            } else if p.contains(where: { !$0.idle && !$0.locked }) {
                idleS = 0
            } else {
                // Every session idle (or locked): since the latest of their idle hints.
                let since = p.map(\.idleSinceUs)
                if since.contains(0) {
                    exactSince = false
                } else if let latest = since.max() {
                    idleS = max(0, Double(Int64(bitPattern: now / 1000) - Int64(bitPattern: latest)) / 1e6)
                }
            }
        }
        let mins = { (s: Double) -> String in s < 90 ? "\(Int(s)) s" : "\(Int(s / 60)) min" }
        var idle: Bool?
        var reason: String
        var crossing: Double?
        if locked == true {
            idle = true
            reason = "away: screen locked (\(lockedBy))"
        } else if let s = idleS {
            idle = s >= after
            if s == 0 {
                reason = "active now (\(sourceText))"
            } else {
                reason = idle! ? "away \(mins(s)) (\(sourceText))" : "idle \(mins(s)) of \(mins(after)) (\(sourceText))"
            }
            if !idle!, !(inputs.desktop?.watched ?? false) {
                // logind's idle since a hint, or KDE's idle time: the threshold is crossed at a known instant
                // unless input comes first (seen by a signal, or by reading again then).
                crossing = s > 0 || inputs.desktop?.idleMs != nil ? after - s : nil
            }
        } else if !exactSince {
            // Idle hints without a time: the desktop's own idle delay has passed.
            idle = true
            reason = "away (\(sourceText) IdleHint)"
        } else {
            idle = nil
            reason = "unknown (\(inputs.desktopReason))"
        }
        return PresenceReading(idle: idle, idleSeconds: idleS.map { ($0 * 10).rounded() / 10 }, locked: locked,
                               sessions: persons?.count, reason: reason, sources: sources, crossingIn: crossing)
    }
}

// MARK: - Reading logind

typealias LogindSessions = (sessions: [LoginSession]?, reason: String, manager: ManagerIdle?)

/// The Manager's IdleHint and IdleSinceHintMonotonic (µs; 0 when not given).
public struct ManagerIdle: Sendable, Equatable {
    public var idle: Bool
    public var sinceUs: UInt64
    public init(idle: Bool, sinceUs: UInt64) { self.idle = idle; self.sinceUs = sinceUs }
}

enum Logind {
    static let name = "org.freedesktop.login1"
    static let path = "/org/freedesktop/login1"
    static let manager = "org.freedesktop.login1.Manager"
    static let session = "org.freedesktop.login1.Session"
    /// More sessions than this are not believed (each costs a call).
    static let maxSessions = 256
}

extension OneShot {
    /// logind's `ListSessions`; its answer is read by `sessions(_:)`.
    typealias LogindSlots = (list: UnsafeMutablePointer<cup_slot>, idle: UnsafeMutablePointer<cup_slot>, since: UnsafeMutablePointer<cup_slot>)

    /// logind's `ListSessions` and its own idle hint; their answers are read by `sessions(_:)`.
    func askSessions() -> LogindSlots {
        (send(Logind.name, Logind.path, Logind.manager, "ListSessions", nil, reply: "(a(susso))", autoStart: false),
         get(Logind.name, Logind.path, Logind.manager, "IdleHint"), get(Logind.name, Logind.path, Logind.manager, "IdleSinceHintMonotonic"))
    }

    /// Every listed session's properties, asked together.
    func sessions(_ slots: LogindSlots) -> LogindSessions {
        let list = slots.list
        guard let reply = list.pointee.reply else {
            return (nil, "logind not on the system bus (\(Logind.name) ListSessions: \(error(list)))", nil)
        }
        var manager: ManagerIdle?
        if let v = value(slots.idle) {
            defer { g_variant_unref(v) }
            if cup_variant_is(v, "b") != 0 {
                var since: UInt64 = 0
                if let s = value(slots.since) {
                    if cup_variant_is(s, "t") != 0 { since = UInt64(g_variant_get_uint64(s)) }
                    g_variant_unref(s)
                }
                manager = ManagerIdle(idle: g_variant_get_boolean(v) != 0, sinceUs: since)
            }
        }
        let array = cup_child(reply, 0)!
        defer { g_variant_unref(array) }
        var paths: [(String, String)] = []
        for i in 0..<min(Int(g_variant_n_children(array)), Logind.maxSessions) {
            let entry = cup_child(array, gsize(i))!
            let id = cup_child(entry, 0)!, path = cup_child(entry, 4)!
            paths.append((String(cString: g_variant_get_string(id, nil)), String(cString: g_variant_get_string(path, nil))))
            g_variant_unref(id); g_variant_unref(path); g_variant_unref(entry)
        }
        let slots = paths.map { getAll(Logind.name, $0.1, Logind.session, autoStart: false) }
        wait()
        var out: [LoginSession] = []
        for ((id, path), slot) in zip(paths, slots) {
            // A session that ended between the two calls is simply gone.
            guard let p = value(slot) else { continue }
            defer { g_variant_unref(p) }
            var session = LoginSession(id: id, type: "", sessionClass: "", state: "", active: false)
            session.path = path
            session.apply(p)
            out.append(session)
        }
        let persons = out.filter(\.isPersons)
        return (out, "logind: \(persons.count) user session(s)", manager)
    }

    static func uint64(_ dict: OpaquePointer, _ key: String) -> UInt64? {
        guard let v = cup_lookup(dict, key) else { return nil }
        defer { g_variant_unref(v) }
        return cup_variant_is(v, "t") != 0 ? UInt64(g_variant_get_uint64(v)) : nil
    }
}

// MARK: - The desktop's idle monitors (session bus)

/// The session D-Bus of the user bgtask runs for, only when one is named or at its standard place:
/// GLib would otherwise try to autolaunch one.
final class SessionBus {
    let connection: OpaquePointer

    static func connect() -> Result<SessionBus, DBusUnavailable> {
        let named = getenv("DBUS_SESSION_BUS_ADDRESS").map { $0.pointee != 0 } ?? false
        if !named {
            let runtime = getenv("XDG_RUNTIME_DIR").map { String(cString: $0) } ?? ""
            guard !runtime.isEmpty, FileIO.exists(runtime + "/bus") else {
                return .failure(DBusUnavailable(message: "no session D-Bus (DBUS_SESSION_BUS_ADDRESS unset, no $XDG_RUNTIME_DIR/bus)"))
            }
        }
        var err: UnsafeMutablePointer<GError>?
        guard let c = g_bus_get_sync(G_BUS_TYPE_SESSION, nil, &err) else {
            return .failure(DBusUnavailable(message: "session D-Bus: " + takeGError(&err)))
        }
        return .success(SessionBus(c))
    }
    private init(_ c: OpaquePointer) { connection = c }
    deinit { g_object_unref(UnsafeMutableRawPointer(connection)) }
}

enum DesktopMonitors {
    static let mutter = (name: "org.gnome.Mutter.IdleMonitor", path: "/org/gnome/Mutter/IdleMonitor/Core",
                         iface: "org.gnome.Mutter.IdleMonitor")
    static let screenSaver = (name: "org.freedesktop.ScreenSaver", path: "/ScreenSaver", iface: "org.freedesktop.ScreenSaver")

    static func call(_ bus: OpaquePointer, _ s: (name: String, path: String, iface: String), _ method: String,
                     _ params: OpaquePointer? = nil, reply: String) -> OpaquePointer? {
        var err: UnsafeMutablePointer<GError>?
        let r = cup_call_sync(bus, s.name, s.path, s.iface, method, params, reply, 1000, &err)
        if r == nil { g_clear_error(&err) }
        return r
    }

    static func first<T>(_ reply: OpaquePointer?, _ get: (OpaquePointer) -> T) -> T? {
        guard let r = reply else { return nil }
        defer { g_variant_unref(r) }
        let c = cup_child(r, 0)!
        defer { g_variant_unref(c) }
        return get(c)
    }

    /// Asks GNOME's idle monitor, else KDE's screen saver service, whichever runs.
    static func read(_ bus: OpaquePointer) -> (DesktopIdle?, String) {
        if let ms = first(call(bus, mutter, "GetIdletime", reply: "(t)"), { UInt64(g_variant_get_uint64($0)) }) {
            // GNOME also answers org.freedesktop.ScreenSaver's GetActive (the lock screen).
            let locked = first(call(bus, screenSaver, "GetActive", reply: "(b)"), { g_variant_get_boolean($0) != 0 })
            return (DesktopIdle(source: "GNOME idle monitor", idleMs: ms, locked: locked, watched: true), "GNOME idle monitor")
        }
        if let active = first(call(bus, screenSaver, "GetActive", reply: "(b)"), { g_variant_get_boolean($0) != 0 }) {
            let seconds = first(call(bus, screenSaver, "GetSessionIdleTime", reply: "(u)"), { g_variant_get_uint32($0) })
            return (DesktopIdle(source: "KDE screen saver", idleMs: seconds.map { UInt64($0) * 1000 }, locked: active, watched: false),
                    "org.freedesktop.ScreenSaver")
        }
        return (nil, "no desktop idle monitor on the session bus (\(mutter.name), \(screenSaver.name))")
    }

    static func read() -> (DesktopIdle?, String) {
        switch SessionBus.connect() {
        case .failure(let e): return (nil, e.message)
        case .success(let b): return read(b.connection)
        }
    }
}
