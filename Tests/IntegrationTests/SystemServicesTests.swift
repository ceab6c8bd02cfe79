import BgtaskTestSupport
import Foundation
import Testing

/// python3-dbusmock's NetworkManager and power-profiles-daemon templates on a private system bus.
final class MockServices {
    let bus: PrivateBus
    var mocks: [Child] = []

    let overrides: [String: String?]
    init(env overrides: [String: String?] = ["LD_PRELOAD": nil, "UMOCKDEV_DIR": nil]) throws {
        bus = try PrivateBus()
        self.overrides = overrides
    }

    var env: [String: String] { bus.environment(overrides) }

    func spawn(template: String, name: String) throws {
        mocks.append(try Child("/usr/bin/python3", ["-m", "dbusmock", "--system", "--template", template], environment: env))
        try bus.waitForName(name)
    }

    /// `gdbus call` on the private bus; returns its output.
    @discardableResult
    func call(_ dest: String, _ path: String, _ method: String, _ args: [String]) throws -> String {
        let (rc, out, err) = try Child.run("/usr/bin/gdbus", ["call", "--system", "--dest", dest, "--object-path", path,
                                                              "--method", method] + args, environment: env)
        try #require(rc == 0, "gdbus \(method): \(err)")
        return out
    }

    func setMetered(_ v: UInt32) throws {
        try call("org.freedesktop.NetworkManager", "/org/freedesktop/NetworkManager", "org.freedesktop.DBus.Properties.Set",
                 ["org.freedesktop.NetworkManager", "Metered", "<uint32 \(v)>"])
    }

    func setProfile(_ p: String) throws {
        try call("net.hadess.PowerProfiles", "/net/hadess/PowerProfiles", "org.freedesktop.DBus.Properties.Set",
                 ["net.hadess.PowerProfiles", "ActiveProfile", "<'\(p)'>"])
    }

    deinit { mocks.forEach { $0.stop(grace: 1) } }
}

extension UmockdevIntegrationTests {
    @Test("network.metered and system.power_saver come from NetworkManager and power-profiles-daemon, and follow their signals")
    func meteredAndPowerSaverFollowDBus() throws {
        let services = try MockServices()
        try services.spawn(template: "networkmanager", name: "org.freedesktop.NetworkManager")
        // The template has no Metered; NetworkManager does (NM_METERED_GUESS_NO = 4).
        try services.call("org.freedesktop.NetworkManager", "/org/freedesktop/NetworkManager", "org.freedesktop.DBus.Mock.AddProperty",
                          ["org.freedesktop.NetworkManager", "Metered", "<uint32 4>"])
        try services.spawn(template: "power_profiles_daemon", name: "net.hadess.PowerProfiles")

        let (rc, out, err) = try Child.run(Child.bgtaskPath, ["status", "--json"], environment: services.env)
        #expect(rc == 0, "\(err)")
        let j = try parseJSON(out)
        #expect(value(j, "network.metered") as? Bool == false)
        #expect((value(j, "network.metered_source") as? String)?.contains("guess-no") == true)
        #expect(value(j, "system.power_profile") as? String == "balanced")
        #expect(value(j, "system.power_saver") as? Bool == false)

        let watch = try Child(Child.bgtaskPath, ["watch", "--json", "--thermal-interval", "0"], environment: services.env)
        defer { watch.stop() }
        _ = try #require(watch.line(within: 10), "no first line: \(watch.stderr)")

        try services.setProfile("power-saver")
        let saver = try #require(watch.line(within: 5) { $0.contains("\"system.power_saver\"") }, "no power-saver line")
        #expect(newValue(try parseJSON(saver), "system.power_saver") as? Bool == true)

        try services.setMetered(1)
        let metered = try #require(watch.line(within: 5) { $0.contains("\"network.metered\"") }, "no metered line")
        #expect(newValue(try parseJSON(metered), "network.metered") as? Bool == true)

        // NetworkManager going away is noticed too: metered becomes unknown unless the link is cellular.
        services.mocks[0].stop(grace: 1)
        let gone = try #require(watch.line(within: 5) { $0.contains("\"network.metered\"") }, "no line when NM left")
        #expect(newValue(try parseJSON(gone), "network.metered") is NSNull)
    }
}
