import BgtaskTestSupport
import Foundation
import Testing

/// A service bgtask reads that can come, go and come back: upowerd (the real one), and python3-dbusmock's logind,
/// NetworkManager, power-profiles-daemon and notification server, and the desktop's idle monitors.
final class Peer {
    let name: String
    let start: () throws -> Void
    let stop: () -> Void
    init(_ name: String, start: @escaping () throws -> Void, stop: @escaping () -> Void) {
        self.name = name
        self.start = start
        self.stop = stop
    }
}

/// The latest value of each reading a `bgtask watch --json` has printed.
final class WatchedReadings {
    let watch: Child
    var latest: [String: Any] = [:]
    init(_ watch: Child) { self.watch = watch }

    /// Reads lines (bounded) until every condition holds for the latest values; true if they all did in time.
    func until(within seconds: Double, _ conditions: [String: (Any?) -> Bool]) throws -> Bool {
        func met() -> Bool { conditions.allSatisfy { $0.value(latest[$0.key]) } }
        let deadline = Date().addingTimeInterval(seconds)
        while !met() {
            guard let line = watch.line(within: deadline.timeIntervalSinceNow) else { return false }
            let changes = try parseJSON(line)["changes"] as? [String: Any] ?? [:]
            for (k, v) in changes { latest[k] = (v as? [String: Any])?["new"] }
        }
        return true
    }

    /// The readings of the services, for a failing expectation's message.
    var services: String {
        "\(latest.filter { ["upower", "system", "network"].contains(String($0.key.prefix { $0 != "." })) }); watch said: \(watch.stdout.suffix(2000))"
    }
}

func isNull(_ v: Any?) -> Bool { v == nil || v is NSNull }

extension UmockdevIntegrationTests {
    @Test("every peer started, stopped and restarted three times, in three orders, under bgtaskd, watch and a waiting run: no crash, the readings follow")
    func peersComeAndGo() throws {
        try requirePreload()
        let p = try PolicyEnv()
        try p.userPolicy("50-fast.toml", immediatePowerRule)
        let tb = Testbed()
        let laptop = tb.addLaptop(acOnline: false)
        let system = try PrivateBus()
        let session = try PrivateBus()
        let d = try SessionDaemon(policy: p, preload: true, system: system, session: session)
        let env = d.env

        let watch = try Child(Child.bgtaskPath, ["watch", "--json", "--thermal-interval", "0"], environment: env)
        defer { watch.stop() }
        let readings = WatchedReadings(watch)
        #expect(try readings.until(within: 15, ["upower.available": { $0 as? Bool == false }]), "\(watch.stderr)")
        let run = try Child(Child.bgtaskPath, ["run", "--requires-external-power", "--id", "waits", "--", "true"], environment: env)
        defer { run.stop() }
        _ = try #require(run.errorLine(within: 15) { $0.contains("waiting:") }, "no waiting line: \(run.stderr)")
        #expect(try d.bgtask(["submit", "--id", "queued", "--requires-external-power", "--", "true"]).0 == 0)

        func gdbus(_ bus: PrivateBus, _ args: [String]) throws {
            let (rc, _, err) = try bus.gdbus("call", args)
            try #require(rc == 0, "gdbus \(args): \(err)")
        }
        func mock(_ bus: PrivateBus, _ template: String, _ name: String, then setUp: @escaping () throws -> Void = {}) -> Peer {
            var child: Child?
            return Peer(name, start: {
                child = try bus.dbusmock(template: template, name: name, system: bus === system)
                try setUp()
            }, stop: { child?.stop(grace: 1); child = nil })
        }
        var upowerd: UPowerDaemon?
        let support = repoRoot.appendingPathComponent("Tests/Support/dbusmock")
        let nm = ["--dest", "org.freedesktop.NetworkManager", "--object-path", "/org/freedesktop/NetworkManager"]
        let peers = [
            Peer("org.freedesktop.UPower", start: { upowerd = try UPowerDaemon(bus: system) }, stop: { upowerd?.stop(); upowerd = nil }),
            mock(system, "logind", "org.freedesktop.login1"),
            mock(system, "networkmanager", "org.freedesktop.NetworkManager") {
                // The template has no Metered: added (NM_METERED_GUESS_NO), then set, whose PropertiesChanged a reader
                // that looked before the property existed is told of.
                try gdbus(system, nm + ["--method", "org.freedesktop.DBus.Mock.AddProperty", "org.freedesktop.NetworkManager", "Metered", "<uint32 4>"])
                try gdbus(system, nm + ["--method", "org.freedesktop.DBus.Properties.Set", "org.freedesktop.NetworkManager", "Metered", "<uint32 1>"])
            },
            mock(system, "power_profiles_daemon", "net.hadess.PowerProfiles"),
            mock(session, "notification_daemon", "org.freedesktop.Notifications"),
            mock(session, support.appendingPathComponent("mutter_idle_monitor.py").path, "org.gnome.Mutter.IdleMonitor"),
            mock(session, support.appendingPathComponent("screensaver.py").path, "org.freedesktop.ScreenSaver"),
        ]
        defer { peers.forEach { $0.stop() } }

        func allAlive(_ step: String) {
            #expect(d.daemon?.process.isRunning == true, "bgtaskd died \(step): \(d.daemon?.stderr.suffix(2000) ?? "")")
            #expect(watch.process.isRunning, "watch died \(step): \(watch.stderr.suffix(2000))")
            #expect(run.process.isRunning, "run died \(step): \(run.stderr.suffix(2000))")
        }
        var rng = SystemRandomNumberGenerator()
        for round in 1...3 {
            // Forward, backward, then shuffled: any order.
            let order = round == 1 ? peers : round == 2 ? peers.reversed() : peers.shuffled(using: &rng)
            for peer in order {
                try peer.start()
                allAlive("after \(peer.name) came (round \(round))")
            }
            #expect(try readings.until(within: 20, ["upower.available": { $0 as? Bool == true },
                                                    "system.power_profile": { $0 as? String == "balanced" },
                                                    "network.metered": { $0 as? Bool == true }]),
                    "round \(round), peers up: \(readings.services)")
            // The daemon still answers, and still reads the battery (the task waits for the charger).
            let (rc, out, err) = try d.bgtask(["pending", "--json"])
            #expect(rc == 0 && out.contains("waiting for external power"), "round \(round): \(rc) \(out) \(err)")
            for peer in order.shuffled(using: &rng) {
                peer.stop()
                allAlive("after \(peer.name) went (round \(round))")
            }
            #expect(try readings.until(within: 20, ["upower.available": { $0 as? Bool == false },
                                                    "system.power_profile": isNull, "network.metered": isNull]),
                    "round \(round), peers gone: \(readings.services)")
        }
        allAlive("at the end")

        // Still following: upowerd once more (it reads the charger at its start), and the charger starts both the
        // waiting run and the queued task. (The watch's own uevents are not asserted after the rounds: umockdev names
        // each process's event socket after its fd number, so a restarted upowerd can take over another process's.)
        tb.plug(laptop, true)
        try peers[0].start()
        #expect(try readings.until(within: 20, ["upower.on_battery": { $0 as? Bool == false }]), "\(readings.services)")
        #expect(run.waitExit(within: 20) == 0, "\(run.stderr.suffix(2000))")
        #expect(d.said("queued: finished", within: 20)?.contains("exit 0") == true, "\(d.daemon?.stderr.suffix(2000) ?? "")")
    }
}

extension UmockdevIntegrationTests {
    @Test("the systemd user manager absent at bgtaskd's start, then started, stopped and started again three times: each task runs as its unit while the manager is there and as bgtaskd's child while it is not; bgtaskd never dies")
    func userManagerComesAndGoes() throws {
        try requirePreload()
        let p = try PolicyEnv()
        let tb = Testbed()
        _ = tb.addLaptop(acOnline: true, batteryStatus: "Charging")
        let runtime = p.dir.appendingPathComponent("user-runtime")
        try FileManager.default.createDirectory(at: runtime, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let d = try SessionDaemon(policy: p, preload: true, daemonEnv: ["BGTASK_SYSTEMD_UNITS": "1", "XDG_RUNTIME_DIR": runtime.path])
        func runs(_ id: String, asUnit: Bool, _ step: String) throws {
            #expect(try d.bgtask(["submit", "--id", id, "--", "true"]).0 == 0)
            let started = try #require(d.said("\(id): started", within: 20), "\(step): \(d.daemon?.stderr.suffix(2000) ?? "")")
            #expect(started.contains("(systemd unit ") == asUnit, "\(step): \(started)")
            #expect(d.said("\(id): finished", within: 20)?.contains("exit 0") == true, "\(step): \(d.daemon?.stderr.suffix(2000) ?? "")")
            #expect(d.daemon?.process.isRunning == true, "bgtaskd died \(step)")
        }
        try runs("before", asUnit: false, "before any manager")
        for round in 1...3 {
            var manager: UserManager? = try UserManager(runtimeDirectory: runtime)
            try runs("with\(round)", asUnit: true, "with the manager (round \(round))")
            withExtendedLifetime(manager) {}
            manager = nil   // stopped: its socket goes with its runtime directory's contents
            try FileManager.default.createDirectory(at: runtime, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            try runs("without\(round)", asUnit: false, "after the manager stopped (round \(round))")
        }
    }
}
