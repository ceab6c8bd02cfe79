/// The policy in force: the layers merged, each rule compiled once.
public struct Policy: Sendable {
    public let rules: [Rule]
    public let settings: PolicySettings
    /// Files in the order they were layered.
    public let files: [String]
    /// What later layers did to earlier rules, for `policy show`.
    public let history: [String: [String]]
    let slots: Slots
    let schema: Schema
    /// For the queue re-check: rules strictest first, split by whether they read per-task values
    /// (id, waited, running) or only the task's flags and kind, which many tasks share.
    let bySignature: [Rule]
    let perTask: [Rule]
    /// For each per-task rule, its `&&` parts that read no per-task value: one false part rules it out
    /// for every task with the same signature.
    let gates: [[Eval]]
    /// How the rules read the clock and the task's age, so a scheduler can be woken at the instant a
    /// rule can change rather than every second.
    public let time: TimeDependence

    /// Layers later files over earlier ones: a rule with the same id replaces the earlier one where it
    /// stood; `enabled = false` removes it; settings override key by key.
    public static func merge(_ layers: [PolicyFile], schema: Schema = .standard) -> Policy {
        var rules: [Rule] = []
        var settings = PolicySettings()
        var history: [String: [String]] = [:]
        for f in layers {
            for (k, (v, _)) in f.settings { settings.values[k] = v }
            for r in f.rules {
                if let i = rules.firstIndex(where: { $0.id == r.id }) {
                    history[r.id, default: []].append("replaces \(rules[i].location)")
                    var r = r
                    if !r.setsHolds && (rules[i].holdOn > 0 || rules[i].holdOff > 0) {
                        r.holdOn = rules[i].holdOn
                        r.holdOff = rules[i].holdOff
                        r.setsHolds = rules[i].setsHolds
                        history[r.id, default: []].append("keeps its holds (hold_on \(formatDuration(r.holdOn)), hold_off \(formatDuration(r.holdOff)))")
                    }
                    rules[i] = r
                } else {
                    rules.append(r)
                }
            }
            for (id, loc) in f.disabled {
                if let i = rules.firstIndex(where: { $0.id == id }) {
                    history[id, default: []].append("disabled at \(loc)")
                    rules.remove(at: i)
                }
            }
        }
        let strictestFirst = rules.enumerated().sorted { a, b in
            a.element.verdict != b.element.verdict ? a.element.verdict > b.element.verdict : a.offset < b.offset
        }.map(\.element)
        let perTaskNames: Set<String> = ["task.id", "task.waited", "task.waited_s", "task.running", "task.running_s"]
        let readsPerTask = { (r: Rule) in r.names.contains(where: perTaskNames.contains) }
        let perTask = strictestFirst.filter(readsPerTask)
        let gates = perTask.map { r in r.conjuncts.filter { !$0.names.contains(where: perTaskNames.contains) }.map(\.eval) }
        return Policy(rules: rules, settings: settings, files: layers.map(\.path), history: history,
                      slots: Slots(schema: schema), schema: schema,
                      bySignature: strictestFirst.filter { !readsPerTask($0) }, perTask: perTask, gates: gates,
                      time: TimeDependence(rules.map(\.expr)))
    }

    public static let empty = Policy.merge([])

    /// What differs from `old`, for a person who reloaded: rules added, removed or changed (by id), settings
    /// changed; empty when nothing did.
    public func changes(from old: Policy) -> [String] {
        func shape(_ r: Rule) -> String {
            "\(r.when)|\(r.verdict)|\(r.reason ?? "")|\(r.cpuPercent ?? -1)|\(r.grace ?? -1)|\(r.holdOn)|\(r.holdOff)|\(r.whenUnknown)"
        }
        let before = Dictionary(old.rules.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
        let after = Dictionary(rules.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
        var out: [String] = []
        let added = rules.map(\.id).filter { before[$0] == nil }
        let removed = old.rules.map(\.id).filter { after[$0] == nil }
        let changed = rules.filter { r in before[r.id].map { shape($0) != shape(r) } ?? false }
        if !added.isEmpty { out.append("rules added: " + added.joined(separator: ", ")) }
        if !removed.isEmpty { out.append("rules removed: " + removed.joined(separator: ", ")) }
        if !changed.isEmpty { out.append("rules changed: " + changed.map { "\($0.id) (\($0.location))" }.joined(separator: ", ")) }
        for name in settings.values.keys.sorted() where settings.values[name] != old.settings.values[name] {
            out.append("\(name): \(old.settings.values[name].map { "\($0)" } ?? "-") → \(settings.values[name].map { "\($0)" } ?? "-")")
        }
        return out
    }
}

/// What a task is, as iOS's request classes say it (`regular`: a plain command, none of them).
public enum TaskKind: String, CaseIterable, Sendable, Codable {
    case processing, refresh, continued, regular
    /// "processing, refresh, continued, regular", for messages that list them.
    public static let names = allCases.map(\.rawValue).joined(separator: ", ")
}

/// A task's own fields, as rules read them (`task.*`).
public struct TaskFields: Sendable, Equatable {
    public var id: String
    public var kind: TaskKind
    public var requiresExternalPower = false
    public var requiresNetwork = false
    public var requiresUnmetered = false
    public var cpuHeavy = false
    public var userInitiated = false
    /// Seconds waited before starting, and run since.
    public var waited: Double = 0
    public var running: Double = 0
    /// `--between`: the local hours it may run in.
    public var window: ClockWindow?

    public init(id: String, kind: TaskKind = .processing) {
        self.id = id
        self.kind = kind
    }
}

/// A daily window of local time (`--between 01:00-06:00`; `22:00-06:00` runs past midnight): the task's own
/// requirement, as a charger is for `--requires-external-power` — outside it a waiting task waits and a running
/// one is paused, as a `defer` rule would, with no policy rule needed.
public struct ClockWindow: Sendable, Equatable {
    /// Seconds since midnight: from `start` (included) to `end` (excluded).
    public var start: Double
    public var end: Double

    public init?(start: Double, end: Double) {
        guard start >= 0, start < 86_400, end >= 0, end < 86_400, start != end else { return nil }
        self.start = start
        self.end = end
    }

    /// `HH:MM[:SS]-HH:MM[:SS]`.
    public init?(_ text: String) {
        let halves = text.split(separator: "-", omittingEmptySubsequences: false)
        guard halves.count == 2, let a = ClockWindow.clock(halves[0]), let b = ClockWindow.clock(halves[1]) else { return nil }
        self.init(start: a, end: b)
    }

    static func clock(_ s: Substring) -> Double? {
        let f = s.split(separator: ":", omittingEmptySubsequences: false)
        guard (2...3).contains(f.count), f.allSatisfy({ (1...2).contains($0.count) && $0.allSatisfy(\.isASCII) && $0.allSatisfy(\.isNumber) }),
              let h = Int(f[0]), let m = Int(f[1]), h < 24, m < 60 else { return nil }
        let sec = f.count == 3 ? Int(f[2]) ?? 60 : 0
        guard sec < 60 else { return nil }
        return Double(h * 3600 + m * 60 + sec)
    }

    public func contains(_ secondsSinceMidnight: Double) -> Bool {
        start < end ? (secondsSinceMidnight >= start && secondsSinceMidnight < end)
                    : (secondsSinceMidnight >= start || secondsSinceMidnight < end)
    }

    /// Seconds from `time` until the window next opens or closes (always > 0), by the local calendar.
    public func untilChange(from time: TimeFields) -> Double {
        min(time.secondsUntil(start), time.secondsUntil(end))
    }

    public var text: String {
        func c(_ v: Double) -> String {
            let s = Int(v), p = { (x: Int) in x < 10 ? "0\(x)" : String(x) }
            return p(s / 3600) + ":" + p(s % 3600 / 60) + (s % 60 == 0 ? "" : ":" + p(s % 60))
        }
        return c(start) + "-" + c(end)
    }
}

/// The local time, broken down by the caller (the policy module does no I/O, clocks included).
public struct TimeFields: Sendable, Equatable {
    public var hour: Int
    public var secondsSinceMidnight: Double
    public var weekday: String
    /// Seconds from these fields' instant until the local clock next reads a time of day (seconds since midnight),
    /// by the calendar: across a daylight-saving change a day has 23 or 25 hours, and "01:00 tomorrow" is not 24 h
    /// after "01:00 today". The caller that broke the time down knows its zone (`localTime`); without one, days
    /// of 86,400 s.
    public var secondsUntil: @Sendable (Double) -> Double

    public init(hour: Int, secondsSinceMidnight: Double, weekday: String, secondsUntil: (@Sendable (Double) -> Double)? = nil) {
        self.hour = hour
        self.secondsSinceMidnight = secondsSinceMidnight
        self.weekday = weekday
        self.secondsUntil = secondsUntil ?? { [secondsSinceMidnight] t in TimeFields.evenDays(t, from: secondsSinceMidnight) }
    }

    /// Seconds until time of day `t` from `sod` in days of 86,400 s (always > 0).
    public static func evenDays(_ t: Double, from sod: Double) -> Double {
        var d = (t - sod).truncatingRemainder(dividingBy: 86_400)
        if d <= 0 { d += 86_400 }
        return d
    }

    public static func == (a: TimeFields, b: TimeFields) -> Bool {
        a.hour == b.hour && a.secondsSinceMidnight == b.secondsSinceMidnight && a.weekday == b.weekday
    }

    public static let midnightMonday = TimeFields(hour: 0, secondsSinceMidnight: 0, weekday: "mon")
}

extension Policy {
    /// The shared slots of a frame: conditions (missing ones are unknown), time, settings.
    public func sharedValues(conditions: [String: PolicyValue], time: TimeFields) -> [PolicyValue] {
        slots.sharedNames.map { name in
            switch name {
            case "time.hour": return .number(Double(time.hour))
            case "time.of_day": return .duration(time.secondsSinceMidnight)
            case "time.weekday": return .string(time.weekday)
            default:
                if let s = settings.values[name] { return s }
                return conditions[name] ?? .null
            }
        }
    }

    /// Fills a frame's task slots in place (no allocation, no name lookups).
    func fillTask(_ t: TaskFields, into frame: Frame) {
        let i = slots.taskIndex
        frame.task[i.id] = .string(t.id)
        frame.task[i.kind] = .string(t.kind.rawValue)
        frame.task[i.power] = .bool(t.requiresExternalPower)
        frame.task[i.network] = .bool(t.requiresNetwork)
        frame.task[i.unmetered] = .bool(t.requiresUnmetered)
        frame.task[i.heavy] = .bool(t.cpuHeavy)
        frame.task[i.user] = .bool(t.userInitiated)
        frame.task[i.waited] = .duration(t.waited)
        frame.task[i.waitedS] = .number(t.waited)
        frame.task[i.running] = .duration(t.running)
        frame.task[i.runningS] = .number(t.running)
        frame.task[i.window] = .string(t.window?.text ?? "")
        frame.task[i.inWindow] = .bool(t.window.map { w in
            if case .duration(let sod) = frame.shared[slots.requirementIndex.ofDay] { return w.contains(sod) }
            return true
        } ?? true)
    }

    /// The task fields that identify tasks alike for rules that read no per-task value.
    static func signature(_ t: TaskFields) -> UInt16 {
        var s: UInt16 = t.requiresExternalPower ? 1 : 0
        if t.requiresNetwork { s |= 2 }
        if t.requiresUnmetered { s |= 4 }
        if t.cpuHeavy { s |= 8 }
        if t.userInitiated { s |= 16 }
        switch t.kind { case .processing: s |= 32; case .refresh: s |= 64; case .continued: s |= 96; case .regular: s |= 160 }
        return s
    }

}

/// Where the rules compare the clock or a task's age with a constant: the instants they can change.
public struct TimeDependence: Sendable, Equatable {
    static let names: Set<String> = ["task.waited", "task.waited_s", "task.running", "task.running_s",
                                     "time.hour", "time.of_day", "time.weekday"]
    /// Seconds each of task.waited, task.running and time.of_day is compared with.
    public var waited: [Double] = []
    public var running: [Double] = []
    public var ofDay: [Double] = []
    /// time.hour and time.weekday change on the hour and at midnight.
    public var readsHour = false
    public var readsWeekday = false
    /// A use not of the form `name OP constant`: its change cannot be foreseen (callers look each second).
    public var opaque = false

    public var isEmpty: Bool { waited.isEmpty && running.isEmpty && ofDay.isEmpty && !readsHour && !readsWeekday && !opaque }

    init(_ exprs: [Expr]) {
        for e in exprs { collect(e) }
    }

    mutating func collect(_ e: Expr) {
        switch e {
        case .binary(let op, let a, let b, _) where Parser.comparisons.contains(op):
            if case .name(let n, _) = a, TimeDependence.names.contains(n), let v = constant(b) { add(n, v) }
            else if case .name(let n, _) = b, TimeDependence.names.contains(n), let v = constant(a) { add(n, v) }
            else { collect(a); collect(b) }
        case .binary(_, let a, let b, _): collect(a); collect(b)
        case .not(let x, _), .negate(let x, _): collect(x)
        case .list(let xs, _), .call(_, let xs, _): xs.forEach { collect($0) }
        case .name(let n, _):
            switch n {
            case "time.hour": readsHour = true
            case "time.weekday": readsWeekday = true
            default: if TimeDependence.names.contains(n) { opaque = true }
            }
        case .literal: break
        }
    }

    func constant(_ e: Expr) -> Double? {
        switch e {
        case .literal(.duration(let d), _), .literal(.number(let d), _): return d
        default: return nil
        }
    }

    mutating func add(_ name: String, _ v: Double) {
        switch name {
        case "task.waited", "task.waited_s": waited.append(v)
        case "task.running", "task.running_s": running.append(v)
        case "time.of_day": ofDay.append(v)
        case "time.hour": readsHour = true
        case "time.weekday": readsWeekday = true
        default: opaque = true
        }
    }
}
