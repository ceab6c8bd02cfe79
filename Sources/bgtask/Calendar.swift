import ArgumentParser
import BgtaskConfig
import BgtaskCore
import BgtaskJSON
import BgtaskPolicy

extension Bgtask {
    struct Calendar: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "calendar",
            abstract: "Check calendar events (--on-calendar) and show when they elapse next, as systemd-analyze calendar does.",
            discussion: """
            The syntax and meaning are systemd's (systemd.time(7)): `daily`, `Mon..Fri 09:00`, `*-*-* 01:00`, \
            `Sat,Sun *-*-1..7 03:30`, `*-*~01` (the last day of each month), `*:0/15`, with UTC at the end for \
            UTC (other time zones are refused; without one the local zone is used). Exit status: 0; 2 when an \
            expression does not parse (each is named with the reason).
            """)

        @Option(name: .long, help: ArgumentHelp("How many elapses to show.", valueName: "n"))
        var iterations = 1

        @Option(name: .long, help: ArgumentHelp("Count from this time instead of now: @SECONDS since the epoch, or what --earliest takes.", valueName: "when"))
        var baseTime: String?

        @Flag(name: .long, help: "Print each expression with its normalized form and elapses (ISO-8601 and seconds since the epoch) as JSON.")
        var json = false

        @Argument(help: ArgumentHelp("Calendar events, such as 'Mon..Fri 01:00' (quote each one).", valueName: "expression"))
        var expressions: [String]

        mutating func validate() throws {
            if expressions.isEmpty { throw ValidationError("give a calendar event, such as 'Mon..Fri 01:00' or daily") }
            if !(1...1000).contains(iterations) { throw ValidationError("--iterations \(iterations): 1 to 1000") }
            if let b = baseTime, Calendar.base(b) == nil {
                throw ValidationError("--base-time \(b): @SECONDS since the epoch, or a time such as 2026-11-22T21:00 or 'tomorrow 01:00'")
            }
        }

        static func base(_ s: String) -> Double? {
            if s.hasPrefix("@"), let v = Double(s.dropFirst()), v >= 0, v < 7e9 { return v }
            return parseWhen(s, now: wallClockNow())
        }

        func run() throws {
            let now = wallClockNow()
            let from = baseTime.flatMap(Calendar.base) ?? now
            var items: [JSONValue] = []
            var failed = false
            for (n, text) in expressions.enumerated() {
                let event: CalendarEvent
                do { event = try CalendarEvent(parsing: text) } catch {
                    failed = true
                    if json { items.append(.object([("original", .string(text)), ("error", .string(error.why))])) }
                    else { err(error.description) }
                    continue
                }
                let next = event.elapses(after: from, count: iterations)
                if json {
                    items.append(.object([("original", .string(text)), ("normalized", .string(event.description)),
                                          ("next", .array(next.map { .string(isoText($0)) })),
                                          ("next_epoch", .array(next.map { .number($0) }))]))
                    continue
                }
                if n > 0 { out("") }
                out("  Original form: \(Terminal.safe(text))")
                out("Normalized form: \(event)")
                if next.isEmpty { out("    Next elapse: never") }
                for (i, t) in next.enumerated() {
                    let label = i == 0 ? "    Next elapse" : "       Iter. #\(i + 1)"
                    out("\(label): \(dateText(t))")
                    out("       From now: \(t >= now ? "in " + formatDuration((t - now).rounded(.up)) : formatDuration((now - t).rounded(.down)) + " ago")")
                }
            }
            if json { print(JSONValue.array(items).rendered) }
            if failed { throw ExitCode(ExitStatus.usage) }
        }
    }
}
