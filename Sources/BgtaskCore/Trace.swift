import BgtaskJSON
import BgtaskPolicy

/// A trace: JSON lines as `bgtask watch --record` writes them, each with an RFC 3339 `time` and every
/// condition under `conditions`; what `policy simulate` replays.
public enum TraceFile {
    public struct Problem: Error, CustomStringConvertible {
        public var line: Int?
        public var message: String
        public var description: String { line.map { "line \($0): \(message)" } ?? message }
    }

    /// The records of a trace's text, in time order; the first problem found, with its line.
    public static func parse(_ text: String) throws(Problem) -> [TraceRecord] {
        var out: [TraceRecord] = []
        for (i, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let l = String(line).trimmingCharacters(in: " ")
            if l.isEmpty { continue }
            let json: JSONValue
            do { json = try JSONValue.parse(l) } catch { throw Problem(line: i + 1, message: "not JSON: \(error)") }
            guard case .string(let ts)? = json["time"], let time = Timestamp.parse(ts) else {
                throw Problem(line: i + 1, message: "no \"time\" in RFC 3339 form")
            }
            guard case .object(let flat)? = json["conditions"] else {
                throw Problem(line: i + 1, message: "no \"conditions\" object (record traces with `bgtask watch --record FILE`)")
            }
            if let last = out.last, time < last.time { throw Problem(line: i + 1, message: "time goes backwards (\(ts))") }
            out.append(TraceRecord(time: time, conditions: ConditionConversion.values(flat)))
        }
        guard !out.isEmpty else { throw Problem(line: nil, message: "no records") }
        return out
    }

    /// One line of a trace: every condition, not only what changed, so it can be replayed alone.
    public static func line(time: String, trigger: String, initial: Bool, changed: [String], conditions: [(String, JSONValue)]) -> JSONValue {
        .object([("time", .string(time)), ("trigger", .string(trigger)), ("initial", .bool(initial)),
                 ("changed", .array(changed.map(JSONValue.string))), ("conditions", .object(conditions))])
    }
}

public enum Timestamp {
    /// RFC 3339 (`2026-11-22T02:15:52.598Z`, or with a `+01:00` offset) to seconds since the epoch.
    public static func parse(_ s: String) -> Double? {
        let c = Array(s.utf8)
        func num(_ a: Int, _ n: Int) -> Int? {
            guard a + n <= c.count else { return nil }
            var v = 0
            for b in c[a..<a + n] { guard b >= 48 && b <= 57 else { return nil }; v = v * 10 + Int(b - 48) }
            return v
        }
        guard c.count >= 20, let y = num(0, 4), let mo = num(5, 2), let d = num(8, 2), let h = num(11, 2),
              let mi = num(14, 2), let se = num(17, 2), (1...12).contains(mo), (1...31).contains(d), h < 24, mi < 60, se < 61 else { return nil }
        var i = 19
        var frac = 0.0
        if i < c.count, c[i] == UInt8(ascii: ".") {
            i += 1
            var scale = 0.1
            while i < c.count, c[i] >= 48, c[i] <= 57 { frac += Double(c[i] - 48) * scale; scale /= 10; i += 1 }
        }
        var offset = 0
        if i < c.count, c[i] == UInt8(ascii: "Z") || c[i] == UInt8(ascii: "z") { i += 1 }
        else if i < c.count, c[i] == UInt8(ascii: "+") || c[i] == UInt8(ascii: "-") {
            guard let oh = num(i + 1, 2), let om = num(i + 4, 2) else { return nil }
            offset = (oh * 3600 + om * 60) * (c[i] == UInt8(ascii: "+") ? 1 : -1)
            i += 6
        } else { return nil }
        guard i == c.count else { return nil }
        // Days from the civil date (Howard Hinnant's algorithm).
        let yy = mo <= 2 ? y - 1 : y
        let era = (yy >= 0 ? yy : yy - 399) / 400
        let yoe = yy - era * 400
        let doy = (153 * (mo + (mo > 2 ? -3 : 9)) + 2) / 5 + d - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        let days = era * 146_097 + doe - 719_468
        return Double(days * 86_400 + h * 3600 + mi * 60 + se - offset) + frac
    }

    public static func clock(_ t: Double) -> String {
        let s = Int(t.rounded(.down)) % 86_400
        func p(_ v: Int) -> String { v < 10 ? "0\(v)" : String(v) }
        return "\(p(s / 3600)):\(p(s / 60 % 60)):\(p(s % 60))"
    }
}

