import BgtaskCore
import BgtaskPolicy
import Testing

/// `--between`: the task's own window of local time, in virtual time (the clock is handed in, not read).
@Suite("--between windows: wait outside, pause at the close, run again when it opens")
struct WindowTests {
    static func at(_ hour: Double) -> TimeFields {
        TimeFields(hour: Int(hour) % 24, secondsSinceMidnight: (hour * 3600).truncatingRemainder(dividingBy: 86_400), weekday: "mon")
    }

    @Test("parsing: HH:MM-HH:MM, spanning midnight allowed, the same time twice and bad clocks refused")
    func parses() {
        #expect(ClockWindow("01:00-06:00")?.text == "01:00-06:00")
        #expect(ClockWindow("22:00-6:30")?.text == "22:00-06:30")
        #expect(ClockWindow("01:00:30-02:00")?.start == 3630)
        for bad in ["01:00-01:00", "25:00-01:00", "01:60-02:00", "1-2", "01:00", "01:00-02:00-03:00", "-01:00", "01:00-", "٠١:00-02:00"] {
            #expect(ClockWindow(bad) == nil, "\(bad)")
        }
        let night = ClockWindow("22:00-06:00")!
        #expect(night.contains(23 * 3600) && night.contains(3600) && !night.contains(6 * 3600) && !night.contains(12 * 3600))
        #expect(night.untilChange(from: Self.at(12)) == 10 * 3600)
        #expect(night.untilChange(from: Self.at(23)) == 7 * 3600)
    }

    @Test("outside its window a task waits with the reason and wakes when it opens; it starts then; the close pauses it; the next opening resumes it")
    func waitsRunsPausesResumes() throws {
        let p = Policy.merge([])
        var t = TaskFields(id: "backup")
        t.window = ClockWindow("01:00-06:00")
        var m = TaskMachine(task: t, enqueuedAt: 0)
        func step(_ now: Double) -> (Decision, [TaskAction]) {
            // `now` counts seconds from midnight Monday, so the local time follows it.
            m.step(Policy.Evaluator(policy: p, conditions: ["power.external": .bool(true)], time: Self.at(now / 3600)), now: now)
        }
        let noon = step(0)    // midnight: outside
        #expect(noon.1 == [])
        #expect(noon.0.verdict == .defer)
        #expect(noon.0.matches.first?.ruleID == "task.in_window")
        #expect(noon.0.matches.first?.reason.contains("outside its window 01:00-06:00; it opens in 1h") == true, "\(noon.0.matches)")
        let wake = try #require(m.nextWake)
        #expect(abs(wake - 3600) < 0.01)
        #expect(step(wake).1 == [.start])
        #expect(abs((m.nextWake ?? 0) - 6 * 3600) < 0.01)          // it will be looked at when the window closes
        #expect(step(6 * 3600 + 0.001).1 == [.pause])
        #expect(abs((m.nextWake ?? 0) - 25 * 3600) < 0.01)         // … and when it opens again tomorrow
        #expect(step(25 * 3600 + 0.001).1 == [.resume])
    }

    @Test("a window is the task's own requirement: it holds with every rule gone, and for many tasks with one signature alike")
    func heldForEachTask() {
        let p = Policy.merge([])
        let ev = Policy.Evaluator(policy: p, conditions: [:], time: Self.at(12))
        var inside = TaskFields(id: "a")
        inside.window = ClockWindow("11:00-13:00")
        var outside = TaskFields(id: "b")
        outside.window = ClockWindow("01:00-06:00")
        // The fast verdict caches by signature; both have the same flags and kind.
        #expect(ev.verdict(inside) == .run)
        #expect(ev.verdict(outside) == .defer)
        #expect(ev.verdict(TaskFields(id: "c")) == .run)
    }
}
