/// What one task cost: the machine's measured draw attributed to the task by its share of the CPU time the
/// machine used in each interval (as Android's BatteryStats attributes by time on a component). Pure: the
/// supervisor hands in readings; time is its clock. Intervals without a power source count as unmeasured,
/// never as zero.
public struct EnergyMeter: Sendable, Equatable {
    public struct Sample: Sendable, Equatable {
        public var time: Double
        /// CPU seconds: the task's, and the whole machine's busy time.
        public var taskCPU: Double?
        public var machineCPU: Double?
        /// The machine's draw: watts now, or a cumulative counter (joules, wrapping at `counterRange`).
        public var watts: Double?
        public var counterJoules: Double?
        public var counterRange: Double?
        public var source: String?
        public var uncertainty: String?

        public init(time: Double, taskCPU: Double?, machineCPU: Double?, watts: Double? = nil, counterJoules: Double? = nil,
                    counterRange: Double? = nil, source: String? = nil, uncertainty: String? = nil) {
            self.time = time
            self.taskCPU = taskCPU
            self.machineCPU = machineCPU
            self.watts = watts
            self.counterJoules = counterJoules
            self.counterRange = counterRange
            self.source = source
            self.uncertainty = uncertainty
        }
    }

    public private(set) var joules = 0.0
    public private(set) var measuredSeconds = 0.0
    public private(set) var unmeasuredSeconds = 0.0
    /// Every source used, in order.
    public private(set) var sources: [String] = []
    public private(set) var uncertainty: String?
    /// The task's attributed draw over the last interval, watts (nil: unmeasured).
    public private(set) var lastWatts: Double?
    var last: Sample?

    public init() {}

    public mutating func add(_ s: Sample) {
        defer { last = s }
        guard let p = last, s.time > p.time else { return }
        let dt = s.time - p.time
        guard let machineJ = Self.machineJoules(from: p, to: s, seconds: dt),
              let t0 = p.taskCPU, let t1 = s.taskCPU, let m0 = p.machineCPU, let m1 = s.machineCPU else {
            unmeasuredSeconds += dt
            lastWatts = nil
            return
        }
        let dTask = max(0, t1 - t0), dMachine = m1 - m0
        // The task's CPU time cannot exceed the machine's; a machine counter that did not move (a stopped
        // task on an idle machine) gives the task nothing.
        let share = dMachine > 0 ? min(1, dTask / dMachine) : 0
        let j = machineJ * share
        joules += j
        measuredSeconds += dt
        lastWatts = j / dt
        if let src = s.source, !sources.contains(src) { sources.append(src) }
        if let u = s.uncertainty { uncertainty = u }
    }

    /// The machine's energy over one interval: a counter's difference (across one wrap), else the mean of the
    /// two readings' watts (or the one there is) times the interval.
    static func machineJoules(from a: Sample, to b: Sample, seconds dt: Double) -> Double? {
        if let c0 = a.counterJoules, let c1 = b.counterJoules, a.source == b.source {
            var d = c1 - c0
            if d < 0, let r = b.counterRange { d += r }
            return d >= 0 ? d : nil
        }
        switch (a.watts, b.watts) {
        case (let w0?, let w1?): return (w0 + w1) / 2 * dt
        case (nil, let w?), (let w?, nil): return w * dt
        default: return nil
        }
    }

    /// Watt-hours, when any interval was measured.
    public var wattHours: Double? { measuredSeconds > 0 ? joules / 3600 : nil }

    /// `~3.1 Wh (2 % of the battery's full energy); source: BAT0 power_now × CPU share, ±15%…`; nil when unmeasured.
    public func summary(batteryFullWh: Double?) -> String? {
        guard let wh = wattHours else { return nil }
        var s = "used ~\(Self.format(wh))"
        if let full = batteryFullWh, full > 0 { s += ", \(Self.percent(wh / full * 100)) of the battery's full energy" }
        s += "; source: \(sources.joined(separator: ", then ")) × CPU share"
        if let u = uncertainty { s += " (\(u))" }
        let total = measuredSeconds + unmeasuredSeconds
        if unmeasuredSeconds > 0 && total > 0 { s += "; \(Int((unmeasuredSeconds / total * 100).rounded())) % of the run had no source" }
        return s
    }

    public static func format(_ wh: Double) -> String {
        if wh >= 10 { return "\(Int(wh.rounded())) Wh" }
        if wh >= 0.1 { return "\(Double(Int((wh * 10).rounded())) / 10) Wh" }
        return "\(Int((wh * 1000).rounded())) mWh"
    }

    static func percent(_ p: Double) -> String { p >= 1 ? "\(Int(p.rounded())) %" : "<1 %" }
}
