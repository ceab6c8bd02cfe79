import BgtaskPolicy

/// When a waiting task could run at the earliest, as `systemctl list-timers` shows NEXT: not when it is looked at
/// again (a re-check, `next_check`), but the first instant at which nothing whose end is known still holds it
/// back — its earliest date (`--at`, `--on-calendar`, `--every`, a retry's backoff), every hold still running, its
/// `--between` window and every rule that reads only the clock and the task (office hours). What waits for a
/// reading to change (the charger, the network) has no known end: it is taken as able to change at any moment,
/// so it moves the answer to nothing; a task held back by such things alone has no time (nil).
///
/// Pure: the clock, the local calendar (`time`: the fields of an instant) and the readings are handed in. Rules that
/// read the clock are asked at each instant their outcome can change (the hour, midnight, the times of day they
/// compare with, the window's edges), with the readings as they are now, within `horizon`.
public struct NextRun {
    let policy: Policy
    let conditions: [String: PolicyValue]
    let now: Double
    let time: (Double) -> TimeFields
    let horizon: Double
    /// The rules (and the window requirement) whose end can be foreseen: they read only the clock and the task.
    let timed: Set<String>

    /// For many tasks under one policy, readings and clock (`now` on the wall clock).
    public init(policy: Policy, conditions: [String: PolicyValue], now: Double, time: @escaping (Double) -> TimeFields,
                horizon: Double = 8 * 86_400) {
        self.policy = policy
        self.conditions = conditions
        self.now = now
        self.time = time
        self.horizon = horizon
        timed = Set(policy.rules.filter { NextRun.readsOnlyClock($0, policy) }.map(\.id)).union(["task.in_window"])
    }

    /// The earliest instant at or after `now` (all on the wall clock) at which the task could run; nil when nothing
    /// of known end holds it back, or no instant within `horizon` frees it.
    /// - `blocking`: what holds it back now (the decision's matches; those of verdict run and throttle are skipped),
    /// - `holds`: per rule id, when a hold keeping it in effect lets go,
    /// - `earliest`: its earliest date, if it has one.
    public func earliest(task: TaskFields, blocking: [Match], holds: [String: Double], earliest: Double?) -> Double? {
        let blockers = blocking.filter { $0.verdict != .run && $0.verdict != .throttle }
        var floor = now
        var known = false
        if let e = earliest, e > now { floor = e; known = true }
        for m in blockers {
            if let h = holds[m.ruleID] { floor = max(floor, h); known = true }
            else if timed.contains(m.ruleID) { known = true }
        }
        guard known else { return nil }
        // No rule of the clock and no window: nothing to ask at later instants (a listing of 100,000 dated tasks
        // makes no evaluator for them).
        if timed.count == 1 && task.window == nil { return floor }
        let dep = policy.time
        // A rule of the clock that blocks at `t`, the readings as now (its hold aside: a rule that begins to match
        // takes its hold_on first, which only delays it).
        func blocked(at t: Double) -> Bool {
            var f = task
            f.waited = task.waited + max(0, t - now)
            // A millisecond in: an instant made of a day's length and a time of day may fall a hair before the second.
            let d = Policy.Evaluator(policy: policy, conditions: conditions, time: time(t + 0.001)).decideNow(f)
            return d.matches.contains { $0.verdict != .run && $0.verdict != .throttle && timed.contains($0.ruleID) }
        }
        // The next instant after `t` at which such a rule's outcome can change.
        func next(after t: Double) -> Double? {
            let tf = time(t)
            let sod = tf.secondsSinceMidnight
            var c: [Double] = []
            if dep.opaque { c.append(t + 60) }
            if dep.readsHour { c.append(t + tf.secondsUntil(((sod / 3600).rounded(.down) + 1).truncatingRemainder(dividingBy: 24) * 3600)) }
            if dep.readsWeekday { c.append(t + tf.secondsUntil(0)) }
            for l in dep.ofDay { c.append(t + tf.secondsUntil(l)) }
            if let w = task.window { c += [t + tf.secondsUntil(w.start), t + tf.secondsUntil(w.end)] }
            let waited = task.waited + (t - now)
            c += dep.waited.filter { $0 > waited }.map { t + ($0 - waited) + 0.001 }
            return c.filter { $0 > t }.min()
        }
        var t = floor
        // A bound on the steps as well as on the span: a rule read in a way that cannot be foreseen is asked each
        // minute, for a day at most (a listing asks this of each task it lists).
        let span = dep.opaque ? min(horizon, 86_400) : horizon
        for _ in 0..<2_000 {
            if !blocked(at: t) { return t }
            guard let n = next(after: t), n - floor <= span else { return nil }
            t = abs(n - n.rounded()) < 0.01 ? n.rounded() : n
        }
        return nil
    }

    /// Whether every name `rule` reads is the clock's, the task's own or a setting: its end can be foreseen.
    static func readsOnlyClock(_ rule: Rule, _ policy: Policy) -> Bool {
        !rule.names.isEmpty && rule.names.allSatisfy { n in
            n.hasPrefix("time.") || n.hasPrefix("task.") || policy.settings.values[n] != nil || PolicySettings.defaults.keys.contains(n)
        }
    }
}
