import BgtaskTestSupport
import Foundation
import Testing

/// A stand-in app for the daemon side (the protocol alone, without the Swift library): python-dbus on a GLib loop.
/// `submit` registers and submits, then exits; `background` (as bgtaskd launches it) registers, says
/// ready, and completes each launched task (`submit KIND power|- [IDENTIFIER]`) — or, with HANG set, ignores it and only notes its expiration.
let fakeApp = #"""
import dbus, dbus.mainloop.glib, os, sys
from gi.repository import GLib
dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
bus = dbus.SessionBus()
s = dbus.Interface(bus.get_object("io.github.bgtask.Scheduler1", "/io/github/bgtask/Scheduler1"), "io.github.bgtask.Scheduler1")
APP, IDENT = "com.example.ColorFeed", "com.example.colorfeed.refresh"
IDENTS = [IDENT, "com.example.colorfeed.db_cleaning"]
marker = os.environ.get("MARKER", "/dev/null")
def note(text):
    with open(marker, "a") as f: f.write(text + "\n")
mode = sys.argv[1]
if mode == "submit":
    ident = sys.argv[4] if len(sys.argv) > 4 else IDENT
    s.AppRegister(APP, ident)
    s.AppSubmit(APP, dbus.Dictionary({"identifier": ident, "kind": sys.argv[2], "requires_external_power": dbus.Boolean(sys.argv[3] == "power")}, signature="sv"))
    sys.exit(0)
if mode in ("submit-ready", "unhandled"):
    # submit-ready: a command-line app that schedules work and exits: it says it is ready (as the library does at
    # its first submit), submits a refresh due now, and leaves on the Launch without having run a handler.
    # unhandled: the library had no handler for the launch and says so.
    loop = GLib.MainLoop()
    def on_launch(app, ident, kind):
        note(f"{mode} got launch {ident}")
        if mode == "unhandled":
            s.AppLaunchReceived(APP, ident, False, "no launch handler is registered for " + ident)
        elif os.environ.get("HANDLED"):
            # The library says "handled" on its bus thread while the app's main thread is already on its way out.
            s.AppLaunchReceived(APP, ident, True, "")
        loop.quit()
    bus.add_signal_receiver(on_launch, "Launch", "io.github.bgtask.Scheduler1")
    s.AppRegister(APP, IDENT)
    s.AppReady(APP)
    s.AppSubmit(APP, dbus.Dictionary({"identifier": IDENT, "kind": "refresh"}, signature="sv"))
    GLib.timeout_add(20000, loop.quit)
    loop.run()
    sys.exit(0)
if mode == "hold":
    # hold: a process the user started that stays: it registers, says ready, and takes every launch (handled)
    # without completing it; what it got is printed, after the call.
    loop = GLib.MainLoop()
    def on_hold(app, ident, kind):
        s.AppLaunchReceived(APP, ident, True, "")
        print(f"got launch {ident}", flush=True)
    bus.add_signal_receiver(on_hold, "Launch", "io.github.bgtask.Scheduler1")
    for ident in IDENTS:
        s.AppRegister(APP, ident)
    s.AppReady(APP)
    print("ready", flush=True)
    GLib.timeout_add(60000, loop.quit)
    loop.run()
    sys.exit(0)
if mode == "cancel":
    s.AppCancel(APP, sys.argv[2] if len(sys.argv) > 2 else IDENT)
    sys.exit(0)
if mode == "cancelall":
    s.AppCancelAll(APP)
    sys.exit(0)
if mode == "try":   # try IDENT [KIND]: a request due in an hour (it stays pending), and what bgtaskd said
    import time
    try:
        s.AppSubmit(APP, dbus.Dictionary({"identifier": sys.argv[2], "kind": sys.argv[3] if len(sys.argv) > 3 else "refresh",
                                          "earliest": dbus.Double(time.time() + 3600)}, signature="sv"))
        print("accepted")
    except dbus.exceptions.DBusException as e:
        print(e.get_dbus_name())
    sys.exit(0)
loop = GLib.MainLoop()
note("started " + os.environ.get("BGTASK_LAUNCHED_FOR_BACKGROUND", "-"))
def launch(app, ident, kind):
    note(f"launch {ident} {kind}")
    if not os.environ.get("HANG"):
        s.AppComplete(APP, ident, True)
        GLib.timeout_add(500, loop.quit)
def expire(app, ident, reason):
    note(f"expire {ident}: {reason}")
bus.add_signal_receiver(launch, "Launch", "io.github.bgtask.Scheduler1")
bus.add_signal_receiver(expire, "Expire", "io.github.bgtask.Scheduler1")
for ident in IDENTS:
    s.AppRegister(APP, ident)
s.AppReady(APP)
GLib.timeout_add(60000, loop.quit)
loop.run()
"""#

/// An app manifest and the fake app, in a test's own XDG_DATA_HOME.
struct FakeApp {
    let script: URL
    let marker: URL
    let dataHome: URL

    /// Kept alive with the app: its directory holds the script and the manifest.
    let policy: PolicyEnv

    /// `command`: the manifest's command (nil: the fake app in its `background` mode).
    init(_ p: PolicyEnv, command: [String]? = nil) throws {
        policy = p
        dataHome = p.dir.appendingPathComponent("data")
        let apps = dataHome.appendingPathComponent("bgtask/apps")
        try FileManager.default.createDirectory(at: apps, withIntermediateDirectories: true)
        script = p.dir.appendingPathComponent("colorfeed.py")
        marker = p.dir.appendingPathComponent("colorfeed.log")
        try fakeApp.write(to: script, atomically: true, encoding: .utf8)
        let argv = command ?? ["/usr/bin/python3", script.path, "background"]
        try """
        id = "com.example.ColorFeed"
        command = [\(argv.map { "\"\($0)\"" }.joined(separator: ", "))]
        permitted_identifiers = ["com.example.colorfeed.refresh", "com.example.colorfeed.db_cleaning"]
        kinds = ["refresh", "processing"]
        """.write(to: apps.appendingPathComponent("com.example.ColorFeed.toml"), atomically: true, encoding: .utf8)
    }

    var env: [String: String] { ["XDG_DATA_HOME": dataHome.path, "XDG_DATA_DIRS": "/nonexistent", "MARKER": marker.path] }

    /// A laptop on the charger, a 1 s grace, and bgtaskd launching the app so that it ignores its expirations.
    static func ignoringExpiration() throws -> (FakeApp, Testbed, SessionDaemon) {
        let p = try PolicyEnv()
        try p.userPolicy("60-grace.toml", "[run]\nexpire_grace = \"1s\"\n")
        let app = try FakeApp(p)
        let tb = Testbed()
        _ = tb.addLaptop(acOnline: true, batteryStatus: "Charging")
        var env = app.env
        env["HANG"] = "1"
        return (app, tb, try SessionDaemon(policy: p, preload: true, daemonEnv: env, extraEnv: app.env))
    }
    var notes: String { (try? String(contentsOf: marker, encoding: .utf8)) ?? "" }

    func run(_ d: SessionDaemon, _ args: [String]) throws -> (Int32, String, String) {
        var env = d.env.merging(self.env) { $1 }
        env["LD_PRELOAD"] = nil
        return try Child.run("/usr/bin/python3", [script.path] + args, environment: env, deadline: 30)
    }
}

extension FakeApp {
    /// The fake app's world: a policy that starts power-bound work as soon as the charger comes, a laptop on
    /// battery, and bgtaskd that knows the app.
    static func onBattery() throws -> (FakeApp, Testbed, Testbed.Laptop, SessionDaemon) {
        let p = try PolicyEnv()
        try p.userPolicy("50-fast.toml", immediatePowerRule)
        let app = try FakeApp(p)
        let tb = Testbed()
        let laptop = tb.addLaptop(acOnline: false)
        return (app, tb, laptop, try SessionDaemon(policy: p, preload: true, daemonEnv: app.env, extraEnv: app.env))
    }
}

extension UmockdevIntegrationTests {
    @Test("an app's refresh task submitted on battery: bgtaskd launches the app's command when the charger comes, delivers the task, the app completes it; why tells it")
    func appLaunchedForItsTask() throws {
        try requirePreload()
        let (app, tb, laptop, d) = try FakeApp.onBattery()
        let (s, o, e) = try app.run(d, ["submit", "refresh", "power"])
        #expect(s == 0, "\(o) \(e)")
        let key = "com.example.ColorFeed/com.example.colorfeed.refresh"
        let pending = try d.pending()
        #expect(pending.first?["id"] as? String == key, "\(pending)")
        #expect(pending.first?["rule"] as? String == "processing.needs-power")

        tb.plug(laptop, true)
        _ = try #require(d.said("\(key): finished"), "\(d.daemon?.stderr ?? "")")
        #expect(app.notes.contains("started 1"), "\(app.notes)")                 // launched for background work
        #expect(app.notes.contains("launch com.example.colorfeed.refresh refresh"), "\(app.notes)")
        let (_, why, _) = try d.bgtask(["why", key])
        #expect(why.contains("completed by the app"), "\(why)")
        let (_, log, _) = try d.bgtask(["log", "-n", "20", "--no-follow"])
        #expect(log.contains("launched com.example.ColorFeed"), "\(log)")
        #expect(try d.pending().isEmpty)
    }

    @Test("due tasks of one app arrive in one launch: the charger starts a refresh and a processing task of the same app; bgtaskd launches the app once and delivers both")
    func dueTasksShareOneLaunch() throws {
        try requirePreload()
        let (app, tb, laptop, d) = try FakeApp.onBattery()
        #expect(try app.run(d, ["submit", "refresh", "power"]).0 == 0)
        #expect(try app.run(d, ["submit", "processing", "power", "com.example.colorfeed.db_cleaning"]).0 == 0)
        let keys = ["com.example.ColorFeed/com.example.colorfeed.refresh", "com.example.ColorFeed/com.example.colorfeed.db_cleaning"]
        #expect(Set(try d.pending().compactMap { $0["id"] as? String }) == Set(keys))

        tb.plug(laptop, true)
        var finished: Set<String> = []
        while finished.count < 2, let line = d.said(": finished", within: 20) {
            finished.formUnion(keys.filter { line.contains("\($0): finished") })
        }
        #expect(finished == Set(keys), "\(d.daemon?.stderr ?? "")")
        let notes = app.notes
        #expect(notes.components(separatedBy: "started ").count - 1 == 1, "launched once: \(notes)")
        #expect(notes.contains("launch com.example.colorfeed.refresh refresh"), "\(notes)")
        #expect(notes.contains("launch com.example.colorfeed.db_cleaning processing"), "\(notes)")
        let (_, log, _) = try d.bgtask(["log", "-n", "50", "--no-follow"])
        #expect(log.components(separatedBy: "launched com.example.ColorFeed (pid").count - 1 == 1, "\(log)")
    }

    @Test("app errors as Apple's: an identifier not in the manifest is NotPermitted; an app switched off is Unavailable; an unknown app is NotPermitted")
    func appErrors() throws {
        try requirePreload()
        let p = try PolicyEnv()
        let app = try FakeApp(p)
        let tb = Testbed()
        _ = tb.addLaptop(acOnline: false)
        let d = try SessionDaemon(policy: p, preload: true, daemonEnv: app.env, extraEnv: app.env)
        #expect(try app.run(d, ["try", "com.example.colorfeed.refresh"]).1.contains("accepted"))
        #expect(try app.run(d, ["try", "com.example.other"]).1.contains("Error.NotPermitted"))
        let (ds, dout, de) = try d.bgtask(["apps", "disable", "com.example.ColorFeed"])
        #expect(ds == 0, "\(dout) \(de)")
        #expect(try d.pending().isEmpty)                                     // switching off cancels its pending work
        #expect(try app.run(d, ["try", "com.example.colorfeed.refresh"]).1.contains("Error.Unavailable"))
        let (_, list, _) = try d.bgtask(["apps"])
        #expect(list.contains("com.example.ColorFeed: off"), "\(list)")
        #expect(try d.bgtask(["apps", "enable", "com.example.ColorFeed"]).0 == 0)
        #expect(try app.run(d, ["try", "com.example.colorfeed.refresh"]).1.contains("accepted"))
    }

    @Test("an app that does not complete after its expiration and grace is ended (SIGTERM) and that is recorded against it; debug expire sends the expiration")
    func appThatIgnoresExpiration() throws {
        try requirePreload()
        let (app, tb, d) = try FakeApp.ignoringExpiration()
        defer { withExtendedLifetime(tb) {} }
        #expect(try app.run(d, ["submit", "processing", "none"]).0 == 0)
        let key = "com.example.ColorFeed/com.example.colorfeed.refresh"
        _ = try #require(d.said("\(key): started"), "\(d.daemon?.stderr ?? "")")
        _ = try #require(d.said("\(key): delivered"), "\(d.daemon?.stderr ?? "")")
        #expect(try d.bgtask(["debug", "expire", key]).0 == 0)
        let ended = try #require(d.said("did not complete"), "\(d.daemon?.stderr ?? "")")
        #expect(ended.contains("SIGTERM to the app"), "\(ended)")
        #expect(app.notes.contains("launch com.example.colorfeed.refresh processing"), "\(app.notes)")
        #expect(app.notes.contains("expire com.example.colorfeed.refresh: bgtask debug expire"), "\(app.notes)")
        let (_, why, _) = try d.bgtask(["why", key])
        #expect(why.contains("recorded against com.example.ColorFeed") || why.contains("not completed"), "\(why)")
    }
}

extension UmockdevIntegrationTests {
    @Test("an app's cancel(taskRequestWithIdentifier:) expires its running task; cancelAllTaskRequests removes its pending ones; the audit trail names the app, not bgtask cancel")
    func appCancelsItsOwnWork() throws {
        try requirePreload()
        let (app, tb, laptop, d) = try FakeApp.onBattery()
        let key = "com.example.ColorFeed/com.example.colorfeed.refresh"
        #expect(try app.run(d, ["submit", "refresh", "power"]).0 == 0)
        #expect(try app.run(d, ["cancelall"]).0 == 0)
        #expect(try d.pending().isEmpty)
        let (_, gone, _) = try d.bgtask(["why", key])
        #expect(gone.contains("the app (cancelAllTaskRequests)") && !gone.contains("bgtask cancel"), "\(gone)")

        _ = tb.plug(laptop, true)
        d.daemon?.process.terminate()
        _ = d.daemon?.waitExit(within: 15)
        var env = app.env
        env["HANG"] = "1"
        // The app ignores its expiration: finished after the grace and a SIGTERM, so a grace well inside said's window.
        try app.policy.userPolicy("60-grace.toml", "[run]\nexpire_grace = \"2s\"\n")
        let hung = try SessionDaemon(policy: app.policy, preload: true, daemonEnv: env, extraEnv: app.env)
        #expect(try app.run(hung, ["submit", "processing", "none"]).0 == 0)
        _ = try #require(hung.said("\(key): delivered"), "\(hung.daemon?.stderr ?? "")")
        #expect(try app.run(hung, ["cancel"]).0 == 0)
        _ = try #require(hung.said("\(key): finished"), "\(hung.daemon?.stderr ?? "")")
        #expect(app.notes.contains("expire com.example.colorfeed.refresh: cancelled by the app (cancel(taskRequestWithIdentifier:))"), "\(app.notes)")
    }

    @Test("an app that used its daily battery budget waits on battery with that reason, and runs when the charger comes")
    func appBatteryBudget() throws {
        try requirePreload()
        let p = try PolicyEnv()
        try p.userPolicy("60-budget.toml", "[run]\nexpire_grace = \"1s\"\n\n[daemon]\napp_battery_budget = \"1s\"\n")
        try p.userPolicy("50-fast.toml", immediatePowerRule)
        let app = try FakeApp(p)
        let tb = Testbed()
        let laptop = tb.addLaptop(acOnline: false)
        var env = app.env
        env["HANG"] = "1"
        let d = try SessionDaemon(policy: p, preload: true, daemonEnv: env, extraEnv: app.env)
        let key = "com.example.ColorFeed/com.example.colorfeed.refresh"
        #expect(try app.run(d, ["submit", "processing", "none"]).0 == 0)
        _ = try #require(d.said("\(key): delivered"), "\(d.daemon?.stderr ?? "")")
        #expect(try d.bgtask(["debug", "expire", key]).0 == 0)
        _ = try #require(d.said("\(key): finished"), "\(d.daemon?.stderr ?? "")")   // ended after its grace: > 1 s on battery in all

        #expect(try app.run(d, ["submit", "processing", "none"]).0 == 0)
        let waiting = try #require(d.said("\(key): waiting"), "\(d.daemon?.stderr ?? "")")
        #expect(waiting.contains("daily battery budget"), "\(waiting)")
        tb.plug(laptop, true)
        _ = try #require(d.said("\(key): started"), "not started on the charger: \(d.daemon?.stderr ?? "")")
    }
}

@Suite("Apple's limits for an app's requests")
struct AppLimitTests {
    func manifest(_ app: FakeApp, identifiers: [String]) throws {
        try """
        id = "com.example.ColorFeed"
        command = ["/bin/true"]
        permitted_identifiers = [\(identifiers.map { "\"\($0)\"" }.joined(separator: ", "))]
        """.write(to: app.dataHome.appendingPathComponent("bgtask/apps/com.example.ColorFeed.toml"), atomically: true, encoding: .utf8)
    }

    @Test("one pending refresh per app (TooManyPendingTaskRequests beyond; a resubmit replaces its own); a wildcard permits continued tasks only")
    func applesLimits() throws {
        let p = try PolicyEnv()
        let app = try FakeApp(p)
        try manifest(app, identifiers: ["com.example.colorfeed.refresh", "com.example.colorfeed.db_cleaning", "com.example.colorfeed.dyn.*"])
        let d = try SessionDaemon(policy: p, preload: false, daemonEnv: app.env, extraEnv: app.env)
        func attempt(_ ident: String, _ kind: String) throws -> String { try app.run(d, ["try", ident, kind]).1 }
        #expect(try attempt("com.example.colorfeed.refresh", "refresh").contains("accepted"))
        #expect(try attempt("com.example.colorfeed.refresh", "refresh").contains("accepted"))
        #expect(try attempt("com.example.colorfeed.db_cleaning", "refresh").contains("Error.TooManyPendingTaskRequests"))
        #expect(try attempt("com.example.colorfeed.dyn.1", "continued").contains("accepted"))
        #expect(try attempt("com.example.colorfeed.dyn.x", "processing").contains("Error.NotPermitted"))
        #expect(try attempt("com.example.colorfeed.dyn.x", "refresh").contains("Error.NotPermitted"))
        #expect(try attempt("com.example.colorfeed.db_cleaning", "processing").contains("accepted"))
    }

    @Test("ten pending processing requests are the most, the eleventh is refused; daemon.max_pending_processing raises it")
    func processingLimit() throws {
        let p = try PolicyEnv()
        let app = try FakeApp(p)
        try manifest(app, identifiers: (0..<12).map { "com.example.colorfeed.p\($0)" })
        let d = try SessionDaemon(policy: p, preload: false, daemonEnv: app.env, extraEnv: app.env)
        for n in 0..<10 { #expect(try app.run(d, ["try", "com.example.colorfeed.p\(n)", "processing"]).1.contains("accepted")) }
        #expect(try app.run(d, ["try", "com.example.colorfeed.p10", "processing"]).1.contains("Error.TooManyPendingTaskRequests"))
        try p.userPolicy("60-more.toml", "[daemon]\nmax_pending_processing = 11\n")
        _ = try #require(d.said("policy reloaded"), "\(d.daemon?.stderr ?? "")")
        #expect(try app.run(d, ["try", "com.example.colorfeed.p10", "processing"]).1.contains("accepted"))
    }
}

@Suite("an app's launches as on iOS")
struct AppLaunchTests {
    @Test("work scheduled by a command-line app that exits on the launch is not lost: bgtaskd launches the app for it, which completes it")
    func exitingAppIsLaunchedAgain() throws {
        let p = try PolicyEnv()
        let app = try FakeApp(p)
        let d = try SessionDaemon(policy: p, preload: false, daemonEnv: app.env, extraEnv: app.env)
        let key = "com.example.ColorFeed/com.example.colorfeed.refresh"
        #expect(try app.run(d, ["submit-ready"]).0 == 0)
        let again = try #require(d.said("before handling it"), "\(d.daemon?.stderr ?? "")")
        #expect(again.contains("launched com.example.ColorFeed"), "\(again)")
        _ = try #require(d.said("\(key): finished"), "\(d.daemon?.stderr ?? "")")
        #expect(app.notes.contains("submit-ready got launch") && app.notes.contains("started 1"), "\(app.notes)")
        let (_, why, _) = try d.bgtask(["why", key])
        #expect(why.contains("completed by the app") && !why.contains("unsuccessfully") && !why.contains("left the bus"), "\(why)")
    }

    @Test("a launch the library could not hand to a handler is recorded as not handled, never as the app's unsuccessful completion")
    func unhandledLaunchIsTheLibrarys() throws {
        let p = try PolicyEnv()
        let app = try FakeApp(p)
        let d = try SessionDaemon(policy: p, preload: false, daemonEnv: app.env, extraEnv: app.env)
        let key = "com.example.ColorFeed/com.example.colorfeed.refresh"
        #expect(try app.run(d, ["unhandled"]).0 == 0)
        _ = try #require(d.said("\(key): finished"), "\(d.daemon?.stderr ?? "")")
        let (_, why, _) = try d.bgtask(["why", key])
        #expect(why.contains("not handled: no launch handler is registered for com.example.colorfeed.refresh"), "\(why)")
        #expect(!why.contains("completed by the app"), "\(why)")
    }
}

extension UmockdevIntegrationTests {
    @Test("counts against the app: a task it did not complete after its expiration holds its next refresh requests back (15 min, shown by bgtask apps), across a restart of bgtaskd; a task it completes in time makes it good")
    func endedTasksCountAgainstTheApp() throws {
        try requirePreload()
        let (app, tb, d) = try FakeApp.ignoringExpiration()
        defer { withExtendedLifetime(tb) {} }
        let p = app.policy
        let key = "com.example.ColorFeed/com.example.colorfeed.refresh"
        #expect(try app.run(d, ["submit", "processing", "none"]).0 == 0)
        _ = try #require(d.said("\(key): delivered"), "\(d.daemon?.stderr ?? "")")
        #expect(try d.bgtask(["debug", "expire", key]).0 == 0)
        let ended = try #require(d.said("did not complete"), "\(d.daemon?.stderr ?? "")")
        #expect(ended.contains("counted against com.example.ColorFeed (1 not made good): its refresh work now waits 15m longer"), "\(ended)")
        _ = try #require(d.said("\(key): finished"), "\(d.daemon?.stderr ?? "")")
        func standing(_ d: SessionDaemon) throws -> (Double?, Double?) {
            let (rc, out, err) = try d.bgtask(["apps", "list", "--json"])
            try #require(rc == 0, "\(err)")
            let list = try #require(try JSONSerialization.jsonObject(with: Data(out.utf8)) as? [[String: Any]], "\(out)")
            let a = try #require(list.first { $0["id"] as? String == "com.example.ColorFeed" }, "\(out)")
            return (a["ended_by_system"] as? Double, a["refresh_held_back_s"] as? Double)
        }
        let (n, held) = try standing(d)
        #expect(n == 1 && held == 900, "\(String(describing: n)) \(String(describing: held))")
        let (_, text, _) = try d.bgtask(["apps", "list"])
        #expect(text.contains("1 task(s) the system had to end"), "\(text)")

        // Its next refresh request (due at once) is held back 15 min.
        let submitted = Date().timeIntervalSince1970
        #expect(try app.run(d, ["submit", "refresh", "none"]).0 == 0)
        _ = try #require(d.said("held back 15m: 1 task(s) of com.example.ColorFeed the system had to end"), "\(d.daemon?.stderr ?? "")")
        let pending = try d.pending()
        let r = try #require(pending.first { $0["id"] as? String == key }, "\(pending)")
        #expect((r["earliest"] as? Double ?? 0) >= submitted + 890, "\(r)")

        // A new bgtaskd remembers; a task the app completes in time makes it good.
        d.daemon?.process.terminate()
        _ = d.daemon?.waitExit(within: 15)
        let fine = try SessionDaemon(policy: p, preload: true, daemonEnv: app.env, extraEnv: app.env)
        #expect(try standing(fine).0 == 1)
        #expect(try app.run(fine, ["submit", "processing", "none", "com.example.colorfeed.db_cleaning"]).0 == 0)
        _ = try #require(fine.said("completed in time; com.example.ColorFeed has 0 ended task(s) not made good"), "\(fine.daemon?.stderr ?? "")")
        #expect(try standing(fine).0 == 0)
    }
}

/// Issue 43's app classes: a start that failed, relaunches without end, state kept per app id instead of per process.
@Suite("an app's launches and processes, each as it is", .serialized)
struct AppProcessTests {
    static let refresh = "com.example.ColorFeed/com.example.colorfeed.refresh"
    static let cleaning = "com.example.ColorFeed/com.example.colorfeed.db_cleaning"

    @Test("a failed start is not started: an app whose command does not exist fails its task at once, naming the command and errno, and frees its slot")
    func failedStartIsNotStarted() throws {
        let p = try PolicyEnv()
        // One slot: a task left "running" by a launch that never happened would hold up the command task after it.
        try p.userPolicy("60-one.toml", "[daemon]\nmax_running = 1\n")
        let app = try FakeApp(p, command: ["/nonexistent/colorfeed", "background"])
        let d = try SessionDaemon(policy: p, preload: false, daemonEnv: app.env, extraEnv: app.env)
        #expect(try app.run(d, ["submit", "refresh", "none"]).0 == 0)
        let failed = try #require(d.said("could not be launched"), "\(d.daemon?.stderr ?? "")")
        #expect(failed.contains("/nonexistent/colorfeed") && failed.contains("ENOENT"), "\(failed)")
        #expect(!failed.contains("started"), "told as a start: \(failed)")
        let (_, running, _) = try d.bgtask(["tasks", "--json"])
        #expect(!running.contains(Self.refresh), "still running: \(running)")
        let (_, why, _) = try d.bgtask(["why", Self.refresh])
        #expect(why.contains("could not be launched") && why.contains("/nonexistent/colorfeed") && why.contains("No such file or directory"), "\(why)")
        #expect(try d.pending().isEmpty, "a refresh that failed is over, as one whose command failed")
        // The slot is free: the next task runs.
        #expect(try d.bgtask(["submit", "--id", "after", "--", "/bin/true"]).0 == 0)
        _ = try #require(d.said("after: finished"), "the slot was not freed: \(d.daemon?.stderr ?? "")")
    }

    @Test("relaunch is bounded: an app whose command exits before registering is launched again three times, each later than the last, then its task fails saying so")
    func relaunchIsBoundedForAnAppThatNeverRegisters() throws {
        let p = try PolicyEnv()
        let launches = p.dir.appendingPathComponent("launches")
        let app = try FakeApp(p, command: ["/bin/sh", "-c", "date +%s.%N >> '\(launches.path)'"])
        let d = try SessionDaemon(policy: p, preload: false, daemonEnv: app.env, extraEnv: app.env)
        #expect(try app.run(d, ["submit", "refresh", "none"]).0 == 0)
        let gaveUp = try #require(d.said("not launched again", within: 20), "\(d.daemon?.stderr.suffix(3000) ?? "")")
        #expect(gaveUp.contains(Self.refresh), "\(gaveUp)")
        let (_, why, _) = try d.bgtask(["why", Self.refresh])
        #expect(why.contains("not launched again") && why.contains("3 times"), "\(why)")
        let times = try String(contentsOf: launches, encoding: .utf8).split(separator: "\n").compactMap { Double($0) }
        #expect(times.count == 4, "the first launch and three more: \(times.count) launches; \(d.daemon?.stderr.suffix(3000) ?? "")")
        // The backoff: each relaunch after a longer wait than the one before it.
        let gaps = zip(times.dropFirst(), times).map { $0 - $1 }
        #expect(gaps.count == 3 && gaps[1] >= 0.9 && gaps[2] >= 1.9, "\(gaps)")
    }

    /// The fake app's `hold` mode as the user would start it: a process of its own, beside bgtaskd's launches.
    func hold(_ app: FakeApp, _ d: SessionDaemon) throws -> Child {
        var env = d.env.merging(app.env) { $1 }
        env["LD_PRELOAD"] = nil
        let c = try Child("/usr/bin/python3", [app.script.path, "hold"], environment: env)
        guard c.line(within: 20, where: { $0 == "ready" }) != nil else {
            c.stop()
            throw DaemonTestError(message: "the app did not come up: \(c.stderr)")
        }
        return c
    }

    @Test("app state is per connection: with two processes of an app, the first one's leaving ends its own task; a refresh handed to a process that exits is handed again, not lost")
    func appStateIsPerConnection() throws {
        let p = try PolicyEnv()
        let app = try FakeApp(p)
        let d = try SessionDaemon(policy: p, preload: false, daemonEnv: app.env, extraEnv: app.env)
        // A process of the app is up; a command-line run of the app submits its cleaning (as a refresh) and exits;
        // the first process takes it; a second process of the app comes up.
        let first = try hold(app, d)
        defer { first.stop() }
        #expect(try app.run(d, ["submit", "refresh", "-", "com.example.colorfeed.db_cleaning"]).0 == 0)
        _ = try #require(first.line(within: 20, where: { $0 == "got launch com.example.colorfeed.db_cleaning" }), "\(d.daemon?.stderr ?? "")")
        let second = try hold(app, d)
        defer { second.stop() }
        // The first leaves: what was handed to it is over, not "running" for ever.
        kill(first.process.processIdentifier, SIGKILL)
        _ = first.waitExit(within: 10)
        let ended = try #require(d.said("\(Self.cleaning): finished"), "\(d.daemon?.stderr.suffix(3000) ?? "")")
        #expect(ended.contains("left the bus before completing it"), "\(ended)")

        // A command-line run of the app submits a refresh and exits as it is handed over (its library said
        // "handled" on the way out): the refresh goes to the process still there, not down with the one that left.
        var env = d.env.merging(app.env) { $1 }
        env["HANDLED"] = "1"
        env["LD_PRELOAD"] = nil
        let (s, o, e) = try Child.run("/usr/bin/python3", [app.script.path, "submit-ready"], environment: env, deadline: 30)
        #expect(s == 0, "\(o) \(e)")
        _ = try #require(second.line(within: 20, where: { $0 == "got launch com.example.colorfeed.refresh" }),
                         "not handed again: \(d.daemon?.stderr.suffix(3000) ?? "")")
        let (_, why, _) = try d.bgtask(["why", Self.refresh])
        #expect(!why.contains("before completing it"), "\(why)")
    }
}

extension UmockdevIntegrationTests {
    @Test("an app bgtaskd launched ends with bgtaskd: SIGTERM to the daemon while the launched app holds its task ends the app too")
    func launchedAppEndsWithTheDaemon() throws {
        try requirePreload()
        let (app, tb, d) = try FakeApp.ignoringExpiration()
        defer { withExtendedLifetime(tb) {} }
        #expect(try app.run(d, ["submit", "processing", "now", "com.example.colorfeed.db_cleaning"]).0 == 0)
        let launched = try #require(d.said("launched com.example.ColorFeed (pid", within: 20), "\(d.daemon?.stderr ?? "")")
        let pid = try #require(launched.range(of: "(pid ").flatMap { Int32(launched[$0.upperBound...].prefix { $0.isNumber }) }, "\(launched)")
        // The app has its task (the fake app notes each launch it is handed; it has no event to wait on). Launched
        // as background work it runs SCHED_IDLE, which on a machine busy with the rest of the suite may wait long.
        #expect(polled(within: 60, every: 0.1) { app.notes.contains("launch com.example.colorfeed.db_cleaning") }, "\(app.notes)")
        #expect(liveState(pid) != nil, "the app is not running: \(app.notes)")
        d.daemon?.process.terminate()
        #expect(d.daemon?.waitExit(within: 20) == 0, "\(d.daemon?.stderr ?? "")")
        #expect(polled(within: 10) { liveState(pid) == nil }, "the app bgtaskd launched outlived it (pid \(pid), state \(liveState(pid) ?? "gone"))")
        #expect(d.daemon?.stderr.contains("ending the app it launched (pid \(pid))") == true, "\(d.daemon?.stderr ?? "")")
    }
}
