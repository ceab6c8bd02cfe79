/// Reads the D-Bus services once, on the calling thread (`bgtask status`, `policy explain`): one connection,
/// every question sent before any answer is awaited (`OneShot`). The watcher keeps libupower-glib's client, for
/// its signals, and asks NetworkManager and power-profiles-daemon the same way with `read(bus:upower:)`.
enum DBusProbe {
    static func read() -> DBusReadings {
        switch SystemBus.connect() {
        case .failure(let e):
            var r = DBusReadings.notConsulted(e.message)
            let desktop = DesktopMonitors.read()
            r.presence = PresenceInputs(sessions: nil, logindReason: e.message, desktop: desktop.0, desktopReason: desktop.1,
                                        readAt: monotonicNanos())
            return r
        case .success(let bus):
            return OneShot(bus: bus).read()
        }
    }

    static func read(bus: SystemBus, upower: UPowerReading, desktop: (DesktopIdle?, String), sessions: LogindSessions?) -> DBusReadings {
        OneShot(bus: bus).read(upower: upower, desktop: desktop, sessions: sessions)
    }
}

/// Takes whole snapshots; the parts are exposed so the watcher can re-read only what an event touched.
public struct Prober: Sendable {
    public let options: ProbeOptions
    public var reader: DeviceReader { DeviceReader(root: options.root) }

    public init(options: ProbeOptions = .init()) { self.options = options }

    public func snapshot(previousZoneStates: [String: ThermalState] = [:]) -> ConditionSnapshot {
        let dbus = options.useDBus ? DBusProbe.read()
            : .notConsulted(options.noDBusReason)
        return snapshot(dbus: dbus, previousZoneStates: previousZoneStates)
    }

    public func snapshot(dbus: DBusReadings, previousZoneStates: [String: ThermalState] = [:]) -> ConditionSnapshot {
        let r = reader
        let (routes, readable) = r.defaultRoutes()
        return ConditionSnapshot.assemble(
            supplies: r.powerSupplies(), zones: r.thermalZones(fallback: options.thermal),
            previousZoneStates: previousZoneStates, links: r.networkLinks(routes: routes), routesReadable: readable,
            cpuPressure: r.cpuPressure(), dbus: dbus, options: options)
    }
}
