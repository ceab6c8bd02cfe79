import BgtaskConfig
import BgtaskCore
import BgtaskPolicy
import Foundation
import Testing

let repoPolicies = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../Policies").standardized

func errors(_ text: String) -> [PolicyError] {
    if case .failure(let e) = PolicyFile.parse(text, path: "x.toml") { return e.errors }
    return []
}

@Suite("The policy a binary carries, and the task's own requirements")
struct BuiltInPolicyTests {
    @Test("the built-in default policy is Policies/default.toml, byte for byte (run scripts/embed-default-policy.sh after editing it)")
    func builtInMatchesTheShippedFile() throws {
        let shipped = try String(contentsOf: repoPolicies.appendingPathComponent("default.toml"), encoding: .utf8)
        #expect(BuiltinPolicy.text + "\n" == shipped)
    }

    @Test("with no layer directories at all, the built-in default is in force and its rules say where they come from")
    func builtInIsTheLowestLayer() throws {
        let (policy, errs) = PolicyLayers.load([.builtIn])
        #expect(errs.isEmpty)
        let rule = try #require(policy.rules.first { $0.id == "processing.needs-power" })
        let lines = BuiltinPolicy.text.split(separator: "\n", omittingEmptySubsequences: false)
        let header = try #require(lines.firstIndex { $0.contains("id = \"processing.needs-power\"") })   // 0-based
        #expect(rule.location.description == "built-in:default.toml:\(header + 1)")
    }

    static let onBattery: [String: PolicyValue] = ["power.external": .bool(false), "power.reason": .string("BAT0 is discharging")]

    @Test("--requires-external-power holds with every rule removed: the decision defers, from the built-in requirement")
    func requirementHoldsWithoutRules() throws {
        var task = TaskFields(id: "backup")
        task.requiresExternalPower = true
        let e = Policy.Evaluator(policy: .empty, conditions: Self.onBattery, time: .midnightMonday)
        let d = e.decideNow(task)
        #expect(d.verdict == .defer)
        #expect(d.matches.first?.ruleID == "task.requires_external_power")
        #expect(d.matches.first?.location.description == "built-in")
        #expect(d.reason == "waiting for external power (BAT0 is discharging)")
        #expect(e.verdict(task) == .defer)   // the queue's fast path agrees
        var hold: HoldState = [:]
        #expect(e.decide(task, now: 0, hold: &hold).verdict == .defer)
        // Unknown is not external power either.
        #expect(Policy.Evaluator(policy: .empty, conditions: [:], time: .midnightMonday).decideNow(task).verdict == .defer)
        // On the charger it may run.
        let on = Policy.Evaluator(policy: .empty, conditions: ["power.external": .bool(true)], time: .midnightMonday)
        #expect(on.decideNow(task).verdict == .run)
    }

    @Test("network and unmetered requirements hold with the rules that state them disabled")
    func networkRequirementsHoldWhenRulesAreDisabled() throws {
        let base = try file(BuiltinPolicy.text, path: "default.toml")
        let off = try file("""
        [[rule]]
        id = "network.required"
        enabled = false
        [[rule]]
        id = "network.unmetered"
        enabled = false
        """, path: "off.toml")
        let p = Policy.merge([base, off])
        var task = TaskFields(id: "sync")
        task.requiresNetwork = true
        task.requiresUnmetered = true
        let offline = Policy.Evaluator(policy: p, conditions: ["network.online": .bool(false), "power.external": .bool(true)], time: .midnightMonday)
        #expect(offline.decideNow(task).verdict == .defer)
        #expect(offline.decideNow(task).matches.first?.ruleID == "task.requires_network")
        let metered = Policy.Evaluator(policy: p, conditions: ["network.online": .bool(true), "network.metered": .bool(true),
                                                               "network.interface": .string("wwan0"), "power.external": .bool(true)],
                                       time: .midnightMonday)
        #expect(metered.decideNow(task).reason == "waiting for an unmetered network (wwan0 is metered)")
        #expect(metered.verdict(task) == .defer)
    }

    @Test("a rule in effect that states the requirement speaks for it: no second, built-in reason")
    func ruleCoversItsRequirement() throws {
        let p = try policy(BuiltinPolicy.text)
        var task = TaskFields(id: "backup")
        task.requiresExternalPower = true
        let d = Policy.Evaluator(policy: p, conditions: Self.onBattery, time: .midnightMonday).decideNow(task)
        #expect(d.matches.map(\.ruleID) == ["processing.needs-power"])
    }
}

@Suite("Holds explain themselves")
struct HoldMessageTests {
    @Test("after the charger returns, the held rule says its cause cleared and when it lets go, never the stale reason")
    func heldRuleSaysItIsHeld() throws {
        let p = try policy(BuiltinPolicy.text)
        var task = TaskFields(id: "backup")
        task.requiresExternalPower = true
        var hold: HoldState = [:]
        let off = Policy.Evaluator(policy: p, conditions: ["power.external": .bool(false), "power.reason": .string("BAT0 is discharging")],
                                   time: .midnightMonday)
        #expect(off.decide(task, now: 100, hold: &hold).reason.hasPrefix("waiting for external power (BAT0 is discharging"))
        let on = Policy.Evaluator(policy: p, conditions: ["power.external": .bool(true), "power.reason": .string("AC (Mains) is online")],
                                  time: .midnightMonday)
        on.timeLabel = { t, _ in "T+\(Int(t))" }
        let d = on.decide(task, now: 110, hold: &hold)
        #expect(d.verdict == .defer)
        let m = try #require(d.matches.first)
        #expect(m.heldUntil == 140)
        #expect(m.reason.contains("its condition cleared (now power.external = true)"), "\(m.reason)")
        #expect(m.reason.contains("held until T+140 unless it changes again (hold_off 30s)"), "\(m.reason)")
        #expect(!m.reason.contains("AC (Mains) is online"))
        #expect(d.verdict == .defer && on.decide(task, now: 140, hold: &hold).verdict == .run)
    }

    @Test("policy simulate's events carry the held reason, with the trace's own clock")
    func simulationShowsHolds() throws {
        let p = try policy(BuiltinPolicy.text)
        var task = TaskFields(id: "backup")
        task.requiresExternalPower = true
        let records = [TraceRecord(time: 1000, conditions: ["power.external": .bool(false)]),
                       TraceRecord(time: 1010, conditions: ["power.external": .bool(true)])]
        let events = Simulation.run(policy: p, task: task, records: records, time: { _ in .midnightMonday },
                                    label: { "at-\(Int($0))" })
        #expect(events.contains { $0.decision.reason.contains("held until at-1040") })
        #expect(events.last?.actions == [.start])
    }
}

@Suite("Hostile policies: bounded, and every one a clear error with file:line:col")
struct HostilePolicyTests {
    @Test("thousands of && terms: an error, not a stack overflow; the message shows a window of the line, not all of it")
    func longConjunctionIsBounded() {
        let when = Array(repeating: "power.external", count: 5000).joined(separator: " && ")
        let e = errors("[[rule]]\nid = \"x\"\nwhen = '\(when)'\nverdict = \"defer\"\n")
        #expect(e.first?.message.contains("expression too long: 89996 characters, at most 8192") == true)
        #expect(e.first?.location.line == 3)
        #expect((e.first?.description.count ?? 0) < 600)
        // Short enough, but too many operators.
        let many = Array(repeating: "true", count: 300).joined(separator: " && ")
        let e2 = errors("[[rule]]\nid = \"x\"\nwhen = '\(many)'\nverdict = \"defer\"\n")
        #expect(e2.first?.message.contains("too complex: more than 256 operators") == true)
    }

    @Test("20,000 nested ! and 10,000 parentheses: an error, not a stack overflow")
    func deepNestingIsBounded() {
        let nots = String(repeating: "!", count: 20_000) + "power.external"
        let e1 = errors("[[rule]]\nid = \"x\"\nwhen = '\(nots)'\nverdict = \"defer\"\n")
        #expect(e1.first?.message.contains("too long") == true)
        let fewer = String(repeating: "!", count: 100) + "power.external"
        let e3 = errors("[[rule]]\nid = \"x\"\nwhen = '\(fewer)'\nverdict = \"defer\"\n")
        #expect(e3.first?.message.contains("nested too deeply (more than 64 levels)") == true, "\(e3)")
        let parens = String(repeating: "(", count: 10_000) + "true" + String(repeating: ")", count: 10_000)
        let e2 = errors("[[rule]]\nid = \"x\"\nwhen = '\(parens)'\nverdict = \"defer\"\n")
        #expect(e2.first.map { $0.message.contains("nested too deeply") || $0.message.contains("too long") } == true)
    }

    @Test("durations have an upper bound: a grace or hold of 99999999999999999d is an error, so nothing traps later",
          arguments: ["[run]\nexpire_grace = \"99999999999999999d\"\n",
                      "[run]\nrefresh_budget = \"400d\"\n",
                      "[[rule]]\nid = \"x\"\nwhen = 'true'\nverdict = \"expire\"\ngrace = \"99999999999999999d\"\n",
                      "[[rule]]\nid = \"x\"\nwhen = 'true'\nverdict = \"defer\"\nhold = \"99999999999999999d\"\n",
                      "[[rule]]\nid = \"x\"\nwhen = 'task.waited > 99999999999999999d'\nverdict = \"defer\"\n"])
    func durationsAreBounded(_ text: String) {
        let e = errors(text)
        #expect(!e.isEmpty)
        #expect(e.first.map { $0.location.line >= 2 } == true, "\(e)")
        #expect(parseDuration("99999999999999999d") == nil)
        #expect(formatDuration(1e300).hasSuffix("s"))   // formatting never traps either
    }

    @Test("a NUL byte is an error at its line and column, not the silent end of the file")
    func nulByteIsRejected() {
        let text = "[[rule]]\nid = \"a\"\nwhen = 'true'\nverdict = \"defer\"\n\u{0}\n[[rule]]\nid = \"a\"\nenabled = false\n"
        let e = errors(text)
        #expect(e.count == 1)
        #expect(e.first?.location.full == "x.toml:5:1")
        #expect(e.first?.message.contains("NUL") == true)
    }

    @Test("invalid UTF-8 and control characters are errors at their line and column", arguments: [
        ([0x5B, 0x72, 0x75, 0x6E, 0x5D, 0x0A, 0x23, 0x20, 0xC3, 0x28, 0x0A] as [UInt8], "x.toml:2:3", "invalid UTF-8"),
        (Array("[run]\n# bell \u{7}\n".utf8), "x.toml:2:8", "control character"),
        ([0x23, 0xED, 0xA0, 0x80, 0x0A] as [UInt8], "x.toml:1:2", "invalid UTF-8"),   // a UTF-16 surrogate
    ])
    func badBytesAreRejected(_ bytes: [UInt8], _ at: String, _ what: String) {
        guard case .failure(let e) = PolicyFile.text(bytes, path: "x.toml") else { Issue.record("accepted"); return }
        #expect(e.errors.first?.location.full == at)
        #expect(e.errors.first?.message.contains(what) == true)
    }

    @Test("once expiry has begun, no verdict pauses the task: the SIGKILL must find it able to die")
    func expiryIsFinal() throws {
        let p = try policy("[[rule]]\nid = \"hot\"\nwhen = 'thermal.state == \"serious\"'\nverdict = \"pause\"\n")
        var m = TaskMachine(task: TaskFields(id: "t"), enqueuedAt: 0)
        let cool = Policy.Evaluator(policy: p, conditions: ["thermal.state": .string("nominal")], time: .midnightMonday)
        #expect(m.step(cool, now: 0).1 == [.start])
        #expect(m.expire(now: 1, grace: 3) == [.expire(grace: 3, why: .verdict)])
        let hot = Policy.Evaluator(policy: p, conditions: ["thermal.state": .string("serious")], time: .midnightMonday)
        let (d, actions) = m.step(hot, now: 2)
        #expect(d.verdict == .pause)
        #expect(actions.isEmpty)
        #expect(m.phase == .expiring(killAt: 4, killed: false))
    }
}

@Suite("Tasks alike share one decision")
struct SharedDecisionTests {
    /// Where an array's elements live: equal for two arrays that share one storage.
    func storage<T>(_ a: [T]) -> UnsafeRawPointer? { a.withUnsafeBufferPointer { UnsafeRawPointer($0.baseAddress) } }

    @Test("two waiting tasks alike get one decision's storage from one evaluator; a task unlike them gets its own, and each its own verdict")
    func alikeShareUnlikeDoNot() throws {
        let p = try policy(BuiltinPolicy.text)
        let e = Policy.Evaluator(policy: p, conditions: ["power.external": .bool(false), "power.reason": .string("BAT0 is discharging")],
                                 time: .midnightMonday)
        var a = TaskFields(id: "a"), b = TaskFields(id: "b"), c = TaskFields(id: "c")
        a.requiresExternalPower = true
        b.requiresExternalPower = true
        var ha: HoldState = [:], hb: HoldState = [:], hc: HoldState = [:]
        let da = e.decide(a, now: 1, hold: &ha), db = e.decide(b, now: 1, hold: &hb), dc = e.decide(c, now: 1, hold: &hc)
        #expect(da.verdict == .defer && db.verdict == .defer)
        #expect(dc.verdict != .defer)
        #expect(da == db && storage(da.matches) != nil && storage(da.matches) == storage(db.matches))
        #expect(storage(dc.matches) != storage(da.matches))
        #expect(e.shared("waiting for \(1 + 1)") == "waiting for 2")
        let first = e.shared(da.reason + "")
        #expect(e.shared(String(db.reason.reversed().reversed())) == first)
    }
}
