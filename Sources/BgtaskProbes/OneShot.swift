#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import CUPower

/// A one-shot read of the system bus services: UPower's daemon and display device with `GetAll`, its device
/// list, NetworkManager's `Metered` and power-profiles-daemon's `ActiveProfile`, all sent before any answer is
/// awaited, then one more round for the devices' `GetAll`. libupower-glib's client instead builds a proxy per
/// device, one synchronous message at a time (about 30 for a laptop), and a second connection was opened for
/// the rest; `bgtask status` paid for both.
final class OneShot {
    let bus: SystemBus
    let context: OpaquePointer
    /// Calls in flight (a C int the completion callbacks decrement).
    let outstanding = UnsafeMutablePointer<Int32>.allocate(capacity: 1)
    var slots: [UnsafeMutablePointer<cup_slot>] = []

    init(bus: SystemBus) {
        self.bus = bus
        context = g_main_context_new()
        outstanding.initialize(to: 0)
    }

    deinit {
        for s in slots {
            if let r = s.pointee.reply { g_variant_unref(r) }
            if s.pointee.error != nil { g_clear_error(&s.pointee.error) }
            s.deallocate()
        }
        g_main_context_unref(context)
        outstanding.deallocate()
    }

    static let upower = (name: "org.freedesktop.UPower", path: "/org/freedesktop/UPower")
    static let properties = "org.freedesktop.DBus.Properties"
    /// A machine has a handful of power supplies; a bus that lists thousands is not believed past this.
    static let maxDevices = 64

    /// Sends a call now; its answer is read after `wait()`.
    func send(_ name: String, _ path: String, _ iface: String, _ method: String, _ params: OpaquePointer?, reply: String?,
              autoStart: Bool) -> UnsafeMutablePointer<cup_slot> {
        let slot = UnsafeMutablePointer<cup_slot>.allocate(capacity: 1)
        slot.initialize(to: cup_slot(reply: nil, error: nil, outstanding: nil))
        slot.pointee.outstanding = outstanding
        slots.append(slot)
        cup_call_into(bus.connection, name, path, iface, method, params, reply, autoStart ? 1 : 0, 1000, slot)
        return slot
    }

    func getAll(_ name: String, _ path: String, _ iface: String, autoStart: Bool) -> UnsafeMutablePointer<cup_slot> {
        send(name, path, OneShot.properties, "GetAll", cup_params_s(iface), reply: "(a{sv})", autoStart: autoStart)
    }

    func get(_ name: String, _ path: String, _ iface: String, _ prop: String) -> UnsafeMutablePointer<cup_slot> {
        send(name, path, OneShot.properties, "Get", cup_params_ss(iface, prop), reply: "(v)", autoStart: false)
    }

    /// Iterates the private context until every call sent has its answer (each bounded by its 1 s timeout).
    func wait() {
        while outstanding.pointee > 0 { g_main_context_iteration(context, 1) }
    }

    func error(_ s: UnsafeMutablePointer<cup_slot>) -> String {
        cString(s.pointee.error?.pointee.message) ?? "no reply"
    }

    /// The answer's first value (unboxed; g_variant_unref it), or nil when the call failed.
    func value(_ s: UnsafeMutablePointer<cup_slot>) -> OpaquePointer? {
        s.pointee.reply.map { cup_reply_first($0) }
    }

    static func number(_ dict: OpaquePointer, _ key: String) -> Double? {
        guard let v = cup_lookup(dict, key) else { return nil }
        defer { g_variant_unref(v) }
        if cup_variant_is(v, "d") != 0 { return g_variant_get_double(v) }
        if cup_variant_is(v, "u") != 0 { return Double(g_variant_get_uint32(v)) }
        return nil
    }

    static func bool(_ dict: OpaquePointer, _ key: String) -> Bool? {
        guard let v = cup_lookup(dict, key) else { return nil }
        defer { g_variant_unref(v) }
        return cup_variant_is(v, "b") != 0 ? g_variant_get_boolean(v) != 0 : nil
    }

    static func string(_ dict: OpaquePointer, _ key: String) -> String? {
        guard let v = cup_lookup(dict, key) else { return nil }
        defer { g_variant_unref(v) }
        return cup_variant_is(v, "s") != 0 ? String(cString: g_variant_get_string(v, nil)) : nil
    }

    static func state(_ n: Double?) -> String? {
        n.flatMap { $0 >= 0 && $0 < 100 ? cString(up_device_state_to_string(UpDeviceState(UInt32($0)))) : nil }
    }

    func read() -> DBusReadings {
        g_main_context_push_thread_default(context)
        defer { g_main_context_pop_thread_default(context) }
        // UPower is started on demand, as libupower-glib's client would start it; the others are read if running.
        let daemon = getAll(OneShot.upower.name, OneShot.upower.path, "org.freedesktop.UPower", autoStart: true)
        let display = getAll(OneShot.upower.name, OneShot.upower.path + "/devices/DisplayDevice", "org.freedesktop.UPower.Device",
                             autoStart: true)
        let list = send(OneShot.upower.name, OneShot.upower.path, "org.freedesktop.UPower", "EnumerateDevices", nil,
                        reply: "(ao)", autoStart: true)
        let others = askServices()
        wait()
        let desktop = DesktopMonitors.read()
        return readings(upower: upowerReading(daemon: daemon, display: display, list: list), others, desktop: desktop)
    }

    /// NetworkManager, power-profiles-daemon and logind, with UPower and the desktop read elsewhere (the watcher's).
    /// `sessions`: logind's sessions as the watcher keeps them from logind's signals (nil: list them again).
    func read(upower: UPowerReading, desktop: (DesktopIdle?, String), sessions: LogindSessions? = nil) -> DBusReadings {
        g_main_context_push_thread_default(context)
        defer { g_main_context_pop_thread_default(context) }
        let others = askServices(listSessions: sessions == nil)
        wait()
        return readings(upower: upower, others, desktop: desktop, known: sessions)
    }

    typealias ProfileSlots = [(service: (name: String, path: String, iface: String), slot: UnsafeMutablePointer<cup_slot>)]
    typealias ServiceSlots = (metered: UnsafeMutablePointer<cup_slot>, profiles: ProfileSlots, sessions: LogindSlots?)

    func askServices(listSessions: Bool = true) -> ServiceSlots {
        let nm = Services.networkManager
        return (get(nm.name, nm.path, nm.iface, "Metered"),
                Services.powerProfiles.map { (service: $0, slot: get($0.name, $0.path, $0.iface, "ActiveProfile")) },
                listSessions ? askSessions() : nil)
    }

    func readings(upower: UPowerReading, _ s: ServiceSlots, desktop: (DesktopIdle?, String), known: LogindSessions? = nil) -> DBusReadings {
        let metered = nmMetered(s.metered), p = profile(s.profiles)
        let logind = s.sessions.map { sessions($0) } ?? known ?? (nil, "logind not asked", nil)
        var presence = PresenceInputs(sessions: logind.sessions, logindReason: logind.reason, desktop: desktop.0,
                                      desktopReason: desktop.1, readAt: monotonicNanos())
        presence.managerIdle = logind.manager
        return DBusReadings(upower: upower, nmMetered: metered.value, nmReason: metered.reason,
                            powerProfile: p.profile, powerProfileSource: p.source, presence: presence)
    }

    func upowerReading(daemon: UnsafeMutablePointer<cup_slot>, display: UnsafeMutablePointer<cup_slot>,
                       list: UnsafeMutablePointer<cup_slot>) -> UPowerReading {
        guard let d = value(daemon) else { return .unavailable("upowerd does not answer on the system bus (\(error(daemon)))") }
        defer { g_variant_unref(d) }
        let version = OneShot.string(d, "DaemonVersion")
        var r = UPowerReading(available: true, daemonVersion: version, onBattery: OneShot.bool(d, "OnBattery"),
                              percentage: nil, state: nil, warningLevel: nil, devices: [],
                              reason: "org.freedesktop.UPower \(version ?? "?")")
        if let dd = value(display) {
            defer { g_variant_unref(dd) }
            if OneShot.bool(dd, "IsPresent") == true {
                r.percentage = OneShot.number(dd, "Percentage")
                r.state = OneShot.state(OneShot.number(dd, "State"))
                r.warningLevel = OneShot.number(dd, "WarningLevel").flatMap {
                    $0 >= 0 && $0 < 100 ? cString(up_device_level_to_string(UpDeviceLevel(UInt32($0)))) : nil
                }
            }
        }
        var paths: [String] = []
        if let l = value(list) {
            defer { g_variant_unref(l) }
            for i in 0..<min(Int(g_variant_n_children(l)), OneShot.maxDevices) {
                let c = g_variant_get_child_value(l, gsize(i))!
                paths.append(String(cString: g_variant_get_string(c, nil)))
                g_variant_unref(c)
            }
        }
        let devices = paths.map { getAll(OneShot.upower.name, $0, "org.freedesktop.UPower.Device", autoStart: false) }
        wait()
        for slot in devices {
            guard let p = value(slot) else { continue }
            defer { g_variant_unref(p) }
            r.devices.append(UPowerDevice(
                kind: OneShot.number(p, "Type").flatMap { $0 >= 0 && $0 < 100 ? cString(up_device_kind_to_string(UpDeviceKind(UInt32($0)))) : nil } ?? "unknown",
                nativePath: OneShot.string(p, "NativePath") ?? "",
                percentage: OneShot.number(p, "Percentage") ?? 0,
                state: OneShot.state(OneShot.number(p, "State")) ?? "unknown",
                online: OneShot.bool(p, "Online") ?? false,
                isPowerSupply: OneShot.bool(p, "PowerSupply") ?? false))
        }
        return r
    }

    func nmMetered(_ slot: UnsafeMutablePointer<cup_slot>) -> (value: UInt32?, reason: String) {
        let nm = Services.networkManager
        guard let v = value(slot) else { return (nil, "NetworkManager not running (\(nm.name) Metered: \(error(slot)))") }
        defer { g_variant_unref(v) }
        guard cup_variant_is(v, "u") != 0 else { return (nil, "NetworkManager not running (\(nm.name) Metered: not a uint32)") }
        let m = g_variant_get_uint32(v)
        return (m, "NetworkManager Metered=\(NMMetered.name(m))")
    }

    func profile(_ answers: ProfileSlots) -> (profile: String?, source: String) {
        var why: [String] = []
        for (service, slot) in answers {
            guard let v = value(slot) else { why.append("\(service.name) ActiveProfile: \(error(slot))"); continue }
            defer { g_variant_unref(v) }
            if cup_variant_is(v, "s") != 0 { return (String(cString: g_variant_get_string(v, nil)), "\(service.name) ActiveProfile") }
            why.append("\(service.name) ActiveProfile: not a string")
        }
        return (nil, "power-profiles-daemon not running (\(why.first ?? ""))")
    }
}
