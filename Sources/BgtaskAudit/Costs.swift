import BgtaskJSON

/// What each task cost over a stretch of time, summed from the audit trail's entries in it (`bgtask report`):
/// the runs that ended (a `finished` entry), the CPU seconds and energy those ends recorded, the expiries. Pure.
public struct TaskCost: Sendable, Equatable {
    public var task: String
    public var runs = 0
    /// The CPU seconds the ended runs recorded; `cpuUnknownRuns` recorded none (a trail from before "v6 cpu").
    public var cpuSeconds = 0.0
    public var cpuUnknownRuns = 0
    /// Watt-hours where a power source measured them (nil: no run was measured); `energyUnmeasuredRuns` were not.
    public var energyWh: Double?
    public var energyUnmeasuredRuns = 0
    public var expiries = 0

    public init(task: String) { self.task = task }

    /// Per task, in the order each first appears, and their total (task "total"), for the entries with
    /// `since <= time <= until`.
    public static func costs(_ entries: [AuditEntry], since: Double, until: Double) -> (tasks: [TaskCost], total: TaskCost) {
        var byTask: [String: TaskCost] = [:]
        var order: [String] = []
        var total = TaskCost(task: "total")
        for e in entries where e.time >= since && e.time <= until && ["finished", "expired"].contains(e.event) {
            if byTask[e.taskID] == nil { order.append(e.taskID) }
            var c = byTask[e.taskID] ?? TaskCost(task: e.taskID)
            c.add(e)
            total.add(e)
            byTask[e.taskID] = c
        }
        return (order.map { byTask[$0]! }, total)
    }

    mutating func add(_ e: AuditEntry) {
        switch e.event {
        case "expired": expiries += 1
        case "finished":
            runs += 1
            if let s = e.cpuSeconds { cpuSeconds += s } else { cpuUnknownRuns += 1 }
            if let wh = e.energyWh { energyWh = (energyWh ?? 0) + wh } else { energyUnmeasuredRuns += 1 }
        default: break
        }
    }

    /// `v` with `places` decimals (no Foundation here): 12.345, 3 → "12.345"; 0.05, 1 → "0.1".
    public static func fixed(_ v: Double, _ places: Int) -> String {
        guard v.isFinite else { return "-" }
        var scale = 1.0
        for _ in 0..<places { scale *= 10 }
        let n = Int64((abs(v) * scale).rounded()), whole = n / Int64(scale), frac = n % Int64(scale)
        var f = String(frac)
        while f.count < places { f = "0" + f }
        return (v < 0 && n > 0 ? "-" : "") + String(whole) + (places > 0 ? "." + f : "")
    }

    /// As `report --json` prints it.
    public var json: JSONValue {
        .object([("task", .string(task)), ("runs", .number(Double(runs))), ("cpu_seconds", .number(cpuSeconds)),
                 ("cpu_unknown_runs", .number(Double(cpuUnknownRuns))), ("energy_wh", energyWh.map { .number($0) } ?? .null),
                 ("energy_unmeasured_runs", .number(Double(energyUnmeasuredRuns))), ("expiries", .number(Double(expiries)))])
    }
}
