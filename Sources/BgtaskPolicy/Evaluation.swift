/// Per task and rule: whether the rule is in effect, and since when its condition has said otherwise.
public struct RuleHold: Sendable, Equatable, Codable {
    public var active: Bool
    public var changingSince: Double?
}

public typealias HoldState = [String: RuleHold]

/// A rule in effect, with the reason filled in and the readings it looked at.
public struct Match: Sendable, Equatable {
    public var ruleID: String
    public var verdict: Verdict
    public var reason: String
    public var location: SourceLocation
    public var readings: [Reading]
    public var cpuPercent: Int?
    public var grace: Double?

    public init(ruleID: String, verdict: Verdict, reason: String, location: SourceLocation, readings: [Reading],
                cpuPercent: Int? = nil, grace: Double? = nil) {
        self.ruleID = ruleID
        self.verdict = verdict
        self.reason = reason
        self.location = location
        self.readings = readings
        self.cpuPercent = cpuPercent
        self.grace = grace
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

        /// Verdicts of the rules that read only a task's flags and kind, per task signature.
        var bySignature: [UInt16: (verdict: Verdict, candidates: [Int])] = [:]

        public init(policy: Policy, conditions: [String: PolicyValue], time: TimeFields) {
            self.policy = policy
            frame = Frame(shared: policy.sharedValues(conditions: conditions, time: time),
                          task: [PolicyValue](repeating: .null, count: policy.slots.taskNames.count))
        }

        /// The verdict for a task now. `hold` carries the dwell state from one evaluation to the next;
        /// on a task's first evaluation rules take effect at once, after that a change must hold.
        public func decide(_ task: TaskFields, now: Double, hold: inout HoldState) -> Decision {
            policy.fillTask(task, into: frame)
            var active: [Rule] = []
            var pending: [PendingChange] = []
            for rule in policy.rules {
                let raw = Policy.matches(rule, frame)
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
                    }
                }
                if hold[rule.id] != h { hold[rule.id] = h }
                if h.active { active.append(rule) }
            }
            return policy.decision(active: active, pending: pending, frame: frame)
        }

        /// Without history or holds: what the rules say this instant.
        public func decideNow(_ task: TaskFields) -> Decision {
            policy.fillTask(task, into: frame)
            return policy.decision(active: policy.rules.filter { Policy.matches($0, frame) }, pending: [], frame: frame)
        }

        /// Verdict only, without holds or reasons: for re-checking a whole queue after a condition changes.
        /// Rules are tried strictest first, so the first match decides; rules that read only the task's
        /// flags and kind are evaluated once per distinct combination.
        public func verdict(_ task: TaskFields) -> Verdict {
            let sig = Policy.signature(task)
            let entry: (verdict: Verdict, candidates: [Int])
            if let cached = bySignature[sig] {
                if cached.candidates.isEmpty { return cached.verdict }
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
            for i in entry.candidates where Policy.matches(policy.perTask[i], frame) {
                return policy.perTask[i].verdict
            }
            return entry.verdict
        }

        var currentFrame: Frame { frame }
    }

    static func matches(_ rule: Rule, _ frame: Frame) -> Bool {
        switch rule.compiled(frame) {
        case .bool(let b): return b
        default: return rule.whenUnknown == .match
        }
    }

    func decision(active: [Rule], pending: [PendingChange], frame: Frame) -> Decision {
        let sorted = active.enumerated().sorted { a, b in
            a.element.verdict != b.element.verdict ? a.element.verdict > b.element.verdict : a.offset < b.offset
        }.map(\.element)
        let matches = sorted.map { rule in
            Match(ruleID: rule.id, verdict: rule.verdict, reason: fill(rule, frame), location: rule.location,
                  readings: rule.names.map { Reading(name: $0, value: value(of: $0, frame)) },
                  cpuPercent: rule.cpuPercent, grace: rule.grace)
        }
        let verdict = sorted.first?.verdict ?? .run
        let cpu = verdict == .throttle ? sorted.filter { $0.verdict == .throttle }.compactMap(\.cpuPercent).min() : nil
        let grace = verdict == .expire
            ? (sorted.filter { $0.verdict == .expire }.compactMap(\.grace).min() ?? settings.number("run.expire_grace")) : nil
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
            case .name(_, let slot):
                let v = slot.task ? frame.task[slot.index] : frame.shared[slot.index]
                return v == .null ? "unknown" : v.description
            }
        }.joined()
    }
}
