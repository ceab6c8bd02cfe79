#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import CUPower
import BgtaskFiles

func cString(_ p: UnsafePointer<CChar>?) -> String? { p.map { String(cString: $0) } }

func takeGError(_ err: inout UnsafeMutablePointer<GError>?) -> String {
    defer { g_clear_error(&err) }
    return cString(err?.pointee.message) ?? "unknown error"
}

/// The system D-Bus (or whatever `DBUS_SYSTEM_BUS_ADDRESS` names, as in our tests).
/// GDBus objects are bound to the thread-default main context of the thread that uses them.
final class SystemBus {
    let connection: OpaquePointer

    /// No address in the environment and no socket at the standard path: there is no bus to try,
    /// and initialising GIO only to be told so costs more than the rest of a snapshot.
    static var absent: DBusUnavailable? {
        if let a = getenv("DBUS_SYSTEM_BUS_ADDRESS"), a.pointee != 0 { return nil }
        if FileIO.exists("/run/dbus/system_bus_socket") || FileIO.exists("/var/run/dbus/system_bus_socket") { return nil }
        return DBusUnavailable(message: "no system D-Bus (/run/dbus/system_bus_socket does not exist)")
    }

    static func connect() -> Result<SystemBus, DBusUnavailable> {
        if let no = absent { return .failure(no) }
        var err: UnsafeMutablePointer<GError>?
        guard let c = g_bus_get_sync(G_BUS_TYPE_SYSTEM, nil, &err) else {
            return .failure(DBusUnavailable(message: "system D-Bus: " + takeGError(&err)))
        }
        return .success(SystemBus(c))
    }
    private init(_ c: OpaquePointer) { connection = c }
    deinit { g_object_unref(UnsafeMutableRawPointer(connection)) }
}

public struct DBusUnavailable: Error, Sendable, CustomStringConvertible {
    public var message: String
    public var description: String { message }
}

/// The D-Bus services we read besides UPower, by name, path, interface and property.
enum Services {
    static let networkManager = (name: "org.freedesktop.NetworkManager", path: "/org/freedesktop/NetworkManager",
                                 iface: "org.freedesktop.NetworkManager")
    /// power-profiles-daemon's current name, then its legacy one.
    static let powerProfiles = [
        (name: "org.freedesktop.UPower.PowerProfiles", path: "/org/freedesktop/UPower/PowerProfiles",
         iface: "org.freedesktop.UPower.PowerProfiles"),
        (name: "net.hadess.PowerProfiles", path: "/net/hadess/PowerProfiles", iface: "net.hadess.PowerProfiles"),
    ]
}

public struct SystemReading: Sendable, Equatable {
    public var powerSaver: Bool?
    public var powerProfile: String?
    public var powerProfileSource: String
    public var cpuPressure: Double?
}

// MARK: - UPower

public struct UPowerDevice: Sendable, Equatable {
    public var kind: String
    public var nativePath: String
    public var percentage: Double
    public var state: String
    public var online: Bool
    public var isPowerSupply: Bool
}

public struct UPowerReading: Sendable, Equatable {
    public var available: Bool
    public var daemonVersion: String?
    public var onBattery: Bool?
    public var percentage: Double?
    public var state: String?
    public var warningLevel: String?
    public var devices: [UPowerDevice]
    public var reason: String

    public static func unavailable(_ why: String) -> UPowerReading {
        UPowerReading(available: false, daemonVersion: nil, onBattery: nil, percentage: nil, state: nil,
                      warningLevel: nil, devices: [], reason: why)
    }
}

/// libupower-glib's client. Property updates arrive only while the GMainContext that was
/// thread-default at creation is iterated (the watcher runs one on its own thread).
///
/// One client serves the whole life of its thread: its GDBusProxy follows upowerd's name as upowerd comes, goes
/// and comes back (its properties are loaded again, and cleared, as the owner changes), so there is never a reason
/// to make another. Freeing one is what must not happen while upowerd may be starting: the proxy outlives the
/// client while its property load is in flight, and its `notify` handler then calls `g_object_notify` on the
/// freed client (libupower-glib connects it without a weak reference) — the SIGSEGV in libgobject that every
/// bgtask process died of when upowerd appeared on the bus.
final class UPowerClient {
    let client: UnsafeMutablePointer<UpClient>
    /// The display device, once upowerd has answered for it; asked for again until then (`displayDevice()`), and
    /// kept for the same reason as the client.
    private(set) var display: UnsafeMutablePointer<UpDevice>?

    static func connect() -> Result<UPowerClient, DBusUnavailable> {
        if let no = SystemBus.absent { return .failure(no) }
        var err: UnsafeMutablePointer<GError>?
        guard let c = up_client_new_full(nil, &err) else {
            return .failure(DBusUnavailable(message: "UPower: " + takeGError(&err)))
        }
        return .success(UPowerClient(c))
    }
    private init(_ c: UnsafeMutablePointer<UpClient>) {
        client = c
        _ = displayDevice()
    }
    deinit {
        if let d = display { g_object_unref(d) }
        g_object_unref(client)
    }

    /// The display device, made the first time upowerd answers (before that libupower-glib may give none).
    /// `made` is true on the call that made it, for the caller to subscribe to its changes once.
    func displayDevice() -> (device: UnsafeMutablePointer<UpDevice>?, made: Bool) {
        if let d = display { return (d, false) }
        guard daemonVersion != nil else { return (nil, false) }
        display = up_client_get_display_device(client)
        return (display, display != nil)
    }

    /// A bus with no upowerd still yields a client: a nil daemon version is the tell.
    var daemonVersion: String? { cString(up_client_get_daemon_version(client)) }

    func reading() -> UPowerReading {
        guard let version = daemonVersion else {
            return .unavailable("upowerd does not answer on the system bus")
        }
        var r = UPowerReading(available: true, daemonVersion: version, onBattery: up_client_get_on_battery(client) != 0,
                              percentage: nil, state: nil, warningLevel: nil, devices: [], reason: "org.freedesktop.UPower \(version)")
        if let d = display {
            let obj = UnsafeMutableRawPointer(d)
            if cup_get_bool(obj, "is-present") != 0 {
                r.percentage = cup_get_double(obj, "percentage")
                r.state = cString(up_device_state_to_string(UpDeviceState(cup_get_uint(obj, "state"))))
                r.warningLevel = cString(up_device_level_to_string(UpDeviceLevel(cup_get_uint(obj, "warning-level"))))
            }
        }
        if let arr = up_client_get_devices2(client) {
            defer { g_ptr_array_unref(arr) }
            for i in 0..<Int(arr.pointee.len) {
                guard let p = arr.pointee.pdata[i] else { continue }
                let np = cup_get_string(p, "native-path")
                defer { g_free(np) }
                r.devices.append(UPowerDevice(
                    kind: cString(up_device_kind_to_string(UpDeviceKind(cup_get_uint(p, "kind")))) ?? "unknown",
                    nativePath: cString(np) ?? "",
                    percentage: cup_get_double(p, "percentage"),
                    state: cString(up_device_state_to_string(UpDeviceState(cup_get_uint(p, "state")))) ?? "unknown",
                    online: cup_get_bool(p, "online") != 0,
                    isPowerSupply: cup_get_bool(p, "power-supply") != 0))
            }
        }
        return r
    }
}
