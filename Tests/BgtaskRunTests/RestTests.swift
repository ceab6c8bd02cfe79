import BgtaskCore
import BgtaskPolicy
import BgtaskProbes
import BgtaskRun
import Testing

/// A policy of one file's text.
func policy(_ text: String, path: String = "test.toml") throws -> Policy { Policy.merge([try PolicyFile.parse(text, path: path).get()]) }

/// bgtaskd lets the supervisor of a task that waits for a condition go, and makes a new one when the queue's fast
/// verdict changes (`Supervisor.rest`, `resume`): the new one must decide exactly as the old one would have.
@Suite("a waiting task's supervisor let go and taken up again (bgtaskd's resting tasks)")
struct RestTests {
    static let holdPolicy = """
    [[rule]]
    id = "power"
    when = 'task.requires_external_power && power.external != true'
    verdict = "defer"
    hold_off = "30s"
    reason = "waiting for external power"
    """

    func supervisor(_ p: PolicyRef) -> Supervisor {
        var task = TaskFields(id: "backup")
        task.requiresExternalPower = true
        var o = RunOptions(argv: ["true"], task: task, probe: ProbeOptions(root: SysfsRoot(sysfs: "/nonexistent"), useDBus: false))
        o.quiet = true
        let s = Supervisor(options: o, policy: p, observer: nil, state: nil, enqueuedAt: 0)
        // Nothing is spawned: where it would start, it waits for a slot instead, which says so.
        s.slot = { _ in "no slot in this test" }
        return s
    }

    func evaluator(_ p: PolicyRef, power: Bool) -> Policy.Evaluator {
        Policy.Evaluator(policy: p.policy, conditions: ["power.external": .bool(power)], time: .midnightMonday)
    }

    func startsNow(_ s: Supervisor) -> Bool {
        if case .noSlot? = s.machine.startBlock { return true }
        return false
    }

    @Test("a supervisor made anew from a rest keeps the hold_off its predecessor had: the charger must stay 30 s")
    func resumedSupervisorKeepsTheHold() throws {
        let p = PolicyRef(try policy(RestTests.holdPolicy))
        let first = supervisor(p)
        first.conditionsChanged(["power.external": .bool(false)], now: 0, shared: evaluator(p, power: false))
        let rest = try #require(first.rest, "a task waiting for the charger, no hold running, may rest")
        #expect(rest.verdict == .defer)
        #expect(rest.reason.contains("waiting for external power"))

        let second = supervisor(p)
        second.resume(rest)
        second.conditionsChanged(["power.external": .bool(true)], now: 10, shared: evaluator(p, power: true))
        #expect(!startsNow(second), "the hold_off must keep it waiting for 30 s after the charger came back")
        #expect(second.nextDeadline == 40)
        #expect(second.rest == nil, "a task with a hold running must keep its supervisor: the hold ends on its own")
        second.timersDue(now: 40)
        #expect(startsNow(second))

        // Without the rest, a new supervisor would not know the rule was in effect: it would start at once.
        let fresh = supervisor(p)
        fresh.conditionsChanged(["power.external": .bool(true)], now: 10, shared: evaluator(p, power: true))
        #expect(startsNow(fresh))
    }

    @Test("a task under a rule that reads its id does not rest: the queue's fast verdict could not decide for it")
    func identityRulesKeepTheSupervisor() throws {
        let p = PolicyRef(try policy("""
        [[rule]]
        id = "one"
        when = 'task.id == "backup" && power.external != true'
        verdict = "defer"
        """))
        let s = supervisor(p)
        s.conditionsChanged(["power.external": .bool(false)], now: 0, shared: evaluator(p, power: false))
        #expect(s.machine.lastDecision?.verdict == .defer)
        #expect(s.rest == nil)
    }

    @Test("rests that differ only in what tells why (the readings in a reason) share a group; rests whose holds differ do not")
    func restsShareAGroupByTheirHolds() throws {
        let p = PolicyRef(try policy("""
        [[rule]]
        id = "power"
        when = 'task.requires_external_power && power.external != true'
        verdict = "defer"
        hold_off = "30s"
        reason = "waiting for external power ({battery.percent}%)"

        [[rule]]
        id = "low"
        when = 'battery.percent < 30'
        verdict = "defer"
        hold_off = "60s"
        reason = "battery low"
        """))
        func resting(at percent: Double, now: Double) throws -> Supervisor.Rest {
            let s = supervisor(p)
            let c: [String: PolicyValue] = ["power.external": .bool(false), "battery.percent": .number(percent)]
            s.conditionsChanged(c, now: now, shared: Policy.Evaluator(policy: p.policy, conditions: c, time: .midnightMonday))
            return try #require(s.rest)
        }
        let a = try resting(at: 54, now: 0), b = try resting(at: 20, now: 5), c = try resting(at: 53, now: 9)
        #expect(a.verdict == .defer && b.verdict == .defer)
        #expect(!a.sharesGroup(with: b), "the low-battery rule is in effect for b alone: its hold decides differently once woken")
        #expect(a.reason != c.reason && a.reason.contains("54%") && c.reason.contains("53%"))
        #expect(c.sharesGroup(with: a), "the same holds and verdict, another battery level in the reason: one group")
    }
}
