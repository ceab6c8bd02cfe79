import BgtaskBus
import BgtaskProtocol
import Foundation
import Synchronization

#if !canImport(Darwin)
// Foundation on Linux has no thermalState, isLowPowerModeEnabled or their notifications, so iOS code that
// checks them would not compile. They read bgtask's own readings through bgtaskd: the thermal zones against
// their trip points (thermal.state) and power-profiles-daemon's power-saver (system.power_saver).
extension ProcessInfo {
    /// Apple's thermal states, from bgtask's `thermal.state`.
    public enum ThermalState: Int, Sendable {
        case nominal, fair, serious, critical
    }

    /// The machine's thermal state; `.nominal` while bgtaskd cannot be asked or has no thermal zone to read.
    public var thermalState: ThermalState { SystemConditions.shared.current().thermal }

    /// Low Power Mode: power-profiles-daemon's `power-saver` profile; false where it does not run.
    public var isLowPowerModeEnabled: Bool { SystemConditions.shared.current().lowPower }

    /// Posted (object: `ProcessInfo.processInfo`) when `thermalState` changes.
    public static let thermalStateDidChangeNotification = Notification.Name("NSProcessInfoThermalStateDidChangeNotification")
}

extension Notification.Name {
    /// Posted (object: `ProcessInfo.processInfo`) when `isLowPowerModeEnabled` changes.
    public static let NSProcessInfoPowerStateDidChange = Notification.Name("NSProcessInfoPowerStateDidChangeNotification")
}

/// The values ProcessInfo reads: asked of bgtaskd once (`GetConditions`), then kept by its `ConditionsChanged`
/// signal, which also posts the notifications. No timer: bgtaskd says when they change.
final class SystemConditions: Sendable {
    static let shared = SystemConditions()
    struct Values: Equatable, Sendable { var thermal: ProcessInfo.ThermalState = .nominal; var lowPower = false }

    struct State: Sendable {
        var values: Values?
        /// When the daemon was last asked without an answer: not asked again on every read.
        var failedAt: Date?
    }
    let state = Mutex(State())

    func current() -> Values {
        if let v = state.withLock({ $0.values }) { return v }
        if let f = state.withLock({ $0.failedAt }), Date().timeIntervalSince(f) < 5 { return Values() }
        let link = BGTaskScheduler.shared.link
        guard case .success(let reply) = link.call(.getConditions, []), case .dict(let d)? = reply.first else {
            state.withLock { $0.failedAt = Date() }
            return Values()
        }
        let v = SystemConditions.values(d)
        // A signal may have come first: it is newer.
        return state.withLock { s in
            if s.values == nil { s.values = v }
            return s.values!
        }
    }

    static func values(_ d: [String: BusValue]) -> Values {
        var v = Values()
        // A value of the wrong type is as good as none: the defaults, as when bgtaskd cannot read the machine.
        let c = (try? Conditions(variant: d)) ?? Conditions()
        switch c.thermalState {
        case "fair": v.thermal = .fair
        case "serious": v.thermal = .serious
        case "critical": v.thermal = .critical
        default: v.thermal = .nominal
        }
        v.lowPower = c.lowPowerMode ?? false
        return v
    }

    /// From the bus thread: keeps the new values and posts what changed, as Apple posts them.
    func changed(_ d: [String: BusValue]) {
        let new = SystemConditions.values(d)
        let old = state.withLock { s -> Values? in
            defer { s.values = new }
            return s.values
        }
        let before = old ?? Values()
        if before.thermal != new.thermal {
            NotificationCenter.default.post(name: ProcessInfo.thermalStateDidChangeNotification, object: ProcessInfo.processInfo)
        }
        if before.lowPower != new.lowPower {
            NotificationCenter.default.post(name: .NSProcessInfoPowerStateDidChange, object: ProcessInfo.processInfo)
        }
    }
}
#endif
