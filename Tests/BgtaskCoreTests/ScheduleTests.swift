@testable import BgtaskCore
import BgtaskPolicy
import Testing
import Foundation

/// A policy with only the built-in requirement checks: the schedule alone decides.
func bareMachine(_ t: TaskFields, limits: TaskLimits = .init()) -> TaskMachine { TaskMachine(task: t, enqueuedAt: 0, limits: limits) }

func emptyPolicy() throws -> Policy { Policy.merge([]) }

@Suite("the daemon's queue rules, in virtual time")
struct ScheduleTests {
    let ac: [String: PolicyValue] = ["power.external": .bool(true)]
    let battery: [String: PolicyValue] = ["power.external": .bool(false)]

    @Test("--earliest is a floor: the machine wakes at it when the policy would run the task, and starts it then, not before")
    func earliestIsAFloor() throws {
        let p = try emptyPolicy()
        var limits = TaskLimits()
        limits.earliest = 3600
        var m = bareMachine(TaskFields(id: "nightly"), limits: limits)
        func at(_ now: Double, _ c: [String: PolicyValue]) -> [TaskAction] {
            m.step(Policy.Evaluator(policy: p, conditions: c, time: .midnightMonday), now: now).1
        }
        #expect(at(0, ac) == [])
        #expect(m.startBlock == .earliest(3600))
        #expect(m.nextWake == 3600)
        #expect(at(1800, ac) == [])
        #expect(at(3600, ac) == [.start])
        #expect(m.startBlock == nil)
    }

    @Test("--earliest does not make a task that waits for the charger wake at it: the charger starts it, after the floor")
    func earliestWithRequirement() throws {
        let p = try emptyPolicy()
        var t = TaskFields(id: "backup")
        t.requiresExternalPower = true
        var limits = TaskLimits()
        limits.earliest = 600
        var m = bareMachine(t, limits: limits)
        func at(_ now: Double, _ c: [String: PolicyValue]) -> [TaskAction] {
            m.step(Policy.Evaluator(policy: p, conditions: c, time: .midnightMonday), now: now).1
        }
        #expect(at(0, battery) == [])
        #expect(m.nextWake == nil)              // only the charger can start it
        #expect(at(300, ac) == [])              // the charger came before the floor
        #expect(m.nextWake == 600)
        #expect(at(600, ac) == [.start])
    }

    @Test("the limits: a full set of slots holds a task the policy would run; a freed slot starts it; user-initiated work is not held")
    func slotsHoldWork() throws {
        let p = try emptyPolicy()
        let limits = Schedule.Limits(maxRunning: 2, maxRunningHeavy: 1)
        var heavy = TaskFields(id: "encode")
        heavy.cpuHeavy = true
        #expect(limits.slot(for: TaskFields(id: "a"), load: .init(running: 1, heavy: 1)) == nil)
        #expect(limits.slot(for: heavy, load: .init(running: 1, heavy: 1)) != nil)
        #expect(limits.slot(for: TaskFields(id: "a"), load: .init(running: 2, heavy: 0)) != nil)
        var user = TaskFields(id: "u")
        user.userInitiated = true
        #expect(limits.slot(for: user, load: .init(running: 2, heavy: 1)) == nil)

        var m = bareMachine(TaskFields(id: "a"))
        let ev = Policy.Evaluator(policy: p, conditions: ac, time: .midnightMonday)
        let full = limits.slot(for: m.task, load: .init(running: 2))
        #expect(m.step(ev, now: 0, slot: full).1 == [])
        guard case .noSlot(let why)? = m.startBlock else { Issue.record("not held by the slots: \(String(describing: m.startBlock))"); return }
        #expect(why.contains("daemon.max_running"))
        #expect(m.step(ev, now: 5, slot: nil).1 == [.start])
    }

    @Test("--every: the next period after a run; periods missed while the machine was off run once, not once each")
    func periodic() {
        // Anchored at 1000, every 100: a run at 1005 is next due at 1100.
        #expect(Schedule.nextPeriodic(anchor: 1000, every: 100, after: 1005) == 1100)
        #expect(Schedule.nextPeriodic(anchor: 1000, every: 100, after: 1100) == 1200)
        #expect(Schedule.nextPeriodic(anchor: 1000, every: 100, after: 900) == 1000)
        // Off from 1100 to 1550: the run at 1550 (late, once) is next due at 1600 — not 1200, 1300, 1400, 1500.
        #expect(Schedule.nextPeriodic(anchor: 1000, every: 100, after: 1550) == 1600)
    }

    @Test("--retry backoff: the base, doubled each retry, capped")
    func backoff() {
        #expect(Schedule.backoff(attempt: 1, base: 30, max: 3600) == 30)
        #expect(Schedule.backoff(attempt: 2, base: 30, max: 3600) == 60)
        #expect(Schedule.backoff(attempt: 4, base: 30, max: 3600) == 240)
        #expect(Schedule.backoff(attempt: 9, base: 30, max: 3600) == 3600)
        #expect(Schedule.backoff(attempt: 1000, base: 30, max: 3600) == 3600)
    }

    @Test("a debug launch starts a waiting task whatever the policy says, and the policy governs it from then on")
    func debugLaunch() throws {
        let p = try emptyPolicy()
        var t = TaskFields(id: "backup")
        t.requiresExternalPower = true
        var m = bareMachine(t)
        #expect(m.step(Policy.Evaluator(policy: p, conditions: battery, time: .midnightMonday), now: 0).1 == [])
        #expect(m.launchNow(now: 1) == [.start])
        #expect(m.forced)
        #expect(m.launchNow(now: 2) == [])      // once
    }
}

@Suite("an app's task in the core")
struct AppTaskMachineTests {
    @Test("a defer or pause verdict expires an app's running task (its app cannot be frozen for it); a command's task is paused")
    func pauseExpiresOnlyAppTasks() throws {
        let p = Policy.merge([])
        var t = TaskFields(id: "feed")
        t.requiresExternalPower = true
        let ac: [String: PolicyValue] = ["power.external": .bool(true)]
        let battery: [String: PolicyValue] = ["power.external": .bool(false)]
        for appTask in [false, true] {
            var limits = TaskLimits(expireGrace: 5)
            limits.pauseExpires = appTask
            var m = TaskMachine(task: t, enqueuedAt: 0, limits: limits)
            #expect(m.step(Policy.Evaluator(policy: p, conditions: ac, time: .midnightMonday), now: 0).1 == [.start])
            let actions = m.step(Policy.Evaluator(policy: p, conditions: battery, time: .midnightMonday), now: 1).1
            #expect(actions == (appTask ? [.expire(grace: 5, why: .verdict)] : [.pause]))
        }
    }
}

@Suite("the daily battery budget per app, in virtual time")
struct BatteryBudgetTests {
    @Test("runtime on battery adds up per app (once per app, however many of its tasks run); on the charger nothing counts; a new day starts at zero")
    func accounting() {
        var use = Schedule.BatteryUse(day: 100)
        use.add(120, apps: ["a", "b"], onBattery: true, day: 100)
        use.add(300, apps: ["a"], onBattery: false, day: 100)
        use.add(60, apps: ["a"], onBattery: true, day: 100)
        #expect(use.seconds["a"] == 180)
        #expect(use.seconds["b"] == 120)
        use.add(10, apps: ["a"], onBattery: true, day: 101)
        #expect(use.seconds["a"] == 10)
        #expect(use.seconds["b"] == nil)
    }

    @Test("an app over its budget waits on battery, not on the charger")
    func enforcement() {
        let limits = Schedule.Limits(appBatteryBudget: 600)
        #expect(limits.budget(app: "a", used: 599, onBattery: true) == nil)
        #expect(limits.budget(app: "a", used: 600, onBattery: true)?.contains("daemon.app_battery_budget") == true)
        #expect(limits.budget(app: "a", used: 5000, onBattery: false) == nil)
    }
}

@Suite("continued tasks in virtual time")
struct ContinuedTaskTimeTests {
    @Test("no progress for run.progress_stalled shows it stalled, for run.progress_expire expires it; only a change counts; keep going restarts the count")
    func progressWatch() {
        var w = ProgressWatch(start: 100, stalledAfter: 60, expireAfter: 180)
        #expect(w.state(now: 159) == .moving)
        #expect(w.nextCheck(now: 100) == 160)
        #expect(w.state(now: 160) == .stalled(since: 100))
        w.report(completed: 0, total: 10, now: 150)
        #expect(w.state(now: 209) == .moving)
        w.report(completed: 0, total: 10, now: 200)          // the same numbers again: not progress
        #expect(w.state(now: 210) == .stalled(since: 150))
        #expect(w.nextCheck(now: 210) == 330)
        #expect(w.state(now: 330) == .expire(since: 150))
        #expect(w.nextCheck(now: 330) == nil)
        w.keepGoing(now: 330)
        #expect(w.state(now: 331) == .moving)
        w.report(completed: 1, total: 10, now: 340)
        #expect(w.state(now: 399) == .moving)
    }

    @Test("updates at most once a second: the first at once, the rest wait for the interval and are coalesced")
    func throttle() {
        var t = UpdateThrottle(interval: 1)
        #expect(t.offer(now: 10) == .sendNow)
        #expect(t.offer(now: 10.2) == .sendAt(11))
        #expect(t.offer(now: 10.5) == .alreadyScheduled)
        t.sent(now: 11)
        #expect(t.offer(now: 11.4) == .sendAt(12))
        t.sent(now: 12)
        #expect(t.offer(now: 13.5) == .sendNow)
    }

    @Test("the notification body: subtitle, then the percentage and counts (GNOME draws no bar), and a stall line")
    func body() {
        #expect(ProgressText.body(subtitle: "3 of 7 files", completed: 3, total: 7) == "3 of 7 files\n42 % · 3 of 7")
        #expect(ProgressText.body(subtitle: nil, completed: 0, total: 0) == "starting…")
        #expect(ProgressText.percent(completed: 250, total: 100) == 100)
        #expect(ProgressText.body(subtitle: "", completed: 1, total: 2, stalledFor: 75).contains("No progress for 1 min 15 s"))
    }

    @Test("an app's words in a body for a markup-reading server stay words: & < > are escaped, the rest is kept")
    func markupEscaped() {
        #expect(ProgressText.markupEscaped("Tom & Jerry <b>4K</b> → 42 % · 3 of 7") == "Tom &amp; Jerry &lt;b&gt;4K&lt;/b&gt; → 42 % · 3 of 7")
        #expect(ProgressText.markupEscaped("plain") == "plain")
        #expect(ProgressText.markupEscaped("&amp;") == "&amp;amp;")
    }
}

/// Times as people read them: with their day, as `systemctl list-timers` shows them.
struct ClockTextTests {
    /// Today at `hour`:00 local time, as an epoch.
    func today(_ hour: Int32, plusDays days: Int32 = 0) -> Double {
        var now = time_t(wallClockNow())
        var t = tm()
        localtime_r(&now, &t)
        t.tm_hour = hour; t.tm_min = 0; t.tm_sec = 0; t.tm_mday += days; t.tm_isdst = -1
        return Double(mktime(&t))
    }

    @Test("today's times bare; tomorrow and yesterday named; the week around today by weekday; further off with the date")
    func timesCarryTheirDay() {
        let noon = today(12)
        #expect(clockText(today(13), now: noon) == "13:00:00")
        #expect(clockText(today(1, plusDays: 1), now: noon) == "tomorrow 01:00:00")
        #expect(clockText(today(23, plusDays: -1), now: noon) == "yesterday 23:00:00")
        let inThree = clockText(today(9, plusDays: 3), now: noon)
        #expect(["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"].contains(String(inThree.prefix(3))) && inThree.hasSuffix(" 09:00:00"), "\(inThree)")
        let far = clockText(today(9, plusDays: 40), now: noon)
        #expect(far.range(of: #"^\d{4}-\d{2}-\d{2} 09:00:00$"#, options: .regularExpression) != nil, "\(far)")
    }

    @Test("a time to come says how far off it is: 13:20 at 13:21 reads as tomorrow, in 23h59m")
    func untilSaysTheDistance() {
        let at1321 = today(13) + 21 * 60
        #expect(untilText(today(13) + 20 * 60 + 86_400, now: at1321) == "tomorrow 13:20:00, in 23h59m")
        #expect(untilText(today(13), now: at1321) == "13:00:00", "a time gone by has no distance")
    }
}

@Suite("local midnight, on the wall clock")
struct MidnightTests {
    @Test("the next local midnight is 00:00:00 of the next local day, within 25 h, for instants across a year (daylight-saving days included)")
    func nextMidnight() {
        var t = 1_798_761_600.0    // 2027-01-01 UTC; then every 7 h 13 min for a year
        while t < 1_830_297_600 {
            let m = RunEnd.nextLocalMidnight(after: t)
            var a = time_t(t), b = time_t(m)
            var ta = tm(), tb = tm()
            localtime_r(&a, &ta)
            localtime_r(&b, &tb)
            #expect(m > t && m - t <= 25 * 3600, "\(t) → \(m)")
            #expect(tb.tm_hour == 0 && tb.tm_min == 0 && tb.tm_sec == 0, "\(t) → \(m)")
            var next = ta
            next.tm_mday += 1; next.tm_hour = 12; next.tm_isdst = -1
            var noon = next
            _ = mktime(&noon)
            #expect(tb.tm_mday == noon.tm_mday && tb.tm_mon == noon.tm_mon, "\(t) → \(m)")
            t += 7 * 3600 + 13 * 60
        }
    }
}
