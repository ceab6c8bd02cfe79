import BgtaskProbes
import BgtaskTestSupport
import Foundation
import Testing

/// A testbed the real upowerd and our sysfs probe must read alike.
struct UPowerCase: CustomTestStringConvertible, Sendable {
    var name: String
    var supplies: String   // umockdev text
    var external: Bool
    var state: String?     // ours
    var upowerState: String?
    var testDescription: String { name }
}

private func ac(_ online: Int) -> String {
    """
    P: /devices/LNXSYSTM:00/LNXSYBUS:00/ACPI0003:00/power_supply/AC
    E: SUBSYSTEM=power_supply
    E: POWER_SUPPLY_ONLINE=\(online)
    A: type=Mains\\n
    A: online=\(online)\\n
    """ + "\n\n"
}

private func battery(_ name: String, status: String, now: Int, full: Int = 60_000_000, power: Int = 9_500_000, index: Int = 0) -> String {
    """
    P: /devices/LNXSYSTM:00/LNXSYBUS:00/PNP0C0A:0\(index)/power_supply/\(name)
    E: SUBSYSTEM=power_supply
    A: type=Battery\\n
    A: present=1\\n
    A: status=\(status)\\n
    A: energy_now=\(now)\\n
    A: energy_full=\(full)\\n
    A: energy_full_design=\(full)\\n
    A: power_now=\(power)\\n
    A: voltage_now=12000000\\n
    A: capacity=\(now * 100 / full)\\n
    A: technology=Li-ion\\n
    """ + "\n\n"
}

let upowerCases: [UPowerCase] = [
    .init(name: "on battery, 42 %", supplies: ac(0) + battery("BAT0", status: "Discharging", now: 25_200_000),
          external: false, state: "discharging", upowerState: "discharging"),
    .init(name: "charging, 80 %", supplies: ac(1) + battery("BAT0", status: "Charging", now: 48_000_000),
          external: true, state: "charging", upowerState: "charging"),
    .init(name: "full on AC", supplies: ac(1) + battery("BAT0", status: "Full", now: 60_000_000, power: 0),
          external: true, state: "full", upowerState: "fully-charged"),
    // A charge limit: UPower calls it pending-charge.
    .init(name: "not charging at a charge limit", supplies: ac(1) + battery("BAT0", status: "Not charging", now: 48_000_000, power: 0),
          external: true, state: "not-charging", upowerState: "pending-charge"),
    .init(name: "two batteries on battery", supplies: ac(0) + battery("BAT0", status: "Discharging", now: 6_000_000)
          + battery("BAT1", status: "Discharging", now: 3_000_000, full: 30_000_000, power: 2_000_000, index: 1),
          external: false, state: "discharging", upowerState: "discharging"),
    .init(name: "desktop: AC and no battery", supplies: ac(1), external: true, state: nil, upowerState: nil),
    // UPower's own test_ups_no_ac: a UPS on its battery means OnBattery=true; the mains are out.
    .init(name: "desktop behind a UPS on battery", supplies: ups(status: "Discharging"), external: false, state: nil, upowerState: nil),
    .init(name: "desktop behind a UPS on the mains", supplies: ups(status: "Charging"), external: true, state: nil, upowerState: nil),
]

private func ups(status: String) -> String {
    """
    P: /devices/pci0000:00/0000:00:14.0/usb1/1-1/1-1:1.0/power_supply/ups
    E: SUBSYSTEM=power_supply
    A: type=UPS\\n
    A: present=1\\n
    A: status=\(status)\\n
    A: capacity=70\\n
    A: energy_now=35000000\\n
    A: energy_full=50000000\\n
    """ + "\n\n"
}

extension UmockdevIntegrationTests {
    @Test("bgtask and the real upowerd agree on on-battery, percentage and state", arguments: upowerCases)
    func agreesWithUpowerd(_ c: UPowerCase) throws {
        try requirePreload()
        let tb = Testbed()
        try tb.load(umockdev: c.supplies)
        let bus = try PrivateBus()
        let upowerd = try UPowerDaemon(bus: bus)
        defer { upowerd.stop() }

        let (rc, out, err) = try Child.run(Child.bgtaskPath, ["status", "--json"], environment: bus.environment())
        #expect(rc == 0, "\(err)")
        let j = try parseJSON(out)
        #expect(value(j, "upower.available") as? Bool == true, "\(String(describing: value(j, "upower.reason")))")
        #expect(value(j, "power.external") as? Bool == c.external)
        #expect(value(j, "upower.on_battery") as? Bool == !c.external)
        #expect(value(j, "power.disagreement") is NSNull)
        #expect(value(j, "battery.state") as? String == c.state)
        if let s = c.upowerState { #expect(value(j, "upower.state") as? String == s) }
        if let ours = value(j, "battery.percent") as? Double {
            let theirs = try #require(value(j, "upower.percentage") as? Double)
            #expect(abs(ours - theirs) < 0.5, "bgtask \(ours) % vs upowerd \(theirs) %")
        }
    }

    @Test("`bgtask watch` follows upowerd's OnBattery signal and the uevent together")
    func watchSeesUpowerSignals() throws {
        try requirePreload()
        // Under a loaded machine upowerd (under the preload) now and then never changes OnBattery at all —
        // the diagnostics below ask it directly. One fresh attempt (new testbed, bus and upowerd) is allowed
        // for that; a watcher that missed a signal would miss it again. Every failure is printed.
        if try watchSeesUpowerSignalsOnce(final: false) { return }
        print("note: first attempt saw no UPower signal; trying once more with a fresh upowerd")
        _ = try watchSeesUpowerSignalsOnce(final: true)
    }

    func watchSeesUpowerSignalsOnce(final: Bool) throws -> Bool {
        let tb = Testbed()
        let laptop = tb.addLaptop(acOnline: true, batteryStatus: "Charging")
        let bus = try PrivateBus()
        let upowerd = try UPowerDaemon(bus: bus)
        defer { upowerd.stop() }
        let watch = try Child(Child.bgtaskPath, ["watch", "--json", "--thermal-interval", "0"], environment: bus.environment())
        defer { watch.stop() }
        let first = try parseJSON(try #require(watch.line(within: 10), "no first line: \(watch.stderr)"))
        #expect(newValue(first, "upower.on_battery") as? Bool == false)

        tb.plug(laptop, false)
        // Both readings change; they may arrive in one line or two, in either order.
        var seen: [String: Any] = [:]
        var lines: [String] = []
        func collect(for seconds: Double) throws {
            let deadline = Date().addingTimeInterval(seconds)
            while seen.count < 2, let line = watch.line(within: deadline.timeIntervalSinceNow, where: {
                $0.contains("\"power.external\"") || $0.contains("\"upower.on_battery\"")
            }) {
                lines.append(String(line.prefix(400)))
                let j = try parseJSON(line)
                for path in ["power.external", "upower.on_battery"] { if let v = newValue(j, path) { seen[path] = v } }
            }
        }
        // Generous: the other suites run beside this one and load the machine; upowerd under the preload is slow then.
        try collect(for: 10)
        // upowerd under umockdev now and then drops a uevent that arrives while it is still settling after
        // coldplug (its own state then never changes); one resend tells that apart from a signal we missed,
        // which a resend cannot bring back (upowerd signals only changes).
        let resent = seen["upower.on_battery"] == nil
        var refreshFailures = ""
        if resent {
            tb.uevent(laptop.ac)
            tb.uevent(laptop.battery)
            try collect(for: 10)
        }
        // Still nothing: make upowerd re-read the (already changed) sysfs without a uevent. If it then signals
        // and we see it, the watcher follows upowerd; if upowerd signals and we miss it, that is our failure.
        if seen["upower.on_battery"] == nil {
            refreshFailures = upowerd.refreshAll(bus: bus)
            try collect(for: 10)
        }
        var upowerSays = ""
        if seen["upower.on_battery"] == nil {
            upowerSays = (try? Child.run("/usr/bin/gdbus", ["call", "--system", "--dest", "org.freedesktop.UPower", "--object-path",
                                                            "/org/freedesktop/UPower", "--method", "org.freedesktop.DBus.Properties.Get",
                                                            "org.freedesktop.UPower", "OnBattery"],
                                         environment: bus.environment(["LD_PRELOAD": nil]), deadline: 10).1) ?? "?"
        }
        let diagnostics = "upowerd's OnBattery now: \(upowerSays); no UPower signal line (resent: \(resent)\(refreshFailures.isEmpty ? "" : "; " + refreshFailures)); lines: \(lines); upowerd said: \(upowerd.log.suffix(3000))"
        guard final || (seen["upower.on_battery"] as? Bool == true && seen["power.external"] as? Bool == false) else {
            print("note: \(diagnostics)")
            return false
        }
        #expect(seen["power.external"] as? Bool == false)
        #expect(seen["upower.on_battery"] as? Bool == true, "\(diagnostics)")
        if resent { print("note: upowerd needed the uevent twice") }
        return true
    }
}
