import BgtaskTestSupport
import Foundation
import Testing

/// `--between` across daylight-saving changes, on the real clock functions: `bgtask run` under libfaketime
/// (preloaded as the `faketime` wrapper would) on the days New York's and Berlin's clocks change, compared with an ordinary day.
@Suite("Durations across an offset change")
struct DaylightSavingTests {
    static let faketime = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"

    /// libfaketime preloaded straight into the process (not through the `faketime` wrapper, which forks: stopping
    /// the wrapper would leave the faked process running): its clock starts at `at`, local time, and runs on.
    static func faked(_ at: String, _ env: [String: String]) -> [String: String] {
        env.merging(["LD_PRELOAD": faketime, "FAKETIME": "@" + at]) { $1 }
    }

    /// `bgtask run --between WINDOW` started at local time `at` in `zone`: its first waiting line (it is stopped then).
    static func waiting(zone: String, at: String, window: String) throws -> String {
        try #require(FileManager.default.isReadableFile(atPath: faketime), "faketime is missing (scripts/install-deps.sh --test)")
        let p = try PolicyEnv()
        let run = try Child(Child.bgtaskPath, ["run", "--no-dbus", "--between", window, "--id", "w", "--", "true"],
                            environment: faked(at, p.environment(preload: false, ["TZ": ":" + zone])))
        defer { run.stop() }
        return try #require(run.errorLine(within: 20) { $0.contains("waiting:") }, "no waiting line: \(run.stderr)")
    }

    @Test("a window opens at its local time after a spring-forward or a fall-back day, not an hour off", arguments: [
        // Saturday noon before the change; the window opens at 03:00 on Sunday, after the change.
        ("America/New_York", "2027-03-13 12:00:00", "14h"),   // 02:00 EST → 03:00 EDT: a day of 23 hours
        ("America/New_York", "2027-11-06 12:00:00", "16h"),   // 02:00 EDT → 01:00 EST: a day of 25 hours
        ("Europe/Berlin", "2027-03-27 12:00:00", "14h"),
        ("Europe/Berlin", "2027-10-30 12:00:00", "16h"),
        ("America/New_York", "2027-06-05 12:00:00", "15h"),   // an ordinary day
    ])
    func windowsFollowTheLocalCalendar(zone: String, at: String, opensIn: String) throws {
        let line = try Self.waiting(zone: zone, at: at, window: "03:00-06:00")
        #expect(line.contains("outside its window 03:00-06:00; it opens in \(opensIn) "), "\(zone) \(at): \(line)")
    }

    @Test("the wake for a window's opening comes at the local time: ten seconds before a spring-forward 03:00, the task starts in about ten seconds, not an hour and ten")
    func windowWakeIsOnTheLocalCalendar() throws {
        try #require(FileManager.default.isReadableFile(atPath: Self.faketime), "faketime is missing (scripts/install-deps.sh --test)")
        let p = try PolicyEnv()
        let marker = p.dir.appendingPathComponent("ran")
        let run = try Child(Child.bgtaskPath, ["run", "--no-dbus", "--between", "03:00-06:00", "--id", "w", "--", "sh", "-c", "echo > '\(marker.path)'"],
                            environment: Self.faked("2027-03-14 01:59:50", p.environment(preload: false, ["TZ": ":America/New_York"])))
        defer { run.stop() }
        let waiting = try #require(run.errorLine(within: 20) { $0.contains("waiting:") }, "\(run.stderr)")
        #expect(waiting.contains("it opens in 10s") || waiting.contains("it opens in 9s"), "\(waiting)")
        #expect(run.waitExit(within: 40) == 0, "did not start when the window opened: \(run.stderr)")
        #expect(FileManager.default.fileExists(atPath: marker.path))
    }
}

extension DaylightSavingTests {
    @Test("--every 1d --at 02:00 across a fall-back night: the next run is at 02:00 the next day by the calendar (25 hours later), not 24 hours later at 01:00")
    func dailyPeriodFollowsTheLocalCalendar() throws {
        try #require(FileManager.default.isReadableFile(atPath: Self.faketime), "faketime is missing (scripts/install-deps.sh --test)")
        let p = try PolicyEnv()
        let bus = try PrivateBus()
        let env = p.environment(preload: false, ["TZ": ":America/New_York", "DBUS_SESSION_BUS_ADDRESS": bus.address])
        // New York, Saturday 2027-11-06 just before 02:00 EDT; the clocks go back at 02:00 EDT on Sunday.
        let daemon = try Child(Child.bgtaskdPath, ["--no-dbus"], environment: Self.faked("2027-11-06 01:59:56", env))
        defer { daemon.stop() }
        _ = try #require(daemon.errorLine(within: 20) { $0.contains("serving io.github.bgtask.Scheduler1") }, "\(daemon.stderr)")
        let (s, _, e) = try Child.run(Child.bgtaskPath, ["submit", "--id", "nightly", "--every", "1d", "--at", "02:00", "--", "true"],
                                      environment: Self.faked("2027-11-06 01:59:57", env), deadline: 30)
        try #require(s == 0, "submit: \(e)")
        _ = try #require(daemon.errorLine(within: 20) { $0.contains("nightly: finished") }, "did not run at 02:00: \(daemon.stderr)")
        let (ps, out, pe) = try Child.run(Child.bgtaskPath, ["pending", "--json"], environment: env, deadline: 30)
        #expect(ps == 0, "\(pe)")
        let list = try #require(try JSONSerialization.jsonObject(with: Data(out.utf8)) as? [[String: Any]], "\(out)")
        let next = try #require(list.first { $0["id"] as? String == "nightly" }?["earliest"] as? Double, "\(list)")
        // 2027-11-07 02:00 EST = 07:00 UTC; 24 hours after the first run would be 06:00 UTC (01:00 EST).
        #expect(next == 1_825_570_800, "next run at \(next), \(next - 1_825_480_800) s after the first")
    }
}
