import BgtaskCore
import BgtaskPolicy
import BgtaskProbes
import BgtaskRun
import Testing

/// A task held back by two rules: each rule's hold runs from its own condition's change, and both are told while
/// both hold, whether its supervisor stays awake (bgtaskd's fast path) or rests between changes (its resting
/// groups). In virtual time: the clock is what `now` says.
@Suite("every blocking rule keeps its state: holds counted from their own change, all of them told")
struct BlockerHoldTests {
    /// The default policy's two requirements: the charger with a 30 s hold_off, the network with none (so its
    /// return starts the task at once when nothing else holds).
    static let twoRules = RestTests.holdPolicy + """


    [[rule]]
    id = "network"
    when = 'task.requires_network && network.online != true'
    verdict = "defer"
    reason = "waiting for the network"
    """

    static var task: TaskFields {
        var t = TaskFields(id: "sync")
        t.requiresExternalPower = true
        t.requiresNetwork = true
        return t
    }

    func supervisor(_ p: PolicyRef) -> Supervisor {
        var o = RunOptions(argv: ["true"], task: Self.task, probe: ProbeOptions(root: SysfsRoot(sysfs: "/nonexistent"), useDBus: false))
        o.quiet = true
        let s = Supervisor(options: o, policy: p, observer: nil, state: nil, enqueuedAt: 0)
        s.slot = { _ in "no slot in this test" }    // where it would start, it waits for a slot, which says so
        return s
    }

    static func readings(power: Bool, online: Bool) -> [String: PolicyValue] {
        ["power.external": .bool(power), "network.online": .bool(online)]
    }

    func evaluator(_ p: PolicyRef, power: Bool, online: Bool) -> Policy.Evaluator {
        Policy.Evaluator(policy: p.policy, conditions: Self.readings(power: power, online: online), time: .midnightMonday)
    }

    func deliver(_ s: Supervisor, _ p: PolicyRef, power: Bool, online: Bool, at now: Double) {
        s.conditionsChanged(Self.readings(power: power, online: online), now: now, shared: evaluator(p, power: power, online: online))
    }

    func startsNow(_ s: Supervisor) -> Bool {
        if case .noSlot? = s.machine.startBlock { return true }
        return false
    }

    func blockers(_ s: Supervisor) -> [String] {
        (s.machine.lastDecision?.matches ?? []).filter { $0.verdict == .defer }.map(\.ruleID)
    }

    @Test("the standing changes when a rule behind the deciding one stops matching, though the verdict stays defer")
    func standingSeesEveryRule() throws {
        let p = PolicyRef(try policy(Self.twoRules))
        let bothDown = evaluator(p, power: false, online: false).standing(Self.task)
        let plugged = evaluator(p, power: true, online: false).standing(Self.task)
        #expect(bothDown.verdict == .defer && plugged.verdict == .defer)
        #expect(bothDown != plugged, "the charger's rule stopped matching: the task must be decided again")
        #expect(evaluator(p, power: false, online: false).standing(Self.task) == bothDown)
        // A decision's standing is the evaluator's, so a task resting on one wakes exactly when the other differs.
        var hold = HoldState()
        let d = evaluator(p, power: false, online: false).decide(Self.task, now: 0, hold: &hold)
        #expect(d.standing == bothDown)
    }

    @Test("awake: the charger's hold starts when it is plugged, not when the network returns; both are told meanwhile")
    func awakeSupervisor() throws {
        let p = PolicyRef(try policy(Self.twoRules))
        let s = supervisor(p)
        deliver(s, p, power: false, online: false, at: 0)
        #expect(blockers(s) == ["power", "network"])
        #expect(s.rest != nil, "waiting for conditions only, no hold running")

        deliver(s, p, power: true, online: false, at: 5)        // plugged while the link is down
        #expect(blockers(s) == ["power", "network"], "both hold: the charger's by its hold_off")
        let power = try #require(s.machine.lastDecision?.matches.first { $0.ruleID == "power" })
        #expect(power.heldUntil == 35, "the hold counts from the plug at 5 s")
        #expect(power.reason.contains("held until") && !power.reason.hasPrefix("waiting for external power"), "\(power.reason)")
        #expect(s.nextDeadline == 35)

        s.timersDue(now: 35)
        #expect(blockers(s) == ["network"], "the hold is over: only the network holds it back")
        deliver(s, p, power: true, online: true, at: 40)
        #expect(startsNow(s), "the network came 5 s after the charger's hold ended: it starts at once, not 30 s later")
    }

    @Test("resting: the group wakes on the plug (the verdict unchanged), the hold runs from it, and the task starts when the network comes")
    func restingGroup() throws {
        typealias Queue = Scheduler<String, Supervisor.Rest>
        let p = PolicyRef(try policy(Self.twoRules))
        let first = supervisor(p)
        deliver(first, p, power: false, online: false, at: 0)
        let rest = try #require(first.rest)
        #expect(evaluator(p, power: true, online: false).verdict(Self.task) == rest.verdict,
                "the plug changes no verdict: a group woken by its verdict alone slept through it, its hold unstarted")
        var q = Queue(limits: Schedule.Limits(maxRunning: 2, maxRunningHeavy: 1, maxPendingPerApp: 5), now: 0, day: 0,
                       submitsPerSecond: 100, submitBurst: 100)
        q.add(Queue.Job(fields: Self.task), "sync")
        q.rest("sync", standing: rest.decision.standing, rest: rest)
        #expect(q.wake(standing: { evaluator(p, power: false, online: false).standing($0) }).isEmpty, "nothing changed: it stays at rest")
        let woken = q.wake(standing: { evaluator(p, power: true, online: false).standing($0) })
        #expect(woken.map(\.id) == ["sync"], "the charger's rule stopped matching: the group wakes")

        let second = supervisor(p)
        second.resume(try #require(woken.first).rest)
        deliver(second, p, power: true, online: false, at: 5)
        #expect(blockers(second) == ["power", "network"])
        #expect(second.machine.lastDecision?.matches.first { $0.ruleID == "power" }?.heldUntil == 35)
        #expect(second.rest == nil, "a hold is running: it stays awake until it ends")
        second.timersDue(now: 35)
        #expect(blockers(second) == ["network"])
        deliver(second, p, power: true, online: true, at: 40)
        #expect(startsNow(second), "not a hold later (70 s)")
    }
}
