import BgtaskJSON
import BgtaskCore
import BgtaskPolicy
import BgtaskProbes
import BgtaskRun
import BgtaskTestSupport
import Foundation
import Testing

let defaultPolicyPath = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
    .appendingPathComponent("../../Policies/default.toml").standardized.path

func defaultPolicy() throws -> Policy {
    try policy(try String(contentsOfFile: defaultPolicyPath, encoding: .utf8), path: "Policies/default.toml")
}

struct VerdictCase: CustomTestStringConvertible, Sendable {
    var fixture: String
    var proc: String? = nil
    var set: [String: String] = [:]
    var task: String
    var verdict: Verdict
    var rule: String?
    var testDescription: String { "\(fixture) · \(task)" }
}

func task(_ spec: String) -> TaskFields {
    var t = TaskFields(id: "t", kind: .processing)
    for f in spec.split(separator: ",") {
        switch f {
        case "power": t.requiresExternalPower = true
        case "network": t.requiresNetwork = true
        case "unmetered": t.requiresNetwork = true; t.requiresUnmetered = true
        case "heavy": t.cpuHeavy = true
        case "user": t.userInitiated = true
        case "refresh": t.kind = .refresh
        default: break
        }
    }
    return t
}

/// The table in docs/policy.md ("What the default policy does on real machines").
let verdictCases: [VerdictCase] = [
    .init(fixture: "power/03-dell-xps15-discharging", task: "power", verdict: .defer, rule: "processing.needs-power"),
    .init(fixture: "power/03-dell-xps15-discharging", task: "heavy", verdict: .throttle, rule: "heavy.on-battery"),
    .init(fixture: "power/03-dell-xps15-discharging", task: "plain", verdict: .run, rule: nil),
    .init(fixture: "power/03-dell-xps15-discharging", task: "heavy,user", verdict: .run, rule: nil),
    .init(fixture: "power/14-thinkpad-bat0-discharging-low", task: "plain", verdict: .defer, rule: "discretionary.low-battery"),
    .init(fixture: "power/14-thinkpad-bat0-discharging-low", task: "user", verdict: .run, rule: nil),
    .init(fixture: "power/checkbox-ipu7-not-charging-ucsi", task: "power,heavy", verdict: .run, rule: nil),
    .init(fixture: "power/07-nexus5-no-status-usb-charger-offline", task: "power", verdict: .defer, rule: "processing.needs-power"),
    .init(fixture: "power/08-mouse-only-capacity-level", task: "power,heavy", verdict: .run, rule: nil),
    .init(fixture: "power/02-thinkpad-unknown-energy-based", task: "power", verdict: .run, rule: nil),
    .init(fixture: "thermal/rpi4-active-trip-fan", task: "heavy", verdict: .throttle, rule: "heavy.warm"),
    .init(fixture: "thermal/thermald-231-skylake-trips", set: ["class/thermal/thermal_zone5/temp": "90000"],
          task: "heavy", verdict: .pause, rule: "heavy.hot"),
    .init(fixture: "thermal/thermald-231-skylake-trips", set: ["class/thermal/thermal_zone5/temp": "127000"],
          task: "heavy,user", verdict: .expire, rule: "all.critical-heat"),
    .init(fixture: "network/qmi-four-links", proc: "network/qmi-wwan-default.proc", task: "unmetered", verdict: .defer, rule: "network.unmetered"),
    .init(fixture: "network/qmi-four-links", proc: "network/qmi-usb-eth-and-wwan.proc", task: "unmetered", verdict: .run, rule: nil),
    .init(fixture: "network/qmi-four-links", proc: "network/qmi-dormant-wifi-only.proc", task: "network", verdict: .defer, rule: "network.required"),
]

@Suite("The default policy on real recordings")
struct DefaultPolicyTests {
    @Test("the shipped policy checks clean")
    func shippedPolicyLoads() throws {
        let p = try defaultPolicy()
        #expect(p.rules.count >= 9)
    }

    @Test("verdicts are those docs/policy.md lists", arguments: verdictCases)
    func verdictOnRecording(_ c: VerdictCase) throws {
        let tree = try FixtureTree.load("\(c.fixture).umockdev")
        defer { tree.remove() }
        for (path, value) in c.set { try tree.set(path, value + "\n") }
        let snap = tree.snapshot(proc: c.proc)
        let d = Policy.Evaluator(policy: try defaultPolicy(), conditions: conditionValues(snap), time: .midnightMonday)
            .decideNow(task(c.task))
        #expect(d.verdict == c.verdict, "\(d.matches.map(\.ruleID)) — \(snap.summary)")
        #expect(d.matches.first?.ruleID == c.rule)
    }
}

let tracePath = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Traces/charger-heat-charger.jsonl")

/// The trace recorded by scripts/record-trace.py from a umockdev laptop, in real time.
func recordedTrace() throws -> [TraceRecord] {
    try String(contentsOf: tracePath, encoding: .utf8).split(separator: "\n").map { line in
        let json = try JSONValue.parse(String(line))
        guard case .string(let ts)? = json["time"], case .object(let flat)? = json["conditions"] else { throw TestFailure("bad line") }
        let c = ConditionConversion.values(flat)
        // Seconds within the day are enough here: the trace spans minutes.
        let parts = ts.dropFirst(11).prefix(12).split(separator: ":")
        let t = Double(parts[0])! * 3600 + Double(parts[1])! * 60 + Double(parts[2])!
        return TraceRecord(time: t, conditions: c)
    }
}

struct TestFailure: Error { var message: String; init(_ m: String) { message = m } }

@Suite("simulate on a trace recorded from a umockdev laptop")
struct RecordedTraceTests {
    @Test("charger unplugged, heat, charger back with a wobble: the holds are visible")
    func chargerHeatCharger() throws {
        let records = try recordedTrace()
        let external = records.map { $0.conditions["power.external"] }
        let thermal = records.map { $0.conditions["thermal.state"] }
        // The recording itself: on AC, unplugged, fair, serious, cooled, plugged, unplugged, plugged.
        #expect(external.first == .bool(true) && external.last == .bool(true))
        #expect(thermal.contains(.string("serious")))
        let cooled = try #require(records.lastIndex { $0.conditions["thermal.state"] == .string("serious") }).advanced(by: 1)
        let lastPlug = records.count - 1

        var t = TaskFields(id: "build")
        t.requiresExternalPower = true
        t.cpuHeavy = true
        let events = Simulation.run(policy: try defaultPolicy(), task: t, records: records) { _ in .midnightMonday }
        #expect(events.flatMap(\.actions) == [.start, .pause, .resume])
        let pause = try #require(events.first { $0.actions == [.pause] })
        #expect(pause.time == records[1].time)                 // unplugged: waits for external power
        #expect(pause.decision.matches.first?.ruleID == "processing.needs-power")
        // Resumes when both holds have let go: heavy.hot 1 min after cooling, the power rule 30 s after the final replug.
        let resume = try #require(events.first { $0.actions == [.resume] })
        #expect(resume.time == max(records[cooled].time + 60, records[lastPlug].time + 30))
        #expect(resume.holdElapsed)
        // The wobble is visible: a hold set by the first replug, then one restarted by the last.
        let powerHolds = Set(events.flatMap(\.decision.pending).filter { $0.ruleID == "processing.needs-power" }.map(\.at))
        #expect(powerHolds.contains(records[lastPlug - 2].time + 30))
        #expect(powerHolds.contains(records[lastPlug].time + 30))
    }

    @Test("a CPU-heavy task that needs no charger is throttled on battery, then paused by heat")
    func heavyTaskOnBattery() throws {
        var t = TaskFields(id: "index")
        t.cpuHeavy = true
        let events = Simulation.run(policy: try defaultPolicy(), task: t, records: try recordedTrace()) { _ in .midnightMonday }
        #expect(events.flatMap(\.actions) == [.start, .throttle(cpuPercent: 25), .pause, .unthrottle, .resume])
    }
}

@Suite("How often the zones are read")
struct ThermalIntervalTests {
    @Test("the read interval grows with the distance to the nearest boundary: 2 s within 5 °C, 30 s from 20 °C")
    func intervalByDistance() throws {
        let tree = try FixtureTree(umockdev: """
        P: /devices/virtual/thermal/thermal_zone0
        E: SUBSYSTEM=thermal
        A: type=x86_pkg_temp\\n
        A: temp=54000\\n
        A: trip_point_0_type=critical\\n
        A: trip_point_0_temp=95000\\n
        A: trip_point_1_type=passive\\n
        A: trip_point_1_temp=85000\\n
        """)
        defer { tree.remove() }
        func interval(_ milli: String, previous: ThermalState? = nil) throws -> Int32? {
            try tree.set("class/thermal/thermal_zone0/temp", milli + "\n")
            let s = Prober(options: tree.options()).snapshot(previousZoneStates: previous.map { ["thermal_zone0": $0] } ?? [:])
            return ThermalAnalysis.readInterval(s.zones, states: s.zoneStates)
        }
        #expect(try interval("54000") == 30_000)     // 21 °C below fair (75 °C)
        #expect(try interval("65000") == 11_333)     // 10 °C below
        #expect(try interval("72000") == 2000)       // within 5 °C
        #expect(try interval("77000", previous: .fair) == 2000)   // 5 °C above fair's exit (75 − 3 hysteresis)
        #expect(ThermalAnalysis.readInterval([], states: [:]) == nil)
    }
}

@Suite("Processing work waits while storage is low")
struct StorageRuleTests {
    @Test("storage.low defers processing work (not refresh, regular or user-initiated work); unknown storage holds nothing")
    func lowStorageDefers() throws {
        let p = try defaultPolicy()
        func verdict(_ t: TaskFields, _ low: PolicyValue) -> Decision {
            var h: HoldState = [:]
            return Policy.Evaluator(policy: p, conditions: ["power.external": .bool(true), "storage.low": low, "storage.path": .string("/home/a"),
                                                            "storage.free_bytes": .number(5_000_000)], time: .midnightMonday)
                .decide(t, now: 0, hold: &h)
        }
        let d = verdict(TaskFields(id: "p", kind: .processing), .bool(true))
        #expect(d.verdict == .defer && d.matches.first?.ruleID == "processing.storage-low")
        #expect(d.reason == "storage low on /home/a (4.77 MiB free, under 1024 MiB)", "\(d.reason)")
        // A {…_bytes} name is filled in binary units, to three figures.
        let counts: [Double] = [1, 512, 1536, 851_443_712, 5_120_000_000, 3_298_534_883_328]
        let said = counts.map(Policy.bytesText)
        #expect(said == ["1 byte", "512 bytes", "1.5 KiB", "812 MiB", "4.77 GiB", "3 TiB"])
        var user = TaskFields(id: "u", kind: .processing)
        user.userInitiated = true
        for t in [TaskFields(id: "r", kind: .refresh), TaskFields(id: "g", kind: .regular), user] {
            #expect(verdict(t, .bool(true)).verdict == .run, "\(t.kind)")
        }
        #expect(verdict(TaskFields(id: "p", kind: .processing), .null).verdict == .run)
    }
}

@Suite("What a reload changed")
struct PolicyChangesTests {
    @Test("rules added, removed and changed by id, and settings changed, old → new; nothing when nothing differs")
    func changesByID() throws {
        let base = try file(try String(contentsOfFile: defaultPolicyPath, encoding: .utf8), path: "default.toml")
        let old = Policy.merge([base])
        #expect(Policy.merge([base]).changes(from: old).isEmpty)
        let layer = try file("""
            [idle]
            after = "2m"
            [[rule]]
            id = "mine.nightly"
            when = 'time.hour < 6'
            verdict = "defer"
            [[rule]]
            id = "heavy.warm"
            when = 'task.cpu_heavy && thermal.state == "fair"'
            verdict = "pause"
            [[rule]]
            id = "discretionary.power-saver"
            enabled = false
            """, path: "50-mine.toml")
        let new = Policy.merge([base, layer])
        let said = new.changes(from: old)
        #expect(said.contains("rules added: mine.nightly"), "\(said)")
        #expect(said.contains("rules removed: discretionary.power-saver"), "\(said)")
        #expect(said.contains("rules changed: heavy.warm (50-mine.toml:8)"), "\(said)")
        #expect(said.contains("idle.after: 5m → 2m"), "\(said)")
    }
}

@Suite("overriding a rule by id: the merge")
struct OverrideMergeTests {
    static let base = "[[rule]]\nid = \"processing.needs-power\"\nwhen = 'task.requires_external_power && power.external != true'\nverdict = \"defer\"\nhold_off = \"30s\"\n"

    @Test("an override that sets no hold keeps the replaced rule's holds and says so; one that sets a hold sets both")
    func holdsKeptUnlessSet() throws {
        let reworded = "[[rule]]\nid = \"processing.needs-power\"\nwhen = 'task.requires_external_power && power.external != true'\nverdict = \"defer\"\nreason = \"plug me in\"\n"
        let kept = Policy.merge([try file(Self.base, path: "default.toml"), try file(reworded, path: "50-mine.toml")])
        let rule = try #require(kept.rules.first { $0.id == "processing.needs-power" })
        #expect(rule.reason == "plug me in")
        #expect(rule.holdOff == 30 && rule.holdOn == 0)
        #expect(kept.history["processing.needs-power"]?.contains { $0.contains("keeps its holds") && $0.contains("hold_off 30s") } == true)

        let cleared = Policy.merge([try file(Self.base, path: "default.toml"), try file(reworded + "hold = \"0s\"\n", path: "50-mine.toml")])
        #expect(cleared.rules.first { $0.id == "processing.needs-power" }?.holdOff == 0)
        let onOnly = Policy.merge([try file(Self.base, path: "default.toml"), try file(reworded + "hold_on = \"5s\"\n", path: "50-mine.toml")])
        let r = try #require(onOnly.rules.first { $0.id == "processing.needs-power" })
        #expect(r.holdOn == 5 && r.holdOff == 0)
    }
}
