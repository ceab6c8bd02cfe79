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
        /// A reading drawn as a line (battery %, °C), with its scale.
        public var points: [(time: Double, value: Double)] = []
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

    /// A reading that takes a few values (the charger, heat, the person, the network) as colored spans.
    public mutating func addStates(_ name: String, changes: [(time: Double, value: String)], describe: (String) -> String = { $0 }) {
        var lane = Lane(name: name)
        for (i, c) in changes.enumerated() {
            let until = i + 1 < changes.count ? changes[i + 1].time : end
            guard until > start, c.time < end else { continue }
            lane.spans.append(Span(start: max(c.time, start), end: min(until, end), state: describe(c.value),
                                   hover: "\(name): \(describe(c.value)) from \(Timeline.clock(max(c.time, start)))"))
        }
        if !lane.spans.isEmpty { lanes.append(lane) }
    }

    /// A reading with a number (battery %, °C), as a line.
    public mutating func addSeries(_ name: String, changes: [(time: Double, value: Double)], unit: String) {
        var lane = Lane(name: name)
        lane.unit = unit
        var last: Double?
        for c in changes {
            if c.time < start { last = c.value; continue }
            guard c.time <= end else { break }
            if let l = last, lane.points.isEmpty { lane.points.append((start, l)) }
            lane.points.append((c.time, c.value))
        }
        if lane.points.isEmpty, let l = last { lane.points.append((start, l)) }
        guard let lastPoint = lane.points.last else { return }
        lane.points.append((end, lastPoint.value))
        let values = lane.points.map(\.value)
        lane.range = (values.min()! - 1)...(values.max()! + 1)
        lanes.append(lane)
    }

    // MARK: - Drawing

    public static let width = 1200.0
    static let labelWidth = 190.0, laneHeight = 26.0, gap = 8.0, top = 34.0

    public var plotWidth: Double { Timeline.width - Timeline.labelWidth - 10 }

    /// Where an instant is drawn, in the SVG's x.
    public func x(_ t: Double) -> Double { Timeline.labelWidth + (t - start) / (end - start) * plotWidth }

    public func svg() -> String {
        func n(_ v: Double) -> String { Timeline.n(v) }
        let height = Timeline.top + Double(lanes.count) * (Timeline.laneHeight + Timeline.gap) + 10
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
            s += "<line x1=\"\(n(xt))\" y1=\"\(n(Timeline.top - 6))\" x2=\"\(n(xt))\" y2=\"\(n(height - 10))\" stroke=\"#dddddd\"/>"
            s += "<text x=\"\(n(xt))\" y=\"\(n(Timeline.top - 10))\" text-anchor=\"middle\" fill=\"#555555\">\(Timeline.escape(Timeline.clock(tick, short: true)))</text>\n"
            tick += step
        }
        for (i, lane) in lanes.enumerated() {
            let y = Timeline.top + Double(i) * (Timeline.laneHeight + Timeline.gap)
            s += "<text x=\"6\" y=\"\(n(y + 17))\" fill=\"#222222\"\(lane.isTask ? " font-weight=\"bold\"" : "")>\(Timeline.escape(lane.name))</text>\n"
            for sp in lane.spans {
                let x0 = x(sp.start), w = max(1, x(sp.end) - x0)
                s += "<rect class=\"\(Timeline.escape(Timeline.cssClass(sp.state)))\" x=\"\(n(x0))\" y=\"\(n(y))\" width=\"\(n(w))\" height=\"\(n(Timeline.laneHeight))\" "
                s += "fill=\"\(Timeline.color(sp.state))\" data-lane=\"\(Timeline.escape(lane.name))\" data-state=\"\(Timeline.escape(sp.state))\" "
                s += "data-start=\"\(n(sp.start))\" data-end=\"\(n(sp.end))\"><title>\(Timeline.escape(sp.hover))</title></rect>\n"
            }
            if let r = lane.range, lane.points.count >= 2 {
                func yv(_ v: Double) -> Double { y + Timeline.laneHeight - (v - r.lowerBound) / (r.upperBound - r.lowerBound) * Timeline.laneHeight }
                var d = ""
                for (j, p) in lane.points.enumerated() {
                    // A step: the value holds until the next reading.
                    if j > 0 { d += " L\(n(x(p.time))),\(n(yv(lane.points[j - 1].value)))" }
                    d += (j == 0 ? "M" : " L") + "\(n(x(p.time))),\(n(yv(p.value)))"
                }
                s += "<rect x=\"\(n(Timeline.labelWidth))\" y=\"\(n(y))\" width=\"\(n(plotWidth))\" height=\"\(n(Timeline.laneHeight))\" fill=\"#f6f6f6\"/>"
                s += "<path d=\"\(d)\" fill=\"none\" stroke=\"#1f6fb2\" stroke-width=\"2\" data-lane=\"\(Timeline.escape(lane.name))\"/>"
                let lo = lane.points.map(\.value).min()!, hi = lane.points.map(\.value).max()!
                s += "<text x=\"\(n(Timeline.width - 14))\" y=\"\(n(y + 17))\" text-anchor=\"end\" fill=\"#555555\">\(n(lo))–\(n(hi)) \(Timeline.escape(lane.unit))"
                s += "<title>\(Timeline.escape("\(lane.name): from \(n(lo)) to \(n(hi)) \(lane.unit)"))</title></text>\n"
            }
        }
        return s + "</svg>\n"
    }

    /// One page with the picture and a legend; opens in any browser, offline.
    public func html() -> String {
        let legend = [("waiting", "waiting"), ("running", "running"), ("throttled", "throttled"), ("paused", "paused"), ("expired", "expired"),
                      ("on the charger", "on the charger"), ("on battery", "on battery"), ("away", "away"), ("present", "present"),
                      ("serious", "hot (serious)")]
        var h = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>\(Timeline.escape(title))</title>\n"
        h += "<style>body{font-family:sans-serif;margin:16px;color:#222}h1{font-size:18px}.legend span{display:inline-block;margin-right:14px}"
        h += ".legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:middle}</style>\n</head>\n<body>\n"
        h += "<h1>\(Timeline.escape(title))</h1>\n<p>\(Timeline.escape(Timeline.clock(start))) to \(Timeline.escape(Timeline.clock(end))). "
        h += "Point at a bar for what decided it (the rule and its file:line).</p>\n"
        h += svg()
        h += "<p class=\"legend\">" + legend.map { "<span><i style=\"background:\(Timeline.color($0.0))\"></i>\(Timeline.escape($0.1))</span>" }.joined() + "</p>\n"
        return h + "</body>\n</html>\n"
    }

    static func color(_ state: String) -> String {
        switch state {
        case "waiting": return "#c9ced6"
        case "running": return "#3a9a4a"
        case "throttled": return "#e0b12f"
        case "paused": return "#e07b2f"
        case "expired": return "#c0392b"
        case "on the charger", "online", "present": return "#5b8fd6"
        case "on battery": return "#f0d9a8"
        case "offline": return "#e8b4ae"
        case "away": return "#9fc4ea"
        case "nominal": return "#cfe8cf"
        case "fair": return "#f3e29b"
        case "serious": return "#f0a35e"
        case "critical": return "#d9534f"
        default: return "#eeeeee"
        }
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
