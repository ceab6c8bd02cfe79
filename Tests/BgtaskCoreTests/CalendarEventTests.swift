import BgtaskCore
import Testing

/// The calendar core on its own, in UTC (so no test depends on the machine's zone); values as
/// `systemd-analyze calendar` printed them (the integration tests compare with it live, in three zones).
@Suite("calendar events: parsing, normalizing and the next elapse")
struct CalendarEventTests {
    static let base = 1_795_577_400.0    // Wed 2026-11-25 03:30:00 UTC

    @Test("normalized forms are systemd's", arguments: [
        ("daily UTC", "*-*-* 00:00:00 UTC"), ("Mon,Tue,Wed 1:2 UTC", "Mon..Wed *-*-* 01:02:00 UTC"),
        ("Mon..Fri *-*-1..5,10 2/3:00 UTC", "Mon..Fri *-*-01..05,10 02/3:00:00 UTC"),
        ("quarterly UTC", "*-01,04,07,10-01 00:00:00 UTC"), ("*-*~07/1 UTC", "*-*~07/1 00:00:00 UTC"),
        ("27-03-04 UTC", "2027-03-04 00:00:00 UTC"), ("10..20/3:00 UTC", "*-*-* 10..19/3:00:00 UTC"),
    ])
    func normalizes(_ text: String, _ normalized: String) throws {
        #expect(try CalendarEvent(parsing: text).description == normalized)
    }

    @Test("the next elapses are strictly later than the base and the ones systemd gives", arguments: [
        ("*-*-* 01:00 UTC", [1_795_654_800.0, 1_795_741_200]),              // Thu and Fri 01:00
        ("Mon..Fri *-*-1..5,10 2/3:00 UTC", [1_796_090_400, 1_796_101_200]), // Tue 2026-12-01 02:00, 05:00
        ("*-02~1 UTC", [1_803_772_800, 1_835_395_200]),                      // 2027-02-28, 2028-02-29
        ("*-*-* *:*:* UTC", [1_795_577_401, 1_795_577_402]),
    ])
    func elapses(_ text: String, _ expected: [Double]) throws {
        #expect(try CalendarEvent(parsing: text).elapses(after: Self.base, count: 2) == expected)
    }

    @Test("a date that never comes again has no elapse")
    func never() throws {
        #expect(try CalendarEvent(parsing: "2024-02-29 UTC").next(after: Self.base) == nil)
        #expect(try CalendarEvent(parsing: "*-02-30 UTC").next(after: Self.base) == nil)
    }

    @Test("refusals name what is wrong", arguments: [
        ("Sat..Mon", "ends before it starts"), ("*-13-01", "month 13 is outside 1–12"), ("*-*-* 1/0:00", "a repetition of 0"),
        ("10:00 Europe/Berlin", "only UTC"), ("Fri 13", "'13' is neither a date"),
    ])
    func refuses(_ text: String, _ why: String) {
        #expect(throws: CalendarEventError.self) { try CalendarEvent(parsing: text) }
        do { _ = try CalendarEvent(parsing: text) } catch { #expect(error.why.contains(why), "\(error)") }
    }
}
