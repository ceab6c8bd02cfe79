import BgtaskCore
@testable import BgtaskAudit
import BgtaskPolicy
import BgtaskRun
import Foundation
import Testing

@Suite("The audit trail")
struct AuditTests {
    func tempDB() -> String {
        FileManager.default.temporaryDirectory.appendingPathComponent("audit-\(UUID().uuidString).sqlite").path
    }

    func decision(_ verdict: Verdict, rule: String, reason: String, readings: [Reading]) -> Decision {
        Decision(verdict: verdict, cpuPercent: verdict == .throttle ? 25 : nil, grace: nil,
                 matches: [Match(ruleID: rule, verdict: verdict, reason: reason,
                                 location: SourceLocation(file: "Policies/default.toml", line: 22, column: 6),
                                 readings: readings, cpuPercent: nil, grace: nil)],
                 pending: [])
    }

    @Test("a run's decisions are stored with rules and readings, and told as a story")
    func storyOfARun() throws {
        let log = try AuditLog(path: tempDB())
        log.runID = "backup-1"
        let task = TaskFields(id: "backup")
        let off: [String: PolicyValue] = ["power.external": .bool(false)]
        let on: [String: PolicyValue] = ["power.external": .bool(true)]
        log.record(RunEvent(kind: .deferred, monotonic: 0, detail: "waiting",
                            decision: decision(.defer, rule: "processing.needs-power", reason: "waiting for external power",
                                               readings: [Reading(name: "power.external", value: .bool(false))]),
                            conditions: off, exitStatus: nil), task: task)
        log.record(RunEvent(kind: .started, monotonic: 1, detail: "pid 1", decision: nil, conditions: on, exitStatus: nil), task: task)
        log.record(RunEvent(kind: .throttled, monotonic: 2, detail: "25%",
                            decision: decision(.throttle, rule: "heavy.warm", reason: "thermal fair (78 °C, x86_pkg_temp)", readings: []),
                            conditions: on, exitStatus: nil), task: task)
        log.record(RunEvent(kind: .finished, monotonic: 3, detail: "exit 0", decision: nil, conditions: on, exitStatus: 0), task: task)

        let entries = try log.entries(task: "backup")
        #expect(entries.map(\.event) == ["deferred", "started", "throttled", "finished"])
        #expect(entries[0].rules.contains("\"origin\":\"Policies/default.toml:22\""))
        #expect(entries[0].rules.contains("\"readings\":{\"power.external\":false}"))
        let story = Story.tell(entries)
        #expect(story.hasPrefix("backup waited "))
        #expect(story.contains("waiting for external power — rule processing.needs-power (Policies/default.toml:22)."))
        #expect(story.contains("Started ") && story.contains(" when power.external became true."))
        #expect(story.contains("Throttled to 25% at ") && story.contains("rule heavy.warm ("))
        #expect(story.hasSuffix("exit 0."))
        #expect(Story.summary(entries.last!).hasPrefix("backup: finished "))
    }

    @Test("a story of many flaps is one line per change: each reason of the wait on its own line, each throttle and lift too")
    func flapsAreLines() throws {
        let log = try AuditLog(path: tempDB())
        log.runID = "sync-1"
        let task = TaskFields(id: "sync")
        let on: [String: PolicyValue] = ["power.external": .bool(true)]
        for (i, r) in ["waiting for external power", "waiting for the network", "thermal serious (91 °C)"].enumerated() {
            log.record(RunEvent(kind: .deferred, monotonic: Double(i), detail: "waiting",
                                decision: decision(.defer, rule: "rule\(i)", reason: r, readings: []), conditions: on, exitStatus: nil), task: task)
        }
        log.record(RunEvent(kind: .started, monotonic: 10, detail: "pid 1", decision: nil, conditions: on, exitStatus: nil), task: task)
        for i in 0..<20 {
            log.record(RunEvent(kind: .throttled, monotonic: 11 + Double(2 * i), detail: "25%",
                                decision: decision(.throttle, rule: "heavy.warm", reason: "thermal fair", readings: []), conditions: on, exitStatus: nil), task: task)
            log.record(RunEvent(kind: .unthrottled, monotonic: 12 + Double(2 * i), detail: "", decision: nil, conditions: on, exitStatus: nil), task: task)
        }
        log.record(RunEvent(kind: .finished, monotonic: 60, detail: "exit 0", decision: nil, conditions: on, exitStatus: 0), task: task)
        let lines = Story.tell(try log.entries(task: "sync")).split(separator: "\n")
        #expect(lines.first?.hasPrefix("sync waited ") == true && lines.first?.hasSuffix(":") == true, "\(lines)")
        #expect(lines[1].hasPrefix("  waiting for external power") && lines[2].hasPrefix("  then waiting for the network"))
        #expect(lines.filter { $0.hasPrefix("Throttled to 25%") }.count == 20 && lines.filter { $0.hasPrefix("Cap lifted") }.count == 20)
        #expect(lines.allSatisfy { $0.count < 200 }, "no line is a paragraph")
        #expect(lines.last?.hasPrefix("Finished ") == true)
    }

    @Test("a debug launch is told as one, not as a start the conditions made")
    func storyOfADebugLaunch() throws {
        let log = try AuditLog(path: tempDB())
        log.runID = "sync-1"
        let task = TaskFields(id: "sync")
        let off: [String: PolicyValue] = ["power.external": .bool(false)]
        log.record(RunEvent(kind: .deferred, monotonic: 0, detail: "waiting",
                            decision: decision(.defer, rule: "processing.needs-power", reason: "waiting for external power",
                                               readings: [Reading(name: "power.external", value: .bool(false))]),
                            conditions: off, exitStatus: nil), task: task)
        log.record(RunEvent(kind: .started, monotonic: 1, detail: "pid 7, waited 1s; launched by bgtask debug launch, whatever the conditions",
                            decision: nil, conditions: off, exitStatus: nil), task: task)
        let story = Story.tell(try log.entries(task: "sync"))
        #expect(story.contains("launched by bgtask debug launch whatever the conditions."), "\(story)")
    }

    @Test("retention drops old entries; a reader opened read-only sees what a writer wrote")
    func retentionAndReaders() throws {
        let path = tempDB()
        let log = try AuditLog(path: path)
        let now = 2_000_000_000.0
        for (i, age) in [40.0, 20.0, 1.0].enumerated() {
            try log.append(AuditEntry(id: nil, time: now - age * 86_400, runID: "r\(i)", taskID: "t", event: "finished",
                                      verdict: nil, detail: "exit 0", rules: "[]", conditions: nil, exitStatus: 0))
        }
        try log.prune(now: now)
        let reader = try AuditLog(path: path, readOnly: true)
        #expect(try reader.entries(task: "t").map(\.runID) == ["r1", "r2"])
        #expect(try reader.latestRun(task: "t") == "r2")
    }
}

@Suite("The audit trail: carrying a story on")
struct LastDeferralTests {
    @Test("lastDeferrals gives a run's wait only where its task's latest entry is a deferral of that run, found through the task table, not every deferral")
    func lastDeferralsOfRuns() throws {
        let log = try AuditLog(path: FileManager.default.temporaryDirectory.appendingPathComponent("audit-\(UUID().uuidString).sqlite").path)
        func record(_ kind: RunEvent.Kind, _ task: String, run: String, _ detail: String) {
            var e = RunEvent(kind: kind, monotonic: 0, detail: detail, decision: nil, conditions: [:], exitStatus: nil)
            e.runID = run
            log.record(e, task: TaskFields(id: task))
        }
        record(.deferred, "a", run: "a-1", "waiting for power")
        record(.deferred, "a", run: "a-1", "waiting for the network")
        record(.deferred, "b", run: "b-1", "waiting for power")
        record(.started, "b", run: "b-1", "pid 7")
        record(.deferred, "c", run: "c-1", "waiting for power")
        record(.deferred, "d", run: "d-1", "waiting for power")
        let told = try log.lastDeferrals(of: [("a", "a-1"), ("b", "b-1"), ("c", "c-2"), ("d", "d-1"), ("e", "e-1")])
        #expect(told == ["a-1": "waiting for the network", "d-1": "waiting for power"])
        #expect(try log.lastDeferrals(of: []).isEmpty)

        let ids = (0..<100).map { "task-\($0)" }
        let plan = try log.queryPlan(AuditLog.lastDeferralsSQL(ids.count), arguments: ids)
        #expect(plan.contains("SEARCH t USING PRIMARY KEY") && plan.contains("SEARCH d USING INTEGER PRIMARY KEY") && !plan.contains("decision_ends"),
                "\(plan)")
    }
}

extension LastDeferralTests {
    @Test("every field of an entry is stored as given and read back equal, each also its task's latest")
    func entriesRoundTrip() throws {
        let log = try AuditLog(path: FileManager.default.temporaryDirectory.appendingPathComponent("audit-\(UUID().uuidString).sqlite").path)
        let full = AuditEntry(id: nil, time: 1_764_000_000.5, runID: "r-1", taskID: "t", event: "finished", verdict: "run", detail: "exit 3",
                              rules: "[{\"id\":\"x\"}]", conditions: "{\"power.external\":true}", exitStatus: 3, energyWh: 0.25, energy: "0.25 Wh (BAT0)")
        let bare = AuditEntry(id: nil, time: 1_764_000_001, runID: "r-2", taskID: "u", event: "deferred", verdict: nil, detail: "waiting",
                              rules: "[]", conditions: nil, exitStatus: nil)
        try log.append(contentsOf: [full, bare])
        let back = try log.entries()
        #expect(back.count == 2 && back[0].id != nil && back[1].id! > back[0].id!)
        var expected = [full, bare]
        for i in expected.indices { expected[i].id = back[i].id }
        #expect(back == expected)
        #expect(try log.latestPerTask(since: 0).map(\.taskID) == ["u", "t"])
    }
}
