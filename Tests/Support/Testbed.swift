import CUMockdev
import Foundation

/// An in-process umockdev testbed: a fake sysfs that libudev and plain file reads both see, and
/// uevents that udev monitors receive. Only works when this process runs under
/// `libumockdev-preload.so` (umockdev-wrapper); children inherit the preload and `UMOCKDEV_DIR`.
/// One testbed at a time per process: umockdev keeps it in the environment.
public final class Testbed {
    let tb: UnsafeMutablePointer<UMockdevTestbed>

    public static var preloaded: Bool {
        (ProcessInfo.processInfo.environment["LD_PRELOAD"] ?? "").contains("libumockdev-preload")
    }

    public init() {
        tb = umockdev_testbed_new()!
    }
    deinit { g_object_unref(tb) }

    public var rootDir: String {
        let p = umockdev_testbed_get_root_dir(tb)!
        defer { g_free(p) }
        return String(cString: p)
    }

    /// Adds a device; attributes and properties alternate name, value. Returns its sysfs path.
    @discardableResult
    public func add(_ subsystem: String, _ name: String, parent: String? = nil,
                    attributes: [String: String], properties: [String: String] = [:]) -> String {
        let a = attributes.sorted { $0.key < $1.key }.flatMap { [$0.key, $0.value] }
        let p = properties.sorted { $0.key < $1.key }.flatMap { [$0.key, $0.value] }
        return withCStringArray(a) { ca in
            withCStringArray(p) { cp in
                let path = umockdev_testbed_add_devicev(tb, subsystem, name, parent, ca, cp)!
                defer { g_free(path) }
                return String(cString: path)
            }
        }
    }

    public func set(_ device: String, _ attribute: String, _ value: String) {
        umockdev_testbed_set_attribute(tb, device, attribute, value)
    }

    public func setProperty(_ device: String, _ name: String, _ value: String) {
        umockdev_testbed_set_property(tb, device, name, value)
    }

    public func uevent(_ device: String, _ action: String = "change") {
        umockdev_testbed_uevent(tb, device, action)
    }

    /// Loads devices from umockdev's text format (a recording from `umockdev-record` or our fixtures).
    public func load(umockdev text: String) throws {
        var err: UnsafeMutablePointer<GError>?
        if umockdev_testbed_add_from_string(tb, text, &err) == 0 {
            let msg = err.map { String(cString: $0.pointee.message) } ?? "unknown error"
            g_clear_error(&err)
            throw TestbedError(message: msg)
        }
    }

    /// A laptop: AC adapter, one battery, one thermal zone with passive and critical trips.
    public struct Laptop {
        public var ac: String
        public var battery: String
        public var zone: String
    }

    @discardableResult
    public func addLaptop(acOnline: Bool, batteryStatus: String = "Discharging", energyNow: Int = 25_200_000,
                          zoneMilliC: Int = 54_000) -> Laptop {
        let ac = add("power_supply", "AC", attributes: ["type": "Mains", "online": acOnline ? "1" : "0"],
                     properties: ["POWER_SUPPLY_ONLINE": acOnline ? "1" : "0"])
        let bat = add("power_supply", "BAT0", attributes: [
            "type": "Battery", "present": "1", "status": batteryStatus, "capacity": String(energyNow / 600_000),
            "energy_now": String(energyNow), "energy_full": "60000000", "energy_full_design": "80000000",
            "power_now": "9500000", "voltage_now": "12000000", "voltage_min_design": "11400000",
            "technology": "Li-ion", "model_name": "bgtask-testbed", "scope": "System",
        ])
        let zone = add("thermal", "thermal_zone0", attributes: [
            "type": "x86_pkg_temp", "temp": String(zoneMilliC),
            "trip_point_0_temp": "95000", "trip_point_0_type": "critical",
            "trip_point_1_temp": "85000", "trip_point_1_type": "passive",
        ])
        return Laptop(ac: ac, battery: bat, zone: zone)
    }

    /// Charger in or out, with the battery following as a real laptop's does. Returns the instant of the first
    /// uevent (CLOCK_MONOTONIC, ns): when the kernel would tell it. The attributes' writes before it are the
    /// testbed's own (umockdev replaces each file, with an fsync), and take 0.5–4 ms as the filesystem is busy.
    @discardableResult
    public func plug(_ l: Laptop, _ online: Bool, batteryStatus: String? = nil) -> UInt64 {
        set(l.ac, "online", online ? "1" : "0")
        setProperty(l.ac, "POWER_SUPPLY_ONLINE", online ? "1" : "0")
        set(l.battery, "status", batteryStatus ?? (online ? "Charging" : "Discharging"))
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        uevent(l.ac)
        uevent(l.battery)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }
}

public struct TestbedError: Error, CustomStringConvertible {
    public var message: String
    public var description: String { message }
}

func withCStringArray<R>(_ strings: [String], _ body: (UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> R) -> R {
    let dup = strings.map { strdup($0) }
    defer { dup.forEach { free($0) } }
    var ptrs: [UnsafeMutablePointer<CChar>?] = dup + [nil]
    return ptrs.withUnsafeMutableBufferPointer { body($0.baseAddress!) }
}
