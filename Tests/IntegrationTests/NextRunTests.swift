import BgtaskTestSupport
import Foundation
import Testing

/// `bgtask pending`'s NEXT is the earliest time a task could run (`next_run` in --json), as `systemctl list-timers`
/// shows NEXT: for `--at`, `--on-calendar` (against systemd-analyze calendar), `--every`, `--between` and a retry's
/// backoff; never the next re-check (`next_check`), never `-` while something of known end holds it back.
/// bgtaskd and bgtask run in one zone of the test's choosing, so the test knows what their clocks read.
extension UmockdevIntegrationTests {
    static let zone = "Europe/Berlin"

    /// A laptop (on its charger unless `charger` is false), the policy that starts power-bound work at once plus
    /// `rules`, and bgtaskd in `zone`.
    func nextRunDaemon(charger: Bool = true, rules: String = "") throws -> (PolicyEnv, Testbed, SessionDaemon) {
        try requirePreload()
        let p = try PolicyEnv()
        try p.userPolicy("50-fast.toml", immediatePowerRule + "\n" + rules)
        let tb = Testbed()
        _ = tb.addLaptop(acOnline: charger, batteryStatus: charger ? "Charging" : "Discharging")
        return (p, tb, try SessionDaemon(policy: p, preload: true, extraEnv: ["TZ": ":" + Self.zone]))
    }

    /// `id`'s entry in `pending --json`, and its row in the table: (NEXT and LEFT as printed, WHY).
    func nextRun(_ d: SessionDaemon, _ id: String) throws -> (entry: [String: Any], table: String) {
        let entry = try #require(try d.pending().first { $0["id"] as? String == id }, "\(id) not pending")
        let (s, table, e) = try d.bgtask(["pending"])
        #expect(s == 0, "\(e)")
        let row = table.split(separator: "\n").first { $0.hasPrefix(id + " ") }.map(String.init) ?? ""
        return (entry, row)
    }

    /// Submits `args` (exit 0 expected), waits for `said` among bgtaskd's lines if given, then for `id`'s entry in
    /// `pending --json` to have `key`: the entry.
    func submitted(_ d: SessionDaemon, _ id: String, _ args: [String], said: String? = nil, having key: String = "next_run") throws -> [String: Any] {
        let (st, _, err) = try d.bgtask(["submit", "--id", id] + args)
        #expect(st == 0, "\(err)")
        if let said { _ = try #require(d.said(said), "\(d.daemon?.stderr ?? "")") }
        var entry: [String: Any] = [:]
        #expect(polled(within: 10) { entry = (try? d.pending().first { $0["id"] as? String == id }) ?? [:]; return entry[key] != nil }, "\(entry)")
        return entry
    }

    /// How the table prints an instant's time of day in `zone`.
    static func clock(_ t: Double) -> String {
        let f = DateFormatter()
        f.timeZone = TimeZone(identifier: zone)
        f.dateFormat = "HH:mm:ss"
        return f.string(from: Date(timeIntervalSince1970: t))
    }

    /// The next instant after now, on a whole minute, `ahead` seconds off at least, and its HH:MM in `zone`.
    static func minuteAhead(_ ahead: Double) -> (at: Double, hhmm: String) {
        let at = ((Date().timeIntervalSince1970 + ahead) / 60).rounded(.up) * 60
        return (at, String(clock(at).prefix(5)))
    }

    @Test("NEXT for --at is its time, whatever a rule on time.hour makes the re-check, and not `-` with the charger also missing")
    func nextRunForAt() throws {
        // A rule that reads time.hour and never blocks: the re-check comes at each hour, the run only at --at.
        let (p, tb, d) = try nextRunDaemon(charger: false, rules: """
        [[rule]]
        id = "never"
        when = 'time.hour > 24'
        verdict = "defer"
        """)
        defer { withExtendedLifetime((p, tb)) {} }   // its state directory and testbed live as long as the daemon
        let (at, hhmm) = Self.minuteAhead(3 * 3600)
        let (st, _, err) = try d.bgtask(["submit", "--id", "backup", "--at", hhmm, "--requires-external-power", "--", "true"])
        #expect(st == 0, "\(err)")
        let (e, row) = try nextRun(d, "backup")
        #expect(e["next_run"] as? Double == at, "\(e)")
        #expect(e["next_run_iso"] is String, "\(e)")
        #expect((e["next_check"] as? Double).map { $0 < at } == true, "the re-check is its own field, before the run: \(e)")
        #expect(row.contains(Self.clock(at)) && row.contains("  3h"), "NEXT and LEFT: \(row)")
        // WHY: the deciding reason; the date's cause named in the unmet list, no countdown frozen into it.
        let unmet = (e["unmet"] as? [[String: Any]] ?? []).compactMap { $0["reason"] as? String }
        #expect(unmet.contains { $0.contains("not before") && $0.contains("its start time") && !$0.contains(", in ") }, "\(unmet)")
    }

    @Test("NEXT for --on-calendar is the event's next elapse as systemd-analyze calendar says it",
          .enabled(if: installedOrCI(CalendarTests.analyze), "systemd-analyze, the reference, is not installed"))
    func nextRunForCalendar() throws {
        let (p, tb, d) = try nextRunDaemon()
        defer { withExtendedLifetime((p, tb)) {} }   // its state directory and testbed live as long as the daemon
        let base = Int(Date().timeIntervalSince1970)
        for (i, event) in ["Mon..Fri 01:00", "*-*-* 04:30:00", "Sat,Sun 23:15", "*-*-1 03:00"].enumerated() {
            let id = "cal\(i)"
            let (st, _, err) = try d.bgtask(["submit", "--id", id, "--on-calendar", event, "--", "true"])
            #expect(st == 0, "\(err)")
            let systemd = try CalendarTests.systemd(event, zone: Self.zone, base: base)
            let (e, row) = try nextRun(d, id)
            #expect((e["next_run"] as? Double).map { Int($0) } == systemd.elapses.first, "\(event): \(e) vs \(systemd)")
            #expect(row.contains(Self.clock(Double(systemd.elapses.first ?? 0))), "\(event): \(row)")
            let unmet = (e["unmet"] as? [[String: Any]] ?? []).compactMap { $0["reason"] as? String }
            #expect(unmet.contains { $0.contains("its calendar event '\(event)'") }, "\(unmet)")
        }
    }

    @Test("NEXT for --every is the next period once a run is done; for --between, the window's opening")
    func nextRunForEveryAndBetween() throws {
        let (p, tb, d) = try nextRunDaemon()
        defer { withExtendedLifetime((p, tb)) {} }   // its state directory and testbed live as long as the daemon
        let entry = try submitted(d, "hourly", ["--every", "1h", "--", "true"], said: "hourly: finished", having: "earliest")
        let period = try #require(entry["earliest"] as? Double, "\(entry)")
        #expect(abs(period - Date().timeIntervalSince1970 - 3600) < 60, "\(entry)")
        let (e, row) = try nextRun(d, "hourly")
        #expect(e["next_run"] as? Double == period, "\(e)")
        #expect(row.contains(Self.clock(period)), "\(row)")

        let (opens, from) = Self.minuteAhead(2 * 3600)
        let to = String(Self.clock(opens + 3600).prefix(5))
        let w = try submitted(d, "nightly", ["--between", "\(from)-\(to)", "--", "true"])
        #expect(w["next_run"] as? Double == opens, "\(w)")
        let (_, wrow) = try nextRun(d, "nightly")
        #expect(wrow.contains(Self.clock(opens)), "\(wrow)")
    }

    @Test("NEXT for a failed --retry task is its backoff's end, and its wait names the backoff, not an earliest begin date")
    func nextRunForRetry() throws {
        let (p, tb, d) = try nextRunDaemon()
        defer { withExtendedLifetime((p, tb)) {} }   // its state directory and testbed live as long as the daemon
        let entry = try submitted(d, "flaky", ["--retry", "2", "--", "false"], said: "flaky: failed (status 1); retry 1 of 2")
        let backoff = try #require(entry["earliest"] as? Double, "\(entry)")
        #expect(entry["next_run"] as? Double == backoff, "\(entry)")
        #expect(entry["next_check"] as? Double == backoff, "looked at again at the date itself, not a microsecond before: \(entry)")
        #expect((entry["reason"] as? String)?.contains("its retry backoff: retry 1 of 2") == true, "\(entry)")
        #expect((entry["reason"] as? String)?.contains("earliest begin date") == false, "\(entry)")
        // No countdown frozen into WHY at the decision: LEFT tells how far off, made when it is shown.
        #expect((entry["reason"] as? String)?.contains(", in ") == false, "\(entry)")
        // What the audit trail keeps of the wait names it too.
        let (ws, why, _) = try d.bgtask(["why", "flaky"])
        #expect(ws == 0 && why.contains("its retry backoff: retry 1 of 2") && !why.contains("earliest begin date"), "\(why)")
    }
}
