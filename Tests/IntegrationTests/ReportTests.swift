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
        #expect(abs(bar[0] - (x0 + (bar[2] - t0) / (t1 - t0) * w)) < 0.02, "x of the bar")
        #expect(abs(bar[1] - max(3, (bar[3] - bar[2]) / (t1 - t0) * w)) < 0.02, "width of the bar (3 at least: an event stays visible)")
        #expect(bar[3] - bar[2] >= 1.9 && bar[3] - bar[2] < 10, "the bar lasts as long as `sleep 2` ran: \(bar)")
        // The times come from the audit trail: `why --json` says the same.
        let (_, why, _) = try p.run(["why", "--json", "nap"])
        let entries = (try JSONSerialization.jsonObject(with: Data(why.utf8)) as? [[String: Any]])?.last?["entries"] as? [[String: Any]] ?? []
        let started = entries.first { $0["event"] as? String == "started" }?["time"] as? Double
        #expect(started.map { abs($0 - bar[2]) < 0.01 } == true, "\(String(describing: started)) vs \(bar[2])")
        let page = try String(contentsOfFile: html, encoding: .utf8)
        // Nothing fetched: no script, no link, no source or reference (the SVG namespace is a name, not a fetch).
        #expect(page.hasPrefix("<!DOCTYPE html>") && page.contains("<svg xmlns=\"http://www.w3.org/2000/svg\""), "self-contained")
        for fetch in ["<script", "<link", "src=", "href=", "url(", "@import"] { #expect(!page.contains(fetch), "\(fetch) in the page") }
    }

    @Test("rendered in headless Chromium: the screenshot of a simulated recorded trace is not blank and shows the lanes' colours",
          .enabled(if: ReportTests.chromium != nil, "Chromium is not installed (Debian's chromium package)"))
    func chromiumRendersIt() throws {
        let p = try PolicyEnv()
        let html = p.dir.appendingPathComponent("sim.html").path, png = p.dir.appendingPathComponent("sim.png").path
        let trace = Self.repo.appendingPathComponent("Tests/BgtaskPolicyTests/Traces/charger-heat-charger.jsonl").path
        let (s, _, e) = try p.run(["policy", "simulate", "--trace", trace, "--requires-external-power", "--cpu-heavy", "--id", "backup", "--html", html])
        #expect(s == 0, "\(e)")
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
            let script = "timeout -k 5 50 '\(Self.chromium!)' \(flags.map { "'\($0)'" }.joined(separator: " ")) >'\(log)' 2>&1; s=$?; "
                + "pkill -f -- '--user-data-dir=\(profile)'; exit $s"
            let (cs, _, _) = try Child.run("/bin/sh", ["-c", script], environment: Child.environment(["HOME": home]), deadline: 70)
            if cs == 0 && FileManager.default.fileExists(atPath: png) { break }
            said.append("try \(attempt): status \(cs): " + String(((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").suffix(1500)))
        }
        try #require(FileManager.default.fileExists(atPath: png), "chromium: \(said)")
        let (ps, stats, pe) = try Child.run("/usr/bin/python3", [Self.repo.appendingPathComponent("scripts/png-stats.py").path, png,
                                                                  "#3a9a4a", "#e07b2f", "#5b8fd6", "#f0d9a8"], deadline: 60)
        #expect(ps == 0, "\(pe)")
        let colours = Int(stats.split(separator: " ").dropFirst(3).first.map(String.init)?.split(separator: "\n").first ?? "") ?? 0
        #expect(colours > 20, "a blank page has one colour: \(stats)")
        // Running (green), paused (orange), on the charger (blue), on battery (sand): the trace has them all.
        #expect(!stats.contains("absent"), "\(stats)")
    }
}
