#if canImport(Glibc)
@preconcurrency import Glibc
#endif
@testable import BgtaskDaemon
import BgtaskBus
import BgtaskConfig
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
    var launcher: TaskLauncher? { fakeLauncher }
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

    init(policy: String, readings: [String: PolicyValue], leftRunning: QueuedTask? = nil) throws {
        dir = FileManager.default.temporaryDirectory.appendingPathComponent("bgtask-driver-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let policyFile = dir.appendingPathComponent("policy.toml")
        try policy.write(to: policyFile, atomically: true, encoding: .utf8)
        bus = try PrivateBus()
        var o = DaemonOptions(probe: ProbeOptions(root: SysfsRoot(sysfs: dir.appendingPathComponent("sys").path, proc: dir.appendingPathComponent("proc").path),
                                                  useDBus: false))
        o.quiet = true
        o.readings = readings
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
    @Test("a charger task rests on battery, starts through the host's launcher when the charger comes, and leaves the queue once its round ends it")
    func chargerTaskThroughTheHost() throws {
        let a = try DriverAlone(policy: ServiceTests.fastPower, readings: ServiceTests.onBattery)
        _ = try a.submit("backup", requiresPower: true).get()
        #expect(a.host.replies.count == 1, "the submitted line and signal wait for the reply")
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
