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
}
