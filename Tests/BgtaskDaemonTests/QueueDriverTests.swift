#if canImport(Glibc)
@preconcurrency import Glibc
#endif
@testable import BgtaskDaemon
import BgtaskBus
import BgtaskConfig
import BgtaskCore
import BgtaskPolicy
import BgtaskProbes
import BgtaskProtocol
import BgtaskQueue
import BgtaskRun
import BgtaskTestSupport
import Foundation
import Testing

/// The daemon as the queue sees it: what it was asked, written down. No adapter (bus service, broker, systemd,
/// presenter, sleep) is made.
final class FakeHost: QueueHost {
    let fakeLauncher = FakeLauncher()
    private(set) var rounds = 0
    private(set) var replies: [() -> Void] = []
    private(set) var callersLeft: [String] = []
    func actOnChanges() { rounds += 1 }
    func reloadPolicy() -> (ok: Bool, said: String) { (false, "not here") }
    /// Commands spawned as the daemon's children (real processes), not as fake units.
    var realProcesses = false
    var launcher: TaskLauncher? { realProcesses ? nil : fakeLauncher }
    func appTask(for row: QueuedTask) -> AppTask { fatalError("no app task in these tests") }
    func appTaskEnded(_ e: Entry, status: Int32) {}
    func appTaskView(_ key: String) -> AppTaskView? { nil }
    var presenter: Presenter { fatalError("no presenter in these tests") }
    var units: SystemdUnits? { nil }
    func afterReply(_ f: @escaping () -> Void) { replies.append(f) }
    func callerLeft(_ name: String) { callersLeft.append(name) }
}

/// A `QueueDriver` alone: its own state directory and policy, given readings, a fake host.
final class DriverAlone {
    let dir: URL
    let bus: PrivateBus
    let host = FakeHost()
    let driver: QueueDriver
    /// Kept, as `InProcessDaemon.kept`: the default context may hold its sources after the test.
    nonisolated(unsafe) static var kept: [(QueueDriver, FakeHost)] = []

    /// `before`: what is done to the state directory (made, empty) before the driver opens it.
    /// `busyTimeout`: how long its queue's writes wait for a lock another process holds.
    init(policy: String, readings: [String: PolicyValue], leftRunning: QueuedTask? = nil, busyTimeout: Double = 5,
         before: (String) throws -> Void = { _ in }) throws {
        dir = FileManager.default.temporaryDirectory.appendingPathComponent("bgtask-driver-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir.appendingPathComponent("state"), withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        try before(dir.appendingPathComponent("state").path)
        let policyFile = dir.appendingPathComponent("policy.toml")
        try policy.write(to: policyFile, atomically: true, encoding: .utf8)
        bus = try PrivateBus()
        var o = DaemonOptions(probe: ProbeOptions(root: SysfsRoot(sysfs: dir.appendingPathComponent("sys").path, proc: dir.appendingPathComponent("proc").path),
                                                  useDBus: false))
        o.quiet = true
        o.readings = readings
        o.queueBusyTimeout = busyTimeout
        o.places = DaemonPlaces(stateDirectory: dir.appendingPathComponent("state").path,
                                policySources: [.builtIn, .file(policyFile.path)], appDirectories: [])
        let files = try StateFiles(o)
        if let r = leftRunning { try files.store.put(r); try files.store.markRunning(r) }
        let (p, errors) = PolicyLayers.load(o.places!.policySources)
        guard errors.isEmpty else { throw DaemonTestFailure("\(errors)") }
        driver = QueueDriver(files: files, options: o, loop: MainLoop(), events: try EventLoop(watch: nil, signals: false),
                             configuration: PolicyInForce(p, warning: nil, atStart: []), bus: try BusConnection(address: bus.address))
        driver.host = host
        DriverAlone.kept.append((driver, host))
    }

    deinit { try? FileManager.default.removeItem(at: dir) }

    func submit(_ id: String, requiresPower: Bool) -> Result<String, BusError> {
        var o = SubmitOptions()
        o.id = id
        o.requiresExternalPower = requiresPower
        return driver.submit(o, ["true"])
    }
}

extension DefaultContextTests {
@Suite("the queue driven alone (QueueDriver): no bus service, broker, systemd or presenter, only a host that writes down what it is asked")
struct QueueDriverTests {
    @Test("a charger task is queued when Submit replies and rests on battery once the reply's follow-up has decided it, starts through the host's launcher when the charger comes, and leaves the queue once its round ends it")
    func chargerTaskThroughTheHost() throws {
        let a = try DriverAlone(policy: ServiceTests.fastPower, readings: ServiceTests.onBattery)
        _ = try a.submit("backup", requiresPower: true).get()
        #expect(a.host.replies.count == 1, "its first verdict, the submitted line and the signal wait for the reply")
        #expect(a.driver.queue.awake["backup"] != nil && a.driver.queue.isWaiting("backup"), "queued, not yet decided, when the reply goes")
        a.host.replies.forEach { $0() }
        #expect(a.driver.queue.awake["backup"] == nil && a.driver.queue.isWaiting("backup"), "resting: no supervisor while it waits for power")
        #expect(a.host.fakeLauncher.started.isEmpty)

        a.driver.readingsChanged(ServiceTests.charger)
        #expect(a.host.fakeLauncher.started["backup"] != nil, "the plug started it through the host's launcher")
        #expect(try a.driver.store.get("backup", state: "running") != nil, "its run is in the queue")
        #expect(a.driver.announce.held.contains { $0.signal == .taskChanged }, "TaskChanged held until the round is done")

        a.driver.running["backup"]?.supervisor.childExited(waitStatus: 0)
        a.driver.settle(now: monotonic())
        #expect(a.driver.running.isEmpty)
        #expect(try a.driver.store.all(state: "running").isEmpty && a.driver.store.all(state: "pending").isEmpty)
    }

    @Test("a run a dead daemon left in a unit, with no systemd manager here now, is recorded as unreachable and queued again")
    func leftoverUnitWithoutAManager() throws {
        var r = QueuedTask(id: "sync", kind: .processing, argv: ["true"], submitted: 1_000)
        r.state = "running"
        r.runID = "sync-run"
        r.cgroup = .unit("bgtask-sync-1-1.service")
        let a = try DriverAlone(policy: ServiceTests.fastPower, readings: ServiceTests.onBattery, leftRunning: r)
        a.driver.recoverInterrupted()
        #expect(try a.driver.store.all(state: "running").isEmpty)
        #expect(try a.driver.store.get("sync", state: "pending") != nil, "processing work is queued again")
        a.driver.audit.flush()
        let told = try a.driver.audit.entries(run: "sync-run").map(\.detail)
        #expect(told.contains { $0.contains("could not be reached (no systemd manager now)") }, "\(told)")
    }

    @Test("a start written to `starting` whose running row was never written (a crash between them): replayed at the next start, its command found by its token and ended, the processing request queued again")
    func startIntentReplayed() throws {
        var r = QueuedTask(id: "sync", kind: .processing, argv: ["true"], submitted: 1_000)
        r.runID = "sync-run"
        r.earliest = wallClockNow() + 7200
        let a = try DriverAlone(policy: "", readings: ServiceTests.onBattery)
        try a.driver.store.put(r)
        let token = "4242-1-1700000000-intent"
        #expect(a.driver.files.intents.record(.init(id: "sync", runID: "sync-run", token: token)) == nil)
        // The command the dead daemon spawned: it carries the token, and nothing else knows its pid.
        // It waits on its stdin, not in an exec of its own: its environment is readable throughout.
        let orphan = try Child("/bin/sh", ["-c", "echo ready; read x"], environment: Child.environment([RunProcesses.variable: token, "LD_PRELOAD": nil]),
                               stdin: true)
        defer { orphan.stop() }
        #expect(orphan.line(within: 10) == "ready")
        #expect(RunProcesses.find(token) == [orphan.process.processIdentifier], "the orphan is there to be found")

        a.driver.recoverInterrupted()
        #expect(orphan.waitExit(within: 15) != nil, "the first copy runs on")
        #expect(try a.driver.store.all(state: "running").isEmpty)
        #expect(try a.driver.store.get("sync", state: "pending")?.runID == "sync-run", "processing work is queued again, its story one")
        a.driver.audit.flush()
        let told = try a.driver.audit.entries(run: "sync-run").map(\.detail)
        #expect(told.contains { $0.contains("its start was recorded, its pid not yet") }, "\(told)")
        #expect(told.contains { $0.contains("queued again") }, "\(told)")
        #expect(a.driver.files.intents.left().isEmpty, "replayed once")
    }

    @Test("a line in `starting` for another request of that id (its run id differs), or for a request that is gone, changes nothing")
    func staleStartIntentIgnored() throws {
        var r = QueuedTask(id: "sync", kind: .refresh, argv: ["true"], submitted: 1_000)
        r.runID = "sync-second"
        let a = try DriverAlone(policy: "", readings: ServiceTests.onBattery)
        try a.driver.store.put(r)
        #expect(a.driver.files.intents.record(.init(id: "sync", runID: "sync-first", token: "t1")) == nil)
        #expect(a.driver.files.intents.record(.init(id: "gone", runID: "gone-run", token: "t2")) == nil)
        #expect(a.driver.files.intents.left().count == 2)
        a.driver.recoverInterrupted()
        #expect(try a.driver.store.get("sync", state: "pending") == r, "the refresh request waits as it was (not dropped)")
        #expect(try a.driver.store.all(state: "running").isEmpty)
        #expect(a.driver.files.intents.left().isEmpty)
    }

    @Test("a start's line holds no tab or line break: such an identifier is refused by the file (the queue takes the start instead), and a damaged line is left out")
    func startIntentLines() throws {
        let a = try DriverAlone(policy: "", readings: ServiceTests.onBattery)
        let intents = a.driver.files.intents
        #expect(intents.record(.init(id: "a\tb", runID: "r", token: "t")) != nil)
        #expect(intents.record(.init(id: "ok", runID: "r\n", token: "t")) != nil)
        #expect(intents.left().isEmpty)
        #expect(intents.record(.init(id: "ok", runID: "r", token: "t")) == nil)
        let fd = open(intents.path, O_WRONLY | O_APPEND)
        _ = "half a line\n\t\t\n".withCString { write(fd, $0, strlen($0)) }
        close(fd)
        #expect(intents.left() == [.init(id: "ok", runID: "r", token: "t")])
        intents.clear()
        #expect(intents.left().isEmpty)
    }

    @Test("a FIFO where `starting` should be: said, and each start is written to the queue as its running row instead; the task still starts")
    func startIntentsOnAFIFO() throws {
        let a = try DriverAlone(policy: ServiceTests.fastPower, readings: ServiceTests.onBattery) { state in
            guard mkfifo(state + "/" + StartIntents.file, 0o600) == 0 else { throw DaemonTestFailure("mkfifo: \(errno)") }
        }
        let problem = try #require(a.driver.files.intents.problem)
        #expect(problem.contains("/starting") && problem.contains("FIFO"), "\(problem)")
        _ = try a.submit("backup", requiresPower: true).get()
        a.driver.readingsChanged(ServiceTests.charger)
        #expect(a.host.fakeLauncher.started["backup"] != nil)
        #expect(try a.driver.store.get("backup", state: "running")?.token != nil, "its start is in the queue, with its token")
        #expect(a.driver.files.intents.left().isEmpty, "a FIFO is not read (it would wait for a writer): nothing to replay")
    }

    @Test("a caller that leaves is forgotten by the queue's submit rate and by the host's bus service")
    func callerLeft() throws {
        let a = try DriverAlone(policy: "", readings: ServiceTests.onBattery)
        var n = 0
        while a.driver.allowSubmit(":1.7"), n < 100_000 { n += 1 }
        #expect(!a.driver.allowSubmit(":1.7"), "its burst is spent")
        a.driver.callerLeft(":1.7")
        #expect(a.host.callersLeft == [":1.7"])
        #expect(a.driver.allowSubmit(":1.7"), "a new caller of that name starts afresh")
    }
}
}
