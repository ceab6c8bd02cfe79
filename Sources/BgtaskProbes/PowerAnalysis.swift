/// `power.*`: would running heavy work now drain the battery?
public struct PowerReading: Sendable, Equatable {
    public var external: Bool?
    /// Which files decided, in words.
    public var reason: String
}

/// `battery.*`: the system batteries combined as UPower's display device combines them.
public struct BatteryReading: Sendable, Equatable {
    public enum State: String, Sendable, Codable, CaseIterable {
        case charging, discharging, full
        case notCharging = "not-charging"
        case empty, unknown
    }
    public enum Warning: String, Sendable, Codable, CaseIterable, Comparable {
        case none, low, critical, action
        var rank: Int { Self.allCases.firstIndex(of: self)! }
        public static func < (a: Self, b: Self) -> Bool { a.rank < b.rank }
    }

    public var present: Bool
    public var count: Int
    public var percent: Double?
    public var state: State?
    public var warning: Warning?
    public var timeToEmptySeconds: Int?
    public var reason: String
}

/// UPower's defaults (UPower.conf: PercentageLow, PercentageCritical, PercentageAction).
public struct BatteryThresholds: Sendable, Equatable {
    public var lowPercent = 20.0
    public var criticalPercent = 5.0
    public var actionPercent = 2.0
    /// "Discharging" at or above this with no current while a charger is online is a firmware quirk.
    public var fullPercent = 99.0
    public init() {}
}

public enum PowerAnalysis {
    /// UPower's mapping for batteries that only report `capacity_level`.
    static func percent(forLevel level: String) -> Double? {
        switch level.lowercased() {
        case "full": return 100
        case "high": return 70
        case "normal": return 55
        case "low": return 10
        case "critical": return 5
        default: return nil
        }
    }

    /// Per battery: percent and where it came from.
    static func percent(_ b: PowerSupply) -> (Double, String)? {
        if let e = b.energyNowWh, let f = b.energyFullWh, f > 0 {
            return (min(100, 100 * e / f), "energy_now/energy_full")
        }
        if let c = b.chargeNowAh, let f = b.chargeFullAh, f > 0 {
            return (min(100, 100 * c / f), "charge_now/charge_full")
        }
        if let c = b.capacity { return (c, "capacity") }
        if let l = b.capacityLevel, let p = percent(forLevel: l) { return (p, "capacity_level \(l)") }
        return nil
    }

    /// Energy in Wh now and when full; charge-based batteries converted at their design voltage, as UPower does.
    static func energy(_ b: PowerSupply) -> (now: Double, full: Double)? {
        if let e = b.energyNowWh, let f = b.energyFullWh, f > 0 { return (e, f) }
        if let c = b.chargeNowAh, let f = b.chargeFullAh, f > 0,
           let v = b.voltageMinDesignV ?? b.voltageV, v > 0 {
            return (c * v, f * v)
        }
        return nil
    }

    static func rateW(_ b: PowerSupply) -> Double? {
        if let p = b.powerW { return p }
        if let i = b.currentA, let v = b.voltageV ?? b.voltageMinDesignV { return i * v }
        return nil
    }

    static func currentFlows(_ b: PowerSupply) -> Bool? {
        guard let r = rateW(b) else { return nil }
        return r > 0.05   // below 50 mW is sensor noise on real gauges
    }

    static func isSourceRole(_ s: PowerSupply) -> Bool { s.powerRole == "source" }

    /// The state of one battery, with the guess UPower also makes for "Unknown" status.
    static func state(_ b: PowerSupply, chargerOnline: Bool, thresholds: BatteryThresholds) -> (BatteryReading.State, String?) {
        let pct = percent(b)?.0
        switch b.status?.lowercased() {
        case "charging": return (.charging, nil)
        case "discharging":
            if chargerOnline, let p = pct, p >= thresholds.fullPercent, currentFlows(b) == false {
                return (.full, "reports Discharging at \(fmt(p))% with no current while a charger is online (firmware quirk)")
            }
            return (.discharging, nil)
        case "full": return (.full, nil)
        case "not charging": return (.notCharging, nil)
        case "empty": return (.empty, nil)
        default:
            let said = b.status.map { "status '\($0)'" } ?? "no status"
            if let p = pct, p >= thresholds.fullPercent { return (.full, "\(said) at \(fmt(p))%: taken as full") }
            if let p = pct, p == 0 { return (.empty, "\(said) at 0%: taken as empty") }
            if chargerOnline { return (.notCharging, "\(said) with a charger online: taken as not charging") }
            return (.unknown, nil)
        }
    }

    public static func analyze(_ supplies: [PowerSupply], thresholds: BatteryThresholds = .init())
        -> (power: PowerReading, battery: BatteryReading)
    {
        let batteries = supplies.filter { $0.isSystemBattery && $0.present != false }
        let chargers = supplies.filter { $0.isCharger }
        let sinkChargers = chargers.filter { !isSourceRole($0) }
        let online = sinkChargers.filter { $0.online == true }
        let chargerOnline = !online.isEmpty

        let states = batteries.map { b -> (PowerSupply, BatteryReading.State, String?) in
            let (s, why) = state(b, chargerOnline: chargerOnline, thresholds: thresholds)
            return (b, s, why)
        }
        let battery = combine(states, thresholds: thresholds)
        let upses = supplies.filter { $0.kind == .ups && $0.present != false }
        let power = external(states: states, chargers: chargers, online: online, upses: upses)
        return (power, battery)
    }

    static func external(states: [(PowerSupply, BatteryReading.State, String?)],
                         chargers: [PowerSupply], online: [PowerSupply], upses: [PowerSupply] = []) -> PowerReading {
        func attr(_ s: PowerSupply, _ a: String) -> String { "\(s.path)/\(a)" }
        // A UPS running on its battery means the mains are gone, whatever else the machine says.
        if let u = upses.first(where: { $0.status?.lowercased() == "discharging" }) {
            return PowerReading(external: false, reason: "UPS \(u.name) is discharging (\(attr(u, "status"))): the mains are out")
        }
        // A discharging system battery is the one fact that says work drains it, whatever a supply claims
        // (underpowered chargers, stale USB-C `online` flags).
        if let (b, _, _) = states.first(where: { $0.1 == .discharging }) {
            let also = online.isEmpty ? "" : " although \(online.map(\.name).joined(separator: ", ")) reports online"
            return PowerReading(external: false, reason: "\(b.name) is discharging (\(attr(b, "status")))\(also)")
        }
        if let c = online.first {
            return PowerReading(external: true, reason: "\(c.name) (\(c.type ?? c.kind.rawValue)) is online (\(attr(c, "online")) = 1)")
        }
        if let (b, s, why) = states.first(where: { [.charging, .full, .notCharging].contains($0.1) }) {
            let how = why.map { "\(b.name) \($0)" } ?? "\(b.name) is \(s.rawValue) (\(attr(b, "status")))"
            return PowerReading(external: true, reason: how)
        }
        if states.isEmpty {
            return PowerReading(external: true, reason: "no system battery: on external power")
        }
        let sinks = chargers.filter { !isSourceRole($0) }
        // Offline only when every charger says so; one whose `online` is missing, unreadable or garbage is unknown.
        let unknown = sinks.filter { $0.online == nil }
        if !sinks.isEmpty && unknown.isEmpty {
            let names = sinks.map(\.name).joined(separator: ", ")
            return PowerReading(external: false, reason: "every charger is offline (\(names)) and a battery is present")
        }
        // Status unknown and no charger to ask: whether current flows is the last evidence.
        let (b, _, _) = states[0]
        let unknownNote = unknown.isEmpty ? "" : "; \(unknown.map(\.name).joined(separator: ", ")) online state unknown"
        switch currentFlows(b) {
        case false?:
            return PowerReading(external: true, reason: "\(b.name) status is '\(b.status ?? "missing")' and no current flows (\(attr(b, b.powerW != nil ? "power_now" : "current_now")))\(unknownNote)")
        case true?:
            return PowerReading(external: false, reason: "\(b.name) status is '\(b.status ?? "missing")', current flows and no charger is known to be online\(unknownNote)")
        case nil:
            if !unknown.isEmpty {
                return PowerReading(external: nil, reason: "unknown: \(unknown.map { "\($0.name) online state unknown (\(attr($0, "online")))" }.joined(separator: ", ")), and \(b.name) has no usable status or current reading")
            }
            return PowerReading(external: nil, reason: "unknown: \(b.name) has no usable status, no current reading, and no charger is listed")
        }
    }

    /// UPower sees supplies sysfs's power_supply class may not (a USB UPS through hiddev): one that powers
    /// the machine and is discharging means we are on battery (UPower's own OnBattery rule). Devices sysfs
    /// already describes are left to sysfs.
    static func upowerDischarging(_ u: UPowerReading, supplies: [PowerSupply]) -> String? {
        guard u.available else { return nil }
        let known = Set(supplies.filter { $0.kind != .ups }.map(\.name))
        let d = u.devices.first { d in
            let name = d.nativePath.split(separator: "/").last.map(String.init) ?? d.nativePath
            return d.isPowerSupply && d.state == "discharging" && (d.kind == "ups" || !known.contains(name))
        }
        guard let dev = d else { return nil }
        let ob = u.onBattery.map { ", OnBattery=\($0)" } ?? ""
        return "UPower: \(dev.kind == "ups" ? "UPS" : dev.kind) \(dev.nativePath) is discharging\(ob)"
    }

    static func combine(_ states: [(PowerSupply, BatteryReading.State, String?)], thresholds: BatteryThresholds) -> BatteryReading {
        guard !states.isEmpty else {
            return BatteryReading(present: false, count: 0, percent: nil, state: nil, warning: nil,
                                  timeToEmptySeconds: nil, reason: "no system battery")
        }
        // Percent: energy-weighted when every battery reports energy (UPower: 100 × Σenergy / Σenergy_full),
        // else the mean of what each reports.
        let energies = states.compactMap { energy($0.0) }
        var combined: Double?
        var how: String
        if energies.count == states.count {
            let full = energies.reduce(0) { $0 + $1.full }
            combined = full > 0 ? min(100, 100 * energies.reduce(0) { $0 + $1.now } / full) : nil
            how = states.count > 1 ? "Σenergy/Σenergy_full of \(states.count) batteries" : (percent(states[0].0)?.1 ?? "energy")
        } else {
            let ps = states.compactMap { percent($0.0) }
            combined = ps.isEmpty ? nil : ps.reduce(0) { $0 + $1.0 } / Double(ps.count)
            how = ps.count == 1 ? ps[0].1 : "mean of \(ps.count) batteries"
        }
        let pct = combined.map { ($0 * 10).rounded() / 10 }

        let all = states.map(\.1)
        let state: BatteryReading.State
        if all.contains(.charging) { state = .charging }
        else if all.contains(.discharging) { state = .discharging }
        else if all.allSatisfy({ $0 == .full }) { state = .full }
        else if all.contains(.notCharging) { state = .notCharging }
        else if all.allSatisfy({ $0 == .empty }) { state = .empty }
        else if all.contains(.full) && all.allSatisfy({ $0 == .full || $0 == .empty || $0 == .unknown }) { state = .full }
        else { state = .unknown }

        // UPower raises warnings only while discharging.
        var warning: BatteryReading.Warning?
        if let p = pct {
            if state != .discharging { warning = BatteryReading.Warning.none }
            else if p <= thresholds.actionPercent { warning = .action }
            else if p <= thresholds.criticalPercent { warning = .critical }
            else if p <= thresholds.lowPercent { warning = .low }
            else { warning = BatteryReading.Warning.none }
        }

        var tte: Int?
        if state == .discharging {
            let rates = states.compactMap { rateW($0.0) }
            let rate = rates.reduce(0, +)
            if energies.count == states.count, rates.count == states.count, rate > 0.05 {
                tte = Int((energies.reduce(0) { $0 + $1.now } / rate * 3600).rounded())
            }
        }

        var parts = states.map { (b, s, why) -> String in
            "\(b.name) \(s.rawValue)" + (percent(b).map { " \(fmt($0.0))%" } ?? "") + (why.map { " (\($0))" } ?? "")
        }
        parts.append("percent from \(how)")
        return BatteryReading(present: true, count: states.count, percent: pct, state: state, warning: warning,
                              timeToEmptySeconds: tte, reason: parts.joined(separator: "; "))
    }
}

/// One decimal at most; never traps (values that reach here are range-checked, but a message must not crash).
func fmt(_ v: Double) -> String {
    guard v.isFinite, abs(v) < 1e15 else { return String(v) }
    let r = (v * 10).rounded() / 10
    return r == r.rounded() ? String(Int(r)) : String(r)
}
