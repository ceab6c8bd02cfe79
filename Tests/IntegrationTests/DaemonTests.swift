import BgtaskTestSupport
import Foundation
import Testing

struct DaemonTestError: Error, CustomStringConvertible {
    var message: String
    var description: String { message }
}

/// bgtaskd on a private session bus, with the per-test state and policy directories of `PolicyEnv`.
final class SessionDaemon {
    let bus: PrivateBus
    let env: [String: String]
    var daemon: Child?

    init(policy: PolicyEnv, preload: Bool) throws {
        bus = try PrivateBus()
        env = policy.environment(preload: preload, ["DBUS_SESSION_BUS_ADDRESS": bus.address, "DBUS_SYSTEM_BUS_ADDRESS": nil])
        try start()
    }

    deinit { daemon?.stop() }

    func start() throws {
        let d = try Child(Child.bgtaskdPath, ["--no-dbus"], environment: env)
        daemon = d
        // Its own line once the name is owned: an event, not a sleep.
        guard d.errorLine(within: 20, where: { $0.contains("serving io.github.bgtask.Scheduler1") }) != nil else {
            throw DaemonTestError(message: "bgtaskd did not come up: \(d.stderr)")
        }
    }

    /// SIGTERM and wait (bounded), then a new daemon on the same state.
    func restart() throws {
        daemon?.process.terminate()
        _ = daemon?.waitExit(within: 15)
        try start()
    }

    func bgtask(_ args: [String]) throws -> (Int32, String, String) {
        try Child.run(Child.bgtaskPath, args, environment: env, deadline: 30)
    }
}

extension UmockdevIntegrationTests {
    @Test("bgtaskd: submit on battery → pending with rule and file:line → daemon restart → still pending → charger uevent → runs → why tells it → not pending")
    func daemonKeepsTheQueueAcrossARestartAndRunsOnTheCharger() throws {
        try requirePreload()
        let p = try PolicyEnv()
        try p.userPolicy("50-fast.toml", immediatePowerRule)
        let tb = Testbed()
        let laptop = tb.addLaptop(acOnline: false)
        let d = try SessionDaemon(policy: p, preload: true)
        let marker = p.dir.appendingPathComponent("ran")

        let (st, out, err) = try d.bgtask(["submit", "--id", "backup", "--requires-external-power", "--",
                                           "sh", "-c", "echo started; echo done > '\(marker.path)'"])
        #expect(st == 0, "submit: \(err)")
        #expect(out.trimmingCharacters(in: .whitespacesAndNewlines) == "backup")

        func pendingJSON() throws -> [[String: Any]] {
            let (s, o, e) = try d.bgtask(["pending", "--json"])
            #expect(s == 0, "pending: \(e)")
            return try #require(try JSONSerialization.jsonObject(with: Data(o.utf8)) as? [[String: Any]], "not a JSON array: \(o)")
        }
        var list = try pendingJSON()
        var entry = try #require(list.first { $0["id"] as? String == "backup" }, "not pending: \(list)")
        #expect(entry["rule"] as? String == "processing.needs-power")
        #expect((entry["location"] as? String)?.hasSuffix("50-fast.toml:2") == true, "\(entry)")
        #expect((entry["reason"] as? String)?.contains("waiting for external power") == true)

        try d.restart()
        list = try pendingJSON()
        entry = try #require(list.first { $0["id"] as? String == "backup" }, "lost in the restart: \(list); \(d.daemon?.stderr ?? "")")
        #expect(entry["rule"] as? String == "processing.needs-power")
        #expect(!FileManager.default.fileExists(atPath: marker.path))

        tb.plug(laptop, true)
        let finished = d.daemon?.errorLine(within: 10) { $0.contains("backup: finished") }
        #expect(finished?.contains("exit 0") == true, "did not run: \(d.daemon?.stderr ?? "")")
        #expect(FileManager.default.fileExists(atPath: marker.path))

        let (ws, why, we) = try d.bgtask(["why", "backup"])
        #expect(ws == 0, "why: \(we)")
        #expect(why.contains("processing.needs-power"), "\(why)")
        #expect(why.contains("Started"), "\(why)")
        #expect(why.contains("finished") || why.contains("exit 0"), "\(why)")

        let (os, output, _) = try d.bgtask(["output", "backup"])
        #expect(os == 0 && output == "started\n", "output: \(output)")
        #expect(try pendingJSON().isEmpty)
    }
}
