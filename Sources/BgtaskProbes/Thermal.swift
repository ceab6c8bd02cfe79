/// `thermal.state`: ordered, so policies may compare (`thermal.state >= "serious"`).
public enum ThermalState: String, Sendable, Codable, CaseIterable, Comparable {
    case nominal, fair, serious, critical
    var rank: Int { Self.allCases.firstIndex(of: self)! }
    public static func < (a: Self, b: Self) -> Bool { a.rank < b.rank }
}

public struct TripPoint: Sendable, Equatable {
    public var index: Int
    public var type: String
    public var celsius: Double
    public var hysteresis: Double?
}

/// Thresholds used when a zone has no usable trip points (the policy's `[thermal]` may change them).
public struct ThermalFallback: Sendable, Equatable {
    public var fairCelsius = 70.0
    public var seriousCelsius = 85.0
    public var criticalCelsius = 95.0
    /// Trips below this are firmware junk (real machines ship 0 °C, 20.8 °C, -273 °C trips).
    public var roomCelsius = 25.0
    /// Trips above this are not real (firmware sentinels such as 85,000 °C, garbage such as 1e30).
    public var maxTripCelsius = 200.0
    /// How far below a boundary the temperature must fall before the state drops (unless the trip says).
    public var hysteresis = 3.0
    /// Fair starts this far below the serious threshold.
    public var fairMargin = 10.0
    public init() {}
}

public struct ThermalZone: Sendable, Equatable {
    public var name: String
    public var path: String
    public var type: String?
    public var celsius: Double?
    public var trips: [TripPoint]
    public var ignoredTrips: [String]
    public var notes: [String]

    public struct Thresholds: Sendable, Equatable {
        public var fair: Double
        public var serious: Double
        public var critical: Double
        public var hysteresis: Double
        public var fromTrips: Bool
        public var basis: String
    }

    public init(device d: SysfsDevice, fallback: ThermalFallback = .init()) {
        name = d.name
        path = d.path
        type = d.text("type").map(Printable.text)   // a newline in it would start a line of its own in `status`
        var notes: [String] = []
        switch d.attributes["temp"] ?? .missing {
        case .text(let raw):
            if let v = Double(raw), v.isFinite {
                let c = v / 1000
                // DPTF and disabled sensors report 0, -274 °C or sentinel values: not a temperature. A driver
                // that reports whole degrees (45 for 45 °C) would read as 0.045 °C: set aside, not read as cold.
                if c >= 1 && c < 200 { celsius = c }
                else if v >= 1 && v < 200 && v == v.rounded() {
                    notes.append("temp: \(raw) looks like whole degrees, not millidegrees Celsius; zone ignored")
                } else { notes.append("temp: \(raw) is not a plausible temperature, zone ignored") }
            } else { notes.append("temp: '\(raw)' is not a number, zone ignored") }
        case .missing: notes.append("temp: missing, zone ignored")
        case .unreadable(let e): notes.append("temp: \(e), zone ignored")
        }
        var trips: [TripPoint] = []
        var ignored: [String] = []
        let indices = Set(d.attributes.keys.compactMap { k -> Int? in
            guard k.hasPrefix("trip_point_"), k.hasSuffix("_temp") else { return nil }
            return Int(k.dropFirst("trip_point_".count).dropLast("_temp".count))
        }).sorted()
        for i in indices {
            let raw = d.text("trip_point_\(i)_temp") ?? ""
            let type = d.text("trip_point_\(i)_type") ?? "unknown"
            guard let v = Double(raw), v.isFinite else {
                ignored.append("trip_point_\(i) (\(type)): '\(raw)' unreadable"); continue
            }
            let c = v / 1000
            if c <= 0 || c < fallback.roomCelsius {
                ignored.append("trip_point_\(i) (\(type)) at \(fmt(c)) °C is below room temperature")
                continue
            }
            if c > fallback.maxTripCelsius {
                ignored.append("trip_point_\(i) (\(type)) at \(raw) m°C is out of range (above \(fmt(fallback.maxTripCelsius)) °C)")
                continue
            }
            let hyst = d.text("trip_point_\(i)_hyst").flatMap(Double.init).map { $0 / 1000 }.flatMap { $0.isFinite && $0 > 0 && $0 < 30 ? $0 : nil }
            trips.append(TripPoint(index: i, type: type, celsius: c, hysteresis: hyst))
        }
        // The critical trip is authoritative (the kernel shuts down there): a passive or hot trip above it
        // is out of order and would hide it, so it is set aside. (Equal ones are common: hot = critical.)
        if let critical = trips.filter({ $0.type == "critical" }).map(\.celsius).min() {
            trips.removeAll { t in
                guard t.type != "critical", t.celsius > critical else { return false }
                ignored.append("trip_point_\(t.index) (\(t.type)) at \(fmt(t.celsius)) °C is above the critical trip (\(fmt(critical)) °C): out of order")
                return true
            }
        }
        self.trips = trips
        self.ignoredTrips = ignored
        self.notes = notes
    }

    public var isUsable: Bool { celsius != nil }

    /// Serious at the lowest passive/hot trip, critical at the lowest critical trip, fair 10 °C below serious.
    public func thresholds(_ fb: ThermalFallback = .init()) -> Thresholds {
        let critical = trips.filter { $0.type == "critical" }.map(\.celsius).min()
        let serious = trips.filter { $0.type == "passive" || $0.type == "hot" }.map(\.celsius).min()
        let hyst = trips.compactMap(\.hysteresis).max() ?? fb.hysteresis
        switch (serious, critical) {
        case let (s?, c?):
            // Trips above the critical one were set aside when read, so s <= c here.
            return Thresholds(fair: s - fb.fairMargin, serious: min(s, c), critical: c, hysteresis: hyst, fromTrips: true,
                              basis: "trips: serious at \(fmt(s)) °C, critical at \(fmt(c)) °C")
        case let (s?, nil):
            return Thresholds(fair: s - fb.fairMargin, serious: s, critical: max(s, fb.criticalCelsius), hysteresis: hyst,
                              fromTrips: true, basis: "trips: serious at \(fmt(s)) °C; critical fallback")
        case let (nil, c?):
            let s = c - fb.fairMargin
            return Thresholds(fair: s - fb.fairMargin, serious: s, critical: c, hysteresis: hyst, fromTrips: true,
                              basis: "trips: critical at \(fmt(c)) °C, serious 10 °C below it")
        case (nil, nil):
            return Thresholds(fair: fb.fairCelsius, serious: fb.seriousCelsius, critical: fb.criticalCelsius,
                              hysteresis: hyst, fromTrips: false,
                              basis: "no usable trips: fallback \(fmt(fb.fairCelsius))/\(fmt(fb.seriousCelsius))/\(fmt(fb.criticalCelsius)) °C")
        }
    }

    /// The state with hysteresis: to drop out of a state the temperature must fall `hysteresis` below its boundary.
    public func state(previous: ThermalState? = nil, fallback: ThermalFallback = .init()) -> ThermalState? {
        guard let t = celsius else { return nil }
        let th = thresholds(fallback)
        func boundary(_ s: ThermalState, _ v: Double) -> Double {
            if let p = previous, s <= p { return v - th.hysteresis }
            return v
        }
        if t >= boundary(.critical, th.critical) { return .critical }
        if t >= boundary(.serious, th.serious) { return .serious }
        if t >= boundary(.fair, th.fair) { return .fair }
        return .nominal
    }
}

public struct ThermalReading: Sendable, Equatable {
    public var state: ThermalState?
    public var celsius: Double?
    public var zone: String?
    public var reason: String
}

public enum ThermalAnalysis {
    /// The machine's state is its hottest zone relative to that zone's own trips.
    public static func analyze(_ zones: [ThermalZone], previous: [String: ThermalState] = [:],
                               fallback: ThermalFallback = .init()) -> (ThermalReading, [String: ThermalState]) {
        var states: [String: ThermalState] = [:]
        for z in zones {
            if let s = z.state(previous: previous[z.name], fallback: fallback) { states[z.name] = s }
        }
        let usable = zones.filter(\.isUsable)
        guard !usable.isEmpty else {
            let why = zones.isEmpty ? "no thermal zones" : "no thermal zone has a usable temperature (\(zones.map(\.name).joined(separator: ", ")))"
            return (ThermalReading(state: nil, celsius: nil, zone: nil, reason: why), states)
        }
        let hottest = usable.max { ($0.celsius ?? 0) < ($1.celsius ?? 0) }!
        let decider = usable.max { a, b in
            let sa = states[a.name] ?? .nominal, sb = states[b.name] ?? .nominal
            return sa != sb ? sa < sb : (a.celsius ?? 0) < (b.celsius ?? 0)
        }!
        let state = states[decider.name] ?? .nominal
        let label = decider.type ?? decider.name
        let reason = "\(label) at \(fmt(decider.celsius ?? 0)) °C (\(decider.path)/temp); \(decider.thresholds(fallback).basis)"
        return (ThermalReading(state: state, celsius: hottest.celsius.map { ($0 * 10).rounded() / 10 },
                               zone: hottest.type ?? hottest.name, reason: reason), states)
    }
}

extension DeviceReader {
    public func thermalZones(fallback: ThermalFallback = .init()) -> [ThermalZone] {
        devicePaths(subsystem: "thermal")
            .filter { ($0.split(separator: "/").last ?? "").hasPrefix("thermal_zone") }
            .map { read(path: $0, subsystem: "thermal", attributes: ["type", "temp"], prefixes: ["trip_point_"]) }
            .map { ThermalZone(device: $0, fallback: fallback) }
    }
}

extension ThermalAnalysis {
    /// How often to read zones when a temperature matters: `minimum` (2 s) within 5 °C of a boundary where
    /// any zone's state would change (a rise into fair, serious or critical, or a fall out of its state by
    /// the hysteresis), growing linearly to `maximum` (30 s) at 20 °C and beyond. nil with no usable zone.
    public static func readInterval(_ zones: [ThermalZone], states: [String: ThermalState], fallback: ThermalFallback = .init(),
                                    minimumMs: Int32 = 2000, maximumMs: Int32 = 30_000) -> Int32? {
        var distance = Double.infinity
        for z in zones {
            guard let t = z.celsius else { continue }
            let th = z.thresholds(fallback)
            let current = states[z.name] ?? .nominal
            for (state, boundary) in [(ThermalState.fair, th.fair), (.serious, th.serious), (.critical, th.critical)] {
                // Above the current state: reached by rising to the boundary; at or below it: left by falling under it.
                let edge = state > current ? boundary : boundary - th.hysteresis
                distance = min(distance, abs(edge - t))
            }
        }
        guard distance.isFinite else { return nil }
        if distance <= 5 { return minimumMs }
        let grown = Double(minimumMs) + (distance - 5) / 15 * Double(maximumMs - minimumMs)
        return Int32(min(Double(maximumMs), grown.rounded()))
    }
}
