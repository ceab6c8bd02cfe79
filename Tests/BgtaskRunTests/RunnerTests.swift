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
}
