#if canImport(Glibc)
@preconcurrency import Glibc
#endif

/// A calendar event in systemd's syntax and meaning (systemd.time(7), "CALENDAR EVENTS"): what
/// `OnCalendar=` takes and `systemd-analyze calendar` explains, for `bgtask submit --on-calendar`.
/// `[WEEKDAYS] [[YEAR-]MONTH-DAY] [HOUR:MINUTE[:SECOND]] [UTC]` or a word (daily, weekly …); each field
/// a list of values, `A..B` ranges and `A/STEP` or `A..B/STEP` repetitions, `*` for any, `~` counting
/// days from the end of the month. The next elapse is found as systemd finds it — the same walk over
/// broken-down local time with mktime(3) normalizing each step — so times in a daylight-saving change
/// resolve as systemd's do (the tests compare with `systemd-analyze calendar` itself).
/// Time zones other than UTC and the local one are refused rather than guessed at.
public struct CalendarEvent: Sendable, Equatable, CustomStringConvertible {
    /// One value, range or repetition of a field: `start`, up to `stop` (-1: no end), every `step` (0: once).
    struct Part: Sendable, Equatable, Comparable {
        var start: Int
        var stop = -1
        var step = 0
        static func < (a: Part, b: Part) -> Bool { (a.start, a.stop, a.step) < (b.start, b.stop, b.step) }
    }

    /// Bit 0 Monday … bit 6 Sunday; -1: any day.
    var weekdays = -1
    /// nil: any. Seconds are in microseconds, as a second may have a fraction.
    var year: [Part]?
    var month: [Part]?
    var day: [Part]?
    var hour: [Part]?
    var minute: [Part]?
    var second: [Part]?
    /// `~`: days count from the end of the month (1 is the last day).
    var endOfMonth = false
    var utc = false

    /// What was written.
    public let text: String

    static let usPerSecond = 1_000_000
    static let minYear = 1970, maxYear = 2199

    /// The normalized form, as `systemd-analyze calendar` prints it.
    public var description: String {
        var s = ""
        if weekdays > 0 && weekdays < 127 { s += CalendarEvent.format(weekdays: weekdays) + " " }
        s += CalendarEvent.format(year, width: 4) + "-" + CalendarEvent.format(month, width: 2)
        s += (endOfMonth ? "~" : "-") + CalendarEvent.format(day, width: 2) + " "
        s += CalendarEvent.format(hour, width: 2) + ":" + CalendarEvent.format(minute, width: 2) + ":"
        s += CalendarEvent.format(second, width: 2, unit: CalendarEvent.usPerSecond)
        if utc { s += " UTC" }
        return s
    }

    public init(parsing text: String) throws(CalendarEventError) {
        self.text = text
        var p = Substring(text)
        func fail(_ why: String) -> CalendarEventError { CalendarEventError(text: text, why: why) }
        if text.utf8.count > 256 { throw fail("longer than 256 characters") }
        if p.count > 4, p.suffix(4).lowercased() == " utc" {
            utc = true
            p = p.dropLast(4)
        } else if let space = p.lastIndex(of: " "), CalendarEvent.looksLikeZone(p[p.index(after: space)...]) {
            throw fail("time zone \(p[p.index(after: space)...]): only UTC is understood (without one, the local time zone is used)")
        }
        if p.isEmpty { throw fail("empty") }
        let zero = [Part(start: 0)]
        switch p.lowercased() {
        case "minutely": second = zero
        case "hourly": minute = zero; second = zero
        case "daily": hour = zero; minute = zero; second = zero
        case "weekly": weekdays = 1; hour = zero; minute = zero; second = zero
        case "monthly": day = [Part(start: 1)]; hour = zero; minute = zero; second = zero
        case "yearly", "annually", "anually":
            month = [Part(start: 1)]; day = [Part(start: 1)]; hour = zero; minute = zero; second = zero
        case "quarterly":
            month = [1, 4, 7, 10].map { Part(start: $0) }; day = [Part(start: 1)]; hour = zero; minute = zero; second = zero
        case "semiannually", "semi-annually", "biannually", "bi-annually":
            month = [1, 7].map { Part(start: $0) }; day = [Part(start: 1)]; hour = zero; minute = zero; second = zero
        default:
            var s = Scanner(Array(p.utf8), fail: fail)
            try s.weekdays(into: &weekdays)
            try s.date(into: &self)
            try s.time(into: &self)
            if !s.atEnd { throw fail("unexpected '\(s.rest)'") }
        }
        try normalizeAndCheck(fail)
    }

    /// The first elapse later than `after` (seconds since the epoch), or nil when it never elapses again
    /// (a date in the past, `*-02-30`, or beyond the year 2199).
    public func next(after: Double) -> Double? {
        guard after.isFinite, after >= 0, after < 7_258_118_400 else { return nil }    // < 2200-01-01
        let us = Int64((after * 1e6).rounded(.down)) + 1
        var t = time_t(us / 1_000_000)
        var usec = Int(us % 1_000_000)
        var c = tm()
        if utc { gmtime_r(&t, &c) } else { localtime_r(&t, &c) }
        guard find(&c, &usec) else { return nil }
        let r = normalize(&c)
        guard r >= 0 else { return nil }
        return Double(r) + Double(usec) / 1e6
    }

    /// The next `count` elapses after `after`.
    public func elapses(after: Double, count: Int) -> [Double] {
        var out: [Double] = []
        var t = after
        while out.count < count, let n = next(after: t) {
            out.append(n)
            t = n
        }
        return out
    }
}

public struct CalendarEventError: Error, Sendable, Equatable, CustomStringConvertible {
    public let text: String
    public let why: String
    public var description: String { "'\(text)' is not a calendar event (systemd.time(7)): \(why)" }
}

// MARK: - Parsing

extension CalendarEvent {
    static let dayNames: [(String, Int)] = [("monday", 0), ("mon", 0), ("tuesday", 1), ("tue", 1), ("wednesday", 2), ("wed", 2),
                                            ("thursday", 3), ("thu", 3), ("friday", 4), ("fri", 4), ("saturday", 5), ("sat", 5),
                                            ("sunday", 6), ("sun", 6)]

    /// A last word naming a zone in the time-zone database (or a letters-only word such as CET): refused by name.
    static func looksLikeZone(_ w: Substring) -> Bool {
        guard let f = w.first, f.isLetter, !w.contains(":"), !w.contains(".."), !w.contains(","), w.count <= 64 else { return false }
        if dayNames.contains(where: { $0.0 == w.lowercased() }) { return false }
        if w.allSatisfy({ $0.isLetter }) && w.count <= 5 && w == w.uppercased() { return true }
        return !w.hasPrefix("/") && access("/usr/share/zoneinfo/" + w, R_OK) == 0
    }

    struct Scanner {
        let b: [UInt8]
        var i = 0
        let fail: (String) -> CalendarEventError
        init(_ b: [UInt8], fail: @escaping (String) -> CalendarEventError) { self.b = b; self.fail = fail }

        var atEnd: Bool { i >= b.count }
        var cur: UInt8 { i < b.count ? b[i] : 0 }
        func at(_ k: Int) -> UInt8 { i + k < b.count ? b[i + k] : 0 }
        var rest: String { String(decoding: b[min(i, b.count)...], as: UTF8.self) }
        mutating func skipSpaces() { while cur == 0x20 { i += 1 } }

        /// `Mon,Wed..Fri` (or `Mon-Fri`), then spaces; nothing when the text does not start with a day name.
        mutating func weekdays(into bits: inout Int) throws(CalendarEventError) {
            var from = -1
            var first = true
            bits = 0
            while true {
                var found: Int?
                for (name, nr) in CalendarEvent.dayNames {
                    let n = Array(name.utf8)
                    guard i + n.count <= b.count, zip(b[i..<(i + n.count)], n).allSatisfy({ ($0 | 0x20) == $1 }) else { continue }
                    let after = at(n.count)
                    guard [0, 0x2D, 0x2E, 0x2C, 0x20].contains(after) else { throw fail("'\(rest)' is not a weekday") }
                    bits |= 1 << nr
                    if from >= 0 {
                        if from > nr { throw fail("the weekday range ends before it starts (\(CalendarEvent.shortDay(from))..\(CalendarEvent.shortDay(nr)))") }
                        for j in (from + 1)..<max(from + 1, nr) { bits |= 1 << j }
                    }
                    i += n.count
                    found = nr
                    break
                }
                guard let nr = found else {
                    if first { bits = -1; return }
                    throw fail("'\(rest)' is not a weekday")
                }
                if atEnd { return }
                if cur == 0x20 { skipSpaces(); return }
                if cur == 0x2E {
                    if from >= 0 || at(1) != 0x2E { throw fail("a weekday range is written Mon..Fri") }
                    from = nr; i += 2
                } else if cur == 0x2D {
                    if from >= 0 { throw fail("a weekday range is written Mon..Fri") }
                    from = nr; i += 1
                } else if cur == 0x2C {
                    from = -1; i += 1
                }
                if atEnd || cur == 0x20 {
                    skipSpaces()
                    if from >= 0 { throw fail("the weekday range has no end") }
                    return
                }
                first = false
            }
        }

        mutating func number(usec: Bool) throws(CalendarEventError) -> Int {
            guard (0x30...0x39).contains(cur) else {
                throw fail(atEnd ? "it ends where a number was expected" : "'\(rest)': a number was expected")
            }
            var v = 0
            while (0x30...0x39).contains(cur) {
                v = v * 10 + Int(cur - 0x30)
                if v > Int(Int32.max) { throw fail("a number is too large") }
                i += 1
            }
            guard usec else { return v }
            v *= CalendarEvent.usPerSecond
            if cur == 0x2E && at(1) != 0x2E {
                i += 1
                var digits = 0, frac = 0
                while (0x30...0x39).contains(cur) {
                    if digits < 6 { frac = frac * 10 + Int(cur - 0x30); digits += 1 }
                    i += 1
                }
                guard digits > 0 else { throw fail("a fraction of a second needs digits") }
                for _ in digits..<6 { frac *= 10 }
                v += frac
            }
            if v > Int(Int32.max) { throw fail("a number is too large") }
            return v
        }

        /// `*`, or a comma list of `A`, `A..B`, `A/S`, `A..B/S`. nil is `*` (for seconds, every whole second).
        mutating func chain(usec: Bool) throws(CalendarEventError) -> [Part]? {
            if cur == 0x2A {
                i += 1
                return usec ? [Part(start: 0, step: CalendarEvent.usPerSecond)] : nil
            }
            var parts: [Part] = []
            while true {
                if parts.count >= 240 { throw fail("more than 240 values in one field") }
                var p = Part(start: try number(usec: usec))
                if cur == 0x2E && at(1) == 0x2E {
                    i += 2
                    p.stop = try number(usec: usec)
                    p.step = usec ? CalendarEvent.usPerSecond : 1
                }
                if cur == 0x2F {
                    i += 1
                    p.step = try number(usec: usec)
                    if p.step == 0 { throw fail("a repetition of 0") }
                } else if usec && p.stop >= 0 && p.start + p.step > p.stop {
                    throw fail("a range of seconds shorter than a second")
                }
                guard [0, 0x20, 0x2C, 0x2D, 0x7E, 0x3A].contains(cur) else { throw fail("unexpected '\(rest)'") }
                parts.append(p)
                if cur == 0x2C { i += 1; continue }
                return parts
            }
        }

        /// `[YEAR-]MONTH-DAY` (`~` for the last separator counts from the month's end), then spaces; nothing
        /// when what comes is a time.
        mutating func date(into e: inout CalendarEvent) throws(CalendarEventError) {
            if atEnd { return }
            let start = i
            let first = try chain(usec: false)
            if atEnd || cur == 0x3A { i = start; return }
            if cur == 0x7E { e.endOfMonth = true } else if cur != 0x2D { throw fail("'\(rest)': a date is written YEAR-MONTH-DAY or MONTH-DAY") }
            i += 1
            let second = try chain(usec: false)
            if atEnd || cur == 0x20 {
                skipSpaces()
                e.month = first; e.day = second
                return
            }
            if e.endOfMonth { throw fail("'~' comes between the month and the day") }
            if cur == 0x7E { e.endOfMonth = true } else if cur != 0x2D { throw fail("'\(rest)': a date is written YEAR-MONTH-DAY or MONTH-DAY") }
            i += 1
            let third = try chain(usec: false)
            guard atEnd || cur == 0x20 else { throw fail("unexpected '\(rest)' after the date") }
            skipSpaces()
            e.year = first; e.month = second; e.day = third
        }

        /// `HOUR:MINUTE[:SECOND]`; none is 00:00:00, no seconds are :00.
        mutating func time(into e: inout CalendarEvent) throws(CalendarEventError) {
            let zero = [Part(start: 0)]
            if atEnd { e.hour = zero; e.minute = zero; e.second = zero; return }
            let word = rest
            let h = try chain(usec: false)
            guard cur == 0x3A else { throw fail(atEnd ? "'\(word)' is neither a date (MONTH-DAY) nor a time (HOUR:MINUTE)" : "unexpected '\(rest)'") }
            i += 1
            let m = try chain(usec: false)
            var s: [Part]? = zero
            if !atEnd {
                guard cur == 0x3A else { throw fail("unexpected '\(rest)'") }
                i += 1
                s = try chain(usec: true)
                guard atEnd else { throw fail("unexpected '\(rest)' after the time") }
            }
            e.hour = h; e.minute = m; e.second = s
        }
    }

    static func shortDay(_ n: Int) -> String { ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"][n] }

    mutating func normalizeAndCheck(_ fail: (String) -> CalendarEventError) throws(CalendarEventError) {
        if weekdays <= 0 || weekdays >= 127 { weekdays = -1 }
        if endOfMonth && day == nil { endOfMonth = false }
        year = year.map { ps in ps.map { p in
            var p = p
            func fix(_ v: Int) -> Int { v < 0 ? v : v < 70 ? v + 2000 : v < 100 ? v + 1900 : v }
            p.start = fix(p.start); p.stop = fix(p.stop)
            return p
        } }
        for path in [\CalendarEvent.year, \.month, \.day, \.hour, \.minute, \.second] {
            self[keyPath: path] = self[keyPath: path].map(CalendarEvent.normalized)
        }
        try CalendarEvent.check(year, "year", CalendarEvent.minYear, CalendarEvent.maxYear, false, fail)
        try CalendarEvent.check(month, "month", 1, 12, false, fail)
        try CalendarEvent.check(day, "day", 1, 31, endOfMonth, fail)
        try CalendarEvent.check(hour, "hour", 0, 23, false, fail)
        try CalendarEvent.check(minute, "minute", 0, 59, false, fail)
        try CalendarEvent.check(second, "second", 0, 60 * CalendarEvent.usPerSecond - 1, false, fail)
    }

    /// Ranges cut to a whole number of steps, steps that cannot repeat dropped, sorted, duplicates removed.
    static func normalized(_ ps: [Part]) -> [Part] {
        var out = ps.map { p -> Part in
            var p = p
            if p.stop > p.start && p.step > 0 { p.stop -= (p.stop - p.start) % p.step }
            if (p.stop > p.start && p.step > 0 && p.start + p.step > p.stop) || p.start == p.stop { p.step = 0; p.stop = -1 }
            return p
        }
        guard out.count > 1 else { return out }
        out.sort()
        var unique: [Part] = []
        for p in out where unique.last != p { unique.append(p) }
        return unique
    }

    static func check(_ ps: [Part]?, _ name: String, _ from: Int, _ to: Int, _ eom: Bool,
                      _ fail: (String) -> CalendarEventError) throws(CalendarEventError) {
        guard let ps else { return }
        let unit = name == "second" ? usPerSecond : 1
        let top = eom ? to - 3 : to
        let range = eom ? "1–28 from the end of the month" : "\(from / unit)–\(top / unit)"
        for p in ps {
            if p.start < from || p.start > top { throw fail("\(name) \(p.start / unit) is outside \(range)") }
            if p.step > top - from { throw fail("the \(name)'s repetition /\(p.step / unit) is larger than its range") }
            if p.stop >= 0 {
                if p.stop < from || p.stop > top { throw fail("\(name) \(p.stop / unit) is outside \(range)") }
                if p.start + p.step > p.stop { throw fail("the \(name) range \(p.start / unit)..\(p.stop / unit) ends before it starts") }
            } else if eom ? p.start - p.step < from : p.start + p.step > top {
                throw fail("the \(name)'s repetition /\(p.step / unit) never repeats")
            }
        }
    }

    static func format(weekdays bits: Int) -> String {
        var s = ""
        var from = -1
        func close(_ x: Int) {
            if from >= 0 && x > from + 1 { s += (x > from + 2 ? ".." : ",") + shortDay(x - 1) }
        }
        for x in 0..<7 {
            if bits & (1 << x) != 0 {
                if from < 0 { s += (s.isEmpty ? "" : ",") + shortDay(x); from = x }
            } else if from >= 0 {
                close(x)
                from = -1
            }
        }
        close(7)
        return s
    }

    static func format(_ ps: [Part]?, width: Int, unit: Int = 1) -> String {
        guard let ps else { return "*" }
        if unit > 1 && ps.contains(where: { $0.start == 0 && $0.stop < 0 && $0.step == unit }) { return "*" }
        func pad(_ v: Int) -> String { let s = String(v); return String(repeating: "0", count: max(0, width - s.count)) + s }
        func frac(_ v: Int) -> String { let s = String(v % unit); return "." + String(repeating: "0", count: 6 - s.count) + s }
        return ps.map { p in
            var s = pad(p.start / unit)
            if unit > 1 && p.start % unit > 0 { s += frac(p.start) }
            if p.stop > 0 { s += ".." + pad(p.stop / unit); if unit > 1 && p.stop % unit > 0 { s += frac(p.stop) } }
            if p.step > 0 && !(p.stop > 0 && p.step == unit) { s += "/" + String(p.step / unit) }
            if unit > 1 && p.step % unit > 0 { s += frac(p.step) }
            return s
        }.joined(separator: ",")
    }
}

// MARK: - The next elapse

extension CalendarEvent {
    /// mktime(3) or timegm(3): normalizes `c` in place (a 32nd of a month is the next month's first; a local
    /// time that a daylight-saving change skips moves past the gap).
    func normalize(_ c: inout tm) -> Int {
        Int(utc ? timegm(&c) : mktime(&c))
    }

    /// The day `~n` stands for in `c`'s month (1: its last day), or -1.
    func endOfMonthDay(_ c: tm, _ n: Int) -> Int {
        var t = c
        t.tm_mon += 1
        t.tm_mday = Int32(1 - n)
        guard normalize(&t) >= 0, t.tm_mon == c.tm_mon else { return -1 }
        return Int(t.tm_mday)
    }

    /// The earliest value of `parts` at or after `value`: moves `value` there. -1: none; 1: moved; 0: already there.
    func match(_ parts: [Part]?, _ value: inout Int, in c: tm, isDay: Bool = false) -> Int {
        guard let parts else { return 0 }
        var best: Int?
        for p in parts {
            var start = p.start, stop = p.stop
            if isDay && endOfMonth {
                start = endOfMonthDay(c, p.start)
                stop = endOfMonthDay(c, p.stop)
                if stop > 0 { swap(&start, &stop) }
            }
            if start >= value {
                if best == nil || start < best! { best = start }
            } else if p.step > 0 {
                let k = start + p.step * ((value - start + p.step - 1) / p.step)
                if (best == nil || k < best!) && (stop < 0 || k <= stop) { best = k }
            }
        }
        guard let b = best else { return -1 }
        defer { value = b }
        return value != b ? 1 : 0
    }

    /// Whether `c` is a real instant as written (1), was moved forward by normalizing (0; `c` is updated), or
    /// cannot be (-1: beyond the last year, or normalizing went backwards).
    func withinBounds(_ c: inout tm) -> Int {
        if Int(c.tm_year) + 1900 > CalendarEvent.maxYear { return -1 }
        var t = c
        guard normalize(&t) >= 0 else { return -1 }
        func cmp(_ a: Int32, _ b: Int32) -> Int { a < b ? -1 : a > b ? 1 : 0 }
        var d = cmp(t.tm_year, c.tm_year)
        if d != 0 { t.tm_mon = 0 } else {
            d = cmp(t.tm_mon, c.tm_mon)
            if d != 0 { t.tm_mday = 1 } else {
                d = cmp(t.tm_mday, c.tm_mday)
                if d != 0 { t.tm_hour = 0 } else {
                    d = cmp(t.tm_hour, c.tm_hour)
                    if d != 0 { t.tm_min = 0 } else {
                        d = cmp(t.tm_min, c.tm_min)
                        if d != 0 { t.tm_sec = 0 } else { d = cmp(t.tm_sec, c.tm_sec) }
                    }
                }
            }
        }
        if d < 0 { return -1 }
        if d > 0 { c = t }
        return d == 0 ? 1 : 0
    }

    func matchesWeekday(_ c: tm) -> Bool {
        guard weekdays > 0 && weekdays < 127 else { return true }
        var t = c
        guard normalize(&t) >= 0 else { return false }
        let k = t.tm_wday == 0 ? 6 : Int(t.tm_wday) - 1
        return weekdays & (1 << k) != 0
    }

    /// Walks `c` forward, field by field from the year down, to the first instant every field matches;
    /// a field with no match left moves the one above it on and starts again. Bounded, as systemd's is.
    func find(_ c: inout tm, _ usec: inout Int) -> Bool {
        func field(_ f: WritableKeyPath<tm, Int32>, offset: Int32 = 0, _ parts: [Part]?, isDay: Bool = false) -> Int {
            var v = Int(c[keyPath: f] + offset)
            let r = match(parts, &v, in: c, isDay: isDay)
            c[keyPath: f] = Int32(v) - offset
            return r
        }
        for _ in 0..<1000 {
            _ = normalize(&c)
            c.tm_isdst = -1

            var r = field(\.tm_year, offset: 1900, year)
            if r > 0 { c.tm_mon = 0; c.tm_mday = 1; c.tm_hour = 0; c.tm_min = 0; c.tm_sec = 0; usec = 0 }
            if r < 0 || withinBounds(&c) <= 0 { return false }

            r = field(\.tm_mon, offset: 1, month)
            if r > 0 { c.tm_mday = 1; c.tm_hour = 0; c.tm_min = 0; c.tm_sec = 0; usec = 0 }
            if r < 0 { c.tm_year += 1; c.tm_mon = 0; c.tm_mday = 1; c.tm_hour = 0; c.tm_min = 0; c.tm_sec = 0; usec = 0; continue }
            r = withinBounds(&c)
            if r < 0 { c.tm_year += 1; c.tm_mon = 0; c.tm_mday = 1; c.tm_hour = 0; c.tm_min = 0; c.tm_sec = 0; usec = 0; continue }
            if r == 0 { continue }

            r = field(\.tm_mday, day, isDay: true)
            if r > 0 { c.tm_hour = 0; c.tm_min = 0; c.tm_sec = 0; usec = 0 }
            if r >= 0 { r = withinBounds(&c) }
            if r < 0 { c.tm_mon += 1; c.tm_mday = 1; c.tm_hour = 0; c.tm_min = 0; c.tm_sec = 0; usec = 0; continue }
            if r == 0 { continue }

            if !matchesWeekday(c) { c.tm_mday += 1; c.tm_hour = 0; c.tm_min = 0; c.tm_sec = 0; usec = 0; continue }

            r = field(\.tm_hour, hour)
            if r > 0 { c.tm_min = 0; c.tm_sec = 0; usec = 0 }
            if r >= 0 { r = withinBounds(&c) }
            if r < 0 { c.tm_mday += 1; c.tm_hour = 0; c.tm_min = 0; c.tm_sec = 0; usec = 0; continue }
            if r == 0 { continue }    // the hour may not exist today (a daylight-saving gap): from the normalized time

            r = field(\.tm_min, minute)
            if r > 0 { c.tm_sec = 0; usec = 0 }
            if r >= 0 { r = withinBounds(&c) }
            if r < 0 { c.tm_hour += 1; c.tm_min = 0; c.tm_sec = 0; usec = 0; continue }
            if r == 0 { continue }

            var us = Int(c.tm_sec) * CalendarEvent.usPerSecond + usec
            r = match(second, &us, in: c)
            usec = us % CalendarEvent.usPerSecond
            c.tm_sec = Int32(us / CalendarEvent.usPerSecond)
            if r >= 0 { r = withinBounds(&c) }
            if r < 0 { c.tm_min += 1; c.tm_sec = 0; usec = 0; continue }
            if r == 0 { continue }
            return true
        }
        return false
    }
}
