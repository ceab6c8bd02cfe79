#if canImport(Glibc)
@preconcurrency import Glibc
#endif

/// When a waiting task will likely start, learned from the machine's own history of one reading (the charger
/// coming, the person leaving, the network): on the last days of the same kind (weekdays, or weekends), when
/// did the reading next become what the task waits for, counted from the same time of day as now? The median
/// of those is the estimate, the middle half its range. Pure: the history and the clock are handed in.
public enum StartEstimate {
    public struct Change: Sendable, Equatable {
        public var time: Double
        public var value: Bool
        public init(time: Double, value: Bool) {
            self.time = time
            self.value = value
        }
    }

    public struct Estimate: Sendable, Equatable {
        /// The likely instant, and the middle half of what the days saw (as instants from now).
        public var at: Double
        public var low: Double
        public var high: Double
        /// On how many of the days looked at it came, and how many there were.
        public var days: Int
        public var of: Int
        /// "weekdays" or "weekend days".
        public var dayKind: String

        public init(at: Double, low: Double, high: Double, days: Int, of: Int, dayKind: String) {
            self.at = at
            self.low = low
            self.high = high
            self.days = days
            self.of = of
            self.dayKind = dayKind
        }
    }

    /// Days of local time: where a day starts, and whether it is a weekend day. Replaceable for tests.
    public struct Days: Sendable {
        public var start: @Sendable (Double) -> Double
        public var isWeekend: @Sendable (Double) -> Bool
        public init(start: @escaping @Sendable (Double) -> Double, isWeekend: @escaping @Sendable (Double) -> Bool) {
            self.start = start
            self.isWeekend = isWeekend
        }

        /// The machine's own time zone (mktime: a day of 23 or 25 hours is one day).
        public static let local = Days(start: { t in
            var now = time_t(t.rounded(.down)), parts = tm()
            localtime_r(&now, &parts)
            parts.tm_hour = 0; parts.tm_min = 0; parts.tm_sec = 0; parts.tm_isdst = -1
            return Double(mktime(&parts))
        }, isWeekend: { t in
            var now = time_t(t.rounded(.down)), parts = tm()
            localtime_r(&now, &parts)
            return parts.tm_wday == 0 || parts.tm_wday == 6
        })

        public static let utc = Days(start: { ($0 / 86_400).rounded(.down) * 86_400 }, isWeekend: { t in
            let wday = (Int((t / 86_400).rounded(.down)) + 4) % 7    // 1970-01-01 was a Thursday
            return wday == 0 || wday == 6
        })
    }

    public enum Outcome: Sendable, Equatable {
        case likely(Estimate)
        /// Why there is no estimate: too little history, or no habit in it.
        case unknown(String)
    }

    /// The next time the reading becomes `wanted` after `now`, from `history` (changes in time order; the value
    /// holds until the next change). `what` names the event for the reason ("the charger came").
    public static func estimate(_ history: [Change], wanted: Bool = true, now: Double, lookback: Int = 14, minimumDays: Int = 5,
                                days: Days = .local) -> Outcome {
        guard let first = history.first else { return .unknown("no history of it recorded yet") }
        let today = days.start(now)
        let sinceMidnight = now - today
        let weekend = days.isWeekend(now)
        let kind = weekend ? "weekend days" : "weekdays"
        var offsets: [Double] = []
        var considered = 0
        // Step back one day at a time (starts found by mktime through `days`), up to 8 weeks.
        var dayStart = today
        for _ in 0..<56 {
            dayStart = days.start(dayStart - 43_200)    // noon of the day before, to its start
            guard considered < lookback else { break }
            if days.isWeekend(dayStart + 43_200) != weekend { continue }
            let from = dayStart + sinceMidnight
            // Only days the history covers: from the first recorded change on.
            guard from >= first.time else { break }
            considered += 1
            if let t = nextBecoming(wanted, in: history, after: from, before: from + 86_400) { offsets.append(t - from) }
        }
        if considered < minimumDays {
            return .unknown("not enough history yet (\(considered) \(kind) recorded, \(minimumDays) needed)")
        }
        if offsets.count * 2 < considered {
            return .unknown("no habit to go by (it happened on \(offsets.count) of the last \(considered) \(kind))")
        }
        offsets.sort()
        func quantile(_ q: Double) -> Double { offsets[min(offsets.count - 1, Int((Double(offsets.count - 1) * q).rounded()))] }
        return .likely(Estimate(at: now + quantile(0.5), low: now + quantile(0.25), high: now + quantile(0.75),
                                days: offsets.count, of: considered, dayKind: kind))
    }

    /// The first change to `wanted` in [from, before), or `from` itself when the reading already was `wanted` then
    /// (a task waiting at that time of day would have started at once).
    static func nextBecoming(_ wanted: Bool, in history: [Change], after from: Double, before: Double) -> Double? {
        var lo = 0, hi = history.count
        while lo < hi {    // the first change at or after `from`
            let mid = (lo + hi) / 2
            if history[mid].time < from { lo = mid + 1 } else { hi = mid }
        }
        if lo > 0, history[lo - 1].value == wanted { return from }
        var i = lo
        while i < history.count, history[i].time < before {
            if history[i].value == wanted { return history[i].time }
            i += 1
        }
        return nil
    }

    /// "likely ~23:10 (between 22:50 and 23:30): the charger came then on 9 of the last 14 weekdays".
    public static func text(_ e: Estimate, what: String, now: Double) -> String {
        func hm(_ t: Double) -> String {
            let c = clockText(t, now: now)
            // HH:MM, the day kept ("tomorrow 01:00"): seconds say more than the estimate knows.
            return c.count >= 8 ? String(c.dropLast(3)) : c
        }
        let range = hm(e.low) == hm(e.high) ? "" : " (between \(hm(e.low)) and \(hm(e.high)))"
        return "likely ~\(hm(e.at))\(range): \(what) then on \(e.days) of the last \(e.of) \(e.dayKind)"
    }
}
