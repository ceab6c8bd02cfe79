#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskCore
import BgtaskJSON
import BgtaskPolicy

/// A run's audit entries told in plain words: what it waited for and which rule (file:line) said so,
/// when it started and what had changed, each throttle, pause and resume, and how it ended.
public enum Story {
    struct RuleRef {
        var id: String, origin: String, reason: String, readings: [(String, JSONValue)]
    }

    static func rules(_ e: AuditEntry) -> [RuleRef] {
        guard case .array(let a)? = try? JSONValue.parse(e.rules) else { return [] }
        return a.compactMap { r in
            guard case .string(let id)? = r["id"], case .string(let origin)? = r["origin"], case .string(let reason)? = r["reason"] else { return nil }
            var readings: [(String, JSONValue)] = []
            if case .object(let kv)? = r["readings"] { readings = kv }
            return RuleRef(id: id, origin: origin, reason: reason, readings: readings)
        }
    }

    public static func because(_ e: AuditEntry) -> String {
        guard let r = rules(e).first else { return e.detail }
        return "\(r.reason) — rule \(r.id) (\(r.origin))"
    }

    public static func clock(_ t: Double) -> String { clockText(t) }

    static func show(_ v: JSONValue) -> String {
        if case .string(let s) = v { return s }
        return v.rendered
    }

    /// One run (its entries in order).
    public static func tell(_ entries: [AuditEntry]) -> String {
        guard let first = entries.first else { return "no record" }
        var out: [String] = []
        let task = first.taskID
        var lastDeferral: AuditEntry?
        var reasons: [String] = []
        /// Expired by bgtask: its end by a signal is that expiry's, not a crash.
        var expired = false
        for e in entries {
            let at = clock(e.time)
            switch e.event {
            case "deferred":
                lastDeferral = e
                let r = because(e)
                if !reasons.contains(r) { reasons.append(r) }
            case "started":
                if !reasons.isEmpty {
                    out.append(waited(task, "waited \(formatDuration(e.time - first.time, .words))", reasons))
                    reasons = []
                }
                var line = "Started \(at)"
                // Where it ran, when that is not this process's child: the unit to look for in systemctl and the journal.
                if e.detail.hasPrefix("systemd unit ") { line += " as \(e.detail.split(separator: ",").first ?? "")" }
                if e.detail.contains("launched by bgtask debug launch") {
                    line += ", launched by bgtask debug launch whatever the conditions"
                } else if let d = lastDeferral, let rule = rules(d).first, case .object(let now)? = e.conditions.flatMap({ try? JSONValue.parse($0) }) {
                    let changed = rule.readings.compactMap { name, before -> String? in
                        guard let after = now.first(where: { $0.0 == name })?.1, after != before else { return nil }
                        return "\(name) became \(show(after))"
                    }
                    if !changed.isEmpty { line += " when " + changed.joined(separator: " and ") }
                }
                out.append(line + ".")
            case "throttled": out.append("Throttled to \(e.detail) at \(at): \(because(e)).")
            case "unthrottled": out.append("Cap lifted at \(at).")
            case "paused": out.append("Paused at \(at): \(because(e)).")
            case "resumed": out.append("Resumed at \(at).")
            case "cpu-heavy": out.append("Measured CPU-heavy at \(at) (\(e.detail)).")
            case "expired":
                expired = true
                out.append("Expired at \(at): \(rules(e).isEmpty ? e.detail : because(e)).")
            case "killed": out.append("Killed at \(at) (\(e.detail)).")
            case "signalled": out.append("At \(at): \(e.detail).")
            case "gave-up":
                if !reasons.isEmpty { out.append(waited(task, "waited \(formatDuration(e.time - first.time, .words))", reasons)) }
                reasons = []
                out.append("Gave up at \(at) (\(e.detail)).")
            case "failed": out.append("Could not start at \(at): \(e.detail).")
            case "lost":
                if !reasons.isEmpty { out.append(waited(task, "waited \(formatDuration(e.time - first.time, .words))", reasons)) }
                reasons = []
                out.append("At \(at) its supervisor was found gone: \(e.detail).")
            case "recovered": out.append("Recovery at \(at) \(e.detail).")
            case "finished":
                if expired, e.detail.contains("signal") { out.append("Ended \(at) by that expiry (\(e.detail)).") }
                else { out.append("Finished \(at), \(e.detail)\(e.cpuSeconds.map { ", \(cpuText($0)) of CPU" } ?? "").") }
                if let energy = e.energy { out.append(energy.prefix(1).uppercased() + energy.dropFirst() + ".") }
            default: out.append("\(at) \(e.event): \(e.detail)")
            }
        }
        if !reasons.isEmpty {
            out.append(waited(task, "has waited \(formatDuration(wallClockNow() - first.time, .words)) so far", reasons))
        }
        return out.joined(separator: "\n")
    }

    /// What a wait was for: one reason on the line, or each on a line of its own in the order they came (a
    /// wait of many flaps reads as a list, not as one long sentence).
    static func waited(_ task: String, _ how: String, _ reasons: [String]) -> String {
        if reasons.count == 1 { return "\(task) \(how): \(reasons[0])." }
        return "\(task) \(how):\n" + reasons.enumerated().map { "  \($0.offset == 0 ? "" : "then ")\($0.element)" }.joined(separator: "\n")
    }

    /// What a run's end recorded of its cost, short: "~0.4 Wh, 12.3 s of CPU"; "energy unknown, 0.2 s of CPU"; nil
    /// when it recorded neither.
    public static func cost(_ end: AuditEntry) -> String? {
        guard end.energyWh != nil || end.cpuSeconds != nil || end.energy != nil else { return nil }
        let energy = end.energyWh.map { "~" + EnergyMeter.format($0) } ?? "energy unknown"
        return energy + (end.cpuSeconds.map { ", \(cpuText($0)) of CPU" } ?? "")
    }

    static func cpuText(_ s: Double) -> String { TaskCost.fixed(s, s < 10 ? 2 : 1) + " s" }

    /// One line per task: where it stands now.
    public static func summary(_ last: AuditEntry) -> String {
        let at = clock(last.time)
        switch last.event {
        case "deferred": return "\(last.taskID): waiting since \(at): \(because(last))"
        case "started", "resumed", "unthrottled": return "\(last.taskID): running since \(at)"
        case "throttled": return "\(last.taskID): running, throttled to \(last.detail) since \(at): \(because(last))"
        case "paused": return "\(last.taskID): paused since \(at): \(because(last))"
        case "finished": return "\(last.taskID): finished \(at), \(last.detail)" + (cost(last).map { "; \($0)" } ?? "")
        case "gave-up": return "\(last.taskID): gave up \(at) (\(last.detail))"
        case "expired", "killed": return "\(last.taskID): expired \(at)"
        case "lost": return "\(last.taskID): supervisor gone (found \(at)): \(last.detail)"
        case "recovered": return "\(last.taskID): supervisor gone; recovery at \(at) \(last.detail)"
        default: return "\(last.taskID): \(last.event) \(at): \(last.detail)"
        }
    }
}
