@testable import BgtaskCore
import BgtaskPolicy
import Testing

@Suite("the readings' history: a row per change worth keeping, bounded")
struct ReadingHistoryTests {
    @Test("a row per change of value; a temperature or charge moving less than 2 is not one; a temperature at most once a minute")
    func rowsPerChange() {
        var h = ReadingHistory()
        var now = 1_800_000_000.0
        let first = h.changes(["power.external": .bool(false), "thermal.celsius": .number(50), "battery.percent": .number(80)], now: now)
        #expect(first.map(\.name) == ReadingHistory.names, "every name once at first, unknown ones as null")
        #expect(first.first { $0.name == "user.idle" }?.value == "null")
        now += 2
        #expect(h.changes(["power.external": .bool(false), "thermal.celsius": .number(51.4), "battery.percent": .number(79)], now: now).isEmpty)
        now += 2
        let plug = h.changes(["power.external": .bool(true), "thermal.celsius": .number(53), "battery.percent": .number(79)], now: now)
        #expect(plug.map(\.name) == ["power.external"], "53 °C four seconds after 50 °C waits for its minute")
        now += 60
        let later = h.changes(["power.external": .bool(true), "thermal.celsius": .number(53), "battery.percent": .number(77.6)], now: now)
        #expect(later.map(\.name) == ["thermal.celsius", "battery.percent"])
        #expect(later.map(\.value) == ["53", "78"])
        #expect(h.changes(["power.external": .bool(true), "thermal.celsius": .number(53), "battery.percent": .number(78)], now: now + 5).isEmpty,
                "nothing moved: no row (keeping history costs no write while nothing changes)")
    }

    @Test("heat not read is one 'unread' row, not the last value kept; the next reading is a row at once; a stop marks every name")
    func unreadRows() {
        var h = ReadingHistory()
        var now = 1_800_000_000.0
        _ = h.changes(["thermal.state": .string("nominal"), "thermal.celsius": .number(45)], now: now)
        now += 5
        let off = h.changes(["thermal.state": .string("nominal"), "thermal.celsius": .number(45)], now: now, unread: ReadingHistory.thermalNames)
        #expect(off.map(\.name).sorted() == ["thermal.celsius", "thermal.state"] && off.allSatisfy { $0.value == "unread" }, "\(off)")
        #expect(h.changes(["thermal.celsius": .number(45)], now: now + 1, unread: ReadingHistory.thermalNames).isEmpty, "said once")
        now += 10
        // Read again 15 s after the last row: written now, not after its minute.
        let on = h.changes(["thermal.state": .string("serious"), "thermal.celsius": .number(88)], now: now)
        #expect(on.map(\.value).sorted() == ["88", "serious"], "\(on)")
        // A jump of 10 °C or more within the minute is written too (no later row may come to correct it).
        #expect(h.changes(["thermal.state": .string("serious"), "thermal.celsius": .number(101)], now: now + 2).map(\.value) == ["101"])
        let stop = h.stopped(now: now + 3)
        #expect(Set(stop.map(\.name)) == Set(ReadingHistory.names) && stop.allSatisfy { $0.value == "unread" }, "\(stop)")
    }
}
