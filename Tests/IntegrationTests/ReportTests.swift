import BgtaskTestSupport
import Foundation
import Testing

/// `bgtask report` and `policy simulate --html`: one self-contained page, the lanes where the data says.
@Suite("bgtask report: a picture of the day")
struct ReportTests {
    static let repo = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../..").standardized
    static let chromium = ["/usr/bin/chromium", "/usr/bin/chromium-browser"].first { FileManager.default.isExecutableFile(atPath: $0) }

    /// The SVG's geometry, read as a browser would: the axis (t0, t1, x0, plot width) and each bar of a lane.
    static func bars(_ svgPath: String, lane: String) throws -> (axis: [Double], bars: [[Double]]) {
        let (s, out, e) = try Child.run("/usr/bin/python3", ["-c", """
            import sys, xml.etree.ElementTree as ET
            root = ET.parse(sys.argv[1]).getroot()
            print(root.get('data-t0'), root.get('data-t1'), root.get('data-x0'), root.get('data-plot-width'))
            for r in root.iter('{http://www.w3.org/2000/svg}rect'):
                if r.get('data-lane') == sys.argv[2] and r.get('data-state') == 'running':
                    print(r.get('x'), r.get('width'), r.get('data-start'), r.get('data-end'))
            """, svgPath, lane], deadline: 30)
        try #require(s == 0, "\(e)")
        let lines = out.split(separator: "\n").map { $0.split(separator: " ").compactMap { Double($0) } }
        return (lines.first ?? [], Array(lines.dropFirst()))
    }

    @Test("a run's bar is drawn where and as long as the audit trail says it ran; the page has no script and no network")
    func barsWhereTheDataSays() throws {
        let p = try PolicyEnv()
        #expect(try p.run(["run", "--ignore-idle", "--id", "nap", "--", "sleep", "2"]).0 == 0)
        let svg = p.dir.appendingPathComponent("day.svg").path, html = p.dir.appendingPathComponent("day.html").path
        let (s, _, e) = try p.run(["report", "--since", "1h", "--svg", svg, "--html", html])
        #expect(s == 0, "\(e)")
        let (axis, bars) = try Self.bars(svg, lane: "nap")
        try #require(axis.count == 4 && bars.count == 1, "\(axis) \(bars)")
        let (t0, t1, x0, w) = (axis[0], axis[1], axis[2], axis[3])
        let bar = bars[0]
        // (A bar that would reach past the plot's right edge at its minimum width ends at the edge.)
        #expect(abs(bar[0] - min(x0 + (bar[2] - t0) / (t1 - t0) * w, x0 + w - bar[1])) < 0.02, "x of the bar")
        #expect(abs(bar[1] - max(3, (bar[3] - bar[2]) / (t1 - t0) * w)) < 0.02, "width of the bar (3 at least: an event stays visible)")
        #expect(bar[3] - bar[2] >= 1.9 && bar[3] - bar[2] < 10, "the bar lasts as long as `sleep 2` ran: \(bar)")
        // The times come from the audit trail: `why --json` says the same.
        let (_, why, _) = try p.run(["why", "--json", "nap"])
        let entries = (try JSONSerialization.jsonObject(with: Data(why.utf8)) as? [[String: Any]])?.last?["entries"] as? [[String: Any]] ?? []
        let started = entries.first { $0["event"] as? String == "started" }?["time"] as? Double
        #expect(started.map { abs($0 - bar[2]) < 0.01 } == true, "\(String(describing: started)) vs \(bar[2])")
        // No bgtaskd ran: the charger was read only by the run, at its start — a mark, and "not read" around it.
        let charger = try Self.drawn(svg).bars.filter { $0.lane == "charger" }
        #expect(charger.filter { $0.end > $0.start }.allSatisfy { $0.state == "not read" } && !charger.isEmpty, "\(charger)")
        #expect(charger.contains { $0.state == "on the charger" && $0.start == $0.end && abs($0.start - bar[2]) < 0.05 }, "\(charger)")
        let page = try String(contentsOfFile: html, encoding: .utf8)
        // Nothing fetched: no script, no link, no source or reference (the SVG namespace is a name, not a fetch).
        #expect(page.hasPrefix("<!DOCTYPE html>") && page.contains("<svg xmlns=\"http://www.w3.org/2000/svg\""), "self-contained")
        for fetch in ["<script", "<link", "src=", "href=", "url(", "@import"] { #expect(!page.contains(fetch), "\(fetch) in the page") }
    }

    /// Every bar of the SVG (lane, state, start, end, fill) and every legend entry (state, fill), as a browser reads them.
    static func drawn(_ svgPath: String) throws -> (bars: [(lane: String, state: String, start: Double, end: Double, fill: String)],
                                                    legend: [(state: String, fill: String)], notReadWords: Int) {
        let (s, out, e) = try Child.run("/usr/bin/python3", ["-c", """
            import sys, xml.etree.ElementTree as ET
            ns = '{http://www.w3.org/2000/svg}'
            root = ET.parse(sys.argv[1]).getroot()
            for r in root.iter(ns + 'rect'):
                if r.get('data-lane') is not None:
                    print('bar', r.get('data-lane'), r.get('data-state'), r.get('data-start'), r.get('data-end'), r.get('fill'), sep='\t')
                if r.get('data-legend') is not None:
                    print('legend', r.get('data-legend'), r.get('fill'), sep='\t')
            print('words', sum(1 for t in root.iter(ns + 'text') if t.text == 'not read'), sep='\t')
            """, svgPath], deadline: 30)
        try #require(s == 0, "\(e)")
        var bars: [(lane: String, state: String, start: Double, end: Double, fill: String)] = []
        var legend: [(state: String, fill: String)] = []
        var words = 0
        for line in out.split(separator: "\n") {
            let f = line.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
            if f[0] == "bar", f.count == 6 { bars.append((f[1], f[2], Double(f[3]) ?? .nan, Double(f[4]) ?? .nan, f[5])) }
            if f[0] == "legend", f.count == 3 { legend.append((f[1], f[2])) }
            if f[0] == "words" { words = Int(f[1]) ?? 0 }
        }
        return (bars, legend, words)
    }

    @Test("a stretch nobody read is drawn 'not read' (bgtaskd stopped), never the last value stretched; a run's reading then is a mark; seen in the SVG and by Chromium",
          .enabled(if: ReportTests.chromium != nil || installedOrCI(), "Chromium is not installed (Debian's chromium package)"))
    func notReadIsSaid() throws {
        let p = try PolicyEnv()
        let d = try SessionDaemon(policy: p, preload: false)
        // bgtaskd reads the recorded laptop while it runs a task; its stop says from when nothing is read.
        let up = Date().timeIntervalSince1970
        #expect(try d.bgtask(["submit", "--id", "nap", "--", "sleep", "1"]).0 == 0)
        #expect(d.said("nap: finished") != nil, "\(d.daemon?.stderr ?? "")")
        d.daemon?.process.terminate()
        #expect(d.daemon?.waitExit(within: 15) != nil, "bgtaskd did not stop: \(d.daemon?.stderr ?? "")")
        let stopped = Date().timeIntervalSince1970
        // A foreground run after it: what it read at its start is in the audit trail.
        #expect(try p.run(["run", "--ignore-idle", "--id", "later", "--", "true"]).0 == 0)
        let svg = p.dir.appendingPathComponent("day.svg").path, html = p.dir.appendingPathComponent("day.html").path
        let (s, _, e) = try p.run(["report", "--since", "2m", "--svg", svg, "--html", html])
        #expect(s == 0, "\(e)")
        let (bars, legend, words) = try Self.drawn(svg)
        let charger = bars.filter { $0.lane == "charger" }
        try #require(!charger.isEmpty, "no charger lane: \(bars)")
        // The recorded laptop is on its charger while bgtaskd read it; from its stop to now nothing read the charger.
        let read = charger.filter { $0.state == "on the charger" && $0.end > $0.start }
        #expect(read.count == 1 && read.allSatisfy { $0.start >= up - 30 && $0.end <= stopped + 0.5 }, "\(charger)")
        let after = charger.filter { $0.state == "not read" && $0.end > $0.start && $0.start >= stopped - 15 }
        #expect(after.count == 1 && after.first.map { $0.end > stopped && $0.start <= stopped } == true, "not read from the stop on: \(charger)")
        // The run after the stop read the charger: a mark of that moment, not a stretch.
        // (bgtaskd writes its first readings just after the start it makes: that start's reading may be a mark too.)
        let marks = charger.filter { $0.end == $0.start && $0.start > stopped - 0.5 }
        #expect(marks.count == 1 && marks.first?.state == "on the charger", "\(charger)")
        #expect(words >= 1, "the stretch says 'not read' in words")
        // No verdict depended on heat (nap is not CPU-heavy): bgtaskd read no zone, and said so while it ran.
        let heat = bars.filter { $0.lane == "heat" }
        #expect(heat.contains { $0.state == "not read" && $0.start >= up - 30 && $0.start < stopped }, "\(heat)")
        #expect(!heat.contains { $0.state != "not read" && $0.end > stopped }, "no heat value after the stop: \(heat)")
        // The legend names every state drawn, each in its own colour, the colour its bars have.
        let states = Set(bars.map(\.state))
        #expect(Set(legend.map(\.state)) == states, "legend \(legend) vs drawn \(states)")
        #expect(Set(legend.map(\.fill)).count == legend.count, "two states share a colour: \(legend)")
        for b in bars { #expect(legend.first { $0.state == b.state }?.fill == b.fill, "\(b)") }
        // Seen as a person sees it: the not-read grey and the charger's blue are on the screen.
        let png = p.dir.appendingPathComponent("day.png").path
        try Self.screenshot(html, png: png, in: p)
        let notRead = try #require(legend.first { $0.state == "not read" }?.fill)
        let (colours, stats) = try Self.pngStats(png, notRead, "#5b8fd6")
        #expect(colours > 20 && !stats.contains("absent"), "\(stats)")
    }

    @Test("the text report's sums are the audit trail's: runs that ended, CPU seconds, energy, expiries per task; --json the same")
    func costsAreTheTrails() throws {
        let p = try PolicyEnv()
        for (id, args) in [("a", ["sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done"]), ("a", ["true"]), ("b", ["sleep", "10"])] {
            _ = try p.run(["run", "--ignore-idle", "--id", id] + (id == "b" ? ["--budget", "1s"] : []) + ["--"] + args)
        }
        let (s, out, e) = try p.run(["report", "--json"])
        #expect(s == 0, "\(e)")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(out.utf8)) as? [String: Any], "\(out)")
        let tasks = try #require(report["tasks"] as? [[String: Any]], "\(out)")
        // The same sums, straight from the trail's file.
        let trail = p.dir.appendingPathComponent("state/audit.sqlite").path
        let (qs, rows, qe) = try Child.run("/usr/bin/python3", ["-c", """
            import sqlite3, sys
            db = sqlite3.connect('file:' + sys.argv[1] + '?mode=ro', uri=True)
            for t, runs, cpu, wh, exp in db.execute(\"\"\"SELECT task_id, SUM(event = 'finished'), TOTAL(CASE WHEN event = 'finished' THEN cpu_seconds END),
                    SUM(CASE WHEN event = 'finished' THEN energy_wh END), SUM(event = 'expired') FROM decision GROUP BY task_id ORDER BY task_id\"\"\"):
                print(t, runs, repr(cpu), 'null' if wh is None else repr(wh), exp)
            """, trail], deadline: 30)
        try #require(qs == 0, "\(qe)")
        let expected = rows.split(separator: "\n").map { $0.split(separator: " ").map(String.init) }
        #expect(expected.map { $0[0] } == ["a", "b"], "\(rows)")
        #expect(tasks.map { $0["task"] as? String ?? "" }.sorted() == ["a", "b"], "\(tasks)")
        for row in expected {
            let t = try #require(tasks.first { $0["task"] as? String == row[0] })
            #expect(t["runs"] as? Int == Int(row[1]), "\(t) vs \(row)")
            #expect(abs((t["cpu_seconds"] as? Double ?? -1) - Double(row[2])!) < 1e-9, "\(t) vs \(row)")
            #expect(row[3] == "null" ? t["energy_wh"] is NSNull : abs((t["energy_wh"] as? Double ?? -1) - Double(row[3])!) < 1e-9, "\(t) vs \(row)")
            #expect(t["expiries"] as? Int == Int(row[4]), "\(t) vs \(row)")
        }
        let a = tasks.first { $0["task"] as? String == "a" } ?? [:], b = tasks.first { $0["task"] as? String == "b" } ?? [:]
        #expect(a["runs"] as? Int == 2, "\(a)")
        #expect(b["expiries"] as? Int == 1, "its budget expired it: \(b)")
        #expect((a["cpu_seconds"] as? Double ?? 0) > 0, "a shell loop used some CPU: \(a)")
        // The text form says the same numbers, a row a task (and a total).
        let (ts, text, te) = try p.run(["report"])
        #expect(ts == 0, "\(te)")
        let lines = text.split(separator: "\n").map { $0.split(separator: " ").map(String.init) }
        #expect(lines.contains(["TASK", "RUNS", "CPU", "S", "ENERGY", "WH", "EXPIRIES"]), "\(text)")
        for row in expected {
            let line = try #require(lines.first { $0.first == row[0] }, "\(text)")
            #expect(line[1] == row[1] && line[4] == row[4], "\(line) vs \(row)")
            #expect(abs(Double(line[2])! - Double(row[2])!) <= 0.05 + 1e-9, "\(line) vs \(row)")
        }
        #expect(lines.contains { $0.first == "total" && $0[1] == "3" && $0[4] == "1" }, "\(text)")
        // The picture without --since is fitted to the entries (seconds old here: five minutes, not a day).
        let fitted = p.dir.appendingPathComponent("fitted.svg").path
        #expect(try p.run(["report", "--svg", fitted]).0 == 0)
        let axis = try Self.bars(fitted, lane: "a").axis
        #expect(axis.count == 4 && axis[1] - axis[0] >= 299 && axis[1] - axis[0] < 400, "\(axis)")
        // `why` says the same of the last run: the story's end and the list's line carry its CPU and energy.
        let (_, story, _) = try p.run(["why", "a"])
        #expect(story.contains("Finished ") && story.contains(" s of CPU."), "\(story)")
        let (_, list, _) = try p.run(["why"])
        #expect(list.split(separator: "\n").contains { $0.hasPrefix("a: finished ") && $0.contains("; energy unknown, ") && $0.hasSuffix(" s of CPU") },
                "\(list)")
    }

    @Test("pending --long and --json say what a repeating task's last run cost (CPU seconds, energy), from the audit trail")
    func pendingSaysTheLastCost() throws {
        let p = try PolicyEnv()
        let d = try SessionDaemon(policy: p, preload: false)
        #expect(try d.bgtask(["submit", "--id", "hourly", "--every", "1h", "--", "true"]).0 == 0)
        #expect(d.said("hourly: finished") != nil, "\(d.daemon?.stderr ?? "")")
        // Its next period waits: the queue lists it with its last run (its end is in the trail before bgtaskd says it).
        let list = try d.pending()
        let e = try #require(list.first { $0["id"] as? String == "hourly" }, "not pending: \(list)")
        #expect(e["last_cpu_seconds"] is Double && e["last_energy_wh"] != nil, "\(e)")
        let (_, long, _) = try d.bgtask(["pending", "--long"])
        #expect(long.split(separator: "\n").contains { $0.hasPrefix("  last run: finished ") && $0.contains("exit 0; ") && $0.hasSuffix(" s of CPU") },
                "\(long)")
    }

    @Test("rendered in headless Chromium: the screenshot of a simulated recorded trace is not blank and shows the lanes' colours",
          .enabled(if: ReportTests.chromium != nil || installedOrCI(), "Chromium is not installed (Debian's chromium package)"))
    func chromiumRendersIt() throws {
        let p = try PolicyEnv()
        let html = p.dir.appendingPathComponent("sim.html").path, png = p.dir.appendingPathComponent("sim.png").path
        let trace = Self.repo.appendingPathComponent("Tests/BgtaskPolicyTests/Traces/charger-heat-charger.jsonl").path
        let (s, _, e) = try p.run(["policy", "simulate", "--trace", trace, "--requires-external-power", "--cpu-heavy", "--id", "backup", "--html", html])
        #expect(s == 0, "\(e)")
        try Self.screenshot(html, png: png, in: p)
        let (colours, stats) = try Self.pngStats(png, "#3a9a4a", "#e07b2f", "#5b8fd6", "#f0d9a8")
        #expect(colours > 20, "a blank page has one colour: \(stats)")
        // Running (green), paused (orange), on the charger (blue), on battery (sand): the trace has them all.
        #expect(!stats.contains("absent"), "\(stats)")
    }

    /// `html` rendered by headless Chromium into `png`.
    static func screenshot(_ html: String, png: String, in p: PolicyEnv) throws {
        let chromium = try #require(Self.chromium, "Chromium is not installed (Debian's chromium package; scripts/install-deps.sh --test)")
        let home = p.dir.appendingPathComponent("chromium-home").path
        // Chromium's helpers (zygote, crash handler) outlive it: its output goes to a file, not to this test's pipe
        // (which they would hold open to the deadline), and whatever is left of it is ended by its profile's name.
        // A start that stalls on a loaded machine is tried again, up to three times.
        var said: [String] = []
        for attempt in 1...3 {
            let profile = "\(home)-\(attempt)", log = "\(home)-\(attempt).log"
            let flags = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run", "--disable-extensions",
                         "--disable-background-networking", "--disable-component-update", "--disable-breakpad", "--hide-scrollbars",
                         "--window-size=1280,420", "--user-data-dir=\(profile)", "--screenshot=\(png)", "file://\(html)"]
            let script = "timeout -k 5 50 '\(chromium)' \(flags.map { "'\($0)'" }.joined(separator: " ")) >'\(log)' 2>&1; s=$?; "
                + "pkill -f -- '--user-data-dir=\(profile)'; exit $s"
            let (cs, _, _) = try Child.run("/bin/sh", ["-c", script], environment: Child.environment(["HOME": home]), deadline: 70)
            if cs == 0 && FileManager.default.fileExists(atPath: png) { break }
            said.append("try \(attempt): status \(cs): " + String(((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").suffix(1500)))
        }
        try #require(FileManager.default.fileExists(atPath: png), "chromium: \(said)")
    }

    /// scripts/png-stats.py on a screenshot: how many colours it has, and its lines (`#rrggbb present|absent`).
    static func pngStats(_ png: String, _ colours: String...) throws -> (Int, String) {
        let (ps, stats, pe) = try Child.run("/usr/bin/python3", [Self.repo.appendingPathComponent("scripts/png-stats.py").path, png] + colours, deadline: 60)
        #expect(ps == 0, "\(pe)")
        return (Int(stats.split(separator: " ").dropFirst(3).first.map(String.init)?.split(separator: "\n").first ?? "") ?? 0, stats)
    }
}
