import BgtaskTestSupport
import Foundation
import Testing

/// The example apps (Examples/) as a person installs them: their manifests from Examples/apps with the built
/// programs' directory for @BINDIR@, in a test's own XDG_DATA_HOME.
struct ExampleApps {
    let dataHome: URL
    let out: URL
    static var binDir: URL { URL(fileURLWithPath: Child.bgtaskPath).deletingLastPathComponent() }

    init(_ p: PolicyEnv) throws {
        dataHome = p.dir.appendingPathComponent("data")
        out = p.dir.appendingPathComponent("exported")
        let apps = dataHome.appendingPathComponent("bgtask/apps")
        try FileManager.default.createDirectory(at: apps, withIntermediateDirectories: true)
        let source = repoRoot.appendingPathComponent("Examples/apps")
        for name in try FileManager.default.contentsOfDirectory(atPath: source.path) where name.hasSuffix(".toml") {
            let text = try String(contentsOf: source.appendingPathComponent(name), encoding: .utf8)
            try text.replacingOccurrences(of: "@BINDIR@", with: ExampleApps.binDir.path)
                .write(to: apps.appendingPathComponent(name), atomically: true, encoding: .utf8)
        }
    }

    var env: [String: String] { ["XDG_DATA_HOME": dataHome.path, "XDG_DATA_DIRS": "/nonexistent", "EXPORTER_OUT": out.path] }

    func environment(_ d: SessionDaemon, _ extra: [String: String] = [:]) -> [String: String] {
        var e = d.env.merging(env) { $1 }.merging(extra) { $1 }
        e["LD_PRELOAD"] = nil
        return e
    }

    func run(_ d: SessionDaemon, _ program: String, _ args: [String], _ extra: [String: String] = [:]) throws -> (Int32, String, String) {
        try Child.run(ExampleApps.binDir.appendingPathComponent(program).path, args, environment: environment(d, extra), deadline: 60)
    }

    func start(_ d: SessionDaemon, _ program: String, _ args: [String], _ extra: [String: String] = [:]) throws -> Child {
        try Child(ExampleApps.binDir.appendingPathComponent(program).path, args, environment: environment(d, extra))
    }

    var feed: [[String: Any]] {
        guard let data = try? Data(contentsOf: dataHome.appendingPathComponent("ColorFeed/feed.json")),
              let obj = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else { return [] }
        return obj["entries"] as? [[String: Any]] ?? []
    }
}

/// A test's world for the examples: its own policy directory (with extra policy files), the examples'
/// manifests, a testbed laptop on the charger or on battery, and bgtaskd on a private session bus.
final class ExampleSetup {
    let p: PolicyEnv
    let apps: ExampleApps
    let tb = Testbed()
    let laptop: Testbed.Laptop
    let d: SessionDaemon

    init(onCharger: Bool, policies: [(String, String)] = [], system: PrivateBus? = nil, appEnv: [String: String] = [:]) throws {
        p = try PolicyEnv()
        for (name, text) in policies { try p.userPolicy(name, text) }
        apps = try ExampleApps(p)
        laptop = onCharger ? tb.addLaptop(acOnline: true, batteryStatus: "Charging") : tb.addLaptop(acOnline: false)
        let env = apps.env.merging(appEnv) { $1 }
        d = try SessionDaemon(policy: p, preload: true, system: system, daemonEnv: env, extraEnv: env)
    }
}

/// A python3-dbusmock service on the test's session bus (a template by name or file), and a `gdbus monitor` of it:
/// each call the daemon makes arrives as a `MethodCalled` line (an event to wait for, not a timer).
final class SessionMock {
    let mock: Child
    let monitor: Child
    let env: [String: String]
    let name: String
    let bus: PrivateBus

    init(_ d: SessionDaemon, template: String, name: String, parameters: String? = nil) throws {
        self.name = name
        bus = d.bus
        env = Child.environment(["DBUS_SESSION_BUS_ADDRESS": d.bus.address, "LD_PRELOAD": nil, "UMOCKDEV_DIR": nil])
        mock = try d.bus.dbusmock(template: template, name: name, parameters: parameters)
        monitor = try Child("/usr/bin/gdbus", d.bus.gdbusArguments("monitor", ["--dest", name]), environment: env)
        _ = monitor.line(within: 5) { $0.contains("Monitoring") }
    }

    /// The notification server, with the capabilities that decide whether a Cancel button is offered.
    static func notifications(_ d: SessionDaemon, capabilities: String = "actions body body-markup persistence") throws -> SessionMock {
        try SessionMock(d, template: "notification_daemon", name: "org.freedesktop.Notifications",
                        parameters: "{\"capabilities\": \"\(capabilities)\"}")
    }

    deinit {
        monitor.stop(grace: 0.5)
        mock.stop(grace: 1)
    }

    /// The next call of `method` the service received (its monitor line), within `seconds`.
    func nextCall(_ method: String, within seconds: Double = 10, where match: (String) -> Bool = { _ in true }) -> String? {
        monitor.line(within: seconds) { $0.contains("MethodCalled ('\(method)'") && match($0) }
    }

    /// Emits `signal` from one of the service's objects (dbusmock's EmitSignal).
    func emit(path: String, interface: String, _ signal: String, _ signature: String, _ args: String) throws {
        let (rc, _, err) = try bus.gdbus("call", ["--dest", name, "--object-path", path, "--method", "org.freedesktop.DBus.Mock.EmitSignal",
                                                  interface, signal, signature, args])
        try #require(rc == 0, "EmitSignal \(signal): \(err)")
    }

    func emit(_ signal: String, _ signature: String, _ args: String) throws {
        try emit(path: "/org/freedesktop/Notifications", interface: "org.freedesktop.Notifications", signal, signature, args)
    }

    func calls(path: String = "/org/freedesktop/Notifications") throws -> String {
        try bus.gdbus("call", ["--dest", name, "--object-path", path, "--method", "org.freedesktop.DBus.Mock.GetCalls"]).1
    }
}

/// `value` hint of a monitored Notify line, if any.
func progressValue(_ line: String) -> Int? {
    guard let r = line.range(of: "'value': <") else { return nil }
    return Int(line[r.upperBound...].prefix { $0.isNumber })
}

extension UmockdevIntegrationTests {
    @Test("ColorFeed, Apple's sample ported: the cleaning (requiresExternalPower) waits on battery; the charger uevent makes bgtaskd launch the app, whose handler cleans and completes; why tells it; a debug launch runs the refresh, which reschedules itself")
    func colorFeedEndToEnd() throws {
        try requirePreload()
        let x = try ExampleSetup(onCharger: false, policies: [("50-fast.toml", immediatePowerRule)])
        let (apps, tb, laptop, d) = (x.apps, x.tb, x.laptop, x.d)

        let (s, o, e) = try apps.run(d, "ColorFeed", [])
        #expect(s == 0, "\(o) \(e)")
        #expect(o.contains("8 colors in the feed"), "\(o)")
        let cleaning = "com.example.apple-samplecode.ColorFeed/com.example.apple-samplecode.ColorFeed.db_cleaning"
        let refresh = "com.example.apple-samplecode.ColorFeed/com.example.apple-samplecode.ColorFeed.refresh"
        var pending = try d.pending()
        let c = try #require(pending.first { $0["id"] as? String == cleaning }, "\(pending)")
        #expect(c["rule"] as? String == "processing.needs-power", "\(c)")
        #expect(c["requires_external_power"] as? Bool == true)
        let r = try #require(pending.first { $0["id"] as? String == refresh }, "\(pending)")
        let earliest = try #require(r["earliest"] as? Double)
        #expect(earliest > Date().timeIntervalSince1970 + 14 * 60, "earliestBeginDate is 15 min ahead: \(r)")
        #expect(d.daemon?.stderr.contains("launched com.example") == false, "launched on battery: \(d.daemon?.stderr ?? "")")

        tb.plug(laptop, true)
        let done = try #require(d.said("\(cleaning): finished", within: 20), "\(d.daemon?.stderr ?? "")")
        #expect(done.contains("completed by the app"), "\(done)")
        #expect(apps.feed.count == 5, "the handler keeps the newest 5 colors: \(apps.feed.count)")
        _ = try #require(d.said("background work is done; ending it"), "the launched app was not ended: \(d.daemon?.stderr ?? "")")
        let (_, why, _) = try d.bgtask(["why", cleaning])
        #expect(why.contains("processing.needs-power"), "\(why)")
        #expect(why.contains("completed by the app"), "\(why)")
        let (_, output, _) = try d.bgtask(["output", "app:com.example.apple-samplecode.ColorFeed"])
        #expect(output.contains("cleaned: removed 3 old colors"), "\(output)")

        // The refresh, launched now as Apple's _simulateLaunchForTaskWithIdentifier does.
        #expect(try d.bgtask(["debug", "launch", refresh]).0 == 0)
        _ = try #require(d.said("\(refresh): finished", within: 20), "\(d.daemon?.stderr ?? "")")
        #expect(apps.feed.count == 8, "3 colors fetched: \(apps.feed.count)")
        pending = try d.pending()
        #expect(pending.contains { $0["id"] as? String == refresh }, "the handler scheduled the next refresh: \(pending)")
    }

    @Test("Exporter, a continued task: the notification shows title, subtitle and progress, updated in place at most once a second; Cancel from the notification server reaches the expiration handler; the notification closes shortly after")
    func exporterCancelledFromTheNotification() throws {
        try requirePreload()
        let x = try ExampleSetup(onCharger: true)
        let (p, apps, d) = (x.p, x.apps, x.d)
        let server = try SessionMock.notifications(d)

        let exporter = try apps.start(d, "Exporter", ["200"], ["EXPORTER_SECONDS_PER_PHOTO": "0.1"])
        defer { exporter.stop(grace: 1) }
        let first = try #require(server.nextCall("Notify"), "no notification: \(d.daemon?.stderr ?? "")")
        #expect(first.contains("'Exporting 200 photos'"), "\(first)")
        #expect(first.contains("'cancel', 'Cancel'"), "a Cancel action: \(first)")
        #expect(first.contains("<uint32 0>"), "the first creates a notification: \(first)")
        let update = try #require(server.nextCall("Notify") { progressValue($0) != nil }, "no progress update")
        #expect(update.contains("<uint32 1>"), "later updates replace the first (replaces_id): \(update)")
        #expect(update.contains(" % · "), "the percentage is in the body: \(update)")
        let second = try #require(server.nextCall("Notify") { progressValue($0) != nil })
        #expect((progressValue(second) ?? 0) > (progressValue(update) ?? 0), "progress moves: \(update) → \(second)")

        // The terminal shows the same progress (`bgtask tasks`, printed once when not on a terminal).
        let (_, tasks, _) = try d.bgtask(["tasks"])
        #expect(tasks.contains("Exporting 200 photos") && tasks.contains("█") && tasks.contains("%"), "\(tasks)")

        try server.emit("ActionInvoked", "us", "[<uint32 1>, <'cancel'>]")
        _ = try #require(exporter.line(within: 20) { $0.contains("stopped after") }, "the expiration handler did not stop it: \(exporter.stdout)")
        #expect(exporter.waitExit(within: 10) == 3)
        _ = try #require(d.said("cancelled by the user (notification)"), "\(d.daemon?.stderr ?? "")")
        let last = try #require(server.nextCall("Notify") { $0.contains("Stopped: cancelled by the user") }, "no final notification")
        #expect(!last.contains("'cancel'"), "no Cancel once it is over: \(last)")
        _ = try #require(server.nextCall("CloseNotification", within: 10), "the notification was not closed")

        // Updates are throttled: the server saw far fewer than one per photo.
        let calls = try server.calls()
        let notifies = calls.components(separatedBy: "'Notify'").count - 1
        let exported = (try? FileManager.default.contentsOfDirectory(atPath: apps.out.path).count) ?? 0
        #expect(notifies < exported, "\(notifies) notifications for \(exported) photos")
        let (_, why, _) = try d.bgtask(["why", "--json", "io.github.bgtask.Exporter/io.github.bgtask.Exporter.export.\(exporter.process.processIdentifier)"])
        #expect(why.contains("cancelled by the user"), "\(why)")
    }

    @Test("a Cancel from a notification that lingers after its continued task ended is not acted on")
    func cancelOnAnEndedTasksNotificationIsIgnored() throws {
        try requirePreload()
        let x = try ExampleSetup(onCharger: true)
        let (apps, d) = (x.apps, x.d)
        let server = try SessionMock.notifications(d)
        let exporter = try apps.start(d, "Exporter", ["2"], ["EXPORTER_SECONDS_PER_PHOTO": "0.05"])
        defer { exporter.stop(grace: 1) }
        let key = "io.github.bgtask.Exporter/io.github.bgtask.Exporter.export.\(exporter.process.processIdentifier)"
        _ = try #require(server.nextCall("Notify"), "no notification: \(d.daemon?.stderr ?? "")")
        _ = try #require(d.said("\(key): finished", within: 20), "\(d.daemon?.stderr ?? "")")
        #expect(exporter.waitExit(within: 10) == 0, "\(exporter.stdout)")
        // The outcome stays on screen a while: its (stale) Cancel is pressed, then a call that says a line of
        // its own — bgtaskd handles the signal before the call (one bus, in order).
        try server.emit("ActionInvoked", "us", "[<uint32 1>, <'cancel'>]")
        #expect(try d.bgtask(["submit", "--id", "after-the-click", "--", "true"]).0 == 0)
        let next = try #require(d.daemon?.errorLine(within: 10) { $0.contains("after-the-click") || $0.contains("cancelled by the user") })
        #expect(next.contains("after-the-click"), "a Cancel on an ended task's notification was acted on: \(next)")
    }

    @Test("Exporter: bgtask debug expire runs the app's expiration handler; a continued task that makes no progress is shown as stalled (Keep going / Stop), then expired")
    func exporterExpiredAndStalled() throws {
        try requirePreload()
        let x = try ExampleSetup(onCharger: true, policies: [("60-stall.toml", "[run]\nprogress_stalled = \"1s\"\nprogress_expire = \"3s\"\n")])
        let (apps, d) = (x.apps, x.d)
        let server = try SessionMock.notifications(d)

        let first = try apps.start(d, "Exporter", ["500"], ["EXPORTER_SECONDS_PER_PHOTO": "0.05"])
        defer { first.stop(grace: 1) }
        let key = "io.github.bgtask.Exporter/io.github.bgtask.Exporter.export.\(first.process.processIdentifier)"
        _ = try #require(d.said("\(key): started"), "\(d.daemon?.stderr ?? "")")
        #expect(try d.bgtask(["debug", "expire", key]).0 == 0)
        #expect(first.waitExit(within: 20) == 3, "\(first.stdout)")

        // A photo takes 8 s: no progress after the first report (0 of 3).
        let slow = try apps.start(d, "Exporter", ["3"], ["EXPORTER_SECONDS_PER_PHOTO": "8"])
        defer { slow.stop(grace: 1) }
        let slowKey = "io.github.bgtask.Exporter/io.github.bgtask.Exporter.export.\(slow.process.processIdentifier)"
        _ = try #require(d.said("shown as stalled", within: 15), "\(d.daemon?.stderr ?? "")")
        let stalled = try #require(server.nextCall("Notify") { $0.contains("No progress for") }, "not shown as stalled")
        #expect(stalled.contains("'continue', 'Keep going'") && stalled.contains("'cancel', 'Stop'"), "\(stalled)")
        let expiring = try #require(d.said("expiring it", within: 15), "not expired: \(d.daemon?.stderr ?? "")")
        #expect(expiring.contains(slowKey), "\(expiring)")
        #expect(slow.waitExit(within: 30) == 3, "\(slow.stdout)")
    }

    @Test("Exporter: .fail where the policy would not start it now is immediateRunIneligible; an identifier outside the manifest is notPermitted (register says why on stderr, the app goes on)")
    func exporterErrors() throws {
        try requirePreload()
        let x = try ExampleSetup(onCharger: true, policies: [("70-no-continued.toml", """
        [[rule]]
        id = "test.no-continued"
        when = 'task.kind == "continued"'
        verdict = "defer"
        reason = "no continued work in this test"
        """)])
        let (apps, d) = (x.apps, x.d)
        let (s, o, e) = try apps.run(d, "Exporter", ["--fail", "3"])
        #expect(s == 75, "\(o) \(e)")
        #expect(o.contains("cannot export in the background right now"), "\(o)")
        #expect(try d.pending().isEmpty, "a refused .fail request is not queued")

        let (s2, o2, e2) = try apps.run(d, "Exporter", ["3"], ["EXPORTER_IDENTIFIER": "io.github.bgtask.Other.export.1"])
        #expect(s2 == 77, "\(o2) \(e2)")
        #expect(e2.contains("cannot register io.github.bgtask.Other.export.1"), "\(e2)")
    }

    @Test("supportedResources has .gpu only where a DRM render node exists and the user may open it; asking for .gpu elsewhere is rejected at submit")
    func gpuOnlyWithARenderNode() throws {
        try requirePreload()
        let x = try ExampleSetup(onCharger: true)
        let (apps, d) = (x.apps, x.d)
        // The testbed has no DRM device: no GPU, and asking for one anyway is refused, queueing nothing.
        let (s, o, e) = try apps.run(d, "Exporter", ["--gpu", "1"], ["EXPORTER_SECONDS_PER_PHOTO": "0"])
        #expect(s == 69, "\(o) \(e)")
        #expect(o.contains("GPU not supported here"), "\(o)")
        #expect(o.contains("no usable GPU render node"), "\(o)")
        #expect(try d.pending().isEmpty)

        // A render node appears (its /dev node with it): the same request is accepted and runs.
        try x.tb.load(umockdev: """
        P: /devices/pci0000:00/0000:00:02.0/drm/renderD128
        N: dri/renderD128
        E: DEVNAME=/dev/dri/renderD128
        E: DEVTYPE=drm_minor
        E: MAJOR=226
        E: MINOR=128
        E: SUBSYSTEM=drm

        """)
        let (s2, o2, e2) = try apps.run(d, "Exporter", ["1"], ["EXPORTER_SECONDS_PER_PHOTO": "0"])
        #expect(s2 == 0, "\(o2) \(e2) \(d.daemon?.stderr ?? "")")
        #expect(o2.contains("GPU supported here"), "\(o2)")
        #expect(o2.contains("done, 1 of 1 exported"), "\(o2)")
    }

    @Test("the Linux beginBackgroundTask: a logind delay lock while saving; PrepareForSleep runs the expiration handler and the lock goes")
    func criticalSectionHoldsOffSleep() throws {
        try requirePreload()
        let logind = try MockServices(env: ["LD_PRELOAD": nil, "UMOCKDEV_DIR": nil])
        try logind.spawn(template: "logind", name: "org.freedesktop.login1")
        let x = try ExampleSetup(onCharger: true, system: logind.bus)
        let (apps, d) = (x.apps, x.d)
        let saver = try apps.start(d, "Exporter", ["--save"])
        defer { saver.stop(grace: 1) }
        _ = try #require(saver.line(within: 10) { $0.contains("sleep held off") }, "\(saver.stdout) \(saver.stderr)")
        func inhibitors() throws -> String {
            try logind.call("org.freedesktop.login1", "/org/freedesktop/login1", "org.freedesktop.login1.Manager.ListInhibitors", [])
        }
        let held = try inhibitors()
        #expect(held.contains("'Finish Export'") && held.contains("'delay'"), "\(held)")
        try logind.call("org.freedesktop.login1", "/org/freedesktop/login1", "org.freedesktop.DBus.Mock.EmitSignal",
                        ["org.freedesktop.login1.Manager", "PrepareForSleep", "b", "[<true>]"])
        _ = try #require(saver.line(within: 10) { $0.contains("going to sleep") }, "\(saver.stdout)")
        #expect(saver.waitExit(within: 10) == 0)
        #expect(!(try inhibitors()).contains("Finish Export"), "the lock is still held")
    }
}

/// KDE's job view server, as plasma-workspace serves it (org.kde.JobViewServer.requestView → a JobViewV2
/// object), in python-dbusmock: each view's calls are recorded, and its `cancelRequested` can be emitted.
let kdeJobViewTemplate = #"""
import dbus
BUS_NAME = 'org.kde.JobViewServer'
MAIN_OBJ = '/JobViewServer'
MAIN_IFACE = 'org.kde.JobViewServer'
SYSTEM_BUS = False

def load(mock, parameters):
    mock.views = 0
    mock.AddMethod(MAIN_IFACE, 'requestView', 'ssi', 'o',
        "self.views += 1\n"
        "path = '/JobViewServer/JobView_%d' % self.views\n"
        "self.AddObject(path, 'org.kde.JobViewV2', {}, ["
        "('setInfoMessage', 's', '', ''), ('setDescriptionField', 'uss', 'b', 'ret = True'),"
        "('setTotalAmount', 'ts', '', ''), ('setProcessedAmount', 'ts', '', ''),"
        "('setPercent', 'u', '', ''), ('terminate', 's', '', '')])\n"
        "ret = dbus.ObjectPath(path)")
"""#

extension UmockdevIntegrationTests {
    @Test("Exporter under KDE: a job view with title, subtitle and percent; its native Cancel (cancelRequested) stops the export through the expiration handler; the job is terminated")
    func exporterInKDEsJobView() throws {
        try requirePreload()
        let x = try ExampleSetup(onCharger: true)
        let (p, apps, d) = (x.p, x.apps, x.d)
        let template = p.dir.appendingPathComponent("kde_jobviewserver.py")
        try kdeJobViewTemplate.write(to: template, atomically: true, encoding: .utf8)
        let server = try SessionMock(d, template: template.path, name: "org.kde.JobViewServer")

        let exporter = try apps.start(d, "Exporter", ["200"], ["EXPORTER_SECONDS_PER_PHOTO": "0.1"])
        defer { exporter.stop(grace: 1) }
        let request = try #require(server.nextCall("requestView"), "no job view asked: \(d.daemon?.stderr ?? "")")
        #expect(request.contains("'Exporter'") && request.contains("<1>"), "app name and the Cancel capability: \(request)")
        let info = try #require(server.nextCall("setInfoMessage"))
        #expect(info.contains("Exporting 200 photos"), "\(info)")
        _ = try #require(server.nextCall("setDescriptionField") { $0.contains("photos complete") })
        let percent = try #require(server.nextCall("setPercent") { !$0.contains("<uint32 0>") },
                                   "no percent: \(server.monitor.stdout)")
        #expect(percent.contains("JobView_1"), "\(percent)")

        try server.emit(path: "/JobViewServer/JobView_1", interface: "org.kde.JobViewV2", "cancelRequested", "", "[]")
        _ = try #require(exporter.line(within: 20) { $0.contains("stopped after") }, "not stopped: \(exporter.stdout) \(d.daemon?.stderr ?? "")")
        _ = try #require(d.said("cancelled by the user (job view)"), "\(d.daemon?.stderr ?? "")")
        _ = try #require(server.nextCall("terminate"), "the job was not terminated")
    }
}

extension UmockdevIntegrationTests {
    @Test("a running app registers again with a restarted bgtaskd: a task launched after the restart is delivered to it, not to a new process")
    func appSurvivesADaemonRestart() throws {
        try requirePreload()
        let x = try ExampleSetup(onCharger: false)
        let (apps, d) = (x.apps, x.d)
        #expect(try apps.run(d, "ColorFeed", []).0 == 0)
        // The app as a person keeps it open: its handlers registered, waiting for tasks.
        let app = try apps.start(d, "ColorFeed", [], ["BGTASK_LAUNCHED_FOR_BACKGROUND": "1"])
        defer { app.stop(grace: 1) }
        _ = try #require(d.said("ready for its tasks (2 handlers, pid \(app.process.processIdentifier))"), "\(d.daemon?.stderr ?? "")")
        try d.restart()
        _ = try #require(d.said("ready for its tasks (2 handlers, pid \(app.process.processIdentifier))"), "not registered again: \(d.daemon?.stderr ?? "")")
        let refresh = "com.example.apple-samplecode.ColorFeed/com.example.apple-samplecode.ColorFeed.refresh"
        #expect(try d.bgtask(["debug", "launch", refresh]).0 == 0)
        let delivered = try #require(d.said("\(refresh): started"), "\(d.daemon?.stderr ?? "")")
        #expect(delivered.contains("delivered to com.example.apple-samplecode.ColorFeed (pid \(app.process.processIdentifier))"), "\(delivered)")
        _ = try #require(d.said("\(refresh): finished"), "\(d.daemon?.stderr ?? "")")
        _ = try #require(app.line(within: 10) { $0.contains("refreshed: 3 new colors") }, "\(app.stdout)")
    }
}

extension UmockdevIntegrationTests {
    @Test("ProcessInfo as iOS code reads it (ColorFeed conditions): thermalState from the zone against its trips and isLowPowerModeEnabled from power-profiles-daemon, and both change notifications, from bgtaskd's signal")
    func processInfoConditionsFollowTheMachine() throws {
        try requirePreload()
        let services = try MockServices(env: ["LD_PRELOAD": nil, "UMOCKDEV_DIR": nil])
        try services.spawn(template: "power_profiles_daemon", name: "net.hadess.PowerProfiles")
        let x = try ExampleSetup(onCharger: true, system: services.bus)
        let app = try x.apps.start(x.d, "ColorFeed", ["conditions"])
        defer { app.stop() }
        let first = try #require(app.line(within: 15) { $0.contains("ColorFeed: thermal") }, "\(app.stdout) \(app.stderr)")
        #expect(first == "ColorFeed: thermal nominal, low power off", "\(first)")

        try services.setProfile("power-saver")
        let saver = try #require(app.line(within: 10) { $0.contains("power state changed") }, "\(app.stdout) \(x.d.daemon?.stderr ?? "")")
        #expect(saver.hasSuffix("thermal nominal, low power on"), "\(saver)")

        // Past the passive trip (85 °C): serious. The kernel announces a trip crossing with a uevent.
        x.tb.set(x.laptop.zone, "temp", "88000")
        x.tb.uevent(x.laptop.zone)
        let hot = try #require(app.line(within: 10) { $0.contains("thermal state changed") }, "\(app.stdout) \(x.d.daemon?.stderr ?? "")")
        #expect(hot.hasSuffix("thermal serious, low power on"), "\(hot)")
        let (rc, out, _) = try x.d.bus.gdbus("call", ["--dest", "io.github.bgtask.Scheduler1", "--object-path", "/io/github/bgtask/Scheduler1",
                                                      "--method", "io.github.bgtask.Scheduler1.GetConditions"])
        #expect(rc == 0 && out.contains("'thermal_state': <'serious'>") && out.contains("'low_power_mode': <true>"), "\(out)")
    }
}
