import BgtaskCore
import BgtaskPolicy
import Foundation
import Testing

// TaskMachine, the core of one task's life, in virtual time: mostly under the shipped policy, as every run is.

let defaultPolicyPath = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
    .appendingPathComponent("../../Policies/default.toml").standardized.path

/// The shipped policy (`Policies/default.toml`), as the machine decides under it.
func defaultPolicy() throws -> Policy {
    try policy(String(contentsOfFile: defaultPolicyPath, encoding: .utf8), path: "Policies/default.toml")
}

/// A policy of one file's text.
func policy(_ text: String, path: String = "test.toml") throws -> Policy { Policy.merge([try file(text, path: path)]) }
func file(_ text: String, path: String) throws -> PolicyFile { try PolicyFile.parse(text, path: path).get() }

@Suite("The scheduler core")
struct TaskMachineTests {
    @Test("waiting → started → throttled → paused → resumed → expired, in virtual time")
    func lifecycle() throws {
        let p = try defaultPolicy()
        var t = TaskFields(id: "build", kind: .processing)
        t.requiresExternalPower = true
        t.cpuHeavy = true
        var m = TaskMachine(task: t, enqueuedAt: 0)
        func at(_ now: Double, _ c: [String: PolicyValue]) -> [TaskAction] {
            m.step(Policy.Evaluator(policy: p, conditions: c, time: .midnightMonday), now: now).1
        }
        let battery: [String: PolicyValue] = ["power.external": .bool(false), "thermal.state": .string("nominal")]
        let ac: [String: PolicyValue] = ["power.external": .bool(true), "thermal.state": .string("nominal")]
        #expect(at(0, battery) == [])
        #expect(m.phase == .waiting)
        #expect(at(60, ac) == [])                       // hold_off 30 s on the power rule
        #expect(at(90, ac) == [.start])
        #expect(m.task.waited == 90)
        #expect(at(100, ac.merging(["thermal.state": .string("fair")]) { $1 }) == [])   // heavy.warm holds 30 s
        #expect(at(130, ac.merging(["thermal.state": .string("fair")]) { $1 }) == [.throttle(cpuPercent: 25)])
        #expect(at(140, ac.merging(["thermal.state": .string("serious")]) { $1 }) == [.pause])
        #expect(m.phase == .paused(cpuCap: 25))
        #expect(at(150, ac) == [])                      // heavy.hot lets go after 1 min
        #expect(at(200, ac) == [])
        #expect(at(210, ac) == [.unthrottle, .resume])
        #expect(at(220, ac.merging(["thermal.state": .string("critical")]) { $1 }) == [.expire(grace: 5, why: .verdict)])
        #expect(m.isExpiring)
        #expect(m.nextWake == 225)
        #expect(at(225, ac) == [.kill])
        m.exited(status: 137)
        #expect(m.isDone && m.exitStatus == 75)
        #expect(at(230, ac) == [])
    }

    @Test("the core alone, in virtual time: wait → hold → start → throttle → budget expiry → grace → kill, each at its instant")
    func budgetAndGraceInVirtualTime() throws {
        let p = try defaultPolicy()
        var t = TaskFields(id: "build")
        t.requiresExternalPower = true
        t.cpuHeavy = true
        var m = TaskMachine(task: t, enqueuedAt: 0, limits: TaskLimits(budget: 600, expireGrace: 10))
        func at(_ now: Double, _ c: [String: PolicyValue]) -> [TaskAction] {
            m.step(Policy.Evaluator(policy: p, conditions: c, time: .midnightMonday), now: now).1
        }
        let battery: [String: PolicyValue] = ["power.external": .bool(false), "thermal.state": .string("nominal")]
        let ac: [String: PolicyValue] = ["power.external": .bool(true), "thermal.state": .string("nominal")]
        let warm = ac.merging(["thermal.state": .string("fair")]) { $1 }
        #expect(at(0, battery) == [])
        #expect(m.nextWake == nil)                      // nothing to wait for but an event
        #expect(at(100, ac) == [])
        #expect(m.nextWake == 130)                      // the hold_off asks to be woken, nothing polls
        #expect(at(130, ac) == [.start])
        #expect(m.nextWake == 730)                      // the budget
        #expect(at(140, warm) == [])
        #expect(at(170, warm) == [.throttle(cpuPercent: 25)])
        #expect(at(730, warm) == [.expire(grace: 10, why: .budget(600))])
        // Expiring: a pause verdict cannot freeze it now.
        #expect(at(731, warm.merging(["thermal.state": .string("serious")]) { $1 }) == [])
        #expect(m.nextWake == 740)
        #expect(at(740, warm) == [.kill])
        #expect(m.nextWake == nil)
        m.exited(status: 137)
        #expect(m.exitStatus == 75)
    }

    @Test("a running-time limit counts seconds of running: a pause does not use up the budget, nor does task.running grow")
    func runningTimeLimitIsRunningNotElapsed() throws {
        // The issue's case: 10 s of budget, frozen after 2 s of running, kept frozen for a minute.
        let p = try policy("""
        [[rule]]
        id = "pause-off-power"
        when = 'power.external != true'
        verdict = "pause"
        """)
        var m = TaskMachine(task: TaskFields(id: "sync"), enqueuedAt: 0, limits: TaskLimits(budget: 10, expireGrace: 5))
        func at(_ now: Double, _ c: [String: PolicyValue]) -> [TaskAction] {
            m.step(Policy.Evaluator(policy: p, conditions: c, time: .midnightMonday), now: now).1
        }
        let ac: [String: PolicyValue] = ["power.external": .bool(true)]
        let battery: [String: PolicyValue] = ["power.external": .bool(false)]
        #expect(at(0, ac) == [.start])
        #expect(m.nextWake == 10)
        #expect(at(2, battery) == [.pause])
        #expect(m.runningTime(now: 2) == 2)
        #expect(m.nextWake == nil, "a paused run has no budget deadline")
        #expect(at(11, battery) == [], "expired while frozen after 2 s of running out of 10")
        #expect(at(62, battery) == [])
        #expect(m.task.running == 2)
        #expect(at(62, ac) == [.resume])
        #expect(m.nextWake == 70, "8 s of budget left after the pause")
        #expect(at(69, ac) == [])
        #expect(m.runningTime(now: 69) == 9)
        #expect(at(70, ac) == [.expire(grace: 5, why: .budget(10))])
    }

    @Test("a debug launch runs whatever the conditions say: later defer, pause and expire verdicts leave it running; its budget still ends it")
    func debugLaunchIsNotEndedByConditions() throws {
        let p = try defaultPolicy()
        var t = TaskFields(id: "sync", kind: .refresh)
        t.requiresExternalPower = true
        var limits = TaskLimits(budget: 30, expireGrace: 5)
        limits.pauseExpires = true   // an app's task: a defer verdict would expire it
        var m = TaskMachine(task: t, enqueuedAt: 0, limits: limits)
        func at(_ now: Double, _ c: [String: PolicyValue]) -> [TaskAction] {
            m.step(Policy.Evaluator(policy: p, conditions: c, time: .midnightMonday), now: now).1
        }
        let battery: [String: PolicyValue] = ["power.external": .bool(false), "thermal.state": .string("nominal"), "battery.percent": .number(60)]
        #expect(at(0, battery) == [])
        #expect(m.launchNow(now: 1) == [.start])
        // The next unrelated reading (a battery tick) must not end it at a random moment.
        #expect(at(2, battery.merging(["battery.percent": .number(59)]) { $1 }) == [])
        #expect(at(3, battery.merging(["thermal.state": .string("critical")]) { $1 }) == [])
        #expect(m.phase == .running(cpuCap: nil))
        #expect(at(31, battery) == [.expire(grace: 5, why: .budget(30))])
    }

    @Test("give-up in virtual time: --max-wait at its instant, --no-wait at the first decision, a signal while waiting")
    func givingUpInVirtualTime() throws {
        let p = try defaultPolicy()
        var t = TaskFields(id: "b")
        t.requiresExternalPower = true
        let battery: [String: PolicyValue] = ["power.external": .bool(false)]
        var m = TaskMachine(task: t, enqueuedAt: 0, limits: TaskLimits(maxWait: 3600))
        #expect(m.step(Policy.Evaluator(policy: p, conditions: battery, time: .midnightMonday), now: 0).1 == [])
        #expect(m.nextWake == 3600)
        #expect(m.step(Policy.Evaluator(policy: p, conditions: battery, time: .midnightMonday), now: 3600).1 == [.giveUp(reason: .maxWait(3600))])
        #expect(m.exitStatus == 75)
        var n = TaskMachine(task: t, enqueuedAt: 0, limits: TaskLimits(noWait: true))
        #expect(n.step(Policy.Evaluator(policy: p, conditions: battery, time: .midnightMonday), now: 0).1 == [.giveUp(reason: .noWait)])
        var s = TaskMachine(task: t, enqueuedAt: 0)
        _ = s.step(Policy.Evaluator(policy: p, conditions: battery, time: .midnightMonday), now: 0)
        #expect(s.signal(2, terminating: true) == [.giveUp(reason: .signal(2))])
        #expect(s.exitStatus == 130)
    }

    @Test("the CPU monitor decides from samples: above the threshold on battery marks the task heavy; on AC it never does")
    func cpuMonitorInVirtualTime() throws {
        let p = try defaultPolicy()
        var m = TaskMachine(task: TaskFields(id: "hog"), enqueuedAt: 0, limits: TaskLimits(cpuMonitorPercent: 50))
        let battery: [String: PolicyValue] = ["power.external": .bool(false), "battery.percent": .number(80)]
        #expect(m.step(Policy.Evaluator(policy: p, conditions: battery, time: .midnightMonday), now: 0).1 == [.start])
        #expect(m.cpuSampleDue == 1)
        #expect(m.cpuSample(cpuSeconds: 0.0, onBattery: false, now: 1).isEmpty)   // on AC: not watched
        #expect(m.cpuSample(cpuSeconds: 0.0, onBattery: true, now: 2).isEmpty)    // first sample: a baseline
        #expect(m.cpuSample(cpuSeconds: 0.3, onBattery: true, now: 3).isEmpty)    // 30 %
        let marked = m.cpuSample(cpuSeconds: 1.2, onBattery: true, now: 4)          // 90 %
        guard case .markedCPUHeavy(let pct)? = marked.first, marked.count == 1 else { Issue.record("not marked: \(marked)"); return }
        #expect(abs(pct - 90) < 0.001)
        #expect(m.task.cpuHeavy)
        #expect(m.cpuSampleDue == nil)
        let (_, actions) = m.step(Policy.Evaluator(policy: p, conditions: battery, time: .midnightMonday), now: 4)
        #expect(actions == [.throttle(cpuPercent: 25)])                          // heavy.on-battery now applies
    }

    @Test("simulate shows hysteresis: a wobbling charger does not restart the work")
    func simulationShowsHold() throws {
        let p = try defaultPolicy()
        var t = TaskFields(id: "backup")
        t.requiresExternalPower = true
        let on: [String: PolicyValue] = ["power.external": .bool(true)]
        let off: [String: PolicyValue] = ["power.external": .bool(false)]
        let records = [TraceRecord(time: 1000, conditions: off), TraceRecord(time: 1100, conditions: on),
                       TraceRecord(time: 1110, conditions: off), TraceRecord(time: 1120, conditions: on)]
        let events = Simulation.run(policy: p, task: t, records: records) { _ in .midnightMonday }
        let starts = events.filter { $0.actions.contains(.start) }
        #expect(starts.count == 1)
        // Started 30 s after the charger came back for good, after the last line of the trace.
        #expect(starts.first?.time == 1150)
        #expect(starts.first?.holdElapsed == true)
        #expect(events.contains { $0.decision.pending.contains { $0.ruleID == "processing.needs-power" && $0.at == 1130 } })
    }
}

@Suite("Reading temperatures only when they matter")
struct ThermalReadTests {
    @Test("a task waiting for the charger does not depend on temperature; running work does (critical heat stops anything)")
    func dependenceOnThermal() throws {
        let p = try defaultPolicy()
        var waiting = TaskFields(id: "backup")
        waiting.requiresExternalPower = true
        waiting.cpuHeavy = true
        let battery: [String: PolicyValue] = ["power.external": .bool(false), "thermal.state": .string("nominal")]
        var m = TaskMachine(task: waiting, enqueuedAt: 0)
        _ = m.step(Policy.Evaluator(policy: p, conditions: battery, time: .midnightMonday), now: 0)
        #expect(m.phase == .waiting)
        #expect(!m.dependsOnThermal(p, conditions: battery, time: .midnightMonday))
        let ac: [String: PolicyValue] = ["power.external": .bool(true), "thermal.state": .string("nominal")]
        var r = TaskMachine(task: TaskFields(id: "plain"), enqueuedAt: 0)
        _ = r.step(Policy.Evaluator(policy: p, conditions: ac, time: .midnightMonday), now: 0)
        #expect(r.dependsOnThermal(p, conditions: ac, time: .midnightMonday))
        // A policy with no thermal rule never needs a zone read.
        let none = try policy("[[rule]]\nid = \"x\"\nwhen = 'power.external == false'\nverdict = \"pause\"\n")
        #expect(!r.dependsOnThermal(none, conditions: ac, time: .midnightMonday))
    }
}

@Suite("Rules on the clock and the task's age wake the core at their instant, not every second")
struct TimeRuleTests {
    @Test("task.running > 5m pauses at 5 min; task.waited >= 2h starts at 2 h; nothing in between asks to be woken")
    func ageRulesWakeAtTheirInstant() throws {
        let p = try policy("""
        [[rule]]
        id = "long"
        when = 'task.running > 5m'
        verdict = "pause"
        [[rule]]
        id = "patience"
        when = 'task.waited < 2h && task.id == "late"'
        verdict = "defer"
        """)
        #expect(!p.time.opaque)
        func ev() -> Policy.Evaluator { Policy.Evaluator(policy: p, conditions: [:], time: .midnightMonday) }
        var late = TaskMachine(task: TaskFields(id: "late"), enqueuedAt: 100)
        #expect(late.step(ev(), now: 100).1 == [])
        #expect(abs((late.nextWake ?? 0) - (100 + 7200.001)) < 1e-6)
        #expect(late.step(ev(), now: late.nextWake!).1 == [.start])
        #expect(abs((late.nextWake ?? 0) - (late.startedAt! + 300.001)) < 1e-6)
        #expect(late.step(ev(), now: late.nextWake!).1 == [.pause])
    }

    @Test("time.of_day and time.hour wake at the next boundary; a use that cannot be foreseen falls back to looking each second")
    func clockRules() throws {
        let p = try policy("[[rule]]\nid = \"night\"\nwhen = 'time.of_day < 7h || time.hour >= 22'\nverdict = \"defer\"\n")
        var m = TaskMachine(task: TaskFields(id: "t"), enqueuedAt: 0)
        let nine = TimeFields(hour: 21, secondsSinceMidnight: 21 * 3600 + 30 * 60, weekday: "mon")
        _ = m.step(Policy.Evaluator(policy: p, conditions: [:], time: nine), now: 1000)
        // 21:30: the hour turns at 22:00, 30 min away; 07:00 is further.
        #expect(abs((m.nextWake ?? 0) - (1000 + 1800.001)) < 1e-6)
        let opaque = try policy("[[rule]]\nid = \"x\"\nwhen = 'task.running_s > battery.percent'\nverdict = \"pause\"\n")
        #expect(opaque.time.opaque)
    }
}

@Suite("Processing work runs while the person is away")
struct IdleRuleTests {
    let away: [String: PolicyValue] = ["power.external": .bool(true), "user.idle": .bool(true), "user.idle_s": .number(400),
                                       "user.reason": .string("away 6 min (logind)")]
    let present: [String: PolicyValue] = ["power.external": .bool(true), "user.idle": .bool(false), "user.idle_s": .number(0),
                                          "user.reason": .string("active now (logind)")]

    @Test("a processing task waits while the person is active, starts when away, expires within 5 s when they return, and a new run waits again")
    func processingFollowsPresence() throws {
        let p = try defaultPolicy()
        var m = TaskMachine(task: TaskFields(id: "clean", kind: .processing), enqueuedAt: 0)
        func at(_ now: Double, _ c: [String: PolicyValue]) -> (Decision, [TaskAction]) {
            m.step(Policy.Evaluator(policy: p, conditions: c, time: .midnightMonday), now: now)
        }
        let (d, a) = at(0, present)
        #expect(a == [] && m.phase == .waiting)
        #expect(d.matches.first?.ruleID == "processing.user-away")
        #expect(d.reason == "user active now (logind): processing work runs while you are away (a command: --ignore-idle)")
        #expect(at(10, away).1 == [.start])
        #expect(at(20, present).1 == [.expire(grace: 5, why: .verdict)])
        #expect(m.expiredByRule == "processing.user-away")
        #expect(m.nextWake == 25)
        var again = TaskMachine(task: TaskFields(id: "clean", kind: .processing), enqueuedAt: 30)
        #expect(again.step(Policy.Evaluator(policy: p, conditions: present, time: .midnightMonday), now: 30).1 == [])
    }

    @Test("refresh, continued, regular and user-initiated work is not gated on presence; unknown presence gates nothing")
    func othersAreNotGated() throws {
        let p = try defaultPolicy()
        var user = TaskFields(id: "u", kind: .processing)
        user.userInitiated = true
        for t in [TaskFields(id: "r", kind: .refresh), TaskFields(id: "c", kind: .continued), TaskFields(id: "g", kind: .regular), user] {
            var h: HoldState = [:]
            #expect(Policy.Evaluator(policy: p, conditions: present, time: .midnightMonday).decide(t, now: 0, hold: &h).verdict == .run, "\(t.kind)")
        }
        var h: HoldState = [:]
        let unknown: [String: PolicyValue] = ["power.external": .bool(true), "user.idle": .null]
        #expect(Policy.Evaluator(policy: p, conditions: unknown, time: .midnightMonday)
            .decide(TaskFields(id: "p", kind: .processing), now: 0, hold: &h).verdict == .run)
    }

    @Test("a layer can switch the rule off or move the threshold ([idle] after)")
    func layersTuneIt() throws {
        let base = try String(contentsOfFile: defaultPolicyPath, encoding: .utf8)
        let off = Policy.merge([try file(base, path: "default.toml"),
                                try file("[[rule]]\nid = \"processing.user-away\"\nenabled = false\n", path: "off.toml")])
        var h: HoldState = [:]
        #expect(Policy.Evaluator(policy: off, conditions: present, time: .midnightMonday)
            .decide(TaskFields(id: "p", kind: .processing), now: 0, hold: &h).verdict == .run)
        let tuned = Policy.merge([try file(base, path: "default.toml"), try file("[idle]\nafter = \"30s\"\n", path: "tuned.toml")])
        #expect(tuned.settings.number("idle.after") == 30)
    }
}
