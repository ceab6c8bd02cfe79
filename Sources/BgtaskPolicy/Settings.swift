/// The thresholds of a policy's own sections; rules read them as `battery.low_percent` and so on,
/// so a person tunes a number once.
public struct PolicySettings: Sendable, Equatable {
    public var values: [String: PolicyValue] = PolicySettings.defaults

    public static let documented: [(String, String)] = [
        ("battery.low_percent", "battery low at or under this percentage (UPower: 20)"),
        ("battery.critical_percent", "battery critical at or under this percentage (UPower: 5)"),
        ("thermal.fair_celsius", "fair at this temperature, for zones without usable trip points"),
        ("thermal.serious_celsius", "serious at this temperature, for zones without usable trip points"),
        ("thermal.critical_celsius", "critical at this temperature, for zones without usable trip points"),
        ("storage.low_mb", "storage.low below this many MiB free on the working directory's filesystem"),
        ("idle.after", "processing work starts once nobody has touched the machine this long (or the screen is locked)"),
        ("run.expire_grace", "time between SIGTERM and SIGKILL when a task expires"),
        ("run.refresh_budget", "how long a refresh task may run before it expires"),
        ("run.cpu_monitor_percent", "CPU share above which undeclared work counts as CPU-heavy on battery"),
        ("run.progress_stalled", "a continued task without progress this long is shown to the person as stalled"),
        ("run.progress_expire", "a continued task without progress this long is expired"),
        ("daemon.max_running", "bgtaskd: how many tasks run at once"),
        ("daemon.max_running_heavy", "bgtaskd: how many CPU-heavy tasks run at once (within max_running)"),
        ("daemon.max_pending_per_app", "bgtaskd: pending requests one app (or the command line) may have"),
        ("daemon.max_pending_refresh", "bgtaskd: pending refresh requests one app may have (Apple's limit: 1)"),
        ("daemon.max_pending_processing", "bgtaskd: pending processing requests one app may have (Apple's limit: 10)"),
        ("daemon.retry_backoff", "bgtaskd: wait before the first retry of a failed --retry task; doubled each time"),
        ("daemon.retry_backoff_max", "bgtaskd: the longest wait between retries"),
        ("daemon.app_battery_budget", "bgtaskd: background runtime an app's tasks may have on battery each day"),
    ]

    public static let defaults: [String: PolicyValue] = [
        "battery.low_percent": .number(20), "battery.critical_percent": .number(5),
        "thermal.fair_celsius": .number(70), "thermal.serious_celsius": .number(85), "thermal.critical_celsius": .number(95),
        "idle.after": .duration(300), "storage.low_mb": .number(1024),
        "run.expire_grace": .duration(10), "run.refresh_budget": .duration(30), "run.cpu_monitor_percent": .number(50),
        "run.progress_stalled": .duration(60), "run.progress_expire": .duration(180),
        "daemon.max_running": .number(4), "daemon.max_running_heavy": .number(1), "daemon.max_pending_per_app": .number(1000),
        "daemon.max_pending_refresh": .number(1), "daemon.max_pending_processing": .number(10),
        "daemon.retry_backoff": .duration(30), "daemon.retry_backoff_max": .duration(3600), "daemon.app_battery_budget": .duration(600),
    ]

    /// Upper bounds of the duration settings: a grace or a budget of years would leave work running for ever.
    public static let maxDuration: [String: Double] = ["run.expire_grace": 3600, "run.refresh_budget": 86_400,
                                                       "run.progress_stalled": 86_400, "run.progress_expire": 86_400,
                                                       "daemon.retry_backoff": 86_400, "daemon.retry_backoff_max": 7 * 86_400,
                                                       "daemon.app_battery_budget": 86_400, "idle.after": 86_400]
    /// Upper bounds of number settings other than percentages (which are 0–100); 200 when not listed.
    public static let maxNumber: [String: Double] = ["daemon.max_running": 256, "daemon.max_running_heavy": 256,
                                                     "daemon.max_pending_per_app": 100_000, "daemon.max_pending_refresh": 100_000,
                                                     "daemon.max_pending_processing": 100_000,
                                                     "storage.low_mb": 100_000_000]

    public func number(_ name: String) -> Double {
        if case .number(let n)? = values[name] { return n }
        if case .duration(let d)? = values[name] { return d }
        return 0
    }
}
