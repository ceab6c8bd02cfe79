/// Per task and rule: whether the rule is in effect, and since when its condition has said otherwise.
public struct RuleHold: Sendable, Equatable, Codable {
    public var active: Bool
    public var changingSince: Double?
}

public typealias HoldState = [String: RuleHold]

/// Which of a policy's rules match a task's conditions as read now, holds aside (bit `i`: `policy.rules[i]`), and
/// which of the task's own requirements are unmet (the bits after the rules'). Two evaluations with equal bits
/// decide alike and tell alike; a rule that begins or stops matching changes them even when the verdict stays, so
/// the hold of a rule behind another blocking rule starts from its own change.
public struct RuleBits: Sendable, Hashable {
    var low: UInt64 = 0
    var high: [UInt64] = []
    public init() {}
    public mutating func insert(_ i: Int) {
        if i < 64 { low |= 1 << UInt64(i); return }
        let w = i / 64 - 1
        while high.count <= w { high.append(0) }
        high[w] |= 1 << UInt64(i % 64)
    }
    public func contains(_ i: Int) -> Bool {
        if i < 64 { return low & (1 << UInt64(i)) != 0 }
        let w = i / 64 - 1
        return w < high.count && high[w] & (1 << UInt64(i % 64)) != 0
    }
}

/// What a task's conditions say of it, holds aside: the verdict and every rule and requirement that matches.
/// bgtaskd's resting tasks rest on it, and wake when it changes (not only when the verdict does).
public struct Standing: Sendable, Hashable {
    public var verdict: Verdict
    public var matched: RuleBits
    public init(verdict: Verdict, matched: RuleBits = RuleBits()) {
        self.verdict = verdict
        self.matched = matched
    }
}

/// A rule in effect, with the reason filled in and the readings it looked at.
public struct Match: Sendable, Equatable {
    public var ruleID: String
    public var verdict: Verdict
    public var reason: String
    public var location: SourceLocation
    public var readings: [Reading]
    public var cpuPercent: Int?
    public var grace: Double?
    /// Set while a hold keeps the rule in effect after its condition cleared: when it lets go. The reason
    /// then says so, instead of repeating a cause that is gone.
    public var heldUntil: Double?

    public init(ruleID: String, verdict: Verdict, reason: String, location: SourceLocation, readings: [Reading],
                cpuPercent: Int? = nil, grace: Double? = nil, heldUntil: Double? = nil) {
        self.ruleID = ruleID
        self.verdict = verdict
        self.reason = reason
        self.location = location
        self.readings = readings
        self.cpuPercent = cpuPercent
        self.grace = grace
        self.heldUntil = heldUntil
    }
}

public struct Reading: Sendable, Equatable {
    public var name: String
    public var value: PolicyValue
    public init(name: String, value: PolicyValue) {
        self.name = name
        self.value = value
    }
}

public struct PendingChange: Sendable, Equatable {
    public var ruleID: String
    public var becomesActive: Bool
    public var at: Double
}

public struct Decision: Sendable, Equatable {
    public var verdict: Verdict
    /// For throttle: the lowest cap among the throttling rules.
    public var cpuPercent: Int?
    /// For expire: the shortest grace among the expiring rules.
    public var grace: Double?
    /// Every rule in effect, strictest first.
    public var matches: [Match]
    /// Rules whose condition changed but whose hold has not yet elapsed.
    public var pending: [PendingChange]
    /// When to evaluate again even if nothing else changes (the earliest pending hold).
    public var nextChangeAt: Double? { pending.map(\.at).min() }
    /// The rules and requirements whose conditions matched, holds aside (`Standing`).
    public var matched = RuleBits()
    /// The verdict and what matched: with no hold pending, what the conditions say of the task.
    public var standing: Standing { Standing(verdict: verdict, matched: matched) }

    public init(verdict: Verdict, cpuPercent: Int?, grace: Double?, matches: [Match], pending: [PendingChange]) {
        self.verdict = verdict
        self.cpuPercent = cpuPercent
        self.grace = grace
        self.matches = matches
        self.pending = pending
    }

    /// The reason of the deciding rule, or that none applies.
    public var reason: String { matches.first?.reason ?? "no rule applies" }
}

extension Policy {
    /// Evaluates many tasks against one set of conditions, reusing one frame.
    public final class Evaluator {
        public let policy: Policy
        let frame: Frame
        /// How an instant of `now`'s clock reads in a message ("16:40:32"); by default, how far off it is.
        public var timeLabel: (_ instant: Double, _ now: Double) -> String = { t, now in "in \(formatDuration(max(0, t - now)))" }

        /// Verdicts of the rules that read only a task's flags and kind, per task signature.
        var bySignature: [UInt16: (verdict: Verdict, candidates: [Int])] = [:]

        /// The local time the evaluation sees.
        public let time: TimeFields

        /// The last hold state and decision handed out, and texts made from them: tasks alike get equal ones,
        /// and an equal one is handed back as this same value, so thousands of waiting tasks share one storage
        /// instead of holding a copy each (a daemon's queue: about 0.6 KB a task).
        var lastHold: HoldState?
        var lastDecision: Decision?
        var texts: Set<String> = []

        /// `text`, or an equal string made earlier in this evaluation, whose storage it then shares.
        public func shared(_ text: String) -> String {
            if let i = texts.firstIndex(of: text) { return texts[i] }
            if texts.count < 64 { texts.insert(text) }
            return text
        }

        public init(policy: Policy, conditions: [String: PolicyValue], time: TimeFields) {
            self.policy = policy
            self.time = time
            frame = Frame(shared: policy.sharedValues(conditions: conditions, time: time),
                          task: [PolicyValue](repeating: .null, count: policy.slots.taskNames.count))
        }

        /// The verdict for a task now. `hold` carries the dwell state from one evaluation to the next;
        /// on a task's first evaluation rules take effect at once, after that a change must hold.
        public func decide(_ task: TaskFields, now: Double, hold: inout HoldState) -> Decision {
            policy.fillTask(task, into: frame)
            var active: [Rule] = []
            var pending: [PendingChange] = []
            var held: [String: Double] = [:]
            var matched = policy.requirementBits(task, frame, filled: true)
            for (i, rule) in policy.rules.enumerated() {
                let raw = Policy.matches(rule, frame)
                if raw { matched.insert(i) }
                // A rule without holds follows its condition at once: no state to keep (a daemon keeps one of
                // these dictionaries per waiting task).
                if rule.holdOn == 0 && rule.holdOff == 0 {
                    if hold[rule.id] != nil { hold[rule.id] = nil }
                    if raw { active.append(rule) }
                    continue
                }
                var h = hold[rule.id] ?? RuleHold(active: raw, changingSince: nil)
                if raw == h.active {
                    h.changingSince = nil
                } else {
                    let since = h.changingSince ?? now
                    let need = raw ? rule.holdOn : rule.holdOff
                    if now - since >= need {
                        h = RuleHold(active: raw, changingSince: nil)
                    } else {
                        h.changingSince = since
                        pending.append(PendingChange(ruleID: rule.id, becomesActive: raw, at: since + need))
                        if h.active { held[rule.id] = since + need }
                    }
                }
                if hold[rule.id] != h { hold[rule.id] = h }
                if h.active { active.append(rule) }
            }
            if let last = lastHold, last == hold { hold = last } else { lastHold = hold }
            var d = policy.decision(active: active, pending: pending, frame: frame, time: time, held: held,
                                    label: { [timeLabel] in timeLabel($0, now) })
            d.matched = matched
            if let last = lastDecision, last == d { return last }
            lastDecision = d
            return d
        }

        /// Without history or holds: what the rules say this instant.
        public func decideNow(_ task: TaskFields) -> Decision {
            policy.fillTask(task, into: frame)
            var d = policy.decision(active: policy.rules.filter { Policy.matches($0, frame) }, pending: [], frame: frame, time: time)
            d.matched = policy.requirementBits(task, frame, filled: true)
            for (i, rule) in policy.rules.enumerated() where Policy.matches(rule, frame) { d.matched.insert(i) }
            return d
        }

        /// What the conditions say of a task, holds aside: its verdict and every rule and requirement that matches
        /// (`Standing`). Dearer than `verdict` (every rule is asked); a waiting task asks it to learn whether a
        /// change of conditions changes anything it is told or holds, not only whether it could start.
        public func standing(_ task: TaskFields) -> Standing {
            var bits = policy.requirementBits(task, frame)
            var v: Verdict = bits == RuleBits() ? .run : .defer
            for (i, rule) in policy.rules.enumerated() where Policy.matches(rule, frame) {
                bits.insert(i)
                if rule.verdict > v { v = rule.verdict }
            }
            return Standing(verdict: v, matched: bits)
        }

        /// Verdict only, without holds or reasons: for re-checking a whole queue after a condition changes.
        /// Rules are tried strictest first, so the first match decides; rules that read only the task's
        /// flags and kind are evaluated once per distinct combination.
        public func verdict(_ task: TaskFields) -> Verdict {
            let sig = Policy.signature(task)
            let entry: (verdict: Verdict, candidates: [Int])
            if let cached = bySignature[sig] {
                // The requirements are per task (a window is not in the signature): checked for each one.
                if cached.candidates.isEmpty {
                    return cached.verdict < .defer && policy.anyRequirementUnmet(task, frame) ? .defer : cached.verdict
                }
                entry = cached
                policy.fillTask(task, into: frame)
            } else {
                policy.fillTask(task, into: frame)
                let v = policy.bySignature.first { Policy.matches($0, frame) }?.verdict ?? .run
                // Per-task rules stricter than that, and not ruled out by a part every such task shares.
                let candidates = policy.perTask.indices.filter { i in
                    policy.perTask[i].verdict > v && !policy.gates[i].contains { $0(frame) == .bool(false) }
                }
                entry = (v, candidates)
                bySignature[sig] = entry
            }
            var v = entry.verdict
            for i in entry.candidates where Policy.matches(policy.perTask[i], frame) {
                v = policy.perTask[i].verdict
                break
            }
            // The task's own requirements hold whatever the rules say.
            if v < .defer, policy.anyRequirementUnmet(task, frame) { v = .defer }
            return v
        }

        var currentFrame: Frame { frame }
    }

    static func matches(_ rule: Rule, _ frame: Frame) -> Bool {
        switch rule.compiled(frame) {
        case .bool(let b): return b
        default: return rule.whenUnknown == .match
        }
    }

    func decision(active: [Rule], pending: [PendingChange], frame: Frame, time: TimeFields, held: [String: Double] = [:],
                  label: (Double) -> String = { "at \(formatDuration($0))" }) -> Decision {
        let sorted = active.enumerated().sorted { a, b in
            a.element.verdict != b.element.verdict ? a.element.verdict > b.element.verdict : a.offset < b.offset
        }.map(\.element)
        var matches = sorted.map { rule in
            let readings = rule.names.map { Reading(name: $0, value: value(of: $0, frame)) }
            var reason = fill(rule, frame)
            if let until = held[rule.id] {
                reason = Policy.heldReason(rule, readings: readings, until: label(until))
            }
            return Match(ruleID: rule.id, verdict: rule.verdict, reason: reason, location: rule.location,
                         readings: readings, cpuPercent: rule.cpuPercent, grace: rule.grace, heldUntil: held[rule.id])
        }
        // The task's own requirements (`--requires-external-power` …) hold even with every rule removed or
        // disabled; a rule in effect that already reads the requirement speaks for it.
        let covered = Set(sorted.filter { $0.verdict >= .defer }.flatMap(\.names))
        let unmet = unmetRequirements(frame, time: time).filter { !covered.contains($0.flag) }
        matches += unmet.map { r in
            Match(ruleID: r.flag, verdict: .defer, reason: r.reason, location: Policy.builtInLocation, readings: r.readings)
        }
        matches.sort { $0.verdict > $1.verdict }   // stable: rules keep their order within a verdict
        let verdict = matches.first?.verdict ?? .run
        let cpu = verdict == .throttle ? matches.filter { $0.verdict == .throttle }.compactMap(\.cpuPercent).min() : nil
        let grace = verdict == .expire
            ? (matches.filter { $0.verdict == .expire }.compactMap(\.grace).min() ?? settings.number("run.expire_grace")) : nil
        return Decision(verdict: verdict, cpuPercent: cpu, grace: grace, matches: matches, pending: pending)
    }

    func value(of name: String, _ frame: Frame) -> PolicyValue {
        if let i = slots.task[name] { return frame.task[i] }
        if let i = slots.shared[name] { return frame.shared[i] }
        return .null
    }

    func fill(_ rule: Rule, _ frame: Frame) -> String {
        guard !rule.template.isEmpty else { return rule.reason ?? rule.when }
        return rule.template.map { part in
            switch part {
            case .text(let t): return t
            case .name(let name, let slot):
                let v = slot.task ? frame.task[slot.index] : frame.shared[slot.index]
                if case .number(let n) = v, name.hasSuffix("_bytes") { return Policy.bytesText(n) }
                return v == .null ? "unknown" : v.description
            }
        }.joined()
    }

    /// A count of bytes as a person reads it, in binary units to three figures ("812 MiB", "4.77 GiB", "512 bytes"):
    /// a `{…_bytes}` name in a reason is filled so (bgtask-policy(5)), never as a raw 9-digit count.
    public static func bytesText(_ n: Double) -> String {
        let units = ["KiB", "MiB", "GiB", "TiB", "PiB"]
        guard n.isFinite, abs(n) >= 1024 else { return n.isFinite ? "\(Int(n)) byte\(Int(n) == 1 ? "" : "s")" : "\(n)" }
        var v = n / 1024, u = 0
        while abs(v) >= 1024 && u < units.count - 1 { v /= 1024; u += 1 }
        let scale = abs(v) >= 100 ? 1 : abs(v) >= 10 ? 10 : 100
        let scaled = Int((abs(v) * Double(scale)).rounded())
        var t = (v < 0 ? "-" : "") + String(scaled / scale)
        var fraction = scale == 1 ? "" : String(scaled % scale)
        while fraction.count < String(scale).count - 1 { fraction = "0" + fraction }
        while fraction.hasSuffix("0") { fraction.removeLast() }
        if !fraction.isEmpty { t += "." + fraction }
        return "\(t) \(units[u])"
    }
}

/// A requirement the task itself states, checked whatever the rules say.
struct UnmetRequirement {
    var flag: String
    var reason: String
    var readings: [Reading]
}

extension Policy {
    /// Where built-in checks say they come from (`policy explain`, `why`).
    public static let builtInLocation = SourceLocation(file: "built-in", line: 0, column: 0)

    /// The task's unmet requirements as bits after the rules' (`RuleBits`), the task filled into `frame` first
    /// unless `filled`.
    func requirementBits(_ t: TaskFields, _ frame: Frame, filled: Bool = false) -> RuleBits {
        if !filled { fillTask(t, into: frame) }
        let i = slots.requirementIndex, n = rules.count
        var bits = RuleBits()
        if t.requiresExternalPower && frame.shared[i.external] != .bool(true) { bits.insert(n) }
        if t.requiresNetwork && frame.shared[i.online] != .bool(true) { bits.insert(n + 1) }
        if t.requiresUnmetered && frame.shared[i.metered] == .bool(true) { bits.insert(n + 2) }
        if let w = t.window, case .duration(let sod) = frame.shared[i.ofDay], !w.contains(sod) { bits.insert(n + 3) }
        return bits
    }

    /// For the queue's fast path: whether any requirement is unmet, without building reasons.
    func anyRequirementUnmet(_ t: TaskFields, _ frame: Frame) -> Bool {
        let i = slots.requirementIndex
        if t.requiresExternalPower && frame.shared[i.external] != .bool(true) { return true }
        if t.requiresNetwork && frame.shared[i.online] != .bool(true) { return true }
        if t.requiresUnmetered && frame.shared[i.metered] == .bool(true) { return true }
        if let w = t.window, case .duration(let sod) = frame.shared[i.ofDay], !w.contains(sod) { return true }
        return false
    }

    /// `task.requires_external_power` and power.external not true; `task.requires_network` and not online;
    /// `task.requires_unmetered` and metered — an unknown reading does not satisfy a requirement, except
    /// "metered" whose unknown is the common case (no NetworkManager) and is taken as not metered.
    func unmetRequirements(_ frame: Frame, time: TimeFields) -> [UnmetRequirement] {
        let i = slots.requirementIndex, t = slots.taskIndex
        func r(_ n: String) -> Reading { Reading(name: n, value: value(of: n, frame)) }
        var out: [UnmetRequirement] = []
        if frame.task[t.power] == .bool(true), frame.shared[i.external] != .bool(true) {
            let reason = frame.shared[i.reason]
            let why = reason == .null ? "power.external is unknown" : reason.description
            out.append(UnmetRequirement(flag: "task.requires_external_power", reason: "waiting for external power (\(why))",
                                        readings: [r("task.requires_external_power"), r("power.external")]))
        }
        if frame.task[t.network] == .bool(true), frame.shared[i.online] != .bool(true) {
            out.append(UnmetRequirement(flag: "task.requires_network",
                                        reason: frame.shared[i.online] == .null ? "waiting for the network (online state unknown)" : "waiting for the network",
                                        readings: [r("task.requires_network"), r("network.online")]))
        }
        if frame.task[t.unmetered] == .bool(true), frame.shared[i.metered] == .bool(true) {
            let iface = frame.shared[i.interface]
            out.append(UnmetRequirement(flag: "task.requires_unmetered",
                                        reason: "waiting for an unmetered network (\(iface == .null ? "the network" : iface.description) is metered)",
                                        readings: [r("task.requires_unmetered"), r("network.metered")]))
        }
        if frame.task[t.inWindow] == .bool(false) {
            let window = frame.task[t.window].description
            out.append(UnmetRequirement(flag: "task.in_window", reason: Policy.windowReason(window, time: time),
                                        readings: [r("task.window"), r("time.of_day")]))
        }
        return out
    }

    /// What a task outside its `--between` window is told at `time`: "outside its window 01:00-06:00; it opens in 1h".
    /// A countdown: a listing makes it anew from the time it lists at, not from the time of the decision.
    public static func windowReason(_ window: String, time: TimeFields) -> String {
        let opens = ClockWindow(window).map { w in
            let d = w.untilChange(from: time)
            return "; it opens in \(formatDuration(d.rounded(.up)))"
        } ?? ""
        return "outside its window \(window)\(opens)"
    }

    /// A rule kept in effect by its hold after its condition cleared: what changed, and when it lets go.
    static func heldReason(_ rule: Rule, readings: [Reading], until: String) -> String {
        let now = readings.filter { !$0.name.hasPrefix("task.") && !$0.name.hasPrefix("time.") && !PolicySettings.defaults.keys.contains($0.name) && $0.name != "power.reason" }
            .map { "\($0.name) = \($0.value == .null ? "unknown" : $0.value.literal)" }
        let what = now.isEmpty ? "its condition no longer holds" : "its condition cleared (now \(now.joined(separator: ", ")))"
        let hold = rule.holdOff > 0 ? "hold_off \(formatDuration(rule.holdOff))" : "hold"
        // The reason as written, its readings left out: filled in now, they would contradict the hold.
        let was = rule.template.isEmpty ? (rule.reason ?? rule.when) : rule.template.map { part -> String in
            if case .text(let t) = part { return t }
            return "…"
        }.joined()
        return "\(what); held until \(until) unless it changes again (\(hold)); was: \(was)"
    }
}
