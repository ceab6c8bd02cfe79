import BgtaskCore
import Testing

/// The learned start estimate on synthetic histories with a known answer (UTC days, so no test depends on the
/// machine's zone).
@Suite("the learned start estimate: when the charger usually comes")
struct StartEstimateTests {
    static let monday = 1794787200.0    // Mon 2026-11-16 00:00 UTC

    /// The charger in at `plugHour` (plus `jitter(day)` minutes) and out at 08:00 on every weekday for `weeks`
    /// weeks before `monday`, never at weekends.
    static func weekdayCharging(weeks: Int, plugHour: Double, jitter: (Int) -> Double = { _ in 0 }) -> [StartEstimate.Change] {
        var out: [StartEstimate.Change] = []
        for day in (-weeks * 7)..<0 {
            let start = monday + Double(day) * 86_400
            let wday = ((day % 7) + 7) % 7    // 0 Monday … 6 Sunday
            guard wday < 5 else { continue }
            out.append(.init(time: start + 8 * 3600, value: false))
            out.append(.init(time: start + plugHour * 3600 + jitter(day) * 60, value: true))
        }
        return out.sorted { $0.time < $1.time }
    }

    @Test("every weekday at 23:00: at noon on a Monday, likely at 23:00 that night, on 14 of 14 weekdays")
    func regularHabit() throws {
        let history = Self.weekdayCharging(weeks: 4, plugHour: 23)
        let now = Self.monday + 12 * 3600
        guard case .likely(let e) = StartEstimate.estimate(history, now: now, days: .utc) else { Issue.record("no estimate"); return }
        #expect(e.at == Self.monday + 23 * 3600)
        #expect(e.days == 14 && e.of == 14 && e.dayKind == "weekdays")
    }

    @Test("a habit with ±30 minutes of scatter: the median, and the middle half as its range")
    func scatteredHabit() throws {
        let offsets: [Double] = [-30, -20, -10, 0, 10, 20, 30]
        let history = Self.weekdayCharging(weeks: 4, plugHour: 22) { offsets[(($0 % 7) + 7) % 7] }
        let now = Self.monday + 12 * 3600
        guard case .likely(let e) = StartEstimate.estimate(history, now: now, days: .utc) else { Issue.record("no estimate"); return }
        #expect(abs(e.at - (Self.monday + 22 * 3600)) <= 10 * 60, "\(e)")
        #expect(e.low < e.at && e.at < e.high && e.high - e.low <= 40 * 60, "\(e)")
    }

    @Test("at a weekend only weekend days count: plugged at 10:00 on weekends, 23:00 on weekdays; on a Saturday at 09:30 (out since 09:00), likely 10:00")
    func weekendsApart() {
        var history = Self.weekdayCharging(weeks: 4, plugHour: 23)
        for week in 1...4 {
            for d in [-2.0, -1.0] {    // Saturday and Sunday before each Monday
                let start = Self.monday - Double(week - 1) * 7 * 86_400 + d * 86_400
                history.append(.init(time: start + 9 * 3600, value: false))
                history.append(.init(time: start + 10 * 3600, value: true))
            }
        }
        history.sort { $0.time < $1.time }
        let saturday = Self.monday + 5 * 86_400 + 9.5 * 3600
        guard case .likely(let e) = StartEstimate.estimate(history, now: saturday, lookback: 14, minimumDays: 5, days: .utc) else {
            Issue.record("no estimate"); return
        }
        #expect(e.at == saturday + 0.5 * 3600 && e.dayKind == "weekend days" && e.of == 8, "\(e)")
    }

    @Test("too little history, or no habit in it, is said as such — never a guess")
    func unknowns() {
        guard case .unknown(let none) = StartEstimate.estimate([], now: Self.monday, days: .utc) else { Issue.record("estimate from nothing"); return }
        #expect(none.contains("no history"))
        let short = Self.weekdayCharging(weeks: 4, plugHour: 23).filter { $0.time > Self.monday - 3 * 86_400 }
        guard case .unknown(let few) = StartEstimate.estimate(short, now: Self.monday + 12 * 3600, days: .utc) else { Issue.record("estimate from 1 day"); return }
        #expect(few.contains("not enough history yet"), "\(few)")
        // Plugged in on only a few days: on the others it stays out.
        let rare = Self.weekdayCharging(weeks: 4, plugHour: 23).filter { $0.value == false || Int(($0.time - Self.monday) / 86_400) % 4 == 0 }
        guard case .unknown(let habit) = StartEstimate.estimate(rare, now: Self.monday + 12 * 3600, days: .utc) else { Issue.record("an estimate without a habit"); return }
        #expect(habit.contains("no habit"), "\(habit)")
    }

    @Test("the text names the time, the range and the count")
    func text() {
        let e = StartEstimate.Estimate(at: Self.monday + 23 * 3600, low: Self.monday + 22.5 * 3600, high: Self.monday + 23.5 * 3600,
                                       days: 9, of: 14, dayKind: "weekdays")
        let s = StartEstimate.text(e, what: "the charger came", now: Self.monday + 12 * 3600)
        #expect(s.hasPrefix("likely ~") && s.contains("(between ") && s.hasSuffix("the charger came then on 9 of the last 14 weekdays"), "\(s)")
    }
}
