import BgtaskTestSupport
import Foundation
import Testing

/// `bgtask metrics`: Prometheus text from the audit trail (and bgtaskd's queue when it runs), for node_exporter.
@Suite("bgtask metrics: the Prometheus text format, from real runs")
struct MetricsTests {
    /// The text format's rules that a scraper relies on: HELP and TYPE before a family's samples, sample lines
    /// `name{labels} value`, a histogram's buckets cumulative up to +Inf, which equals its count.
    static func check(_ text: String) -> [String] {
        var problems: [String] = []
        var typed: [String: String] = [:]
        var buckets: [String: [(le: Double, count: Double)]] = [:]
        var counts: [String: Double] = [:]
        for line in text.split(separator: "\n", omittingEmptySubsequences: false).dropLast() {
            if line.hasPrefix("# TYPE ") {
                let f = line.split(separator: " ")
                if f.count == 4 { typed[String(f[2])] = String(f[3]) } else { problems.append("bad TYPE: \(line)") }
                continue
            }
            if line.hasPrefix("# HELP ") { continue }
            let parts = line.split(separator: " ")
            guard parts.count == 2, let value = Double(parts[1]) else { problems.append("bad sample: \(line)"); continue }
            let name = String(parts[0].prefix { $0 != "{" })
            let family = [name, String(name.dropLast(7)), String(name.dropLast(4)), String(name.dropLast(6))].first { typed[$0] != nil }
            guard let fam = family else { problems.append("no TYPE before \(name)"); continue }
            if name.hasSuffix("_bucket"), let le = parts[0].split(separator: "\"").dropFirst().first {
                buckets[fam, default: []].append((le == "+Inf" ? .infinity : Double(le) ?? -1, value))
            }
            if name.hasSuffix("_count") && typed[fam] == "histogram" { counts[fam] = value }
        }
        for (fam, bs) in buckets {
            if zip(bs, bs.dropFirst()).contains(where: { $0.le >= $1.le || $0.count > $1.count }) { problems.append("\(fam): buckets not cumulative") }
            if bs.last?.le != .infinity || bs.last?.count != counts[fam] { problems.append("\(fam): +Inf is not the count") }
        }
        return problems
    }

    @Test("three runs (ok, exit 3, expired by its budget) are counted by result and cause, in a well-formed text that promtool accepts where it is installed")
    func fromRuns() throws {
        let p = try PolicyEnv()
        #expect(try p.run(["run", "--ignore-idle", "--id", "fine", "--", "true"]).0 == 0)
        #expect(try p.run(["run", "--ignore-idle", "--id", "broken", "--", "sh", "-c", "exit 3"]).0 == 3)
        #expect(try p.run(["run", "--ignore-idle", "--id", "slow", "--budget", "1s", "--", "sleep", "30"]).0 == 75)
        let (s, text, e) = try p.run(["metrics"])
        #expect(s == 0, "\(e)")
        #expect(Self.check(text).isEmpty, "\(Self.check(text))\n\(text)")
        for line in ["bgtask_daemon_up 0", "bgtask_runs{result=\"ok\"} 1", "bgtask_runs{result=\"failed\"} 1", "bgtask_runs{result=\"expired\"} 1",
                     "bgtask_expiries{cause=\"budget\"} 1", "bgtask_run_duration_seconds_count 3", "bgtask_run_wait_seconds_bucket{le=\"+Inf\"} 3"] {
            #expect(text.contains(line + "\n"), "\(line) in\n\(text)")
        }
        if FileManager.default.isExecutableFile(atPath: "/usr/bin/promtool") {
            let file = p.dir.appendingPathComponent("m.prom")
            try text.write(to: file, atomically: true, encoding: .utf8)
            let (ps, po, pe) = try Child.run("/bin/sh", ["-c", "promtool check metrics < '\(file.path)'"], deadline: 30)
            #expect(ps == 0, "promtool: \(po) \(pe)")
        }
    }

    @Test("promtool check metrics accepts the output (Debian's prometheus package)",
          .enabled(if: installedOrCI("/usr/bin/promtool"), "promtool is not installed (Debian's prometheus package)"))
    func promtool() throws {
        let p = try PolicyEnv()
        #expect(try p.run(["run", "--ignore-idle", "--id", "fine", "--", "true"]).0 == 0)
        let out = p.dir.appendingPathComponent("bgtask.prom")
        #expect(try p.run(["metrics", "--output", out.path]).0 == 0)
        let (s, o, e) = try Child.run("/bin/sh", ["-c", "promtool check metrics < '\(out.path)'"], deadline: 30)
        #expect(s == 0, "\(o) \(e)")
    }

    @Test("--output replaces the file whole, leaves no temporary file, and a directory it cannot write is exit 73 naming it")
    func outputIsAtomic() throws {
        let p = try PolicyEnv()
        let dir = p.dir.appendingPathComponent("collector")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let out = dir.appendingPathComponent("bgtask.prom")
        try "old and long text that must be gone entirely\n".write(to: out, atomically: true, encoding: .utf8)
        #expect(try p.run(["metrics", "--output", out.path]).0 == 0)
        let written = try String(contentsOf: out, encoding: .utf8)
        #expect(written.hasPrefix("# HELP bgtask_daemon_up") && !written.contains("old and long"))
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path) == ["bgtask.prom"])
        let (s, _, e) = try p.run(["metrics", "--output", "/nonexistent-dir/bgtask.prom"])
        #expect(s == 73 && e.contains("/nonexistent-dir/"), "\(e)")
    }
}
