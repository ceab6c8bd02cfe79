import ArgumentParser
import BgtaskConfig
import BgtaskRun
import BgtaskCore
import BgtaskPolicy
import BgtaskProbes

extension Bgtask.PolicyCommand {
    struct Simulate: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Replay a condition trace (`bgtask watch --record`) and print when the task would have waited, started, been throttled, paused, resumed or stopped.",
            discussion: "Holds are honoured in trace time; after the last line, conditions are taken to stay as they were until pending holds elapse.")

        @Option(name: .long, help: ArgumentHelp("A JSON-lines trace from `bgtask watch --record`.", valueName: "file"))
        var trace: String

        @Option(name: .long, help: ArgumentHelp("The task's fields, comma-separated.", valueName: "spec"))
        var task: String

        @Flag(name: .long, help: "Print JSON: one object per event.")
        var json = false

        @OptionGroup var layers: PolicyFilesOption

        func run() throws {
            let t = try TaskSpec.parse(task)
            let policy = try layers.load().policy
            let records = try TraceFile.read(trace)
            let events = Simulation.run(policy: policy, task: t, records: records, time: ConditionValues.localTime, label: clockText)
            for e in events {
                print(json ? e.json.rendered : Terminal.safe(e.text, keepNewlines: true))
            }
        }
    }
}

enum TraceFile {
    static func read(_ path: String) throws -> [TraceRecord] {
        let text: String
        switch PolicyLayers.readText(path) {
        case .success(let s): text = s
        case .failure(let e): throw ValidationError("--trace \(path): \(e)")
        }
        var out: [TraceRecord] = []
        for (i, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let l = String(line).trimmingCharacters(in: " ")
            if l.isEmpty { continue }
            let json: JSONValue
            do { json = try JSONValue.parse(l) } catch { throw ValidationError("\(path):\(i + 1): not JSON: \(error)") }
            guard case .string(let ts)? = json["time"], let time = Timestamp.parse(ts) else {
                throw ValidationError("\(path):\(i + 1): no \"time\" in RFC 3339 form")
            }
            guard case .object(let flat)? = json["conditions"] else {
                throw ValidationError("\(path):\(i + 1): no \"conditions\" object (record traces with `bgtask watch --record FILE`)")
            }
            if let last = out.last, time < last.time {
                throw ValidationError("\(path):\(i + 1): time goes backwards (\(ts))")
            }
            out.append(TraceRecord(time: time, conditions: ConditionValues.from(flat)))
        }
        guard !out.isEmpty else { throw ValidationError("--trace \(path): no records") }
        return out
    }
}

enum Timestamp {
    /// RFC 3339 (`2026-11-22T02:15:52.598Z`, or with a `+01:00` offset) to seconds since the epoch.
    static func parse(_ s: String) -> Double? {
        let c = Array(s.utf8)
        func num(_ a: Int, _ n: Int) -> Int? {
            guard a + n <= c.count else { return nil }
            var v = 0
            for b in c[a..<a + n] { guard b >= 48 && b <= 57 else { return nil }; v = v * 10 + Int(b - 48) }
            return v
        }
        guard c.count >= 20, let y = num(0, 4), let mo = num(5, 2), let d = num(8, 2), let h = num(11, 2),
              let mi = num(14, 2), let se = num(17, 2), (1...12).contains(mo), (1...31).contains(d), h < 24, mi < 60, se < 61 else { return nil }
        var i = 19
        var frac = 0.0
        if i < c.count, c[i] == UInt8(ascii: ".") {
            i += 1
            var scale = 0.1
            while i < c.count, c[i] >= 48, c[i] <= 57 { frac += Double(c[i] - 48) * scale; scale /= 10; i += 1 }
        }
        var offset = 0
        if i < c.count, c[i] == UInt8(ascii: "Z") || c[i] == UInt8(ascii: "z") { i += 1 }
        else if i < c.count, c[i] == UInt8(ascii: "+") || c[i] == UInt8(ascii: "-") {
            guard let oh = num(i + 1, 2), let om = num(i + 4, 2) else { return nil }
            offset = (oh * 3600 + om * 60) * (c[i] == UInt8(ascii: "+") ? 1 : -1)
            i += 6
        } else { return nil }
        guard i == c.count else { return nil }
        // Days from the civil date (Howard Hinnant's algorithm).
        let yy = mo <= 2 ? y - 1 : y
        let era = (yy >= 0 ? yy : yy - 399) / 400
        let yoe = yy - era * 400
        let doy = (153 * (mo + (mo > 2 ? -3 : 9)) + 2) / 5 + d - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        let days = era * 146_097 + doe - 719_468
        return Double(days * 86_400 + h * 3600 + mi * 60 + se - offset) + frac
    }

    static func clock(_ t: Double) -> String {
        let s = Int(t.rounded(.down)) % 86_400
        func p(_ v: Int) -> String { v < 10 ? "0\(v)" : String(v) }
        return "\(p(s / 3600)):\(p(s / 60 % 60)):\(p(s % 60))"
    }
}

extension SimulationEvent {
    var text: String {
        var what: String
        if !actions.isEmpty {
            what = actions.map(Simulation.describe).joined(separator: ", ")
        } else if holdElapsed {
            what = "hold elapsed"
        } else {
            what = "stays \(phase.name)"
        }
        let by = decision.matches.first.map { " — \($0.ruleID) (\($0.location)): \($0.reason)" } ?? " — no rule applies"
        var line = "\(Timestamp.clock(time))  +\(formatDuration(offset).padding(7)) \(what.padding(22)) \(decision.verdict.rawValue)\(by)"
        for p in decision.pending {
            line += "\n          hold: \(p.ruleID) \(p.becomesActive ? "takes effect" : "lets go") at \(Timestamp.clock(p.at)) if conditions stay"
        }
        return line
    }

    var json: JSONValue {
        .object([
            ("time", .number(time)), ("offset_s", .number(offset)), ("phase", .string(phase.name)),
            ("verdict", .string(decision.verdict.rawValue)), ("cpu_percent", JSONValue(decision.cpuPercent)),
            ("actions", .array(actions.map { .string(Simulation.describe($0)) })),
            ("rules", .array(decision.matches.map { .string("\($0.ruleID) (\($0.location))") })),
            ("reason", .string(decision.reason)),
            ("pending", .array(decision.pending.map { .object([("rule", .string($0.ruleID)), ("becomes_active", .bool($0.becomesActive)), ("at", .number($0.at))]) })),
        ])
    }
}
