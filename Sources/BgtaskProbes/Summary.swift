extension ConditionSnapshot {
    /// One line a person reads: power · thermal · network · profile · presence.
    public var summary: String {
        var parts: [String] = []
        parts.append(powerSummary)
        if let s = thermal.state, let c = thermal.celsius {
            parts.append("thermal \(s.rawValue) (\(fmt(c)) °C, \(thermal.zone ?? "?"))")
        } else {
            parts.append(zones.isEmpty ? "no thermal zones" : "thermal unknown (\(thermal.reason))")
        }
        if network.online == true {
            let metered = network.metered.map { $0 ? "metered" : "not metered" } ?? "metered unknown"
            parts.append("online via \(network.interface ?? "?"), \(metered)")
        } else if network.online == false {
            parts.append("offline (\(network.reason))")
        } else {
            parts.append("network unknown (\(network.reason))")
        }
        if let p = system.powerProfile { parts.append("profile \(p)") }
        parts.append(presenceSummary)
        return parts.joined(separator: " · ")
    }

    /// Presence, said as the other readings are, unknown included ("presence unknown: no logind"): `-v` and
    /// `--json` give the whole reason (which bus call failed).
    var presenceSummary: String {
        if user.idle != nil { return "user \(user.reason)" }
        if user.sources.isEmpty && !user.reason.contains("not consulted") { return "presence unknown: no logind" }
        return "presence \(user.reason)"
    }

    var powerSummary: String {
        guard battery.present else {
            switch power.external {
            case true?: return "no battery: on external power"
            case false?: return "no battery, but not on external power (\(power.reason))"
            case nil: return "power unknown (\(power.reason))"
            }
        }
        var detail: [String] = []
        let names = supplies.filter { $0.isSystemBattery && $0.present != false }.map(\.name).joined(separator: "+")
        detail.append("\(names) \(battery.state?.rawValue ?? "unknown")")
        if let p = battery.percent { detail.append("\(fmt(p))%") }
        if let t = battery.timeToEmptySeconds { detail.append("~\(t / 3600)h\(String(format2: (t % 3600) / 60))m left") }
        if let w = battery.warning, w != .none { detail.append("warning \(w.rawValue)") }
        let head: String
        switch power.external {
        case true?: head = "On external power"
        case false?: head = "On battery"
        case nil: head = "Power source unknown"
        }
        return "\(head) (\(detail.joined(separator: ", ")))"
    }
}

extension String {
    init(format2 v: Int) { self = v < 10 ? "0\(v)" : String(v) }
}
