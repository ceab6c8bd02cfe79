/// Why each rule did or did not apply: for `policy explain`.
public struct RuleExplanation: Sendable {
    public enum Outcome: String, Sendable { case matched, unknown, notMatched = "not matched" }
    public var ruleID: String
    public var verdict: Verdict
    public var location: SourceLocation
    public var when: String
    public var outcome: Outcome
    /// Each `&&` part of the condition and what it came to.
    public var clauses: [(text: String, value: PolicyValue)]
    public var readings: [Reading]
    /// Not matched, and every clause but one held.
    public var cameClose: Bool
    public var failing: [String] { clauses.filter { $0.value != .bool(true) }.map(\.text) }
}

extension Policy.Evaluator {
    public func explain(_ task: TaskFields) -> (Decision, [RuleExplanation]) {
        let decision = decideNow(task)
        let frame = currentFrame
        let rules = policy.rules.map { rule -> RuleExplanation in
            let result = rule.compiled(frame)
            let outcome: RuleExplanation.Outcome
            switch result {
            case .bool(true): outcome = .matched
            case .bool(false): outcome = .notMatched
            default: outcome = rule.whenUnknown == .match ? .matched : .unknown
            }
            let clauses = rule.conjuncts.map { (text: $0.text, value: $0.eval(frame)) }
            let failingParts = rule.conjuncts.filter { $0.eval(frame) != .bool(true) }
            let failing = failingParts.count
            // A rule is close when only a reading stands in its way, not the task's own fields.
            let onReadings = failingParts.allSatisfy { part in part.names.contains { !$0.hasPrefix("task.") } }
            return RuleExplanation(
                ruleID: rule.id, verdict: rule.verdict, location: rule.location, when: rule.when, outcome: outcome,
                clauses: clauses, readings: rule.names.map { Reading(name: $0, value: policy.value(of: $0, frame)) },
                cameClose: outcome != .matched && clauses.count > 1 && failing == 1 && onReadings)
        }
        return (decision, rules)
    }
}
