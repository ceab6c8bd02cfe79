import BgtaskFiles

/// One `power_supply` device, its attributes parsed into units, with a note for every value
/// that was odd and therefore dropped.
public struct PowerSupply: Sendable, Equatable {
    public enum Kind: String, Sendable, Codable {
        case battery, mains, usb, wireless, ups, other
    }

    public var name: String
    public var path: String
    public var kind: Kind
    /// The raw `type` value (nil when the file is missing; then `kind` was inferred).
    public var type: String?
    public var scope: String?
    public var online: Bool?
    public var present: Bool?
    public var status: String?
    public var capacity: Double?
    public var capacityLevel: String?
    public var energyNowWh: Double?
    public var energyFullWh: Double?
    public var chargeNowAh: Double?
    public var chargeFullAh: Double?
    public var voltageV: Double?
    public var voltageMinDesignV: Double?
    public var powerW: Double?
    public var currentA: Double?
    public var usbType: String?
    /// For USB-C supplies: the port's power role, when a `typec` port says.
    public var powerRole: String?
    public var notes: [String]

    /// System batteries power the machine; `scope=Device` ones are mice, headsets, pens.
    public var isSystemBattery: Bool { kind == .battery && scope?.lowercased() != "device" }
    public var isPeripheral: Bool { kind == .battery && scope?.lowercased() == "device" }
    /// A UPS powers the machine from its own battery when the mains fail; it is not a charger.
    public var isCharger: Bool { kind != .battery && kind != .ups }

    /// The largest magnitude each attribute can plausibly have, in units (Wh, Ah, V, W, A).
    static let plausibleLimit: [String: Double] = [
        "energy_now": 10_000, "energy_full": 10_000, "charge_now": 1_000, "charge_full": 1_000,
        "voltage_now": 1_000, "voltage_min_design": 1_000, "power_now": 10_000, "current_now": 1_000,
    ]
    static let unit: [String: String] = [
        "energy_now": "Wh", "energy_full": "Wh", "charge_now": "Ah", "charge_full": "Ah",
        "voltage_now": "V", "voltage_min_design": "V", "power_now": "W", "current_now": "A",
    ]

    public static let attributeNames = [
        "type", "scope", "online", "present", "status", "capacity", "capacity_level",
        "energy_now", "energy_full", "charge_now", "charge_full", "voltage_now", "voltage_min_design",
        "power_now", "current_now", "usb_type", "model_name", "manufacturer",
    ]

    public init(device d: SysfsDevice, typecRole: String? = nil) {
        var notes: [String] = []
        func value(_ attr: String) -> String? {
            switch d.attributes[attr] ?? .missing {
            case .text(let t): return t
            case .missing:
                // Older kernels omit some attribute files but still put the value in uevent.
                return d.properties["POWER_SUPPLY_" + attr.uppercased()].map(trimmed)
            case .unreadable(let e):
                notes.append("\(attr): \(e)")
                return nil
            }
        }
        /// µ-units to units; nil with a note for NaN, garbage, negative or the `-1` "unknown" marker, and
        /// for values no battery or charger has (a corrupt gauge reporting 1e40 µWh).
        func micro(_ attr: String, allowNegative: Bool = false) -> Double? {
            guard let raw = value(attr), !raw.isEmpty else { return nil }
            guard let v = Double(raw), v.isFinite else {
                notes.append("\(attr): '\(raw)' is not a number, ignored"); return nil
            }
            if v < 0 && !allowNegative {
                notes.append("\(attr): \(raw) is negative, ignored"); return nil
            }
            let units = v / 1_000_000
            if let limit = PowerSupply.plausibleLimit[attr], abs(units) > limit {
                notes.append("\(attr): \(raw) is out of range (more than \(fmt(limit)) \(PowerSupply.unit[attr] ?? "")), ignored")
                return nil
            }
            return units
        }
        func flag(_ attr: String) -> Bool? {
            guard let raw = value(attr), !raw.isEmpty else { return nil }
            switch raw { case "1": return true; case "0": return false
            default: notes.append("\(attr): '\(raw)' is not 0 or 1, ignored"); return nil }
        }

        name = d.name
        path = d.path
        type = value("type")
        scope = value("scope").flatMap { $0.isEmpty ? nil : $0 }
        // The kernel's `online`: 0 offline, 1 online (fixed), 2 online and programmable (USB PD PPS).
        online = value("online") == "2" ? true : flag("online")
        present = flag("present")
        status = value("status").flatMap { $0.isEmpty ? nil : $0 }
        capacityLevel = value("capacity_level").flatMap { $0.isEmpty || $0 == "Unknown" ? nil : $0 }
        if let raw = value("capacity"), !raw.isEmpty {
            if let v = Double(raw), v.isFinite, v >= 0, v <= 100 { capacity = v }
            else { notes.append("capacity: '\(raw)' is not a percentage, ignored") }
        }
        energyNowWh = micro("energy_now")
        energyFullWh = micro("energy_full")
        chargeNowAh = micro("charge_now")
        chargeFullAh = micro("charge_full")
        voltageV = micro("voltage_now")
        voltageMinDesignV = micro("voltage_min_design")
        // Some drivers report the discharge rate as a negative number: the magnitude is the rate.
        powerW = micro("power_now", allowNegative: true).map(abs)
        currentA = micro("current_now", allowNegative: true).map(abs)
        usbType = value("usb_type")
        powerRole = typecRole

        switch type?.lowercased() {
        case "battery": kind = .battery
        case "mains": kind = .mains
        case "wireless": kind = .wireless
        case "ups": kind = .ups
        case let t? where t.hasPrefix("usb"): kind = .usb
        case nil, "":
            // The uevent of older kernels has no POWER_SUPPLY_TYPE: infer from what it reports.
            let batteryish = ["energy_now", "charge_now", "capacity", "capacity_level", "energy_full", "charge_full"]
                .contains { d.attributes[$0]?.text != nil || d.properties["POWER_SUPPLY_" + $0.uppercased()] != nil }
            kind = batteryish ? .battery : (online != nil ? .mains : .other)
            notes.append("type: missing, inferred \(kind.rawValue)")
        default: kind = .other
        }
        self.notes = notes
    }
}

/// USB-C supplies belong to a port that can be a sink (we are charged) or a source (we power a
/// phone). systemd-ac-power ignores source-role ports; so do we. The port lives under the supply's
/// parent device (`typec/portN`); a ucsi supply named `...:00N` belongs to port N-1.
func typecPowerRole(supplyPath: String, name: String) -> String? {
    let parent = supplyPath + "/device"
    var ports: [String] = []
    for dir in [parent + "/typec", parent] {
        ports += FileIO.list(dir).filter { $0.hasPrefix("port") && !$0.contains("-") }.map { dir + "/" + $0 }
    }
    guard !ports.isEmpty else { return nil }
    if let colon = name.lastIndex(of: ":"), let n = Int(name[name.index(after: colon)...]), n >= 1,
       let match = ports.first(where: { $0.hasSuffix("/port\(n - 1)") }) {
        ports = [match]
    }
    var roles: Set<String> = []
    for p in ports {
        guard let role = FileIO.attribute(p + "/power_role").text else { continue }
        if role.contains("[sink]") { roles.insert("sink") } else if role.contains("[source]") { roles.insert("source") }
    }
    // Like systemd: any sink port means the supply may be charging us.
    if roles.contains("sink") { return "sink" }
    return roles.contains("source") ? "source" : nil
}

extension DeviceReader {
    public func powerSupplies() -> [PowerSupply] {
        devicePaths(subsystem: "power_supply").map(powerSupply(at:))
    }

    /// One supply, by its sysfs path: what a `change` uevent needs re-read, and nothing else.
    public func powerSupply(at path: String) -> PowerSupply {
        let d = read(path: path, subsystem: "power_supply", attributes: PowerSupply.attributeNames)
        let t = d.text("type")?.lowercased() ?? ""
        let role = t.hasPrefix("usb") ? typecPowerRole(supplyPath: d.path, name: d.name) : nil
        return PowerSupply(device: d, typecRole: role)
    }
}
