import Foundation
import Testing
@testable import BgtaskProbes
import BgtaskTestSupport

/// What a real recording must read as. Percent is to 0.1; nil means "must be null".
struct PowerCase: CustomTestStringConvertible, Sendable {
    var file: String
    var external: Bool?
    var reasonMentions: String
    var percent: Double?
    var state: BatteryReading.State?
    var warning: BatteryReading.Warning?
    var batteries: Int
    var peripherals = 0
    var timeToEmpty: ClosedRange<Int>? = nil
    var testDescription: String { file }
}

let powerCases: [PowerCase] = [
    .init(file: "01-dell-charging-charge-based", external: true, reasonMentions: "BAT0 is charging",
          percent: 98.5, state: .charging, warning: BatteryReading.Warning.none, batteries: 1),
    // Status "Unknown", power_now 0 and nothing else to ask: no current flows, so nothing drains.
    .init(file: "02-thinkpad-unknown-energy-based", external: true, reasonMentions: "no current flows",
          percent: 32.5, state: .unknown, warning: BatteryReading.Warning.none, batteries: 1),
    .init(file: "03-dell-xps15-discharging", external: false, reasonMentions: "BAT0 is discharging",
          percent: 92.7, state: .discharging, warning: BatteryReading.Warning.none, batteries: 1, timeToEmpty: 10_150...10_350),
    // energy_now > energy_full: clamped, and "Unknown" at 100 % is full.
    .init(file: "04-thinkpad-overfull-unknown", external: true, reasonMentions: "taken as full",
          percent: 100, state: .full, warning: BatteryReading.Warning.none, batteries: 1),
    .init(file: "05-asus-c300-full", external: true, reasonMentions: "BAT0 is full",
          percent: 100, state: .full, warning: BatteryReading.Warning.none, batteries: 1),
    .init(file: "06a-brunch-discharging", external: false, reasonMentions: "BATC is discharging",
          percent: 74, state: .discharging, warning: BatteryReading.Warning.none, batteries: 1, timeToEmpty: 13_000...13_300),
    .init(file: "06b-brunch-charging", external: true, reasonMentions: "BATC is charging",
          percent: 73, state: .charging, warning: BatteryReading.Warning.none, batteries: 1),
    // A phone battery with no status at all and its USB charger offline.
    .init(file: "07-nexus5-no-status-usb-charger-offline", external: false, reasonMentions: "every charger is offline",
          percent: 36, state: .unknown, warning: BatteryReading.Warning.none, batteries: 1),
    // A desktop whose only battery is a mouse.
    .init(file: "08-mouse-only-capacity-level", external: true, reasonMentions: "no system battery",
          percent: nil, state: nil, warning: nil, batteries: 0, peripherals: 1),
    .init(file: "10-toshiba-unknown-on-ac", external: true, reasonMentions: "AC (Mains) is online",
          percent: 100, state: .full, warning: BatteryReading.Warning.none, batteries: 1),
    // Two batteries combined by energy, as UPower does: 2.42 Wh of 56.24 Wh.
    .init(file: "11-14-dual-battery-secondary-empty", external: false, reasonMentions: "BAT0 is discharging",
          percent: 4.3, state: .discharging, warning: .critical, batteries: 2, timeToEmpty: 300...330),
    .init(file: "12-dell-xps15-full-no-power-now", external: true, reasonMentions: "BAT1 is full",
          percent: 100, state: .full, warning: BatteryReading.Warning.none, batteries: 1),
    // cw2015 has capacity and charge_full but no charge_now: capacity it is.
    .init(file: "13-pinebook-pro-charging", external: true, reasonMentions: "is charging",
          percent: 96, state: .charging, warning: BatteryReading.Warning.none, batteries: 1),
    .init(file: "14-thinkpad-bat0-discharging-low", external: false, reasonMentions: "BAT0 is discharging",
          percent: 9.4, state: .discharging, warning: .low, batteries: 1, timeToEmpty: 300...330),
    .init(file: "19-ac-minimal-no-type", external: true, reasonMentions: "AC (mains) is online",
          percent: nil, state: nil, warning: nil, batteries: 0),
    // Charge limit: "Not charging" at 100 % on AC.
    .init(file: "checkbox-ipu7-not-charging-ucsi", external: true, reasonMentions: "AC (Mains) is online",
          percent: 100, state: .notCharging, warning: BatteryReading.Warning.none, batteries: 1),
    .init(file: "checkbox-t430s-unknown-on-ac", external: true, reasonMentions: "AC",
          percent: 99.9, state: .full, warning: BatteryReading.Warning.none, batteries: 1),
    .init(file: "node-exporter-ac-offline-bat0-discharging", external: false, reasonMentions: "BAT0 is discharging",
          percent: 81.2, state: .discharging, warning: BatteryReading.Warning.none, batteries: 1, timeToEmpty: 26_200...26_450),
    .init(file: "upower-usb-headset", external: true, reasonMentions: "no system battery",
          percent: nil, state: nil, warning: nil, batteries: 0, peripherals: 1),
]

@Suite("Power and battery readings of real recordings")
struct PowerFixtureTests {
    @Test("each recording reads as the machine was", arguments: powerCases)
    func recordingReadsAsRecorded(_ c: PowerCase) throws {
        let tree = try FixtureTree.load("power/\(c.file).umockdev")
        defer { tree.remove() }
        let s = tree.snapshot()
        #expect(s.power.external == c.external, "\(s.power.reason)")
        #expect(s.power.reason.contains(c.reasonMentions), "reason: \(s.power.reason)")
        #expect(s.battery.percent == c.percent)
        #expect(s.battery.state == c.state, "\(s.battery.reason)")
        #expect(s.battery.warning == c.warning)
        #expect(s.battery.count == c.batteries)
        #expect(s.battery.present == (c.batteries > 0))
        #expect(s.supplies.filter(\.isPeripheral).count == c.peripherals)
        if let range = c.timeToEmpty {
            #expect(s.battery.timeToEmptySeconds.map(range.contains) == true, "tte \(String(describing: s.battery.timeToEmptySeconds))")
        } else {
            #expect(s.battery.timeToEmptySeconds == nil)
        }
        // Every reason names a file under the tree it read, or says why none applies.
        #expect(s.power.reason.contains(tree.root.path) || s.power.reason.contains("no system battery")
                || s.power.reason.contains("offline") || s.power.reason.contains("taken as"))
    }

    @Test("the JSON has the policy names as dotted paths, with null for the unknown")
    func jsonPathsMatchConditionNames() throws {
        let tree = try FixtureTree.load("power/08-mouse-only-capacity-level.umockdev")
        defer { tree.remove() }
        let snap = tree.snapshot()
        let json = snap.json
        #expect(json.at(path: "power.external") == .bool(true))
        #expect(json.at(path: "battery.percent") == .null)
        #expect(json.at(path: "battery.state") == .null)
        #expect(json.rendered.contains("\"percent\":null"))
        // One snapshot for both: free space changes between two reads.
        for (name, value) in snap.conditions {
            #expect(json.at(path: name) == value, "\(name)")
        }
    }

    @Test("a battery that says Discharging at 100 % with no current while AC is online is on external power")
    func firmwareQuirkDischargingAtFullCountsAsExternal() throws {
        let tree = try FixtureTree.load("power/checkbox-ipu7-not-charging-ucsi.umockdev")
        defer { tree.remove() }
        try tree.set("class/power_supply/BAT0/status", "Discharging\n")
        try tree.set("class/power_supply/BAT0/current_now", "0\n")
        let s = tree.snapshot()
        #expect(s.power.external == true)
        #expect(s.battery.state == .full)
        #expect(s.battery.reason.contains("firmware quirk"))

        // The same with current flowing is real discharge, whatever AC says (an underpowered charger).
        try tree.set("class/power_supply/BAT0/current_now", "1500000\n")
        let s2 = tree.snapshot()
        #expect(s2.power.external == false)
        #expect(s2.power.reason.contains("although AC"))
    }

    @Test("an online USB-C port in source role is not a charger; in sink role it is")
    func usbCSourceRoleIsIgnored() throws {
        let tree = try FixtureTree.load("power/checkbox-ipu7-not-charging-ucsi.umockdev")
        defer { tree.remove() }
        // No AC adapter; the battery reports no status but current flows out of it.
        try FileManager.default.removeItem(at: tree.url("class/power_supply/AC"))
        try tree.set("class/power_supply/BAT0/status", "Unknown\n")
        try tree.set("class/power_supply/BAT0/capacity", "60\n")
        try tree.set("class/power_supply/BAT0/charge_now", "2759400\n")
        try tree.set("class/power_supply/BAT0/current_now", "1500000\n")
        let port = tree.url("devices/platform/USBC000:00/typec/port0")
        try FileManager.default.createDirectory(at: port, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(
            atPath: tree.url("devices/platform/USBC000:00/power_supply/ucsi-source-psy-USBC000:001/device").path,
            withDestinationPath: "../..")
        try "sink [source]\n".write(to: port.appendingPathComponent("power_role"), atomically: false, encoding: .utf8)

        let asSource = tree.snapshot()
        #expect(asSource.supplies.first { $0.name.hasSuffix(":001") }?.powerRole == "source")
        #expect(asSource.power.external == false, "\(asSource.power.reason)")

        try "[sink] source\n".write(to: port.appendingPathComponent("power_role"), atomically: false, encoding: .utf8)
        let asSink = tree.snapshot()
        #expect(asSink.power.external == true, "\(asSink.power.reason)")
        #expect(asSink.power.reason.contains("ucsi-source-psy-USBC000:001"))
    }

    @Test("an empty sysfs: no battery means external power, and no zones is said plainly")
    func emptyMachineIsOnExternalPower() throws {
        let tree = try FixtureTree(umockdev: "")
        defer { tree.remove() }
        let s = tree.snapshot()
        #expect(s.power.external == true)
        #expect(s.summary.contains("no battery: on external power"))
        #expect(s.summary.contains("no thermal zones"))
        // Not "no logind": it was not asked.
        #expect(s.summary.contains(" · presence unknown: D-Bus not consulted for a recorded tree"), "\(s.summary)")
        #expect(s.thermal.state == nil)
    }
}

@Suite("The README's demo laptop")
struct DemoLaptopTests {
    @Test("laptop-node-exporter reads as on battery at 81 %, thermal nominal")
    func demoLaptopReadings() throws {
        let tree = try FixtureTree.load("laptop-node-exporter.umockdev")
        defer { tree.remove() }
        let s = tree.snapshot()
        #expect(s.power.external == false)
        #expect(s.battery.percent == 81.2)
        #expect(s.thermal.state == .nominal)
        #expect(s.thermal.celsius == 12.4)
        #expect(s.summary.hasPrefix("On battery (BAT0 discharging, 81.2%"))
    }
}
