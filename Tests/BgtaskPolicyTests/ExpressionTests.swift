import BgtaskPolicy
import Testing

@Suite("The expression language")
struct ExpressionTests {
    @Test("unknown readings never satisfy a comparison by accident")
    func unknownReadingsDoNotMatch() throws {
        let p = try rule("battery.percent <= 20")
        #expect(p.matches(["battery.percent": .number(15)]))
        #expect(!p.matches(["battery.percent": .number(50)]))
        #expect(!p.matches(["battery.percent": .null]))      // no battery: no low-battery rule
        #expect(!p.matches([:]))
    }

    @Test("when_unknown = \"match\" makes an undecidable rule apply")
    func whenUnknownMatch() throws {
        let p = try rule("battery.percent <= 20", extra: "when_unknown = \"match\"")
        #expect(p.matches(["battery.percent": .null]))
    }

    @Test("&& and || follow Kleene logic: a known deciding side wins over an unknown one")
    func kleeneLogic() throws {
        let and = try rule("power.external == false && battery.percent < 20")
        #expect(!and.matches(["power.external": .bool(true), "battery.percent": .null]))
        let or = try rule("thermal.state >= \"serious\" || power.external == false")
        #expect(or.matches(["thermal.state": .null, "power.external": .bool(false)]))
        #expect(!or.matches(["thermal.state": .null, "power.external": .bool(true)]))
        let not = try rule("!network.online")
        #expect(!not.matches(["network.online": .null]))
        #expect(not.matches(["network.online": .bool(false)]))
    }

    @Test("== and != are total, so `!= true` treats unknown as not satisfied")
    func equalityWithUnknown() throws {
        let p = try rule("power.external != true")
        #expect(p.matches(["power.external": .null]))
        #expect(p.matches(["power.external": .bool(false)]))
        #expect(!p.matches(["power.external": .bool(true)]))
        #expect(try rule("battery.percent == null").matches(["battery.percent": .null]))
        #expect(try rule("known(battery.percent)").matches(["battery.percent": .number(3)]))
        #expect(!(try rule("known(battery.percent)").matches([:])))
    }

    @Test("ordered states compare in their order; `in` takes a list of members", arguments: [
        ("nominal", false), ("fair", false), ("serious", true), ("critical", true),
    ])
    func orderedStates(state: String, expected: Bool) throws {
        let p = try rule("thermal.state >= \"serious\"")
        #expect(p.matches(["thermal.state": .string(state)]) == expected)
        let q = try rule("thermal.state in [\"serious\", \"critical\"]")
        #expect(q.matches(["thermal.state": .string(state)]) == expected)
    }

    @Test("durations compare with durations; the _s twins with numbers")
    func durations() throws {
        var task = TaskFields(id: "t")
        task.waited = 7200
        #expect(try rule("task.waited > 1h30m").matches([:], task))
        #expect(!(try rule("task.waited > 2h").matches([:], task)))
        #expect(try rule("task.waited_s >= 7200").matches([:], task))
        #expect(try rule("task.waited >= duration(\"2h\")").matches([:], task))
        #expect(try rule("task.running < 250ms").matches([:], task))
    }

    @Test("the time of day, weekday and the policy's own settings are names too")
    func timeAndSettings() throws {
        let night = TimeFields(hour: 23, secondsSinceMidnight: 23 * 3600 + 60, weekday: "sat")
        let p = try rule("time.of_day >= 22h && time.weekday in [\"sat\", \"sun\"] && time.hour == 23")
        #expect(p.verdict([:], time: night) == .defer)
        #expect(p.verdict([:], time: .midnightMonday) == .run)
        let s = try policy("""
        [battery]
        low_percent = 35
        [[rule]]
        id = "low"
        when = 'battery.percent <= battery.low_percent'
        verdict = "defer"
        """)
        #expect(s.matches(["battery.percent": .number(30)]))
        #expect(!s.matches(["battery.percent": .number(40)]))
    }

    @Test("precedence: && binds tighter than ||, ! tighter than &&, parentheses override")
    func precedence() throws {
        let c: [String: PolicyValue] = ["power.external": .bool(true), "network.online": .bool(false), "network.metered": .bool(true)]
        #expect(try rule("power.external || network.online && network.metered").matches(c))
        #expect(!(try rule("(power.external || network.online) && !network.metered").matches(c)))
        #expect(try rule("!network.online && network.metered").matches(c))
    }

    @Test("strings escape, and a lone quote in a single-quoted TOML literal is still checked")
    func stringLiterals() throws {
        #expect(try rule("task.id == \"back\\\"up\"").matches([:], TaskFields(id: "back\"up")))
        #expect(try rule("task.id == \"nightly\"").matches([:], TaskFields(id: "nightly")))
    }
}

@Suite("Verdicts, reasons and holds")
struct DecisionTests {
    let twoRules = """
    [[rule]]
    id = "cap-a"
    when = 'task.cpu_heavy'
    verdict = "throttle"
    cpu_percent = 50
    reason = "heavy: {task.id} at {battery.percent}%"

    [[rule]]
    id = "cap-b"
    when = 'power.external == false'
    verdict = "throttle"
    cpu_percent = 25

    [[rule]]
    id = "hot"
    when = 'thermal.state >= "serious"'
    verdict = "pause"
    reason = "hot: {thermal.state}, {thermal.celsius} °C"
    """

    @Test("the strictest verdict wins, every match is kept, the lowest cap applies")
    func strictestWins() throws {
        let p = try policy(twoRules)
        var task = TaskFields(id: "backup")
        task.cpuHeavy = true
        let e = Policy.Evaluator(policy: p, conditions: ["power.external": .bool(false), "battery.percent": .number(42),
                                                         "thermal.state": .string("nominal")], time: .midnightMonday)
        let d = e.decideNow(task)
        #expect(d.verdict == .throttle)
        #expect(d.cpuPercent == 25)
        #expect(d.matches.map(\.ruleID) == ["cap-a", "cap-b"])
        #expect(d.matches[0].reason == "heavy: backup at 42%")
        #expect(d.matches[0].location == SourceLocation(file: "test.toml", line: 2, column: 6))
        #expect(d.matches[0].readings == [Reading(name: "task.cpu_heavy", value: .bool(true))])

        let hot = Policy.Evaluator(policy: p, conditions: ["power.external": .bool(false), "thermal.state": .string("serious"),
                                                           "thermal.celsius": .number(91)], time: .midnightMonday).decideNow(task)
        #expect(hot.verdict == .pause)
        #expect(hot.matches.first?.ruleID == "hot")
        #expect(hot.reason == "hot: serious, 91 °C")
        #expect(hot.matches.count == 3)
    }

    @Test("unknown values in a reason read as 'unknown'")
    func reasonWithUnknown() throws {
        let p = try rule("power.external != true", extra: "reason = \"on battery at {battery.percent}%\"")
        let d = Policy.Evaluator(policy: p, conditions: [:], time: .midnightMonday).decideNow(TaskFields(id: "t"))
        #expect(d.reason == "on battery at unknown%")
    }

    @Test("hold: a wobbling charger does not restart work until it has stayed plugged for hold_off (virtual time)")
    func holdOffDelaysRelease() throws {
        let p = try rule("power.external != true", extra: "hold_off = \"30s\"\nhold_on = \"5s\"")
        var hold: HoldState = [:]
        let task = TaskFields(id: "t")
        func at(_ t: Double, external: Bool) -> Decision {
            Policy.Evaluator(policy: p, conditions: ["power.external": .bool(external)], time: .midnightMonday)
                .decide(task, now: t, hold: &hold)
        }
        // First evaluation: rules take effect at once, no dwell.
        #expect(at(0, external: false).verdict == .defer)
        // Plugged at 10 s: still deferred, the rule lets go at 40 s.
        let plugged = at(10, external: true)
        #expect(plugged.verdict == .defer)
        #expect(plugged.nextChangeAt == 40)
        #expect(at(39.9, external: true).verdict == .defer)
        // Unplugged at 39.9 before release: the hold restarts from scratch next time.
        #expect(at(39.95, external: false).verdict == .defer)
        #expect(at(45, external: true).nextChangeAt == 75)
        #expect(at(75, external: true).verdict == .run)
        // Unplugging needs hold_on = 5 s of battery before the rule takes effect again.
        #expect(at(80, external: false).verdict == .run)
        #expect(at(85, external: false).verdict == .defer)
    }
}

@Suite("Layers")
struct LayerTests {
    let shipped = """
    [battery]
    low_percent = 20
    [[rule]]
    id = "a"
    when = 'power.external == false'
    verdict = "defer"
    [[rule]]
    id = "b"
    when = 'task.cpu_heavy'
    verdict = "throttle"
    cpu_percent = 50
    """

    @Test("a later file replaces a rule by id in place, disables one, and overrides settings")
    func laterLayersWin() throws {
        let user = """
        [battery]
        low_percent = 30
        [[rule]]
        id = "b"
        when = 'task.cpu_heavy'
        verdict = "throttle"
        cpu_percent = 10
        [[rule]]
        id = "a"
        enabled = false
        """
        let p = Policy.merge([try file(shipped, path: "shipped.toml"), try file(user, path: "user.toml")])
        #expect(p.rules.map(\.id) == ["b"])
        #expect(p.rules[0].cpuPercent == 10)
        #expect(p.rules[0].location.file == "user.toml")
        #expect(p.history["b"] == ["replaces shipped.toml:8"])
        #expect(p.history["a"] == ["disabled at user.toml:9"])
        #expect(p.settings.values["battery.low_percent"] == .number(30))
        #expect(p.files == ["shipped.toml", "user.toml"])
    }
}

@Suite("Reloading")
struct ReloadTests {
    @Test("a reload with a broken file keeps the last good policy in force and reports the error")
    func badReloadKeepsLastGood() throws {
        let store = PolicyStore()
        let good = "[[rule]]\nid = \"a\"\nwhen = 'power.external == false'\nverdict = \"defer\"\n"
        #expect(store.reload([("base.toml", good)]).isEmpty)
        #expect(store.generation == 1)
        let errors = store.reload([("base.toml", good), ("user.toml", "[[rule]]\nid = \"b\"\nwhen = 'battery.pct < 5'\nverdict = \"pause\"\n")])
        #expect(errors.map(\.location.full) == ["user.toml:3:9"])
        #expect(store.generation == 1)
        #expect(store.policy.rules.map(\.id) == ["a"])
        #expect(store.reload([("base.toml", good), ("user.toml", "[[rule]]\nid = \"b\"\nwhen = 'battery.percent < 5'\nverdict = \"pause\"\n")]).isEmpty)
        #expect(store.policy.rules.map(\.id) == ["a", "b"])
        #expect(store.generation == 2)
    }
}
