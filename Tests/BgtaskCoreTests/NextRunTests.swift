import BgtaskCore
import BgtaskPolicy
import Testing

/// `pending`'s NEXT: the earliest time a task could run (`NextRun`), not when it is looked at again. In virtual
/// time: instants count seconds from midnight of a Monday, in days of 86,400 s.
@Suite("NEXT is the earliest time a task could run")
struct NextRunTests {
    static func at(_ t: Double) -> TimeFields {
        let day = Int((t / 86_400).rounded(.down))
        let sod = t - Double(day) * 86_400
        return TimeFields(hour: Int(sod / 3600), secondsSinceMidnight: sod.rounded(.down),
                          weekday: ["mon", "tue", "wed", "thu", "fri", "sat", "sun"][((day % 7) + 7) % 7])
    }

    static let h = 3600.0

    /// Office hours and a weekend (the clock alone: a known end); the charger is the task's own requirement
    /// (`--requires-external-power`: a reading, no known end).
    static let rules = """
    [[rule]]
    id = "office-hours"
    when = 'time.hour >= 9 && time.hour < 17'
    verdict = "defer"
    reason = "not during office hours"

    [[rule]]
    id = "weekend"
    when = 'time.weekday == "sat" && task.kind == "refresh"'
    verdict = "defer"
    reason = "no refreshes on saturdays"
    """

    struct Case {
        var policy: Policy
        var power = false
        var task = TaskFields(id: "backup")
        func next(now: Double, earliest: Double? = nil, holds: [String: Double] = [:]) -> Double? {
            let c: [String: PolicyValue] = ["power.external": .bool(power)]
            var hold = HoldState()
            // What holds it back now, as the daemon's last decision tells it (held rules stay in it).
            var d = Policy.Evaluator(policy: policy, conditions: c, time: NextRunTests.at(now)).decide(task, now: now, hold: &hold)
            for (id, until) in holds where !d.matches.contains(where: { $0.ruleID == id }) {
                d.matches.append(Match(ruleID: id, verdict: .defer, reason: "held", location: Policy.builtInLocation, readings: [], heldUntil: until))
            }
            return NextRun(policy: policy, conditions: c, now: now, time: NextRunTests.at)
                .earliest(task: task, blocking: d.matches, holds: holds, earliest: earliest)
        }
    }

    func make(power: Bool = false, requiresPower: Bool = false) throws -> Case {
        var c = Case(policy: Policy.merge([try PolicyFile.parse(Self.rules, path: "test.toml").get()]), power: power)
        c.task.requiresExternalPower = requiresPower
        return c
    }

    @Test("--at 02:00 shows 02:00 whatever rules read time.hour, and with the charger also missing")
    func earliestDate() throws {
        let c = try make()
        let now = 20 * Self.h, twoAM = 26 * Self.h
        #expect(c.next(now: now, earliest: twoAM) == twoAM, "a rule on time.hour that does not block at 02:00 moves nothing")
        let both = try make(requiresPower: true)
        #expect(both.next(now: now, earliest: twoAM) == twoAM, "two blockers, one of known end: its end, not `-`")
        #expect(both.next(now: now) == nil, "the charger alone: no known time")
        var bare = Case(policy: Policy.merge([]))
        bare.task.requiresExternalPower = true
        #expect(bare.next(now: now, earliest: twoAM) == twoAM, "no rule of the clock: the date, asked of nothing else")
    }

    @Test("a rule of the clock ends when the clock says; a date inside it gives way to the rule's end")
    func clockRules() throws {
        let c = try make(power: true)
        #expect(c.next(now: 10 * Self.h) == 17 * Self.h, "office hours end at 17:00")
        #expect(c.next(now: 20 * Self.h, earliest: 34 * Self.h) == 41 * Self.h, "--at 10:00 tomorrow: office hours then, so 17:00")
        var refresh = c
        refresh.task.kind = .refresh
        // Saturday 10:00 (day 5): office hours end at 17:00 but the weekend rule holds all day: Sunday 00:00.
        let saturday = 5 * 86_400.0
        #expect(refresh.next(now: saturday + 10 * Self.h) == saturday + 86_400)
    }

    @Test("--between: the window's opening; a running hold: its end; the latest of all that is known")
    func windowsAndHolds() throws {
        var c = try make(power: true)
        c.task.window = ClockWindow("01:00-06:00")
        #expect(c.next(now: 18 * Self.h) == 25 * Self.h, "outside 01:00-06:00 at 18:00: 01:00 tomorrow")
        var held = try make(power: true)
        held.task.requiresExternalPower = true
        let now = 18 * Self.h
        #expect(held.next(now: now, holds: ["power": now + 30]) == now + 30, "the charger's hold_off ends in 30 s")
        #expect(held.next(now: now, earliest: now + 600, holds: ["power": now + 30]) == now + 600)
    }
}
