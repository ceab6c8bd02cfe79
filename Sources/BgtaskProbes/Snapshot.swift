import BgtaskJSON
/// What the D-Bus services said (or why they could not say).
public struct DBusReadings: Sendable, Equatable {
    public var upower: UPowerReading
    public var nmMetered: UInt32?
    public var nmReason: String
    public var powerProfile: String?
    public var powerProfileSource: String
    public var presence: PresenceInputs

    public static func notConsulted(_ why: String) -> DBusReadings {
        DBusReadings(upower: .unavailable(why), nmMetered: nil, nmReason: why, powerProfile: nil, powerProfileSource: why,
                     presence: .notConsulted(why))
    }
}

public struct ProbeOptions: Sendable, Equatable {
    public var root: SysfsRoot
    /// Off for recorded trees: live D-Bus answers would not describe the recorded machine.
    public var useDBus: Bool
    public var battery = BatteryThresholds()
    public var thermal = ThermalFallback()
    /// `[idle] after`: seconds without input after which the person counts as away.
    public var idleAfter: Double = 300
    /// Whose filesystem `storage.*` describes: nil for the current directory (`bgtask run`'s command runs there).
    public var storagePath: String?
    /// `[storage] low_mb`, in bytes.
    public var storageLowBytes: Double = 1024 * 1_048_576

    public init(root: SysfsRoot = .init(), useDBus: Bool? = nil) {
        self.root = root
        self.useDBus = useDBus ?? root.isLiveSystem
    }

    /// Why D-Bus was not asked, when it was not.
    public var noDBusReason: String {
        root.isLiveSystem ? "D-Bus not consulted (--no-dbus)"
            : "D-Bus not consulted for a recorded tree (\(root.sysfs))"
    }
}

/// One reading of every condition, with the devices and sources behind it.
public struct ConditionSnapshot: Sendable, Equatable {
    public var power: PowerReading
    public var battery: BatteryReading
    public var thermal: ThermalReading
    public var network: NetworkReading
    public var system: SystemReading
    public var user: PresenceReading
    public var storage: StorageReading
    public var upower: UPowerReading
    public var supplies: [PowerSupply]
    public var zones: [ThermalZone]
    public var links: [NetworkLink]
    /// Per-zone thermal state, fed back in as `previous` for hysteresis.
    public var zoneStates: [String: ThermalState]
    public var options: ProbeOptions

    public static func assemble(supplies: [PowerSupply], zones: [ThermalZone], previousZoneStates: [String: ThermalState] = [:],
                                links: [NetworkLink], routesReadable: Bool, cpuPressure: Double?,
                                dbus: DBusReadings, options: ProbeOptions) -> ConditionSnapshot {
        var (power, battery) = PowerAnalysis.analyze(supplies, thresholds: options.battery)
        if power.external != false, let ups = PowerAnalysis.upowerDischarging(dbus.upower, supplies: supplies) {
            power = PowerReading(external: false, reason: ups)
        }
        let (thermal, zoneStates) = ThermalAnalysis.analyze(zones, previous: previousZoneStates, fallback: options.thermal)
        var network = NetworkAnalysis.analyze(links, nmMetered: dbus.nmMetered, routesReadable: routesReadable)
        if dbus.nmMetered == nil && network.metered == nil { network.meteredSource = dbus.nmReason }
        let system = SystemReading(powerSaver: dbus.powerProfile.map { $0 == "power-saver" }, powerProfile: dbus.powerProfile,
                                   powerProfileSource: dbus.powerProfileSource, cpuPressure: cpuPressure)
        let user = PresenceAnalysis.analyze(dbus.presence, after: options.idleAfter, now: monotonicNanos())
        return ConditionSnapshot(power: power, battery: battery, thermal: thermal, network: network, system: system,
                                 user: user, storage: StorageReading.read(path: options.storagePath, lowBytes: options.storageLowBytes),
                                 upower: dbus.upower, supplies: supplies, zones: zones, links: links,
                                 zoneStates: zoneStates, options: options)
    }

    /// Where sysfs and UPower differ on being on battery (sysfs wins; see docs/probes.md).
    public var disagreement: String? {
        guard upower.available, let ob = upower.onBattery, let ext = power.external, ob == ext else { return nil }
        return "UPower says OnBattery=\(ob); sysfs says external=\(ext): \(power.reason)"
    }

    /// The flat condition names policy rules read, in a stable order.
    public var conditions: [(String, JSONValue)] {
        [
            ("power.external", JSONValue(power.external)),
            ("power.reason", .string(power.reason)),
            ("battery.present", .bool(battery.present)),
            ("battery.percent", JSONValue(battery.percent)),
            ("battery.state", JSONValue(battery.state?.rawValue)),
            ("battery.warning", JSONValue(battery.warning?.rawValue)),
            ("battery.time_to_empty_s", JSONValue(battery.timeToEmptySeconds)),
            ("thermal.state", JSONValue(thermal.state?.rawValue)),
            ("thermal.celsius", JSONValue(thermal.celsius)),
            ("thermal.zone", JSONValue(thermal.zone)),
            ("network.online", JSONValue(network.online)),
            ("network.kind", JSONValue(network.kind)),
            ("network.interface", JSONValue(network.interface)),
            ("network.metered", JSONValue(network.metered)),
            ("system.power_saver", JSONValue(system.powerSaver)),
            ("system.power_profile", JSONValue(system.powerProfile)),
            ("system.cpu_pressure", JSONValue(system.cpuPressure)),
            ("user.idle", JSONValue(user.idle)),
            ("user.idle_s", JSONValue(user.idleSeconds)),
            ("user.locked", JSONValue(user.locked)),
            ("user.sessions", JSONValue(user.sessions.map(Double.init))),
            ("user.reason", .string(user.reason)),
        ] + storage.conditions + [
            ("upower.available", .bool(upower.available)),
            ("upower.on_battery", JSONValue(upower.onBattery)),
            ("upower.percentage", JSONValue(upower.percentage)),
            ("upower.state", JSONValue(upower.state)),
            ("upower.warning_level", JSONValue(upower.warningLevel)),
        ]
    }

    public var json: JSONValue {
        func notes(_ n: [String]) -> JSONValue { .array(n.map(JSONValue.string)) }
        let supplyJSON: (PowerSupply) -> JSONValue = { s in
            .object([
                ("name", .string(s.name)), ("path", .string(s.path)), ("kind", .string(s.kind.rawValue)),
                ("type", JSONValue(s.type)), ("scope", JSONValue(s.scope)), ("online", JSONValue(s.online)),
                ("present", JSONValue(s.present)), ("status", JSONValue(s.status)),
                ("percent", JSONValue(PowerAnalysis.percent(s)?.0)), ("percent_from", JSONValue(PowerAnalysis.percent(s)?.1)),
                ("capacity_level", JSONValue(s.capacityLevel)),
                ("energy_now_wh", JSONValue(s.energyNowWh)), ("energy_full_wh", JSONValue(s.energyFullWh)),
                ("power_w", JSONValue(PowerAnalysis.rateW(s))), ("usb_type", JSONValue(s.usbType)),
                ("power_role", JSONValue(s.powerRole)), ("notes", notes(s.notes)),
            ])
        }
        var sections = [(String, JSONValue)]()
        sections.append(("power", .object([
            ("external", JSONValue(power.external)), ("reason", .string(power.reason)),
            ("source", .string("sysfs \(options.root.sysfs)/class/power_supply")),
            ("disagreement", JSONValue(disagreement)),
        ])))
        sections.append(("battery", .object([
            ("present", .bool(battery.present)), ("count", JSONValue(battery.count)),
            ("percent", JSONValue(battery.percent)), ("state", JSONValue(battery.state?.rawValue)),
            ("warning", JSONValue(battery.warning?.rawValue)), ("time_to_empty_s", JSONValue(battery.timeToEmptySeconds)),
            ("reason", .string(battery.reason)),
        ])))
        sections.append(("thermal", .object([
            ("state", JSONValue(thermal.state?.rawValue)), ("celsius", JSONValue(thermal.celsius)),
            ("zone", JSONValue(thermal.zone)), ("reason", .string(thermal.reason)),
        ])))
        sections.append(("network", .object([
            ("online", JSONValue(network.online)), ("kind", JSONValue(network.kind)),
            ("interface", JSONValue(network.interface)), ("metered", JSONValue(network.metered)),
            ("metered_source", .string(network.meteredSource)), ("reason", .string(network.reason)),
        ])))
        sections.append(("system", .object([
            ("power_saver", JSONValue(system.powerSaver)), ("power_profile", JSONValue(system.powerProfile)),
            ("power_profile_source", .string(system.powerProfileSource)),
            ("cpu_pressure", JSONValue(system.cpuPressure)),
            ("cpu_pressure_source", .string(options.root.proc + "/pressure/cpu")),
        ])))
        sections.append(("user", .object([
            ("idle", JSONValue(user.idle)), ("idle_s", JSONValue(user.idleSeconds)), ("locked", JSONValue(user.locked)),
            ("sessions", JSONValue(user.sessions.map(Double.init))), ("reason", .string(user.reason)),
            ("sources", .array(user.sources.map(JSONValue.string))),
        ])))
        sections.append(("storage", .object([
            ("free_bytes", JSONValue(storage.freeBytes)), ("low", JSONValue(storage.low)), ("path", JSONValue(storage.path)),
            ("reason", .string(storage.reason)),
        ])))
        sections.append(("upower", .object([
            ("available", .bool(upower.available)), ("daemon_version", JSONValue(upower.daemonVersion)),
            ("on_battery", JSONValue(upower.onBattery)), ("percentage", JSONValue(upower.percentage)),
            ("state", JSONValue(upower.state)), ("warning_level", JSONValue(upower.warningLevel)),
            ("reason", .string(upower.reason)),
        ])))
        sections.append(("devices", .object([
            ("supplies", .array(supplies.filter { !$0.isPeripheral }.map(supplyJSON))),
            ("peripherals", .array(supplies.filter(\.isPeripheral).map(supplyJSON))),
            ("zones", .array(zones.map { z in
                let th = z.thresholds(options.thermal)
                return .object([
                    ("name", .string(z.name)), ("path", .string(z.path)), ("type", JSONValue(z.type)),
                    ("celsius", JSONValue(z.celsius)), ("state", JSONValue(zoneStates[z.name]?.rawValue)),
                    ("fair_at", .number(th.fair)), ("serious_at", .number(th.serious)), ("critical_at", .number(th.critical)),
                    ("basis", .string(th.basis)),
                    ("trips", .array(z.trips.map { t in .object([
                        ("index", .number(Double(t.index))), ("type", .string(t.type)), ("celsius", .number(t.celsius)),
                        ("hysteresis", JSONValue(t.hysteresis)),
                    ]) })),
                    ("ignored_trips", notes(z.ignoredTrips)), ("notes", notes(z.notes)),
                ])
            })),
            ("links", .array(links.map { l in .object([
                ("name", .string(l.name)), ("path", .string(l.path)), ("kind", .string(l.kind.rawValue)),
                ("operstate", JSONValue(l.operstate)), ("carrier", JSONValue(l.carrier)), ("up", .bool(l.isUp)),
                ("default_route", .bool(l.defaultRoute)), ("notes", notes(l.notes)),
            ]) })),
            ("upower", .array(upower.devices.map { d in .object([
                ("kind", .string(d.kind)), ("native_path", .string(d.nativePath)), ("percentage", .number(d.percentage)),
                ("state", .string(d.state)), ("online", .bool(d.online)), ("power_supply", .bool(d.isPowerSupply)),
            ]) })),
        ])))
        return .object(sections)
    }
}
