@testable import BgtaskCore
import Testing

/// `bgtask report`'s picture: it draws what was read, and says where nothing was.
@Suite("the report's timeline: never a value nobody read")
struct TimelineTests {
    @Test("no two states share a colour, and none is the line's")
    func distinctColours() {
        let colours = Timeline.palette.map(\.color) + [Timeline.lineColor]
        #expect(Set(colours).count == colours.count, "\(Timeline.palette)")
        // A value the palette does not know gets one of its own, not a known state's.
        for odd in ["warm", "hot", "null", "x"] { #expect(!colours.contains(Timeline.color(odd)), "\(odd): \(Timeline.color(odd))") }
    }

    @Test("a state after an 'unread' row is 'not read' to the next reading; a run's reading inside it is a mark of a moment")
    func statesNotRead() {
        var t = Timeline(start: 1000, end: 2000, title: "t")
        t.addStates("heat", changes: [(900, "nominal"), (1200, "unread"), (1800, "serious")], samples: [(1500, "critical"), (1100, "fair")])
        let spans = t.lanes[0].spans
        #expect(spans.map(\.state) == ["nominal", Timeline.notRead, "serious", "critical"], "\(spans)")
        #expect(spans[0].start == 1000 && spans[0].end == 1200)
        #expect(spans[1].start == 1200 && spans[1].end == 1800, "not read from the mark to the next reading")
        #expect(spans[3].start == 1500 && spans[3].end == 1500, "the run's reading is a moment, not a stretch")
        // 1100 was read by the daemon (nominal): a sample there adds nothing.
        let svg = t.svg()
        #expect(svg.contains(">not read</text>"), "the stretch says it in words")
        #expect(svg.contains("data-legend=\"not read\"") && svg.contains("data-legend=\"critical\""), "the legend names every colour drawn")
        // Before the first reading nothing is known either.
        var u = Timeline(start: 1000, end: 2000, title: "t")
        u.addStates("charger", changes: [(1500, "true")]) { $0 == "true" ? "on the charger" : "on battery" }
        #expect(u.lanes[0].spans.map(\.state) == [Timeline.notRead, "on the charger"])
        // No history at all, only a run's reading: "not read" over the window, and the mark.
        var w = Timeline(start: 1000, end: 2000, title: "t")
        w.addStates("charger", changes: [], samples: [(1300, "true")]) { $0 == "true" ? "on the charger" : "on battery" }
        #expect(w.lanes[0].spans.map { "\($0.state) \(Int($0.start))-\(Int($0.end))" } == ["not read 1000-2000", "on the charger 1300-1300"])
    }

    @Test("a number's line stops where it was not read; that stretch is 'not read', a run's readings dots")
    func seriesNotRead() {
        var t = Timeline(start: 1000, end: 2000, title: "t")
        t.addSeries("temperature", changes: [(900, 45), (1200, nil), (1800, 50)], samples: [(1500, 101)], unit: "°C")
        let lane = t.lanes[0]
        #expect(lane.spans.map { [$0.start, $0.end] } == [[1200, 1800]] && lane.spans.first?.state == Timeline.notRead)
        #expect(lane.samples.map(\.value) == [101])
        #expect(lane.range == 44...102, "the run's 101 °C is on the scale")
        let svg = t.svg()
        // The path has two pieces (45 to 1200, 50 from 1800): nothing is drawn over the stretch nobody read.
        let path = svg.split(separator: "\n").first { $0.contains("<path") }.map(String.init) ?? ""
        #expect(path.components(separatedBy: "M").count - 1 == 2, "\(path)")
        #expect(!path.contains("L\(Timeline.n(t.x(1500)))"), "\(path)")
        #expect(svg.contains("<circle") && svg.contains("data-value=\"101\""))
        // Read with no value (no usable zone) is "unknown", not "not read".
        var u = Timeline(start: 1000, end: 2000, title: "t")
        u.addSeries("temperature", changes: [(900, nil), (1500, nil)], noValue: [900], unit: "°C")
        #expect(u.lanes.first?.spans.map(\.state) == ["unknown", Timeline.notRead], "\(u.lanes.first?.spans ?? [])")
    }

    @Test("an event of a moment is drawn 3 px wide at least, inside the plot")
    func minimumWidth() {
        var t = Timeline(start: 0, end: 86_400, title: "t")
        t.addTask("x", events: [.init(time: 100, event: "started", detail: ""), .init(time: 101, event: "expired", detail: ""),
                                .init(time: 101.1, event: "finished", detail: "")])
        let svg = t.svg()
        let expired = svg.split(separator: "\n").first { $0.contains("data-state=\"expired\"") }.map(String.init) ?? ""
        #expect(expired.contains("width=\"3\""), "\(expired)")
    }
}
