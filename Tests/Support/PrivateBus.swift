import Foundation

/// A private dbus-daemon presented to children as the system bus (`DBUS_SYSTEM_BUS_ADDRESS`),
/// the way UPower's and power-profiles-daemon's own integration tests run.
///
/// Hermetic: it reads a configuration of its own, never `session.conf`, whose standard service directories
/// (`$XDG_DATA_HOME/dbus-1/services`, `/usr/share/dbus-1/services`) hold the bgtaskd that `make install` and the
/// `.deb` put there; a call to a name nobody owns would start that installed daemon on the user's real queue, and
/// it would outlive the test. The only services it can activate are those in `serviceDirectory`.
public final class PrivateBus {
    public let address: String
    let daemon: Child
    let configFile: URL

    /// `listen`: an address for dbus-daemon to listen on (`unix:abstract=…`), else a socket under /tmp, as the
    /// session default. `serviceDirectory`: the one directory of `.service` files it activates from.
    public init(listen: String? = nil, serviceDirectory: URL? = nil) throws {
        configFile = FileManager.default.temporaryDirectory.appendingPathComponent("bgtask-bus-\(getpid())-\(UUID().uuidString).conf")
        try PrivateBus.configuration(listen: listen ?? "unix:tmpdir=/tmp", serviceDirectory: serviceDirectory)
            .write(to: configFile, atomically: true, encoding: .utf8)
        do {
            daemon = try Child("/usr/bin/dbus-daemon", ["--config-file=\(configFile.path)", "--nofork", "--print-address=1"],
                               environment: Child.environment(["LD_PRELOAD": nil, "UMOCKDEV_DIR": nil]))
        } catch {
            try? FileManager.default.removeItem(at: configFile)
            throw error
        }
        guard let addr = daemon.line(within: 10), addr.hasPrefix("unix:") else {
            daemon.stop()
            try? FileManager.default.removeItem(at: configFile)
            throw TestbedError(message: "dbus-daemon did not print an address: \(daemon.stderr)")
        }
        address = addr
    }

    /// session.conf's policy and limits, without its service directories and included files.
    static func configuration(listen: String, serviceDirectory: URL?) -> String {
        func xml(_ s: String) -> String {
            s.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;").replacingOccurrences(of: ">", with: "&gt;")
        }
        return """
        <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
        <busconfig>
          <type>session</type>
          <keep_umask/>
          <listen>\(xml(listen))</listen>
          <auth>EXTERNAL</auth>
        \(serviceDirectory.map { "  <servicedir>\(xml($0.path))</servicedir>" } ?? "")
          <policy context="default">
            <allow send_destination="*" eavesdrop="true"/>
            <allow eavesdrop="true"/>
            <allow own="*"/>
          </policy>
          <limit name="service_start_timeout">30000</limit>
          <limit name="max_message_size">1000000000</limit>
          <limit name="max_incoming_bytes">1000000000</limit>
          <limit name="max_outgoing_bytes">1000000000</limit>
        </busconfig>
        """
    }

    deinit {
        daemon.stop()
        try? FileManager.default.removeItem(at: configFile)
    }

    /// Child environment that sees this bus as the system bus.
    public func environment(_ overrides: [String: String?] = [:]) -> [String: String] {
        var o = overrides
        o["DBUS_SYSTEM_BUS_ADDRESS"] = address
        return Child.environment(o)
    }

    /// `gdbus COMMAND --address ADDRESS REST…` (call, wait, monitor): this bus by its address, never a bus the
    /// environment names.
    public func gdbusArguments(_ command: String, _ rest: [String]) -> [String] { [command, "--address", address] + rest }

    /// `gdbus COMMAND` against this bus, run to its end (bounded).
    public func gdbus(_ command: String, _ rest: [String], deadline: Double = 20) throws -> (Int32, String, String) {
        try Child.run("/usr/bin/gdbus", gdbusArguments(command, rest), environment: Child.environment(["LD_PRELOAD": nil, "UMOCKDEV_DIR": nil]),
                      deadline: deadline)
    }

    /// python3-dbusmock serving `template` (a template's name or a file) on this bus, once `name` is owned. dbusmock
    /// takes its bus from the environment: this bus is given as its session bus, or with `system` as its system bus.
    public func dbusmock(template: String, name: String, parameters: String? = nil, system: Bool = false) throws -> Child {
        let env = Child.environment([system ? "DBUS_SYSTEM_BUS_ADDRESS" : "DBUS_SESSION_BUS_ADDRESS": address, "LD_PRELOAD": nil, "UMOCKDEV_DIR": nil])
        let mock = try Child("/usr/bin/python3", ["-m", "dbusmock", system ? "--system" : "--session", "--template", template]
                                + (parameters.map { ["-p", $0] } ?? []), environment: env)
        let (rc, _, err) = try gdbus("wait", ["--timeout", "15", name], deadline: 20)
        guard rc == 0 else {
            mock.stop(grace: 1)
            throw TestbedError(message: "the mocked \(name) did not appear: \(err) \(mock.stderr)")
        }
        return mock
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
        _ = FileManager.default.createFile(atPath: configFile.path, contents: Data())
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
            if let (rc, _, _) = try? Child.run("/usr/bin/gdbus", ["call", "--system", "--dest", "org.freedesktop.UPower",
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
