@testable import BgtaskRun
import BgtaskCore
import BgtaskPolicy
import BgtaskProbes
import Testing

/// `bgtask run` asks the scheduler bgtaskd keeps, of one entry: the slot before the start, the start, the end.
@Suite("bgtask run's queue: a Scheduler of one entry")
struct RunnerTests {
    @Test("the one entry finds its slot free whatever the daemon's limits; started, it runs and holds the slot; ended, the queue is empty")
    func oneEntry() {
        var task = TaskFields(id: "backup")
        task.cpuHeavy = true
        var o = RunOptions(argv: ["true"], task: task, probe: ProbeOptions(root: SysfsRoot(sysfs: "/nonexistent"), useDBus: false))
        o.quiet = true
        let s = Supervisor(options: o, policy: PolicyRef(Policy.merge([])), observer: nil, state: nil, enqueuedAt: 0)
        let one = OneEntry(s)
        #expect(one.scheduler.awake["backup"] === s && one.scheduler.waitingCount == 1)
        #expect(s.slot?(task) == nil, "one slot, CPU-heavy work included: a foreground command never waits for one")
        s.onEvent?(s, .started)
        #expect(one.scheduler.running["backup"] === s && one.scheduler.waitingCount == 0 && one.scheduler.load.running == 1)
        one.finished()
        #expect(one.scheduler.running.isEmpty && one.scheduler.load.running == 0 && one.scheduler.load.heavy == 0)
    }

    @Test("a wait for an earliest date is told once: its countdown changes at every evaluation, the date does not")
    func earliestWaitToldOnce() {
        var o = RunOptions(argv: ["true"], task: TaskFields(id: "feed"), probe: ProbeOptions(root: SysfsRoot(sysfs: "/nonexistent"), useDBus: false))
        o.quiet = true
        o.earliest = 900
        let s = Supervisor(options: o, policy: PolicyRef(Policy.merge([])), observer: nil, state: nil, enqueuedAt: 0)
        let evaluator = { Policy.Evaluator(policy: Policy.merge([]), conditions: [:], time: .midnightMonday) }
        s.conditionsChanged([:], now: 0, shared: evaluator())
        let first = s.lastSaid
        #expect(first.contains("its earliest begin date") && first.contains(", in 15m"), "\(first)")
        s.conditionsChanged(["power.external": .bool(true)], now: 10, shared: evaluator())
        #expect(s.lastSaid == first, "told again: \(s.lastSaid)")
        #expect(Supervisor.sameWait("not before 20:43:35, in 15m (its earliest begin date)", "not before 20:43:35, in 14m50s (its earliest begin date)"))
        #expect(!Supervisor.sameWait("not before 20:43:35, in 15m (x)", "not before 20:44:35, in 15m (x)"), "another date is another wait")
        #expect(!Supervisor.sameWait("held, in 3m; waiting", "held, in 3 rooms; waiting"), "only a duration is left out")
    }
}
