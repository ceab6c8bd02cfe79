import BgtaskTestSupport
import Foundation
import Testing

/// A laptop on battery with one Ethernet link and no default route (umockdev's sysfs, a routing table of the test's
/// own through BGTASK_PROC_ROOT), a policy whose charger rule holds `hold` and whose network rule holds nothing,
/// and bgtaskd (`--no-dbus`). `online(true)` writes a default route and says so with a uevent on the link.
final class TwoBlockersBed {
    let policy: PolicyEnv
    let testbed = Testbed()
    let laptop: Testbed.Laptop
    let link: String
    let proc: URL
    let daemon: SessionDaemon

    init(hold: String) throws {
        try requirePreload()
        policy = try PolicyEnv()
        try policy.userPolicy("50-two.toml", [
            ("processing.needs-power", "task.requires_external_power && power.external != true", "waiting for external power ({power.reason})",
             "hold_off = \"\(hold)\""),
            ("network.required", "task.requires_network && network.online != true", "waiting for the network", "hold = \"0s\""),
        ].map { "[[rule]]\nid = \"\($0.0)\"\nwhen = '\($0.1)'\nverdict = \"defer\"\nreason = \"\($0.2)\"\n\($0.3)\n" }.joined(separator: "\n"))
        laptop = testbed.addLaptop(acOnline: false)
        link = testbed.add("net", "eth0", attributes: ["operstate": "up", "carrier": "1", "type": "1"], properties: ["INTERFACE": "eth0"])
        proc = policy.dir.appendingPathComponent("routes")
        try FileManager.default.createDirectory(at: proc.appendingPathComponent("net"), withIntermediateDirectories: true)
        try TwoBlockersBed.routes(false, in: proc)
        daemon = try SessionDaemon(policy: policy, preload: true, daemonEnv: ["BGTASK_PROC_ROOT": proc.path])
    }

    /// The routing table with or without a default route through eth0, and the link's uevent that makes bgtaskd read it.
    func online(_ up: Bool) throws {
        try TwoBlockersBed.routes(up, in: proc)
        testbed.uevent(link)
    }

    static func routes(_ up: Bool, in proc: URL) throws {
        let header = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
        let route = up ? "eth0\t00000000\t0102A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n" : ""
        try (header + route).write(to: proc.appendingPathComponent("net/route"), atomically: true, encoding: .utf8)
        try "".write(to: proc.appendingPathComponent("net/ipv6_route"), atomically: true, encoding: .utf8)
    }

    /// The rules that hold task `id` back, as `pending --json` lists them (`unmet`), by rule id → reason.
    func blockers(_ id: String) throws -> [String: String] {
        let entry = try daemon.pending().first { $0["id"] as? String == id }
        var out: [String: String] = [:]
        for u in entry?["unmet"] as? [[String: Any]] ?? [] {
            if let r = u["rule"] as? String { out[r] = u["reason"] as? String ?? "" }
        }
        return out
    }
}

extension UmockdevIntegrationTests {
    @Test("bgtaskd: plugged while the link is down, the charger's hold runs from the plug and both blockers are listed; the network's return after it starts the task at once")
    func twoBlockersEachKeepTheirHold() throws {
        let bed = try TwoBlockersBed(hold: "6s")
        let d = bed.daemon
        let (st, _, err) = try d.bgtask(["submit", "--id", "sync", "--requires-external-power", "--requires-network", "--", "true"])
        #expect(st == 0, "submit: \(err)")
        var both: [String: String] = [:]
        #expect(polled(within: 10) { both = (try? bed.blockers("sync")) ?? [:]; return both.count == 2 }, "\(both)")
        #expect(both["processing.needs-power"]?.contains("waiting for external power") == true, "\(both)")

        bed.testbed.plug(bed.laptop, true)
        let plugged = Date()
        // Both hold now: the charger's by its hold_off (told as a hold, not as the cause that is gone), the network's.
        #expect(polled(within: 5) { both = (try? bed.blockers("sync")) ?? [:]; return both["processing.needs-power"]?.contains("held until") == true },
                "the plug was not taken in while the network held the task: \(both); \(d.daemon?.stderr.suffix(2000) ?? "")")
        #expect(both["network.required"] == "waiting for the network", "\(both)")
        let (ls, long, _) = try d.bgtask(["pending", "--long"])
        #expect(ls == 0 && long.contains("rule processing.needs-power") && long.contains("rule network.required"), "\(long)")
        let (ws, why, _) = try d.bgtask(["why", "sync"])
        let next = why.split(separator: "\n").first { $0.hasPrefix("Next: ") } ?? ""
        #expect(ws == 0 && next.contains("held until") && next.contains("waiting for the network") && next.contains("could run from"), "\(why)")

        // The hold ends 6 s after the plug, on its own clock: only the network holds the task then.
        var left: [String: String] = [:]
        #expect(polled(within: 15) { left = (try? bed.blockers("sync")) ?? [:]; return left.keys.sorted() == ["network.required"] }, "\(left)")
        #expect(Date().timeIntervalSince(plugged) < 12, "the hold ran from the plug, not from some later change")

        try bed.online(true)
        let back = Date()
        let started = d.daemon?.errorLine(within: 15) { $0.contains("sync: started") }
        #expect(started != nil, "\(d.daemon?.stderr.suffix(2000) ?? "")")
        // A hold counted from the network's return would start it 6 s later.
        #expect(Date().timeIntervalSince(back) < 4, "started \(Date().timeIntervalSince(back)) s after the network came back")
    }
}
