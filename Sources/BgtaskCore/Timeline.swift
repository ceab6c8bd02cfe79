#if canImport(Glibc)
@preconcurrency import Glibc
#endif

/// A picture of a stretch of time: each task's life (waiting, running, throttled, paused, expired) against the
/// charger, the battery, heat, the person and the network — built from the audit trail and the readings'
/// history (`bgtask report`) or from a recorded trace (`policy simulate --html`), drawn as one self-contained SVG
/// or HTML page: no script, no network, hover text (SVG `<title>`) with the rule and its file:line. Pure.
public struct Timeline: Sendable {
    public struct Span: Sendable, Equatable {
        public var start: Double
        public var end: Double
        /// What it was (the CSS class too): waiting, running, throttled, paused, expired; or a reading's value.
        public var state: String
        public var hover: String
    }

    public struct Lane: Sendable {
        public var name: String
        public var spans: [Span] = []
        /// A reading drawn as a line (battery %, °C), with its scale; a nil value: from then on it was not read
        /// (the line stops; no value is drawn where none was read).
        public var points: [(time: Double, value: Double?)] = []
        /// Single readings found elsewhere (what a task's run recorded in the audit trail) inside a span nobody
        /// else read: drawn as dots, not as a line that would say the value held.
        public var samples: [(time: Double, value: Double)] = []
        public var range: ClosedRange<Double>?
        public var unit = ""
        public var isTask = false
    }

    public var start: Double
    public var end: Double
    public var lanes: [Lane] = []
    public var title: String

    public init(start: Double, end: Double, title: String) {
        self.start = start
        self.end = max(end, start + 1)
        self.title = title
    }

    // MARK: - Building

    /// One event of a task's life, from the audit trail or a simulation.
    public struct TaskEvent: Sendable {
        public var time: Double
        /// The audit trail's event names: deferred, started, throttled, unthrottled, paused, resumed, expired,
        /// killed, finished, gave-up, failed.
        public var event: String
        public var detail: String
        /// The deciding rule and its file:line, if one decided.
        public var rule: String?
        public var reason: String?

        public init(time: Double, event: String, detail: String, rule: String? = nil, reason: String? = nil) {
            self.time = time
            self.event = event
            self.detail = detail
            self.rule = rule
            self.reason = reason
        }
    }

    /// A task's lane from its events in time order (several runs may follow each other in one lane).
    public mutating func addTask(_ name: String, events: [TaskEvent]) {
        var lane = Lane(name: name)
        lane.isTask = true
        var state: String?
        var since = 0.0
        var hover = ""
        func close(at t: Double) {
            if let s = state, t > since { lane.spans.append(Span(start: max(since, start), end: min(t, end), state: s, hover: hover)) }
        }
        func open(_ s: String?, at t: Double, _ h: String) {
            close(at: t)
            state = s
            since = t
            hover = h
        }
        func why(_ e: TaskEvent) -> String {
            var h = e.reason ?? e.detail
            if let r = e.rule { h += " — rule \(r)" }
            return h
        }
        for e in events where e.time <= end {
            let at = Timeline.clock(e.time)
            switch e.event {
            case "deferred":
                let h = "\(name) waiting since \(at): \(why(e))"
                if state != "waiting" || !hover.hasSuffix(why(e)) { open("waiting", at: e.time, h) }
            case "started", "resumed", "unthrottled": open("running", at: e.time, "\(name) running since \(at) (\(e.event))")
            case "throttled": open("throttled", at: e.time, "\(name) throttled to \(e.detail) at \(at): \(why(e))")
            case "paused": open("paused", at: e.time, "\(name) paused at \(at): \(why(e))")
            case "expired": open("expired", at: e.time, "\(name) expired at \(at): \(why(e))")
            case "finished", "gave-up", "failed", "lost": open(nil, at: e.time, "")
            default: break
            }
        }
        close(at: end)
        guard !lane.spans.isEmpty else { return }
        lanes.append(lane)
    }

    /// What a span nobody read is drawn as, and the text the readings' history marks one with (bgtaskd writes it
    /// when it stops reading a value: heat while no task's verdict depends on it, everything when it stops).
    public static let notRead = "not read"
    public static let unreadMark = "unread"

    /// A reading that takes a few values (the charger, heat, the person, the network) as colored spans. A change
    /// holds until the next; "unread" (and the stretch before the first change) is drawn as "not read", and
    /// `samples` — single readings a task's run recorded then — as short marks inside it: never a value over a
    /// stretch nobody read.
    public mutating func addStates(_ name: String, changes: [(time: Double, value: String)], samples: [(time: Double, value: String)] = [],
                                   describe: (String) -> String = { $0 }) {
        var lane = Lane(name: name)
        func state(_ v: String) -> String { v == Timeline.unreadMark ? Timeline.notRead : v == "null" ? "unknown" : describe(v) }
        if changes.isEmpty { lane.spans.append(Span(start: start, end: end, state: Timeline.notRead, hover: "\(name): not read")) }
        if let first = changes.first, first.time > start {
            lane.spans.append(Span(start: start, end: min(first.time, end), state: Timeline.notRead,
                                   hover: "\(name): not read before \(Timeline.clock(first.time))"))
        }
        var unread: [(Double, Double)] = []
        for (i, c) in changes.enumerated() {
            let until = i + 1 < changes.count ? changes[i + 1].time : end
            guard until > start, c.time < end else { continue }
            let st = state(c.value), from = max(c.time, start)
            let hover = st == Timeline.notRead ? "\(name): not read from \(Timeline.clock(from))" : "\(name): \(st) from \(Timeline.clock(from))"
            lane.spans.append(Span(start: from, end: min(until, end), state: st, hover: hover))
            if st == Timeline.notRead { unread.append((from, min(until, end))) }
        }
        if changes.isEmpty { unread.append((start, end)) } else if let first = changes.first, first.time > start { unread.append((start, first.time)) }
        for smp in samples where unread.contains(where: { smp.time >= $0.0 && smp.time < $0.1 }) {
            let st = state(smp.value)
            guard st != Timeline.notRead else { continue }
            lane.spans.append(Span(start: smp.time, end: smp.time, state: st,
                                   hover: "\(name): \(st) at \(Timeline.clock(smp.time)), read by a task's run (the audit trail)"))
        }
        if !changes.isEmpty || lane.spans.contains(where: { $0.state != Timeline.notRead }) { lanes.append(lane) }
    }

    /// A reading with a number (battery %, °C), as a line; a nil value (not read, or no value) cuts it, and
    /// that stretch is drawn as "not read". `samples` inside such a stretch are drawn as dots.
    /// `noValue`: the times of changes that were read and had no value (a machine without a usable zone): their
    /// stretch is "unknown", not "not read".
    public mutating func addSeries(_ name: String, changes: [(time: Double, value: Double?)], samples: [(time: Double, value: Double)] = [],
                                   noValue: Set<Double> = [], unit: String) {
        var lane = Lane(name: name)
        lane.unit = unit
        var last: Double??
        var noValue = noValue
        for c in changes {
            if c.time < start {
                last = .some(c.value)
                // The change carried to the window's start keeps what it was: no value, or not read.
                if noValue.contains(c.time) { noValue.insert(start) } else { noValue.remove(start) }
                continue
            }
            guard c.time <= end else { break }
            if let l = last, lane.points.isEmpty { lane.points.append((start, l)) }
            lane.points.append((c.time, c.value))
        }
        if lane.points.isEmpty, let l = last { lane.points.append((start, l)) }
        if let first = lane.points.first, first.time > start { lane.points.insert((start, nil), at: 0) }
        if lane.points.isEmpty { lane.points.append((start, nil)) }
        lane.points.append((end, lane.points.last!.value))
        // The stretches with no value, as spans (drawn under the line's background as "not read").
        for (j, p) in lane.points.enumerated() where p.value == nil && j + 1 < lane.points.count {
            let until = lane.points[j + 1].time
            guard until > p.time else { continue }
            let state = noValue.contains(p.time) ? "unknown" : Timeline.notRead
            if let prev = lane.spans.last, prev.end == p.time, prev.state == state { lane.spans[lane.spans.count - 1].end = until; continue }
            lane.spans.append(Span(start: p.time, end: until, state: state,
                                   hover: "\(name): \(state == "unknown" ? "read, no value" : "not read") from \(Timeline.clock(p.time))"))
        }
        lane.samples = samples.filter { s in lane.spans.contains { $0.state == Timeline.notRead && s.time >= $0.start && s.time < $0.end } }
        let values = lane.points.compactMap(\.value) + lane.samples.map(\.value)
        guard !changes.isEmpty || !values.isEmpty else { return }
        lane.range = ((values.min() ?? 0) - 1)...((values.max() ?? 0) + 1)
        lanes.append(lane)
    }

    // MARK: - Drawing

    public static let width = 1200.0
    static let labelWidth = 190.0, laneHeight = 26.0, gap = 8.0, top = 34.0

    public var plotWidth: Double { Timeline.width - Timeline.labelWidth - 10 }

    /// Where an instant is drawn, in the SVG's x.
    public func x(_ t: Double) -> Double { Timeline.labelWidth + (t - start) / (end - start) * plotWidth }

    /// The narrowest a bar is drawn: an event of a moment (an expiry, a reading a run recorded) stays visible.
    public static let minimumWidth = 3.0
    static let legendHeight = 22.0

    /// Every state drawn, in a fixed order (the tasks' first), each with its own colour: the legend's entries.
    public var statesDrawn: [String] {
        let drawn = Set(lanes.flatMap { $0.spans.map(\.state) })
        let known = Timeline.palette.map(\.state)
        return known.filter(drawn.contains) + drawn.subtracting(known).sorted()
    }

    public func svg() -> String {
        func n(_ v: Double) -> String { Timeline.n(v) }
        let legend = statesDrawn, lines = lanes.contains { $0.range != nil }
        let lanesBottom = Timeline.top + Double(lanes.count) * (Timeline.laneHeight + Timeline.gap)
        let height = lanesBottom + (legend.isEmpty && !lines ? 0 : Timeline.legendHeight) + 10
        var s = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"\(n(Timeline.width))\" height=\"\(n(height))\" "
        s += "viewBox=\"0 0 \(n(Timeline.width)) \(n(height))\" font-family=\"sans-serif\" font-size=\"12\" "
        s += "data-t0=\"\(n(start))\" data-t1=\"\(n(end))\" data-x0=\"\(n(Timeline.labelWidth))\" data-plot-width=\"\(n(plotWidth))\">\n"
        s += "<title>\(Timeline.escape(title))</title>\n<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n"
        // The time axis: a tick every 1, 2, 3, 6 or 12 hours (or 10 minutes for short stretches).
        let span = end - start
        let step = [60.0, 300, 600, 1800, 3600, 7200, 10_800, 21_600, 43_200, 86_400].first { span / $0 <= 14 } ?? 86_400
        var tick = (start / step).rounded(.up) * step
        while tick <= end {
            let xt = x(tick)
            s += "<line x1=\"\(n(xt))\" y1=\"\(n(Timeline.top - 6))\" x2=\"\(n(xt))\" y2=\"\(n(lanesBottom))\" stroke=\"#dddddd\"/>"
            s += "<text x=\"\(n(xt))\" y=\"\(n(Timeline.top - 10))\" text-anchor=\"middle\" fill=\"#555555\">\(Timeline.escape(Timeline.clock(tick, short: true)))</text>\n"
            tick += step
        }
        for (i, lane) in lanes.enumerated() {
            let y = Timeline.top + Double(i) * (Timeline.laneHeight + Timeline.gap)
            s += "<text x=\"6\" y=\"\(n(y + 17))\" fill=\"#222222\"\(lane.isTask ? " font-weight=\"bold\"" : "")>\(Timeline.escape(lane.name))</text>\n"
            if lane.range != nil {
                s += "<rect x=\"\(n(Timeline.labelWidth))\" y=\"\(n(y))\" width=\"\(n(plotWidth))\" height=\"\(n(Timeline.laneHeight))\" fill=\"#f6f6f6\"/>"
            }
            // Spans of a moment last, so a wider one never covers them.
            for sp in lane.spans.sorted(by: { ($0.end - $0.start > 0 ? 0 : 1, $0.start) < ($1.end - $1.start > 0 ? 0 : 1, $1.start) }) {
                let w = max(Timeline.minimumWidth, x(sp.end) - x(sp.start))
                // A bar narrower than the minimum starts where it starts (a moment's is centred on it), and stays
                // inside the plot.
                let x0 = max(Timeline.labelWidth, min(x(sp.start) - (sp.end == sp.start ? w / 2 : 0), Timeline.labelWidth + plotWidth - w))
                s += "<rect class=\"\(Timeline.escape(Timeline.cssClass(sp.state)))\" x=\"\(n(x0))\" y=\"\(n(y))\" width=\"\(n(w))\" height=\"\(n(Timeline.laneHeight))\" "
                s += "fill=\"\(Timeline.color(sp.state))\" data-lane=\"\(Timeline.escape(lane.name))\" data-state=\"\(Timeline.escape(sp.state))\" "
                s += "data-start=\"\(n(sp.start))\" data-end=\"\(n(sp.end))\"><title>\(Timeline.escape(sp.hover))</title></rect>\n"
                if sp.state == Timeline.notRead && w >= 70 {
                    s += "<text x=\"\(n(x0 + w / 2))\" y=\"\(n(y + 17))\" text-anchor=\"middle\" fill=\"#ffffff\" data-lane=\"\(Timeline.escape(lane.name))\">not read</text>\n"
                }
            }
            if let r = lane.range {
                func yv(_ v: Double) -> Double { y + Timeline.laneHeight - (v - r.lowerBound) / (r.upperBound - r.lowerBound) * Timeline.laneHeight }
                var d = ""
                var previous: Double?
                for p in lane.points {
                    // A step: the value holds until the next reading; a nil one ends the line until the next value.
                    if let v = p.value {
                        if let pv = previous { d += " L\(n(x(p.time))),\(n(yv(pv))) L\(n(x(p.time))),\(n(yv(v)))" } else { d += (d.isEmpty ? "M" : " M") + "\(n(x(p.time))),\(n(yv(v)))" }
                    } else if let pv = previous {
                        d += " L\(n(x(p.time))),\(n(yv(pv)))"
                    }
                    previous = p.value
                }
                if !d.isEmpty { s += "<path d=\"\(d)\" fill=\"none\" stroke=\"\(Timeline.lineColor)\" stroke-width=\"2\" data-lane=\"\(Timeline.escape(lane.name))\"/>" }
                for smp in lane.samples {
                    s += "<circle cx=\"\(n(x(smp.time)))\" cy=\"\(n(yv(smp.value)))\" r=\"3.5\" fill=\"\(Timeline.lineColor)\" data-lane=\"\(Timeline.escape(lane.name))\" "
                    s += "data-value=\"\(n(smp.value))\"><title>\(Timeline.escape("\(lane.name): \(n(smp.value)) \(lane.unit) at \(Timeline.clock(smp.time)), read by a task's run (the audit trail)"))</title></circle>"
                }
                let values = lane.points.compactMap(\.value) + lane.samples.map(\.value)
                if let lo = values.min(), let hi = values.max() {
                    s += "<text x=\"\(n(Timeline.width - 14))\" y=\"\(n(y + 17))\" text-anchor=\"end\" fill=\"#555555\">\(n(lo))–\(n(hi)) \(Timeline.escape(lane.unit))"
                    s += "<title>\(Timeline.escape("\(lane.name): from \(n(lo)) to \(n(hi)) \(lane.unit) where read"))</title></text>"
                }
                s += "\n"
            }
        }
        // The legend: every colour drawn, named; a line's colour too.
        var lx = 6.0
        let ly = lanesBottom + 4
        for state in legend {
            s += "<rect class=\"legend\" x=\"\(n(lx))\" y=\"\(n(ly))\" width=\"12\" height=\"12\" fill=\"\(Timeline.color(state))\" data-legend=\"\(Timeline.escape(state))\"/>"
            s += "<text x=\"\(n(lx + 16))\" y=\"\(n(ly + 11))\" fill=\"#222222\">\(Timeline.escape(state))</text>\n"
            lx += 16 + Double(state.count) * 7 + 14
        }
        if lines {
            s += "<line class=\"legend\" x1=\"\(n(lx))\" y1=\"\(n(ly + 6))\" x2=\"\(n(lx + 12))\" y2=\"\(n(ly + 6))\" stroke=\"\(Timeline.lineColor)\" stroke-width=\"2\"/>"
            s += "<text x=\"\(n(lx + 16))\" y=\"\(n(ly + 11))\" fill=\"#222222\">a reading's value (dots: read by a task's run)</text>\n"
        }
        return s + "</svg>\n"
    }

    /// One page with the picture (its legend within) and, when given, a table of what each task cost.
    public func html(costs: String = "") -> String {
        var h = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>\(Timeline.escape(title))</title>\n"
        h += "<style>body{font-family:sans-serif;margin:16px;color:#222}h1{font-size:18px}table{border-collapse:collapse;margin-top:12px}"
        h += "td,th{padding:3px 10px;text-align:right;border-bottom:1px solid #ddd}td:first-child,th:first-child{text-align:left}</style>\n</head>\n<body>\n"
        h += "<h1>\(Timeline.escape(title))</h1>\n<p>\(Timeline.escape(Timeline.clock(start))) to \(Timeline.escape(Timeline.clock(end))). "
        h += "Point at a bar for what decided it (the rule and its file:line). A stretch nobody read is drawn as “not read”, never as a value.</p>\n"
        h += svg()
        return h + costs + "</body>\n</html>\n"
    }

    /// Each state's colour, no two alike (`ReportTests` checks it): a task's life, then the readings' values.
    static let palette: [(state: String, color: String)] = [
        ("waiting", "#c9ced6"), ("running", "#3a9a4a"), ("throttled", "#e0b12f"), ("paused", "#e07b2f"), ("expired", "#c0392b"),
        ("on the charger", "#5b8fd6"), ("on battery", "#f0d9a8"),
        ("nominal", "#cfe8cf"), ("fair", "#f3e29b"), ("serious", "#f0a35e"), ("critical", "#d9534f"),
        ("present", "#8e6fc4"), ("away", "#d8ccef"),
        ("online", "#2e8b8b"), ("offline", "#e8b4ae"),
        ("unknown", "#eeeeee"), (Timeline.notRead, "#8a8a8a"),
    ]
    static let lineColor = "#1f6fb2"

    static func color(_ state: String) -> String {
        if let c = palette.first(where: { $0.state == state }) { return c.color }
        // A value the palette does not know (a trace's own): a colour of its own from its name, never a known one.
        var h: UInt32 = 2_166_136_261
        for b in state.utf8 { h = (h ^ UInt32(b)) &* 16_777_619 }
        func hex(_ v: UInt32) -> String { let t = String(v & 0xff, radix: 16); return t.count == 1 ? "0" + t : t }
        var c = "#" + hex(h >> 16 | 0x40) + hex(h >> 8 | 0x40) + hex(h | 0x40)
        if palette.contains(where: { $0.color == c }) || c == lineColor { c = "#" + hex(h >> 16 | 0x40) + hex(h >> 8 | 0x40) + hex(h ^ 0x01 | 0x40) }
        return c
    }

    static func cssClass(_ state: String) -> String { String(state.map { $0.isLetter || $0.isNumber ? $0 : "-" }) }

    static func n(_ v: Double) -> String {
        if v == v.rounded() && abs(v) < 1e15 { return String(Int64(v)) }
        return String((v * 100).rounded() / 100)
    }

    /// XML text: `&`, `<`, `>` and `"`, and no control characters (a reason from a policy file is text from outside).
    public static func escape(_ s: String) -> String {
        var o = ""
        for u in s.unicodeScalars {
            switch u {
            case "&": o += "&amp;"
            case "<": o += "&lt;"
            case ">": o += "&gt;"
            case "\"": o += "&quot;"
            default: if u.value < 0x20 && u != "\t" { o += " " } else { o.unicodeScalars.append(u) }
            }
        }
        return o
    }

    static func clock(_ t: Double, short: Bool = false) -> String {
        var secs = time_t(t.rounded(.down)), parts = tm()
        localtime_r(&secs, &parts)
        func p(_ v: Int32) -> String { v < 10 ? "0\(v)" : String(v) }
        let hm = "\(p(parts.tm_hour)):\(p(parts.tm_min))"
        if short { return hm }
        return "\(parts.tm_year + 1900)-\(p(parts.tm_mon + 1))-\(p(parts.tm_mday)) \(hm)"
    }
}
