import BgtaskTestSupport
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// python3-dbusmock's logind template on a private system bus, with sessions whose IdleHint and LockedHint change
/// as logind changes them: UpdateProperties emits PropertiesChanged, as logind does.
final class MockLogind {
    let services: MockServices
    var bus: PrivateBus { services.bus }
    static let session = "org.freedesktop.login1.Session"

    /// CLOCK_MONOTONIC in µs, `seconds` ago: logind's IdleSinceHintMonotonic. On a machine up for less than that,
    /// 1 µs after boot (the earliest it can say; 0 means "not given"), not an overflow.
    static func monotonicUs(ago seconds: Double) -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        let now = UInt64(ts.tv_sec) * 1_000_000 + UInt64(ts.tv_nsec) / 1000, ago = UInt64(seconds * 1_000_000)
        return now > ago ? now - ago : 1
    }

    init() throws {
        services = try MockServices(env: ["LD_PRELOAD": nil, "UMOCKDEV_DIR": nil])
        try services.spawn(template: "logind", name: "org.freedesktop.login1")
    }

    func addSession(_ id: String, active: Bool = true) throws {
        try services.call("org.freedesktop.login1", "/org/freedesktop/login1", "org.freedesktop.DBus.Mock.AddSession",
                          [id, "seat0", "1000", "alice", active ? "true" : "false"])
        try services.call("org.freedesktop.login1", "/org/freedesktop/login1", "org.freedesktop.DBus.Mock.EmitSignal",
                          ["org.freedesktop.login1.Manager", "SessionNew", "so", "[<'\(id)'>, <objectpath '/org/freedesktop/login1/session/\(id)'>]"])
        // The template's sessions are of type "test": a desktop's, as a person's session is.
        try services.call("org.freedesktop.login1", "/org/freedesktop/login1/session/\(id)", "org.freedesktop.DBus.Mock.UpdateProperties",
                          [MockLogind.session, "{'Type': <'wayland'>}"])
    }

    /// The idle hint as a desktop sets it: idle since `secondsAgo` (CLOCK_MONOTONIC, as logind keeps it), or active.
    func setIdle(_ id: String, _ idle: Bool, secondsAgo: Double = 0) throws {
        let us = MockLogind.monotonicUs(ago: secondsAgo)
        try services.call("org.freedesktop.login1", "/org/freedesktop/login1/session/\(id)", "org.freedesktop.DBus.Mock.UpdateProperties",
                          [MockLogind.session, "{'IdleHint': <\(idle)>, 'IdleSinceHintMonotonic': <uint64 \(us)>}"])
    }

    /// logind's own aggregate on the Manager, as a desktop that sets only it would leave it.
    func setManagerIdle(_ idle: Bool, secondsAgo: Double = 0) throws {
        let us = MockLogind.monotonicUs(ago: secondsAgo)
        try services.call("org.freedesktop.login1", "/org/freedesktop/login1", "org.freedesktop.DBus.Mock.UpdateProperties",
                          ["org.freedesktop.login1.Manager", "{'IdleHint': <\(idle)>, 'IdleSinceHintMonotonic': <uint64 \(us)>}"])
    }

    /// A text console's session: logind computes its idle hint from the terminal's last access, without a signal.
    func addTextSession(_ id: String) throws {
        try addSession(id)
        let path = "/org/freedesktop/login1/session/\(id)"
        try services.call("org.freedesktop.login1", path, "org.freedesktop.DBus.Mock.UpdateProperties",
                          [MockLogind.session, "{'Type': <'tty'>, 'TTY': <'tty2'>}"])
        try services.call("org.freedesktop.login1", path, "org.freedesktop.DBus.Mock.AddMethod",
                          [MockLogind.session, "QuietlyIdle", "t", "",
                           "self.props['\(MockLogind.session)']['IdleHint'] = True\nself.props['\(MockLogind.session)']['IdleSinceHintMonotonic'] = dbus.UInt64(args[0])"])
    }

    /// The tty's idle hint turns true as logind's does: no PropertiesChanged.
    func quietlyIdle(_ id: String, secondsAgo: Double) throws {
        let us = MockLogind.monotonicUs(ago: secondsAgo)
        try services.call("org.freedesktop.login1", "/org/freedesktop/login1/session/\(id)", "\(MockLogind.session).QuietlyIdle", ["\(us)"])
    }

    func setLocked(_ id: String, _ locked: Bool) throws {
        try services.call("org.freedesktop.login1", "/org/freedesktop/login1/session/\(id)", "org.freedesktop.DBus.Mock.UpdateProperties",
                          [MockLogind.session, "{'LockedHint': <\(locked)>}"])
    }
}

/// A desktop's idle monitor (Tests/Support/dbusmock) on a private session bus of its own.
final class MockDesktop {
    let bus: PrivateBus
    let mock: Child
    let name: String
    let path: String
    var env: [String: String] { Child.environment(["DBUS_SESSION_BUS_ADDRESS": bus.address, "LD_PRELOAD": nil, "UMOCKDEV_DIR": nil]) }
    static let templates = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../Support/dbusmock").standardized

    init(_ template: String, name: String, path: String) throws {
        bus = try PrivateBus()
        self.name = name
        self.path = path
        mock = try bus.dbusmock(template: MockDesktop.templates.appendingPathComponent(template).path, name: name)
    }
    deinit { mock.stop(grace: 1) }

    static func mutter() throws -> MockDesktop {
        try MockDesktop("mutter_idle_monitor.py", name: "org.gnome.Mutter.IdleMonitor", path: "/org/gnome/Mutter/IdleMonitor/Core")
    }
    static func kde() throws -> MockDesktop {
        try MockDesktop("screensaver.py", name: "org.freedesktop.ScreenSaver", path: "/ScreenSaver")
    }

    func control(_ method: String, _ args: [String] = []) throws {
        let (rc, _, err) = try bus.gdbus("call", ["--dest", name, "--object-path", path, "--method", "org.freedesktop.DBus.Mock.\(method)"] + args)
        try #require(rc == 0, "\(method): \(err)")
    }
}

/// The threshold these tests use: short, so a test waits seconds, not minutes.
let fastIdle = "[idle]\nafter = \"2s\"\n"

extension UmockdevIntegrationTests {
    @Test("bgtask run --kind processing on the charger waits while the person is active, starts once they have been idle for [idle] after, expires within its 5 s grace when they return (exit 75); refresh and --ignore-idle work does not wait")
    func processingFollowsLogindIdle() throws {
        try requirePreload()
        let logind = try MockLogind()
        try logind.addSession("2")
        let p = try PolicyEnv()
        try p.userPolicy("50-idle.toml", fastIdle)
        let tb = Testbed()
        _ = tb.addLaptop(acOnline: true, batteryStatus: "Charging")
        let env = p.environment(preload: true, ["DBUS_SYSTEM_BUS_ADDRESS": logind.bus.address])

        // Not gated: a refresh task and a command that asks not to be.
        for args in [["--kind", "refresh"], ["--ignore-idle"]] {
            let (rc, _, err) = try Child.run(Child.bgtaskPath, ["run"] + args + ["--max-wait", "5s", "--", "true"], environment: env, deadline: 30)
            #expect(rc == 0, "\(args): \(err)")
        }

        let run = try Child(Child.bgtaskPath, ["run", "--kind", "processing", "--id", "clean", "--", "sleep", "60"], environment: env)
        defer { run.stop() }
        let waiting = try #require(run.errorLine(within: 10) { $0.contains("waiting") }, "\(run.stderr)")
        #expect(waiting.contains("user active now (logind)") && waiting.contains("processing.user-away"), "\(waiting)")

        // Idle from now: it starts when the 2 s have passed (one timer, no polling), not at the signal.
        let idleAt = Date()
        try logind.setIdle("2", true)
        _ = try #require(run.errorLine(within: 10) { $0.contains("started") }, "\(run.stderr)")
        #expect(Date().timeIntervalSince(idleAt) >= 1.9, "started before [idle] after had passed")

        // Back: expired at once, SIGTERM within the grace.
        let backAt = Date()
        try logind.setIdle("2", false)
        let expired = try #require(run.errorLine(within: 5) { $0.contains("expired") }, "\(run.stderr)")
        #expect(expired.contains("processing.user-away"), "\(expired)")
        #expect(run.waitExit(within: 10) == 75)
        #expect(Date().timeIntervalSince(backAt) < 5, "not stopped within the grace")
    }

    @Test("a locked screen counts as away at once; nobody logged in (a server) runs processing work; without logind user.idle is null and the rule says it does not apply")
    func lockedNoSessionAndNoLogind() throws {
        try requirePreload()
        let tb = Testbed()
        _ = tb.addLaptop(acOnline: true, batteryStatus: "Charging")
        let p = try PolicyEnv()

        let logind = try MockLogind()
        let none = p.environment(preload: true, ["DBUS_SYSTEM_BUS_ADDRESS": logind.bus.address])
        let (s0, o0, e0) = try Child.run(Child.bgtaskPath, ["status", "--json"], environment: none)
        #expect(s0 == 0, "\(e0)")
        let j0 = try parseJSON(o0)
        #expect(value(j0, "user.idle") as? Bool == true && value(j0, "user.sessions") as? Double == 0, "\(o0)")
        #expect(try Child.run(Child.bgtaskPath, ["run", "--max-wait", "5s", "--", "true"], environment: none, deadline: 30).0 == 0)

        try logind.addSession("3")
        let (rc1, _, _) = try Child.run(Child.bgtaskPath, ["run", "--no-wait", "--", "true"], environment: none, deadline: 30)
        #expect(rc1 == 75, "a session in use: processing work does not start")
        // logind's own aggregate, set on the Manager alone, is followed by its signal.
        try logind.setManagerIdle(true, secondsAgo: 600)
        #expect(try Child.run(Child.bgtaskPath, ["run", "--no-wait", "--", "true"], environment: none, deadline: 30).0 == 0)
        try logind.setManagerIdle(false)
        try logind.setLocked("3", true)
        let (s1, o1, _) = try Child.run(Child.bgtaskPath, ["status"], environment: none)
        #expect(s1 == 0 && o1.contains("user away: screen locked (logind LockedHint)"), "\(o1)")
        #expect(try Child.run(Child.bgtaskPath, ["run", "--no-wait", "--", "true"], environment: none, deadline: 30).0 == 0)

        // No logind on the bus at all.
        let empty = try PrivateBus()
        let noLogind = p.environment(preload: true, ["DBUS_SYSTEM_BUS_ADDRESS": empty.address])
        let (s2, o2, _) = try Child.run(Child.bgtaskPath, ["status", "--json"], environment: noLogind)
        let j2 = try parseJSON(o2)
        #expect(s2 == 0 && value(j2, "user.idle") is NSNull, "\(o2)")
        #expect((value(j2, "user.reason") as? String)?.contains("logind not on the system bus") == true, "\(o2)")
        // The one line says it too, as it says "no thermal zones".
        let (s2a, o2a, _) = try Child.run(Child.bgtaskPath, ["status"], environment: noLogind)
        #expect(s2a == 0 && o2a.contains(" · presence unknown: no logind"), "\(o2a)")
        let (s3, o3, e3) = try Child.run(Child.bgtaskPath, ["policy", "explain", "--task", "kind=processing"], environment: noLogind)
        #expect(s3 == 0, "\(e3)")
        #expect(o3.contains("processing.user-away") && o3.contains("user.idle = unknown"), "\(o3)")
        #expect(try Child.run(Child.bgtaskPath, ["run", "--no-wait", "--", "true"], environment: noLogind, deadline: 30).0 == 0)
    }

    @Test("GNOME: Mutter's idle watch turns user.idle true at [idle] after and its user-active watch false at the next input, as watch shows; KDE: the screen saver's ActiveChanged locks")
    func desktopIdleMonitors() throws {
        try requirePreload()
        let tb = Testbed()
        _ = tb.addLaptop(acOnline: true, batteryStatus: "Charging")
        let p = try PolicyEnv()
        try p.userPolicy("50-idle.toml", fastIdle)
        let logind = try MockLogind()
        try logind.addSession("2")

        let gnome = try MockDesktop.mutter()
        func idleBecomes(_ w: Child, _ v: Bool, within seconds: Double) -> String? {
            w.line(within: seconds) { l in (try? parseJSON(l)).flatMap { newValue($0, "user.idle") as? Bool } == v }
        }
        let env = p.environment(preload: true, ["DBUS_SYSTEM_BUS_ADDRESS": logind.bus.address, "DBUS_SESSION_BUS_ADDRESS": gnome.bus.address])
        let watch = try Child(Child.bgtaskPath, ["watch", "--json", "--thermal-interval", "0"], environment: env)
        defer { watch.stop() }
        _ = try #require(watch.line(within: 10), "\(watch.stderr)")
        try gnome.control("Input")
        let inputAt = Date()
        let away = try #require(idleBecomes(watch, true, within: 8), "\(watch.stdout)")
        #expect(away.contains("GNOME idle monitor"), "\(away)")
        #expect(Date().timeIntervalSince(inputAt) >= 1.9, "away before [idle] after")
        try gnome.control("Input")
        _ = try #require(idleBecomes(watch, false, within: 5), "\(watch.stdout)")
        watch.stop()

        let kde = try MockDesktop.kde()
        let kenv = p.environment(preload: true, ["DBUS_SYSTEM_BUS_ADDRESS": logind.bus.address, "DBUS_SESSION_BUS_ADDRESS": kde.bus.address])
        let kwatch = try Child(Child.bgtaskPath, ["watch", "--json", "--thermal-interval", "0"], environment: kenv)
        defer { kwatch.stop() }
        _ = try #require(kwatch.line(within: 10), "\(kwatch.stderr)")
        try kde.control("SetLocked", ["true"])
        let locked = try #require(kwatch.line(within: 5) { $0.contains("\"user.locked\"") }, "\(kwatch.stdout)")
        #expect(newValue(try parseJSON(locked), "user.locked") as? Bool == true)
        #expect(newValue(try parseJSON(locked), "user.idle") as? Bool == true)
    }
}

extension UmockdevIntegrationTests {
    @Test("ColorFeed under bgtaskd: its processing task (on the charger) waits while the person is active, is launched once they are away, gets its expiration handler when they return, waits again, and completes the next time")
    func portedAppYieldsToThePerson() throws {
        try requirePreload()
        let logind = try MockLogind()
        try logind.addSession("2")
        let x = try ExampleSetup(onCharger: true, policies: [("50-idle.toml", fastIdle)], system: logind.bus,
                                 appEnv: ["COLORFEED_CLEAN_PACE": "1"])
        let (apps, d) = (x.apps, x.d)
        let cleaning = "com.example.apple-samplecode.ColorFeed/com.example.apple-samplecode.ColorFeed.db_cleaning"

        let (s, o, e) = try apps.run(d, "ColorFeed", [])
        #expect(s == 0, "\(o) \(e)")
        var pending = try d.pending()
        let c = try #require(pending.first { $0["id"] as? String == cleaning }, "\(pending)")
        #expect(c["rule"] as? String == "processing.user-away", "\(c)")
        #expect((c["reason"] as? String)?.contains("active now (logind)") == true, "\(c)")

        try logind.setIdle("2", true, secondsAgo: 10)
        _ = try #require(d.said("launched com.example.apple-samplecode.ColorFeed", within: 15), "\(d.daemon?.stderr ?? "")")
        _ = try #require(d.said("\(cleaning): delivered to", within: 15), "\(d.daemon?.stderr ?? "")")
        // The handler removes one color a second: the person comes back in the middle of it.
        try logind.setIdle("2", false)
        let ended = try #require(d.said("\(cleaning): ended by rule processing.user-away", within: 10), "\(d.daemon?.stderr ?? "")")
        #expect(ended.contains("queued again"), "\(ended)")
        let (_, output, _) = try d.bgtask(["output", "app:com.example.apple-samplecode.ColorFeed"])
        #expect(output.contains("cleaning expired"), "the expiration handler did not run: \(output) \(d.daemon?.stderr ?? "")")
        #expect(apps.feed.count > 5, "it was stopped before it finished: \(apps.feed.count)")
        pending = try d.pending()
        let again = try #require(pending.first { $0["id"] as? String == cleaning }, "not waiting again: \(pending)")
        #expect(again["rule"] as? String == "processing.user-away", "\(again)")

        try logind.setIdle("2", true, secondsAgo: 10)
        let done = try #require(d.said("\(cleaning): finished", within: 20), "\(d.daemon?.stderr ?? "")")
        #expect(done.contains("completed by the app"), "\(done)")
        #expect(apps.feed.count == 5, "the handler keeps the newest 5 colors: \(apps.feed.count)")
    }
}

extension UmockdevIntegrationTests {
    @Test("a trace recorded by watch --record while the person leaves and comes back: policy simulate starts the processing task when they are away and expires it when they return; a refresh task starts at once")
    func simulatePresenceTrace() throws {
        try requirePreload()
        let logind = try MockLogind()
        try logind.addSession("2")
        let p = try PolicyEnv()
        let tb = Testbed()
        _ = tb.addLaptop(acOnline: true, batteryStatus: "Charging")
        let env = p.environment(preload: true, ["DBUS_SYSTEM_BUS_ADDRESS": logind.bus.address])
        let trace = p.dir.appendingPathComponent("trace.jsonl").path
        let watch = try Child(Child.bgtaskPath, ["watch", "--json", "--thermal-interval", "0", "--record", trace], environment: env)
        _ = try #require(watch.line(within: 10), "no first line: \(watch.stderr)")
        try logind.setIdle("2", true, secondsAgo: 600)
        _ = try #require(watch.line(within: 5) { $0.contains("\"user.idle\"") }, "\(watch.stdout)")
        try logind.setIdle("2", false)
        _ = try #require(watch.line(within: 5) { $0.contains("\"user.idle\"") }, "\(watch.stdout)")
        watch.process.terminate()
        #expect(watch.waitExit(within: 10) == 128 + SIGTERM)
        watch.stop()

        func actions(_ task: String) throws -> [String] {
            let r = try Child.run(Child.bgtaskPath, ["policy", "simulate", "--trace", trace, "--task", task, "--json"], environment: p.env)
            #expect(r.0 == 0, "\(r.2)")
            let events = try r.1.split(separator: "\n").map { try #require(try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]) }
            return events.flatMap { ($0["actions"] as? [String]) ?? [] }
        }
        let processing = try actions("kind=processing")
        #expect(processing.first == "started" && processing.contains { $0.hasPrefix("expire") }, "\(processing)")
        let refresh = try actions("kind=refresh")
        #expect(refresh.first == "started" && !refresh.contains { $0.hasPrefix("expire") && !$0.contains("budget") }, "\(refresh)")
    }
}

extension PolicyCommandTests {
    @Test("bgtask run of processing work where the filesystem has less free than [storage] low_mb: it waits, and says how much is free where; regular (--ignore-idle) and user-initiated work runs")
    func lowStorageHoldsProcessingWork() throws {
        let p = try PolicyEnv()
        try p.userPolicy("50-storage.toml", "[storage]\nlow_mb = 100000000\n")
        let (rc, _, err) = try Child.run(Child.bgtaskPath, ["run", "--no-wait", "--", "true"], environment: p.env, deadline: 30)
        #expect(rc == 75, "\(err)")
        #expect(err.contains("storage low on /") && err.contains("processing.storage-low"), "\(err)")
        for flag in ["--user-initiated", "--ignore-idle"] {
            #expect(try Child.run(Child.bgtaskPath, ["run", "--no-wait", flag, "--", "true"], environment: p.env, deadline: 30).0 == 0, "\(flag)")
        }
        let (s, o, _) = try Child.run(Child.bgtaskPath, ["status", "--json"], environment: p.env)
        let j = try parseJSON(o)
        #expect(s == 0 && value(j, "storage.free_bytes") is Double, "\(o)")
    }
}

extension UmockdevIntegrationTests {
    @Test("a text console's idle hint, which logind changes without a signal, is read again every [idle] after: processing work starts without any event")
    func textConsoleIdleWithoutSignal() throws {
        try requirePreload()
        let logind = try MockLogind()
        try logind.addTextSession("4")
        let p = try PolicyEnv()
        try p.userPolicy("50-idle.toml", fastIdle)
        let tb = Testbed()
        _ = tb.addLaptop(acOnline: true, batteryStatus: "Charging")
        let env = p.environment(preload: true, ["DBUS_SYSTEM_BUS_ADDRESS": logind.bus.address])
        let run = try Child(Child.bgtaskPath, ["run", "--kind", "processing", "--", "true"], environment: env)
        defer { run.stop() }
        _ = try #require(run.errorLine(within: 10) { $0.contains("user active now (logind)") }, "\(run.stderr)")
        try logind.quietlyIdle("4", secondsAgo: 60)
        _ = try #require(run.errorLine(within: 10) { $0.contains("started") }, "\(run.stderr)")
        #expect(run.waitExit(within: 10) == 0)
    }
}
