import BgtaskTestSupport
import Foundation
import Testing

/// `--on-calendar` takes systemd's calendar events: the reference for their syntax and meaning is systemd's
/// own `systemd-analyze calendar`, run here beside `bgtask calendar` on one table of expressions, in three
/// time zones, from bases that straddle daylight-saving changes.
@Suite("calendar events mean what systemd-analyze calendar says they mean")
struct CalendarTests {
    static let analyze = "/usr/bin/systemd-analyze"

    /// Accepted and refused expressions alike: both tools must agree on which is which.
    static let expressions = [
        "daily", "weekly", "monthly", "yearly", "annually", "quarterly", "semiannually", "hourly", "minutely", "DAILY",
        "*-*-* 01:00", "01:00", "1:2:3", "00:00", "02:30", "*:30", "*:0/15", "*:*:1/20", "0/2:00", "1..3:00", "1,2,3,5:00",
        "12:30:15.5", "*-*-* *:*:*", "*-*-* *:*", "Mon,Tue,Wed", "Mon-Fri", "mon,wed..fri,sun", "Thursday", "Sat,Sun 22:00",
        "Mon..Fri *-*-1..5,10 2/3:00", "Mon *-1/2", "*-*~07/1", "*-*~01..05", "*-*~3", "*-*~*", "*-02~1", "*-5-1..31/10 0,12:0",
        "*-*-31", "*-02-29", "2027-3-4", "27-03-04", "2027-*-* 1:2:3", "Mon 2000..2100-*-*", "*-12-25", "Fri *-*-13 13:00",
        "Sat..Sun", "Sun,Mon 03:00 UTC", "daily UTC", "10:00 UTC", "*-*-1/3 4:05", "Mon,Mon 5:00", "1,1,2:00", "10..20/3:00",
        "2030-01-01", "2024-02-29", "*-02-30", "Tue,Thu *-*-*",
        // refused
        "Sat..Mon", "Fri 13", "4..2:00", "*-*-* 24:00", "*-13-01", "*:*:60", "*/2-*-*", "*-*-* 1/0:00", "2030..2027-01-01",
        "today", "*-*~05..01", "Mon..", "Mon..Wed..Fri", "", "*-*-* 01:00:00:00", "1969-01-01", "2200-01-01", "*-~1",
    ]

    static let zones = ["UTC", "Europe/Berlin", "America/New_York"]
    /// Now-ish; the weekend of Europe's spring change; America's spring change; Europe's autumn change.
    static let bases: [Int] = [1_795_577_400, 1_806_148_800, 1_804_939_200, 1_824_897_600]

    struct Answer: Equatable, CustomStringConvertible {
        var normalized: String?    // nil: refused
        var elapses: [Int] = []
        var description: String { normalized.map { "\($0) → \(elapses)" } ?? "refused" }
    }

    /// What systemd-analyze says: the normalized form and the next elapses as seconds since the epoch.
    static func systemd(_ e: String, zone: String, base: Int) throws -> Answer {
        var env = Child.environment()
        env["TZ"] = ":" + zone
        env["SYSTEMD_COLORS"] = "0"
        let (status, out, _) = try Child.run(analyze, ["calendar", "--base-time=@\(base)", "--iterations=5", e], environment: env, deadline: 30)
        guard status == 0 else { return Answer(normalized: nil) }
        var normalized: String?
        var local: [Int] = [], inUTC: [Int] = []
        for line in out.split(separator: "\n") {
            let parts = line.split(separator: ":", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard parts.count == 2 else { continue }
            if parts[0] == "Normalized form" { normalized = parts[1] }
            if parts[0] == "Next elapse" || parts[0].hasPrefix("Iter.") { if let t = epoch(parts[1]) { local.append(t) } }
            if parts[0] == "(in UTC)", let t = epoch(parts[1]) { inUTC.append(t) }
        }
        return Answer(normalized: normalized, elapses: inUTC.isEmpty ? local : inUTC)
    }

    /// "Thu 2026-11-26 01:00:00 UTC" → seconds (only UTC texts are read: others come with an "(in UTC)" line).
    static func epoch(_ s: String) -> Int? {
        let f = s.split(separator: " ")
        guard f.count == 4, f[3] == "UTC" else { return nil }
        let d = f[1].split(separator: "-").compactMap { Int32($0) }, t = f[2].split(separator: ":").compactMap { Int32($0) }
        guard d.count == 3, t.count == 3 else { return nil }
        var tm = tm()
        tm.tm_year = d[0] - 1900; tm.tm_mon = d[1] - 1; tm.tm_mday = d[2]; tm.tm_hour = t[0]; tm.tm_min = t[1]; tm.tm_sec = t[2]
        return Int(timegm(&tm))
    }

    /// What `bgtask calendar --json` says for the whole table at once.
    static func bgtask(zone: String, base: Int) throws -> [Answer] {
        let (status, out, err) = try Child.run(Child.bgtaskPath, ["calendar", "--json", "--iterations", "5", "--base-time", "@\(base)", "--"] + expressions,
                                               environment: Child.environment(["TZ": ":" + zone]), deadline: 30)
        #expect(status == 2, "one refused expression makes the exit status 2: \(err)")
        let items = try #require(try JSONSerialization.jsonObject(with: Data(out.utf8)) as? [[String: Any]], "\(out)\n\(err)")
        return items.map { item in
            guard let n = item["normalized"] as? String else { return Answer(normalized: nil) }
            return Answer(normalized: n, elapses: (item["next_epoch"] as? [Double] ?? []).map { Int($0.rounded(.down)) })
        }
    }

    @Test("normalized form and next five elapses agree with systemd-analyze for every expression, zone and base",
          .enabled(if: installedOrCI(analyze), "systemd-analyze, the reference, is not installed"))
    func agreesWithSystemd() throws {
        var compared = 0, refused = 0
        for zone in Self.zones {
            for base in Self.bases {
                let ours = try Self.bgtask(zone: zone, base: base)
                try #require(ours.count == Self.expressions.count)
                for (i, e) in Self.expressions.enumerated() {
                    let theirs = try Self.systemd(e, zone: zone, base: base)
                    #expect(ours[i] == theirs, "'\(e)' in \(zone) from @\(base): bgtask \(ours[i]), systemd \(theirs)")
                    compared += 1
                    if theirs.normalized == nil { refused += 1 }
                }
            }
        }
        // The table exercises both sides: a tool that refused everything, or nothing, would not pass.
        #expect(refused > 0 && refused < compared)
    }

    @Test("a refused expression is named with the reason, on stderr, with exit status 2")
    func refusedIsExplained() throws {
        let (status, out, err) = try Child.run(Child.bgtaskPath, ["calendar", "Fri 13", "10:00 Europe/Berlin"], deadline: 30)
        #expect(status == 2)
        #expect(out.isEmpty)
        #expect(err.contains("bgtask: 'Fri 13' is not a calendar event (systemd.time(7)): '13' is neither a date"), "\(err)")
        #expect(err.contains("time zone Europe/Berlin: only UTC"), "\(err)")
    }
}
