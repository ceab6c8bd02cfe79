#if canImport(Glibc)
@preconcurrency import Glibc
#endif
@testable import BgtaskDaemon
import BgtaskBus
import BgtaskConfig
import BgtaskJSON
import BgtaskPolicy
import BgtaskProbes
import BgtaskProtocol
import BgtaskQueue
import BgtaskRun
import BgtaskTestSupport
import Foundation
import Testing

/// A task's process as the tests see it: nothing runs; what the supervisor does to it is written down.
final class FakeUnit: TaskHandle {
    let name: String
    var pid: pid_t? { nil }
    var mechanism: CapMechanism { .systemdUnit }
    var containment: Containment { .unit(name) }
    var description: String { "fake unit \(name)" }
    private(set) var signals: [Int32] = []
    private(set) var caps: [Int?] = []
    private(set) var freezes: [Bool] = []
    private(set) var released = false
    init(_ name: String) { self.name = name }
    func signal(_ sig: Int32) { signals.append(sig) }
    func setCap(_ percent: Int?) -> Bool { caps.append(percent); return true }
    func freeze(_ on: Bool) -> Bool { freezes.append(on); return true }
    func cpuSeconds() -> Double? { 0 }
    func release() { released = true }
}

/// Starts every command task as a `FakeUnit`.
final class FakeLauncher: TaskLauncher {
    private(set) var started: [String: FakeUnit] = [:]
    private(set) var argv: [String: [String]] = [:]
    func launch(_ s: Supervisor, argv: [String], background: Bool, directory: String?, environment: [String]) throws -> TaskProcess? {
        let u = FakeUnit("fake-\(s.id).service")
        started[s.id] = u
        self.argv[s.id] = argv
        return TaskProcess(handle: u)
    }
}

/// bgtaskd's service in this process: its own state, policy and manifests in a temporary directory, a private
/// bus for what it emits, given readings (no watcher: nothing of this machine is read for a verdict), no signals
/// of its own, and a fake launcher. Calls go straight to the service with a caller already identified; the round
/// that follows a call is run by the test (`settle`), not by a timer.
final class InProcessDaemon {
    let dir: URL
    let bus: PrivateBus
    let launcher = FakeLauncher()
    let daemon: Daemon
    static let user = Caller(uid: getuid(), pid: getpid(), sandbox: .none)
    /// Every daemon made, kept: the GLib default context may still hold its sources (timers, watches) after its
    /// test, and they refer to it unowned.
    nonisolated(unsafe) static var kept: [Daemon] = []

    init(policy: String = "", readings: [String: PolicyValue], manifests: [(id: String, identifiers: [String])] = []) throws {
        dir = FileManager.default.temporaryDirectory.appendingPathComponent("bgtaskd-in-process-\(UUID().uuidString)")
        let apps = dir.appendingPathComponent("apps")
        try FileManager.default.createDirectory(at: apps, withIntermediateDirectories: true)
        let policyFile = dir.appendingPathComponent("policy.toml")
        try policy.write(to: policyFile, atomically: true, encoding: .utf8)
        for m in manifests {
            let ids = m.identifiers.map { "\"\($0)\"" }.joined(separator: ", ")
            try "id = \"\(m.id)\"\ncommand = [\"/bin/true\"]\npermitted_identifiers = [\(ids)]\nkinds = [\"refresh\", \"processing\", \"continued\"]\n"
                .write(to: apps.appendingPathComponent("\(m.id).toml"), atomically: true, encoding: .utf8)
        }
        bus = try PrivateBus()
        var o = DaemonOptions(probe: ProbeOptions(root: SysfsRoot(sysfs: dir.appendingPathComponent("sys").path, proc: dir.appendingPathComponent("proc").path),
                                                  useDBus: false))
        o.busAddress = bus.address
        o.quiet = true
        o.watchSleep = false
        o.systemdUnits = false
        o.ownsSignals = false
        o.readings = readings
        o.launcher = launcher
        o.places = DaemonPlaces(stateDirectory: dir.appendingPathComponent("state").path,
                                policySources: [.builtIn, .file(policyFile.path)], appDirectories: [apps.path])
        daemon = try Daemon(options: o)
        InProcessDaemon.kept.append(daemon)
        try daemon.prepare()
        daemon.loop.runPending()
    }

    deinit { try? FileManager.default.removeItem(at: dir) }

    /// One call to the service, then the round that acts on it.
    @discardableResult
    func call(_ method: SchedulerMethod, _ args: [BusValue] = [], from who: Caller = InProcessDaemon.user, sender: String = ":1.42") -> Result<[BusValue], BusError> {
        let r = daemon.service.handle(BusCall(sender: sender, method: method.rawValue, args: args, signature: method.signature), from: who)
        settle()
        return r
    }

    /// The round after a call, and what it left due at once on the loop.
    func settle() {
        daemon.afterRound(conditionsChanged: false)
        daemon.loop.runPending()
    }

    /// New readings, as the watcher would deliver them.
    func conditions(_ values: [String: PolicyValue]) {
        daemon.driver.readingsChanged(values)
        daemon.afterRound(conditionsChanged: true)
    }

    func submit(_ id: String, _ options: SubmitOptions = SubmitOptions(), argv: [String] = ["true"]) -> Result<[BusValue], BusError> {
        var o = options
        o.id = id
        return call(.submit, [.dict(o.variant), .strings(argv)])
    }

    /// `n` tasks submitted that wait for the charger (`job-0` …, or as `id` names them).
    func submitWaitingForPower(_ n: Int, argv: [String] = ["true"], id: (Int) -> String = { "job-\($0)" }) throws {
        var o = SubmitOptions()
        o.requiresExternalPower = true
        for i in 0..<n { _ = try submit(id(i), o, argv: argv).get() }
    }

    func pending(_ range: PageRange = PageRange()) throws -> [PendingTask] {
        let reply = try call(.listPendingPage, [.dict(range.variant)]).get()
        guard case .dicts(let list)? = reply.first else { throw DaemonTestFailure("ListPending replied \(reply)") }
        return try list.map { d throws(ProtocolError) in try PendingTask(variant: d) }
    }

    /// `n` rows a previous daemon left in the queue (`left-0` …, processing work waiting for the charger), not yet
    /// taken up.
    func storeLeftRows(_ n: Int) throws {
        for i in 0..<n {
            var r = QueuedTask(id: "left-\(i)", kind: .processing, argv: ["true"], submitted: 1_000 + Double(i))
            r.requiresExternalPower = true
            try daemon.driver.store.put(r)
        }
    }

    /// The running task `id`'s command exits with `status` (a unit's end, as its manager would say it).
    func exit(_ id: String, status: Int32 = 0) {
        daemon.driver.running[id]?.supervisor.childExited(waitStatus: status << 8)
        settle()
    }
}

struct DaemonTestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ d: String) { description = d }
}

extension Result {
    var failureName: String? { if case .failure(let e as BusError) = self { return e.name }; return nil }
}

/// The tests that run the GLib default context in this process (a daemon's loop, MainLoop's timers), one at a time:
/// a source one of them left would otherwise be dispatched on another's thread.
@Suite("the GLib default context's users, one at a time", .serialized)
enum DefaultContextTests {}

/// The service run in this process (no bgtaskd spawned): what each method does to the queue, as the state says it.
extension DefaultContextTests {
@Suite("bgtaskd's service in process: Submit, Cancel, pending, debug launch and expire, apps, errors")
struct ServiceTests {
    static let onBattery: [String: PolicyValue] = ["power.external": .bool(false), "network.online": .bool(true), "user.idle": .bool(true)]
    static let charger: [String: PolicyValue] = ["power.external": .bool(true), "network.online": .bool(true), "user.idle": .bool(true)]
    /// The default's power rule without its holds: the charger starts work at once.
    static let fastPower = """
    [[rule]]
    id = "processing.needs-power"
    when = 'task.requires_external_power && power.external != true'
    verdict = "defer"
    reason = "waiting for external power"
    hold = "0s"
    """

    @Test("Submit queues a command; it waits for the charger with its rule; the charger starts it; its exit ends it and it leaves the queue")
    func submitWaitRunFinish() throws {
        let d = try InProcessDaemon(policy: Self.fastPower, readings: Self.onBattery)
        var o = SubmitOptions()
        o.requiresExternalPower = true
        let reply = try d.submit("backup", o, argv: ["sh", "backup.sh"]).get()
        #expect(reply.first?.string == "backup")
        let waiting = try d.pending()
        #expect(waiting.map(\.id) == ["backup"])
        #expect(waiting.first?.rule == "processing.needs-power" && waiting.first?.reason.contains("external power") == true, "\(waiting)")
        #expect(waiting.first?.command == ["sh", "backup.sh"], "a resting task is listed from its stored row")
        #expect(d.launcher.started.isEmpty)
        // Only the charger can start it: it rests, and its row is the queue's alone (no entry, no supervisor).
        #expect(d.daemon.driver.queue.isResting("backup") && d.daemon.driver.queue.awake["backup"] == nil && d.daemon.driver.queue.waitingCount == 1)

        d.conditions(Self.charger)
        let unit = try #require(d.launcher.started["backup"], "not started on the charger")
        #expect(d.launcher.argv["backup"] == ["sh", "backup.sh"])
        #expect(d.daemon.driver.running["backup"] != nil && !d.daemon.driver.queue.isWaiting("backup"))
        #expect(try d.pending().isEmpty)
        #expect(try QueueStoreView(d).state("backup") == "running", "the queue says it runs before anything else does")

        d.exit("backup", status: 0)
        #expect(d.daemon.driver.running["backup"] == nil)
        #expect(unit.released)
        #expect(try QueueStoreView(d).state("backup") == nil, "a finished request leaves the queue")
    }

    @Test("Submit replies before its task's first verdict; a call that comes before the round after it finds the task decided")
    func submitDecidesAfterItsReply() throws {
        let d = try InProcessDaemon(policy: Self.fastPower, readings: Self.onBattery)
        var o = SubmitOptions()
        o.id = "backup"
        o.requiresExternalPower = true
        let service = d.daemon.service
        let reply = service.handle(BusCall(sender: ":1.42", method: SchedulerMethod.submit.rawValue, args: [.dict(o.variant), .strings(["true"])],
                                           signature: SchedulerMethod.submit.signature), from: InProcessDaemon.user)
        #expect((try reply.get()).first?.string == "backup")
        #expect(d.daemon.driver.queue.awake["backup"] != nil && !service.afterReply.isEmpty, "queued, its verdict to follow the reply")
        // The next call, with no round between: the follow-up runs first.
        let listed = try service.handle(BusCall(sender: ":1.43", method: SchedulerMethod.listPendingPage.rawValue, args: [.dict(PageRange().variant)],
                                                signature: SchedulerMethod.listPendingPage.signature), from: InProcessDaemon.user).get()
        guard case .dicts(let list)? = listed.first else { throw DaemonTestFailure("ListPendingPage replied \(listed)") }
        let task = try #require(try list.map { d throws(ProtocolError) in try PendingTask(variant: d) }.first)
        #expect(task.rule == "processing.needs-power" && task.reason.contains("external power"), "\(task)")
        #expect(service.afterReply.isEmpty && d.daemon.driver.queue.isResting("backup"))
    }

    @Test("TaskChanged is sent once the round that made it is done, and in order: pending, running, finished")
    func taskChangedAfterTheRound() throws {
        let d = try InProcessDaemon(policy: Self.fastPower, readings: Self.onBattery)
        let listener = try BusConnection(address: d.bus.address)
        var told: [String] = []
        listener.subscribe(.taskChanged) { _, args in told.append(args.compactMap(\.string).joined(separator: " ")) }
        // The bus has the listener's match once it answers a later call on the same connection.
        _ = try listener.call("GetId", [], destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus")
        var o = SubmitOptions()
        o.requiresExternalPower = true
        _ = try d.submit("t", o).get()
        #expect(d.daemon.loop.iterate(until: { told.count >= 1 }, within: 5), "\(told)")

        // The charger: the task is spawned inside the delivery; its signal waits for the round's end.
        d.daemon.driver.readings = Self.charger
        d.daemon.driver.deliver(now: monotonic())
        #expect(d.launcher.started["t"] != nil)
        #expect(d.daemon.driver.announce.held.map(\.signal) == [.taskChanged])
        d.daemon.afterRound(conditionsChanged: true)
        #expect(d.daemon.loop.iterate(until: { told.count >= 2 }, within: 5), "\(told)")
        #expect(d.daemon.driver.announce.held.isEmpty)

        d.exit("t")
        #expect(d.daemon.loop.iterate(until: { told.count >= 3 }, within: 5), "\(told)")
        #expect(told == ["t pending", "t running", "t finished"])
    }

    @Test("a task that starts as it is submitted is told pending, then running: never running, then pending")
    func startAtSubmitToldInOrder() throws {
        let d = try InProcessDaemon(policy: Self.fastPower, readings: Self.charger)
        let listener = try BusConnection(address: d.bus.address)
        var told: [String] = []
        listener.subscribe(.taskChanged) { _, args in told.append(args.compactMap(\.string).joined(separator: " ")) }
        _ = try listener.call("GetId", [], destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus")
        _ = try d.submit("t").get()
        #expect(d.launcher.started["t"] != nil, "started in the round after its reply")
        #expect(d.daemon.loop.iterate(until: { told.count >= 2 }, within: 5), "\(told)")
        #expect(told == ["t pending", "t running"])
    }

    @Test("the readings' history of a round that spawned a task is written shortly after it, none of it lost; without a spawn, at once")
    func historyWaitsForASpawnedTask() throws {
        let d = try InProcessDaemon(policy: Self.fastPower, readings: Self.onBattery)
        func kept() -> [String] { ((try? d.daemon.driver.store.transitions("power.external", since: 0)) ?? []).map(\.value) }
        d.daemon.driver.recordHistory(Self.onBattery)
        #expect(kept() == ["false"], "a round that spawned nothing writes at once")
        var o = SubmitOptions()
        o.requiresExternalPower = true
        _ = try d.submit("t", o).get()

        d.daemon.driver.readings = Self.charger
        d.daemon.driver.deliver(now: monotonic())
        #expect(d.launcher.started["t"] != nil)
        d.daemon.driver.recordHistory(Self.charger)
        d.daemon.afterRound(conditionsChanged: true)
        #expect(kept() == ["false"], "held while the new task gets under way")
        #expect(d.daemon.loop.iterate(until: { kept() == ["false", "true"] }, within: 5), "\(kept())")
        #expect(d.daemon.driver.rounds.historyDue.isEmpty && !d.daemon.driver.rounds.housekeepingDue)
    }

    @Test("the first resting tasks in line keep their rows: a plug starts them without reading the queue, a resubmit's row replaces the kept one, a cancel drops it")
    func keptRowsOfTheFirstInLine() throws {
        let d = try InProcessDaemon(policy: Self.fastPower + "\n\n[daemon]\nmax_running = 2\n", readings: Self.onBattery)
        var o = SubmitOptions()
        o.requiresExternalPower = true
        for i in 0..<5 { _ = try d.submit("job-\(i)", o, argv: ["echo", "old"]).get() }
        #expect(d.daemon.driver.queue.restingCount == 5)
        #expect(d.daemon.driver.rounds.kept.count == 2, "max_running rows a group, not one a task")
        _ = try d.submit("job-0", o, argv: ["echo", "new"]).get()
        _ = try d.daemon.driver.cancel("job-1", by: "a test").get()
        #expect(d.daemon.driver.rounds.kept.count == 1, "the resubmitted task's new row is kept, the cancelled one's is gone")

        d.conditions(Self.charger)
        #expect(d.launcher.started.keys.sorted() == ["job-2", "job-3"], "the first two in line: \(d.launcher.started.keys.sorted())")
        // The resubmitted job-0 is last in line; freed slots go to job-4, then to it, with the row it has now.
        d.exit("job-2")
        d.exit("job-3")
        #expect(d.launcher.started["job-4"] != nil && d.launcher.started["job-1"] == nil)
        #expect(d.launcher.argv["job-0"] == ["echo", "new"], "\(d.launcher.argv)")
        #expect(d.daemon.driver.rounds.kept.count <= KeptRows.most)

        // A long command is not kept (it is read back when it wakes): the kept rows stay small.
        d.conditions(Self.onBattery)
        let before = d.daemon.driver.rounds.kept.count
        _ = try d.submit("long", o, argv: ["echo", String(repeating: "x", count: KeptRows.largest)]).get()
        #expect(d.daemon.driver.queue.isResting("long") && d.daemon.driver.rounds.kept.count == before)
    }

    @Test("a plug that makes 40 tasks due starts max_running of them; the others rest on a slot, decided once for their group; a freed slot starts the next in line")
    func dueTasksRestOnASlot() throws {
        let d = try InProcessDaemon(policy: Self.fastPower + "\n\n[daemon]\nmax_running = 2\n", readings: Self.onBattery)
        try d.submitWaitingForPower(40, id: { String(format: "job-%02d", $0) })
        #expect(d.daemon.driver.queue.restingCount == 40 && d.daemon.driver.queue.awake.isEmpty)
        let made = d.daemon.driver.rounds.supervisorsMade
        d.conditions(Self.charger)
        #expect(d.launcher.started.keys.sorted() == ["job-00", "job-01"], "the first two in line start: \(d.launcher.started.keys.sorted())")
        #expect(d.daemon.driver.queue.awake.isEmpty && d.daemon.driver.queue.restingCount == 38, "the others rest on a slot, no supervisor kept")
        #expect(d.daemon.driver.rounds.supervisorsMade - made == 3, "a supervisor for each start and one for the rest of the group, not one each: \(d.daemon.driver.rounds.supervisorsMade - made)")
        let waiting = try #require(try d.pending(PageRange(id: "job-02")).first)
        #expect(waiting.unmet.contains { $0["what"]?.string == "slot" && $0["reason"]?.string?.contains("max_running") == true }, "\(waiting.unmet)")
        #expect(waiting.reason.contains("max_running"), "\(waiting.reason)")

        d.exit("job-00")
        #expect(d.launcher.started["job-02"] != nil && d.launcher.started["job-03"] == nil, "a freed slot goes to the next in line, and only one")
        #expect(d.daemon.driver.queue.restingCount == 37)

        // Unplugged: the resting tasks' class no longer runs, so they wake, one decides, and all rest on the charger.
        d.conditions(Self.onBattery)
        #expect(d.daemon.driver.queue.awake.isEmpty && d.daemon.driver.queue.restingCount == 37)
        let again = try #require(try d.pending(PageRange(id: "job-39")).first)
        #expect(again.reason.contains("external power") && again.rule == "processing.needs-power", "\(again.reason)")
    }

    @Test("Cancel removes a pending request and expires a running task (SIGTERM to its unit); an unknown id is NoSuchTask")
    func cancel() throws {
        let d = try InProcessDaemon(readings: Self.charger)
        _ = try d.submit("now").get()
        let unit = try #require(d.launcher.started["now"])
        var later = SubmitOptions()
        later.earliest = Date().timeIntervalSince1970 + 3600
        _ = try d.submit("later", later).get()
        #expect(try d.pending().map(\.id) == ["later"])

        let removed = try d.call(.cancel, [.string("later")]).get()
        #expect(removed.first?.string?.contains("removed the pending request") == true)
        #expect(try d.pending().isEmpty)
        let expired = try d.call(.cancel, [.string("now")]).get()
        #expect(expired.first?.string?.contains("expired the running task") == true)
        #expect(unit.signals.contains(SIGTERM), "\(unit.signals)")
        #expect(d.call(.cancel, [.string("nothing")]).failureName == SchedulerError.noSuchTask.rawValue)
    }

    @Test("DebugLaunch starts a waiting task whatever the conditions; DebugExpire sends a running one SIGTERM; both refuse what is not there")
    func debugLaunchAndExpire() throws {
        let d = try InProcessDaemon(policy: Self.fastPower, readings: Self.onBattery)
        var o = SubmitOptions()
        o.requiresExternalPower = true
        _ = try d.submit("held", o).get()
        #expect(d.launcher.started["held"] == nil)
        _ = try d.call(.debugLaunch, [.string("held")]).get()
        let unit = try #require(d.launcher.started["held"], "debug launch did not start it")
        #expect(d.call(.debugLaunch, [.string("held")]).failureName == SchedulerError.noSuchTask.rawValue, "no pending task of that id now")
        _ = try d.call(.debugExpire, [.string("held")]).get()
        #expect(unit.signals.contains(SIGTERM))
        d.exit("held", status: 143)
        #expect(d.call(.debugExpire, [.string("held")]).failureName == SchedulerError.noSuchTask.rawValue)
    }

    @Test("errors: a bad request is InvalidArgs naming what is wrong, and nothing is queued; the per-app limit is TooManyPendingTaskRequests")
    func errors() throws {
        let d = try InProcessDaemon(policy: "[daemon]\nmax_pending_per_app = 2\n", readings: Self.onBattery)
        var future = SubmitOptions()
        future.earliest = Date().timeIntervalSince1970 + 3600
        #expect(d.call(.submit, [.dict(future.variant), .strings([])]).failureName == SchedulerError.invalidArgs.rawValue)
        var bad = future
        bad.kind = "urgent"
        let kind = d.submit("k", bad)
        #expect(kind.failureName == SchedulerError.invalidArgs.rawValue)
        if case .failure(let e) = kind { #expect(e.message.contains("urgent"), "\(e.message)") }
        var window = future
        window.window = "25:00-26:00"
        #expect(d.submit("w", window).failureName == SchedulerError.invalidArgs.rawValue)
        #expect(d.call(.submit, [.dict(["nonsense": .bool(true)]), .strings(["true"])]).failureName == SchedulerError.invalidArgs.rawValue)
        #expect(try d.pending().isEmpty, "nothing refused was queued")
        _ = try d.submit("a", future).get()
        _ = try d.submit("b", future).get()
        #expect(d.submit("c", future).failureName == SchedulerError.tooManyPending.rawValue)
        #expect(try d.submit("a", future).get().first?.string == "a", "a request replacing its own is not one more")
        #expect(d.call(.listPendingPage, [.dict(PageRange(limit: 0).variant)]).failureName == SchedulerError.invalidArgs.rawValue)
    }

    @Test("apps: a manifest's app registers and submits its permitted identifiers within Apple's limits; others are NotPermitted; a sandboxed caller reaches only its own")
    func apps() throws {
        let d = try InProcessDaemon(readings: Self.onBattery, manifests: [(id: "org.example.Feed", identifiers: ["org.example.feed.refresh"])])
        let app = BusValue.string("org.example.Feed")
        _ = try d.call(.appRegister, [app, .string("org.example.feed.refresh")]).get()
        #expect(d.call(.appRegister, [app, .string("org.example.other")]).failureName == SchedulerError.notPermitted.rawValue)
        let later = BusValue.double(Date().timeIntervalSince1970 + 3600)
        let request: [String: BusValue] = ["identifier": .string("org.example.feed.refresh"), "kind": .string("refresh"), "earliest": later]
        _ = try d.call(.appSubmit, [app, .dict(request)]).get()
        let mine = try d.call(.appPending, [app]).get()
        guard case .dicts(let list)? = mine.first else { throw DaemonTestFailure("AppPending replied \(mine)") }
        #expect(list.compactMap { $0["identifier"]?.string } == ["org.example.feed.refresh"])
        var second = request
        second["identifier"] = .string("org.example.other")
        #expect(d.call(.appSubmit, [app, .dict(second)]).failureName == SchedulerError.notPermitted.rawValue)
        #expect(d.call(.appSubmit, [.string("org.example.Nobody"), .dict(request)]).failureName != nil, "no manifest, no submit")

        // A Flatpak app: its own app id only, and none of the queue's other methods.
        let sandboxed = Caller(uid: getuid(), pid: getpid(), sandbox: .flatpak(appID: "org.example.Feed"))
        #expect(throws: Never.self) { try d.call(.appPending, [app], from: sandboxed).get() }
        #expect(d.call(.appPending, [.string("org.example.Other")], from: sandboxed).failureName == SchedulerError.notPermitted.rawValue,
                "another app's id: the sandbox says who it is")
        #expect(d.call(.listPendingPage, [.dict(PageRange().variant)], from: sandboxed).failureName == SchedulerError.accessDenied.rawValue)
        #expect(d.call(.cancelAll, [], from: sandboxed).failureName == SchedulerError.accessDenied.rawValue)

        _ = try d.call(.appCancelAll, [app]).get()
        #expect(try d.pending().isEmpty)
    }

    @Test("ListPendingJSON pages the queue as ListPendingPage does, each task a line of the JSON `bgtask pending --json` prints")
    func pendingAsJSONLines() throws {
        let d = try InProcessDaemon(policy: Self.fastPower, readings: Self.onBattery)
        try d.submitWaitingForPower(5, argv: ["echo", "a \"quoted\"\tword\n", "é"])
        var later = SubmitOptions()
        later.earliest = Date().timeIntervalSince1970 + 3600
        _ = try d.submit("later", later).get()
        func page(_ method: SchedulerMethod, after: String?) throws -> (BusValue, String) {
            let reply = try d.call(method, [.dict(PageRange(after: after, limit: 4).variant)]).get()
            guard reply.count == 2, let next = reply[1].string else { throw DaemonTestFailure("\(method) replied \(reply)") }
            return (reply[0], next)
        }
        var lines: [String] = [], expected: [String] = []
        var after: String?
        repeat {
            let (text, next) = try page(.listPendingJSON, after: after)
            let (tasks, nextOfPage) = try page(.listPendingPage, after: after)
            #expect(next == nextOfPage, "both methods page alike")
            guard case .dicts(let list) = tasks, let t = text.bytes else { throw DaemonTestFailure("replies \(tasks) \(text)") }
            lines += t.split(separator: 0x0A).map { String(decoding: $0, as: UTF8.self) }
            expected += list.map { BusValue.dict($0).json.rendered }
            after = next.isEmpty ? nil : next
        } while after != nil
        #expect(lines.count == 6)
        // `next_check` is made from the clock at each call (wall + time left): the two calls differ in microseconds.
        func steady(_ line: String) throws -> JSONValue {
            guard case .object(let fields) = try JSONValue.parse(line) else { return .null }
            return .object(fields.filter { !$0.0.hasPrefix("next_check") })
        }
        #expect(try lines.map(steady) == expected.map(steady), "each line is the task as the CLI renders it from ListPendingPage")
        #expect(lines.filter { !$0.contains("next_check") } == expected.filter { !$0.contains("next_check") }, "byte for byte")
        let first = try JSONValue.parse(lines[0])
        #expect(first["id"] == .string("job-0"))
        #expect(first["command"] == .array([.string("echo"), .string("a \"quoted\"\tword\n"), .string("é")]), "escapes survive the round trip")
        #expect(first["submitted_iso"] != nil && first["rule"] == .string("processing.needs-power"))
        #expect(d.call(.listPendingJSON, [.dict(PageRange(limit: 0).variant)]).failureName == SchedulerError.invalidArgs.rawValue)
        // A range whose key has the wrong type is refused as the call's arguments, by either listing, before any row is read.
        for method in [SchedulerMethod.listPendingJSON, .listPendingPage] {
            #expect(d.call(method, [.dict(["limit": .string("ten")])]).failureName == SchedulerError.invalidArgs.rawValue, "\(method)")
        }
    }

    @Test("A client over the bus pages the whole queue as JSON, asking each next page before it is given the last: every task once, in order")
    func pendingJSONPagesOverTheBus() throws {
        let d = try InProcessDaemon(policy: Self.fastPower, readings: Self.onBattery)
        try d.submitWaitingForPower(7)
        let client = try BusConnection(address: d.bus.address)
        var pages: [[String]] = []
        // The daemon's service answers on this thread's default context, which the client's wait runs.
        try client.pendingJSONPages(PageRange(limit: 3)) { lines in
            pages.append(lines.split(separator: 0x0A).map { line in
                guard case .string(let id)? = (try? JSONValue.parse(String(decoding: line, as: UTF8.self)))?["id"] else { return "?" }
                return id
            })
        }
        #expect(pages.map(\.count) == [3, 3, 1], "\(pages)")
        #expect(pages.flatMap { $0 } == (try d.pending()).map(\.id), "every task once, in submission order")
        // A page that cannot be made ends it with the daemon's error, not a hang.
        #expect(throws: BusError.self) { try client.pendingJSONPages(PageRange(limit: 0)) { _ in } }
    }

    @Test("the next JSON page is made while the last is on its way, and told only while no row of the queue changed since")
    func jsonPageMadeAhead() throws {
        let d = try InProcessDaemon(policy: Self.fastPower, readings: Self.onBattery)
        try d.submitWaitingForPower(9)
        func page(after: String?, sender: String = ":1.42") throws -> (ids: [String], next: String) {
            let reply = try d.call(.listPendingJSON, [.dict(PageRange(after: after, limit: 3).variant)], sender: sender).get()
            guard reply.count == 2, let lines = reply[0].bytes, let next = reply[1].string else { throw DaemonTestFailure("replied \(reply)") }
            let ids = try lines.split(separator: 0x0A).map { line -> String in
                guard case .string(let id)? = try JSONValue.parse(String(decoding: line, as: UTF8.self))["id"] else { return "?" }
                return id
            }
            return (ids, next)
        }
        let one = try page(after: nil)
        d.daemon.service.followUps()
        #expect(d.daemon.service.ahead?.range == PageRange(after: one.next, limit: 3), "page two made in the round after page one")
        let two = try page(after: one.next)
        #expect(two.ids == ["job-3", "job-4", "job-5"])
        d.daemon.service.followUps()
        // A row deleted after page three was made: the page is made again, without it.
        _ = try d.call(.cancel, [.string("job-7")]).get()
        let three = try page(after: two.next)
        #expect(three.ids == ["job-6", "job-8"] && three.next.isEmpty, "\(three)")
        d.daemon.service.followUps()
        #expect(d.daemon.service.ahead == nil, "nothing is made after the last page")
        // Another caller's page is its own: the one made ahead for the first goes.
        _ = try page(after: nil)
        d.daemon.service.followUps()
        #expect(d.daemon.service.ahead?.sender == ":1.42")
        #expect(try page(after: one.next, sender: ":1.43").ids == ["job-3", "job-4", "job-5"])
        d.daemon.service.followUps()
        #expect(d.daemon.service.ahead.map { ($0.sender, $0.range.after) } ?? ("", nil) == (":1.43", two.next), "made for the one who asked")
    }

    @Test("start-up takes up a stored queue of several pages a slice at a time, and a call that reads the queue takes up the rest first")
    func restoresAcrossPages() throws {
        let d = try InProcessDaemon(policy: Self.fastPower, readings: Self.onBattery)
        // Rows a previous daemon left, two and a half pages of them.
        try d.storeLeftRows(250)
        d.daemon.driver.rounds.restoring = nil
        d.daemon.driver.restoreSlice(schedulingNext: false)
        let afterOne = d.daemon.driver.queue.waitingCount
        #expect(afterOne >= QueueDriver.restorePage && afterOne % QueueDriver.restorePage == 0 || afterOne == 250, "whole pages: \(afterOne)")
        #expect(d.daemon.driver.rounds.restoring?.done == (afterOne == 250))
        let listed = try d.pending(PageRange(limit: 1_000))
        #expect(listed.count == 250 && Set(listed.map(\.id)).count == 250, "every row once, across the pages' cursors")
        #expect(d.daemon.driver.rounds.restoring?.done == true && d.daemon.driver.queue.waitingCount == 250)
    }

    @Test("a restart, a resume or a reload that leaves a task's wait as it was tells it no second time in the audit trail; a reload that changes its words tells it once")
    func storiesGoOnAcrossRestarts() throws {
        let d = try InProcessDaemon(policy: Self.fastPower, readings: Self.onBattery)
        try d.storeLeftRows(150)
        func deferrals() throws -> [String: Int] {
            d.daemon.driver.audit.flush()
            return Dictionary(try d.daemon.driver.audit.entries().filter { $0.event == "deferred" }.map { ($0.taskID, 1) }, uniquingKeysWith: +)
        }
        // A daemon before this one took the rows up: each story begins with its wait.
        d.daemon.driver.rounds.restoring = nil
        d.daemon.driver.restoreAll()
        #expect(try deferrals() == Dictionary(uniqueKeysWithValues: (0..<150).map { ("left-\($0)", 1) }))

        // The next daemon takes the same rows up anew, with new supervisors: nothing new to tell.
        for i in 0..<150 { _ = d.daemon.driver.queue.removeWaiting("left-\(i)") }
        #expect(d.daemon.driver.queue.waitingCount == 0)
        d.daemon.driver.rounds.restoring = nil
        d.daemon.driver.restoreAll()
        #expect(d.daemon.driver.queue.waitingCount == 150)
        #expect(try deferrals().values.allSatisfy { $0 == 1 }, "a restart told each wait again")

        // A resume from sleep, and a reload of the same policy, supervise every task again: still nothing to tell.
        d.daemon.driver.superviseAllAgain(evaluator: d.daemon.driver.evaluator())
        #expect(d.daemon.reload().ok)
        #expect(try deferrals().values.allSatisfy { $0 == 1 }, "a resume or a reload told an unchanged wait again")

        // A reload whose rule says it in other words: each story tells its new wait, once.
        try Self.fastPower.replacingOccurrences(of: "waiting for external power", with: "on battery: waits for the charger")
            .write(to: d.dir.appendingPathComponent("policy.toml"), atomically: true, encoding: .utf8)
        #expect(d.daemon.reload().ok)
        let told = try deferrals()
        #expect(told.count == 150 && told.values.allSatisfy { $0 == 2 }, "\(told.values.sorted().suffix(3))")
        #expect(try d.pending(PageRange(limit: 1)).first?.reason.contains("waits for the charger") == true)
    }

    @Test("a listing of 1,000 tasks is a large reply, as JSON bytes or as dictionaries (its memory goes back after it); a page of ten is not")
    func largeListingsAreLarge() throws {
        let d = try InProcessDaemon(policy: Self.fastPower, readings: Self.onBattery)
        try d.storeLeftRows(1_000)
        d.daemon.driver.rounds.restoring = nil
        d.daemon.driver.restoreAll()
        for method in [SchedulerMethod.listPendingJSON, .listPendingPage] {
            let all = try d.call(method, [.dict(PageRange(limit: 1_000).variant)]).get()
            #expect(BusService.isLarge(all.first), "\(method) of 1,000")
            let ten = try d.call(method, [.dict(PageRange(limit: 10).variant)]).get()
            #expect(!BusService.isLarge(ten.first), "\(method) of 10")
        }
    }

    @Test("GetStatus answers with the queue's counts; GetConditions with the app-facing readings")
    func status() throws {
        var readings = Self.onBattery
        readings["thermal.state"] = .string("fair")
        let d = try InProcessDaemon(readings: readings)
        var later = SubmitOptions()
        later.earliest = Date().timeIntervalSince1970 + 3600
        _ = try d.submit("one", later).get()
        guard case .dict(let s)? = try d.call(.getStatus).get().first else { throw DaemonTestFailure("no status") }
        let status = try DaemonStatus(variant: s)
        #expect(status.pending == 1 && status.running == 0 && status.pid == UInt32(getpid()))
        guard case .dict(let c)? = try d.call(.getConditions).get().first else { throw DaemonTestFailure("no conditions") }
        #expect(try Conditions(variant: c).thermalState == "fair")
    }
}
}

@Suite("JSON from bus values")
struct BusValueJSONTests {
    @Test("writeJSON writes what json.rendered does: keys sorted, times with their _iso twin, nested lists, escapes")
    func directWriterMatchesTree() {
        let values: [BusValue] = [
            .dict(["id": .string("a\"b\n"), "submitted": .double(1_764_000_000.25), "earliest": .double(1_764_003_600),
                   "command": .strings(["x", "é", "\u{1}"]), "failures": .uint32(3), "cpu_heavy": .bool(false),
                   "unmet": .dicts([["what": .string("rule"), "reason": .string("r")], ["what": .string("slot")]]),
                   "next_check": .double(1_764_000_000.75), "likely_start": .double(.infinity)]),
            .dicts([["time": .int64(-5)], [:]]),
            .tuple([.string("s"), .variant(.bool(true)), .array(element: "d", [.double(0.5)])]),
        ]
        var iso = (second: Double.nan, text: "")
        for v in values {
            var out = JSONBytes()
            v.writeJSON(into: &out, iso: &iso)
            #expect(out.text == v.json.rendered)
        }
    }
}

extension BusValueJSONTests {
    @Test("a list written after another was freed is its own, whatever address its storage has; the same list again is copied")
    func sharedListsHoldTheirList() {
        var lists = BusValue.SharedLists()
        var iso = (second: Double.nan, text: "")
        for i in 0..<200 {
            // Each list made, written and dropped: malloc hands the next one the same storage more often than not.
            let list: [[String: BusValue]] = [["reason": .string("list \(i)")]]
            var out = JSONBytes()
            BusValue.writeJSON(list: list, into: &out, iso: &iso, lists: &lists)
            BusValue.writeJSON(list: list, into: &out, iso: &iso, lists: &lists)
            let one = BusValue.dicts(list).json.rendered
            #expect(out.text == one + one, "list \(i)")
        }
    }
}

/// The queue as stored, read through the daemon's own store.
struct QueueStoreView {
    let d: InProcessDaemon
    init(_ d: InProcessDaemon) { self.d = d }
    func state(_ id: String) throws -> String? {
        if try d.daemon.driver.store.get(id, state: "running") != nil { return "running" }
        if try d.daemon.driver.store.get(id, state: "pending") != nil { return "pending" }
        return nil
    }
}
