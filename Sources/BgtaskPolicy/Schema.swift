/// Every name a `when` may read: the condition names of `bgtask status --json`, the task's own fields,
/// the time of day, and the thresholds of the policy's own sections.
public struct Schema: Sendable {
    public struct Entry: Sendable {
        public var name: String
        public var type: PolicyType
        /// Conditions may be unknown (null); task fields and settings never are.
        public var nullable: Bool
        public var doc: String
        public var scope: Scope
    }
    public enum Scope: Sendable { case condition, task, time, setting }

    public let entries: [String: Entry]
    public let order: [String]

    static let thermalStates = PolicyType.enumeration(name: "thermal state", cases: ["nominal", "fair", "serious", "critical"], ordered: true)
    static let batteryStates = PolicyType.enumeration(name: "battery state",
                                                      cases: ["charging", "discharging", "full", "not-charging", "empty", "unknown"], ordered: false)
    static let warnings = PolicyType.enumeration(name: "battery warning", cases: ["none", "low", "critical", "action"], ordered: true)
    static let networkKinds = PolicyType.enumeration(name: "network kind",
                                                     cases: ["ethernet", "wifi", "cellular", "loopback", "virtual", "other"], ordered: false)
    static let taskKinds = PolicyType.enumeration(name: "task kind", cases: TaskKind.allCases.map(\.rawValue), ordered: false)
    static let weekdays = PolicyType.enumeration(name: "weekday", cases: ["mon", "tue", "wed", "thu", "fri", "sat", "sun"], ordered: false)

    public static let standard: Schema = {
        var list: [Entry] = []
        func c(_ n: String, _ t: PolicyType, _ d: String) { list.append(Entry(name: n, type: t, nullable: true, doc: d, scope: .condition)) }
        func t(_ n: String, _ ty: PolicyType, _ d: String) { list.append(Entry(name: n, type: ty, nullable: false, doc: d, scope: .task)) }
        func s(_ n: String, _ ty: PolicyType, _ d: String) { list.append(Entry(name: n, type: ty, nullable: false, doc: d, scope: .setting)) }
        c("power.external", .bool, "running work now would not drain the battery")
        c("power.reason", .string, "which files decided power.external")
        c("battery.present", .bool, "a system battery is present")
        c("battery.percent", .number, "combined charge of the system batteries, 0-100")
        c("battery.state", batteryStates, "combined state of the system batteries")
        c("battery.warning", warnings, "UPower-style warning level, only while discharging")
        c("battery.time_to_empty_s", .number, "seconds until empty at the present rate")
        c("thermal.state", thermalStates, "hottest zone against its own trip points")
        c("thermal.celsius", .number, "temperature of the hottest zone")
        c("thermal.zone", .string, "type of the hottest zone")
        c("network.online", .bool, "an up link holds a default route")
        c("network.kind", networkKinds, "kind of the default-route link")
        c("network.interface", .string, "name of the default-route link")
        c("network.metered", .bool, "NetworkManager's Metered, or a cellular link")
        c("system.power_saver", .bool, "power-profiles-daemon's profile is power-saver")
        c("system.power_profile", .string, "power-profiles-daemon's active profile")
        c("system.cpu_pressure", .number, "PSI cpu some avg10, percent")
        c("system.preparing_sleep", .bool, "logind announced sleep or shutdown (bgtaskd only; null elsewhere)")
        c("user.idle", .bool, "nobody has touched the machine for idle.after, every session is locked, or nobody is logged in")
        c("user.idle_s", .number, "seconds since the last input (0 while a session is in use)")
        c("user.locked", .bool, "every session is locked (logind LockedHint) or the screen saver is active")
        c("user.sessions", .number, "people's sessions (logind)")
        c("user.reason", .string, "what user.idle was decided from")
        c("storage.free_bytes", .number, "bytes free on the filesystem of the working directory (statvfs)")
        c("storage.low", .bool, "storage.free_bytes is under storage.low_mb")
        c("storage.path", .string, "the directory storage.* describes")
        c("upower.available", .bool, "upowerd answers on the system bus")
        c("upower.on_battery", .bool, "UPower's OnBattery")
        c("upower.percentage", .number, "UPower's display device percentage")
        c("upower.state", .string, "UPower's display device state")
        c("upower.warning_level", .string, "UPower's display device warning level")
        t("task.id", .string, "the task's identifier")
        t("task.kind", taskKinds, "processing, refresh, continued or regular")
        t("task.requires_external_power", .bool, "the task asked for external power")
        t("task.requires_network", .bool, "the task asked for network connectivity")
        t("task.requires_unmetered", .bool, "the task asked for an unmetered network")
        t("task.cpu_heavy", .bool, "declared CPU-heavy, or measured so by the CPU monitor")
        t("task.user_initiated", .bool, "a person is waiting for it")
        t("task.waited", .duration, "how long it has waited to start")
        t("task.waited_s", .number, "task.waited in seconds")
        t("task.running", .duration, "how long it has run")
        t("task.running_s", .number, "task.running in seconds")
        t("task.window", .string, "its --between window (\"01:00-06:00\"), or \"\" without one")
        t("task.in_window", .bool, "true when the local time is in its --between window, or it has none")
        list.append(Entry(name: "time.hour", type: .number, nullable: false, doc: "local hour, 0-23", scope: .time))
        list.append(Entry(name: "time.of_day", type: .duration, nullable: false, doc: "local time since midnight", scope: .time))
        list.append(Entry(name: "time.weekday", type: weekdays, nullable: false, doc: "local day of the week", scope: .time))
        for (name, doc) in PolicySettings.documented {
            if case .duration? = PolicySettings.defaults[name] { s(name, .duration, doc) } else { s(name, .number, doc) }
        }
        return Schema(entries: Dictionary(uniqueKeysWithValues: list.map { ($0.name, $0) }), order: list.map(\.name))
    }()

    /// The closest known names, for "did you mean".
    /// Words people write for a reading the schema names otherwise, by the last part of the name:
    /// `thermal.temp` → `thermal.celsius`, `battery.level` → `battery.percent`.
    static let synonyms: [String: [String]] = [
        "temp": ["celsius"], "temperature": ["celsius"], "degrees": ["celsius"], "celcius": ["celsius"],
        "level": ["percent"], "charge": ["percent"], "capacity": ["percent"], "pct": ["percent"],
        "plugged": ["external"], "ac": ["external"], "charging": ["external"],
        "free": ["free_bytes"], "free_mb": ["free_bytes"], "space": ["free_bytes", "low"],
        "idle_seconds": ["idle_s"], "away": ["idle"],
    ]

    public func suggestions(for name: String) -> [String] {
        let parts = name.split(separator: ".", maxSplits: 1).map(String.init)
        if parts.count == 2, let words = Schema.synonyms[parts[1].lowercased()] {
            let meant = words.map { parts[0] + "." + $0 }.filter { entries[$0] != nil }
            if !meant.isEmpty { return meant }
        }
        let scored = order.map { ($0, editDistance(name, $0)) }.filter { $0.1 <= max(2, name.count / 3) }
        if !scored.isEmpty { return scored.sorted { $0.1 < $1.1 }.prefix(2).map(\.0) }
        // Abbreviations in the right namespace: `battery.pct` → `battery.percent`.
        if parts.count == 2 {
            let abbrev = order.filter { candidate in
                let c = candidate.split(separator: ".", maxSplits: 1).map(String.init)
                return c.count == 2 && c[0] == parts[0] && isSubsequence(parts[1], of: c[1])
            }
            if !abbrev.isEmpty { return abbrev.sorted { editDistance(name, $0) < editDistance(name, $1) }.prefix(2).map { $0 } }
        }
        // Same last component in another namespace: `battery.external` → `power.external`.
        let last = name.split(separator: ".").last.map(String.init) ?? name
        return order.filter { $0.hasSuffix("." + last) }.prefix(2).map { $0 }
    }
}

public func editDistance(_ a: String, _ b: String) -> Int {
    let a = Array(a), b = Array(b)
    if a.isEmpty { return b.count }
    if b.isEmpty { return a.count }
    var prev = Array(0...b.count)
    var cur = [Int](repeating: 0, count: b.count + 1)
    for i in 1...a.count {
        cur[0] = i
        for j in 1...b.count {
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
        }
        swap(&prev, &cur)
    }
    return prev[b.count]
}

func isSubsequence(_ a: String, of b: String) -> Bool {
    var it = b.makeIterator()
    return a.allSatisfy { ch in
        while let x = it.next() { if x == ch { return true } }
        return false
    }
}
