import Foundation

/// A private dbus-daemon presented to children as the system bus (`DBUS_SYSTEM_BUS_ADDRESS`),
/// the way UPower's and power-profiles-daemon's own integration tests run.
public final class PrivateBus {
    public let address: String
    let daemon: Child

    /// `listen`: an address for dbus-daemon to listen on (`unix:abstract=…`), else its session default.
    public init(listen: String? = nil) throws {
        daemon = try Child("/usr/bin/dbus-daemon", ["--session", "--nofork", "--print-address=1"] + (listen.map { ["--address=\($0)"] } ?? []),
                           environment: Child.environment(["LD_PRELOAD": nil, "UMOCKDEV_DIR": nil]))
        guard let addr = daemon.line(within: 10), addr.hasPrefix("unix:") else {
            daemon.stop()
            throw TestbedError(message: "dbus-daemon did not print an address: \(daemon.stderr)")
        }
        address = addr
    }

    deinit { daemon.stop() }

    /// Child environment that sees this bus as the system bus.
    public func environment(_ overrides: [String: String?] = [:]) -> [String: String] {
        var o = overrides
        o["DBUS_SYSTEM_BUS_ADDRESS"] = address
        return Child.environment(o)
    }

    /// Blocks until `name` has an owner on this bus (gdbus wait: an event, not a sleep loop).
    public func waitForName(_ name: String, timeoutSeconds: Int = 15) throws {
        let (status, _, err) = try Child.run("/usr/bin/gdbus", ["wait", "--system", "--timeout", String(timeoutSeconds), name],
                                             environment: environment(["LD_PRELOAD": nil]))
        if status != 0 { throw TestbedError(message: "\(name) did not appear on the private bus: \(err)") }
    }
}

/// The real upowerd on a private bus, reading the current umockdev testbed.
public final class UPowerDaemon {
    let daemon: Child
    public var pid: Int32 { daemon.process.processIdentifier }
    /// What upowerd -v has said so far (GLib writes debug lines to stdout, warnings to stderr), for a failing test's message.
    public var log: String { daemon.stdout + daemon.stderr }
    let historyDir: URL
    let configFile: URL

    public init(bus: PrivateBus) throws {
        let tmp = FileManager.default.temporaryDirectory
        historyDir = tmp.appendingPathComponent("upower-history-\(UUID().uuidString)")
        configFile = tmp.appendingPathComponent("upower-conf-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: historyDir, withIntermediateDirectories: true)
        FileManager.default.createFile(atPath: configFile.path, contents: Data())
        daemon = try Child("/usr/libexec/upowerd", ["-r", "-d"], environment: bus.environment([
            "UPOWER_HISTORY_DIR": historyDir.path,
            "UPOWER_CONF_FILE_NAME": configFile.path,
            // The same hotfix UPower's own integration test uses under umockdev.
            "SYSTEMD_DEVICE_VERIFY_SYSFS": "0",
        ]))
        try bus.waitForName("org.freedesktop.UPower")
        // upowerd owns its name before it has enumerated devices and set up its udev monitor; a uevent
        // sent in between is lost. There is no signal for "coldplug done", so ask until devices are listed.
        let deadline = Date().addingTimeInterval(15)
        while Date() < deadline {
            let (_, out, _) = try Child.run("/usr/bin/gdbus", ["call", "--system", "--dest", "org.freedesktop.UPower",
                                                               "--object-path", "/org/freedesktop/UPower",
                                                               "--method", "org.freedesktop.UPower.EnumerateDevices"],
                                            environment: bus.environment(["LD_PRELOAD": nil]))
            if out.contains("/org/freedesktop/UPower/devices/") { return }
            usleep(100_000)
        }
        throw TestbedError(message: "upowerd listed no devices within 15 s")
    }

    /// Asks upowerd to re-read every device it has (Device.Refresh, allowed in debug mode): the path for a
    /// test to tell "upowerd dropped a uevent" from "our watcher missed upowerd's signal". Returns what failed.
    public func refreshAll(bus: PrivateBus) -> String {
        let env = bus.environment(["LD_PRELOAD": nil])
        guard let (_, out, err) = try? Child.run("/usr/bin/gdbus", ["call", "--system", "--dest", "org.freedesktop.UPower",
                                                                    "--object-path", "/org/freedesktop/UPower",
                                                                    "--method", "org.freedesktop.UPower.EnumerateDevices"],
                                                 environment: env, deadline: 10) else { return "EnumerateDevices failed" }
        var failures = err
        for path in out.split(whereSeparator: { "'[](), ".contains($0) }) where path.hasPrefix("/org/freedesktop/UPower/devices/") {
            if let (rc, _, e) = try? Child.run("/usr/bin/gdbus", ["call", "--system", "--dest", "org.freedesktop.UPower",
                                                                  "--object-path", String(path),
                                                                  "--method", "org.freedesktop.UPower.Device.Refresh"],
                                               environment: env, deadline: 10), rc == 0 { continue }
            failures += "Refresh \(path) failed; "
        }
        return failures
    }

    public func stop() {
        // upowerd under the preload can take seconds to honour SIGTERM; nothing of it is needed after the test.
        daemon.stop(grace: 0.5)
        try? FileManager.default.removeItem(at: historyDir)
        try? FileManager.default.removeItem(at: configFile)
    }

    deinit { stop() }
}
