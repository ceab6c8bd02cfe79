import Foundation
import Testing
@testable import BgtaskProbes
import BgtaskTestSupport
import BgtaskFiles

/// Built trees in the shapes of the faults an outside review found: each would have crashed a probe,
/// hidden a state, or invented a reading.
@Suite("Hostile sysfs trees")
struct HostileSysfsTests {
    static func zone(_ temp: String, trips: [(String, String)]) -> String {
        var s = """
        P: /devices/virtual/thermal/thermal_zone0
        E: SUBSYSTEM=thermal
        A: type=acpitz\\n
        A: temp=\(temp)\\n

        """
        for (i, (type, t)) in trips.enumerated() {
            s += "A: trip_point_\(i)_type=\(type)\\n\nA: trip_point_\(i)_temp=\(t)\\n\n"
        }
        return s
    }

    @Test("a passive trip above the critical one is set aside: 110 °C against a 105 °C critical trip is critical")
    func bogusPassiveTripDoesNotHideCritical() throws {
        let tree = try FixtureTree(umockdev: Self.zone("110000", trips: [("critical", "105000"), ("passive", "127000")]))
        defer { tree.remove() }
        let s = tree.snapshot()
        #expect(s.thermal.state == .critical, "\(s.thermal.reason)")
        let z = try #require(s.zones.first)
        #expect(z.ignoredTrips.contains { $0.contains("above the critical trip (105 °C): out of order") })
        #expect(z.thresholds().critical == 105)
        #expect(z.thresholds().serious <= 105)
    }

    @Test("trips out of any plausible range (85,000 °C, ±1e30) are set aside with a note; nothing traps",
          arguments: ["85000000", "1e33", "-1e33", "inf", "9223372036854775807000"])
    func absurdTripsAreSetAside(_ raw: String) throws {
        let tree = try FixtureTree(umockdev: Self.zone("60000", trips: [("critical", raw), ("passive", "90000")]))
        defer { tree.remove() }
        let s = tree.snapshot()
        let z = try #require(s.zones.first)
        #expect(z.trips.map(\.celsius) == [90])
        #expect(z.ignoredTrips.count == 1)
        #expect(s.thermal.state == .nominal)
        _ = s.json.rendered   // every number in the output renders
        _ = s.summary
    }

    @Test("a temperature in whole degrees (45 where millidegrees are expected) is set aside, not read as 0.045 °C")
    func wrongUnitTemperatureIsSetAside() throws {
        let tree = try FixtureTree(umockdev: Self.zone("45", trips: [("critical", "105000")]))
        defer { tree.remove() }
        let s = tree.snapshot()
        let z = try #require(s.zones.first)
        #expect(!z.isUsable)
        #expect(z.notes.contains { $0.contains("looks like whole degrees, not millidegrees") })
        #expect(s.thermal.state == nil)
        #expect(s.thermal.celsius == nil)
    }

    static func battery(_ attrs: [String: String]) -> String {
        var s = """
        P: /devices/LNXSYSTM:00/LNXSYBUS:00/PNP0C0A:00/power_supply/BAT0
        E: SUBSYSTEM=power_supply
        A: type=Battery\\n
        A: present=1\\n

        """
        for (k, v) in attrs.sorted(by: { $0.key < $1.key }) { s += "A: \(k)=\(v)\\n\n" }
        return s + "\n"
    }

    static func charger(online: String?) -> String {
        var s = """
        P: /devices/LNXSYSTM:00/LNXSYBUS:00/ACPI0003:00/power_supply/AC
        E: SUBSYSTEM=power_supply
        A: type=Mains\\n

        """
        if let o = online { s += "A: online=\(o)\\n\n" }
        return s + "\n"
    }

    @Test("out-of-range gauge numbers (1e40 µWh, 1e30 µW) are set aside with a note; percent and time never trap")
    func outOfRangeNumbersAreSetAside() throws {
        let tree = try FixtureTree(umockdev: Self.battery(["status": "Discharging", "energy_now": "1e40", "energy_full": "50000000",
                                                          "power_now": "1e30", "voltage_now": "99999999999999999999", "capacity": "40"]))
        defer { tree.remove() }
        let s = tree.snapshot()
        let b = try #require(s.supplies.first)
        #expect(b.energyNowWh == nil && b.powerW == nil && b.voltageV == nil)
        #expect(b.notes.contains { $0.contains("energy_now: 1e40 is out of range") })
        #expect(s.battery.percent == 40)
        #expect(s.battery.timeToEmptySeconds == nil)
        #expect(s.power.external == false)
        _ = s.json.rendered
        _ = s.summary
    }

    @Test("a charger whose online file is missing, unreadable or garbage is unknown, not offline",
          arguments: [nil, "3", "yes"] as [String?])
    func unknownChargerIsNotOffline(_ online: String?) throws {
        let tree = try FixtureTree(umockdev: Self.charger(online: online) + Self.battery(["status": "Unknown", "capacity": "60"]))
        defer { tree.remove() }
        let s = tree.snapshot()
        #expect(s.power.external == nil, "\(s.power.reason)")
        #expect(!s.power.reason.contains("every charger is offline"))
        #expect(s.power.reason.contains("online state unknown"))
    }

    @Test("an unknown charger with current flowing out of the battery: the documented current-flow rule decides")
    func unknownChargerFallsBackToCurrentFlow() throws {
        let tree = try FixtureTree(umockdev: Self.charger(online: nil)
                                   + Self.battery(["status": "Unknown", "capacity": "60", "power_now": "7000000"]))
        defer { tree.remove() }
        let s = tree.snapshot()
        #expect(s.power.external == false)
        #expect(s.power.reason.contains("current flows") && s.power.reason.contains("online state unknown"))
    }

    @Test("a UPS running on its battery means the mains are out, even on a desktop with no battery of its own")
    func upsOnBatteryIsNotExternalPower() throws {
        let ups = """
        P: /devices/pci0000:00/0000:00:14.0/usb1/1-1/1-1:1.0/power_supply/ups
        E: SUBSYSTEM=power_supply
        A: type=UPS\\n
        A: present=1\\n
        A: status=Discharging\\n
        A: capacity=70\\n


        """
        let tree = try FixtureTree(umockdev: ups)
        defer { tree.remove() }
        let s = tree.snapshot()
        #expect(s.power.external == false)
        #expect(s.power.reason.contains("UPS ups is discharging"))
        #expect(s.battery.present == false)   // a UPS is not the machine's own battery
    }

    @Test("UPower reporting a UPS discharging that sysfs does not show (USB HID) makes power.external false")
    func upowerUPSDischarging() {
        let up = UPowerReading(available: true, daemonVersion: "1.90", onBattery: true, percentage: nil, state: nil, warningLevel: nil,
                               devices: [UPowerDevice(kind: "ups", nativePath: "/sys/devices/pci0000:00/usb1/1-1/usbmisc/hiddev0",
                                                      percentage: 80, state: "discharging", online: false, isPowerSupply: true)],
                               reason: "test")
        let dbus = DBusReadings(upower: up, nmMetered: nil, nmReason: "", powerProfile: nil, powerProfileSource: "", presence: .notConsulted("test"))
        let s = ConditionSnapshot.assemble(supplies: [], zones: [], links: [], routesReadable: true, cpuPressure: nil, dbus: dbus,
                                           options: ProbeOptions(root: SysfsRoot(sysfs: "/nonexistent"), useDBus: false))
        #expect(s.power.external == false)
        #expect(s.power.reason.contains("UPower: UPS /sys/devices/pci0000:00/usb1/1-1/usbmisc/hiddev0 is discharging, OnBattery=true"))
        // The machine's own battery discharging is left to sysfs, which already says so.
        var laptop = up
        laptop.devices = [UPowerDevice(kind: "battery", nativePath: "BAT0", percentage: 50, state: "charging", online: false, isPowerSupply: true)]
        let t = ConditionSnapshot.assemble(supplies: [], zones: [], links: [], routesReadable: true, cpuPressure: nil,
                                           dbus: DBusReadings(upower: laptop, nmMetered: nil, nmReason: "", powerProfile: nil, powerProfileSource: "", presence: .notConsulted("test")),
                                           options: ProbeOptions(root: SysfsRoot(sysfs: "/nonexistent"), useDBus: false))
        #expect(t.power.external == true)
    }

    @Test("a FIFO where an attribute should be is refused at once, never read (it would block for ever)")
    func fifoAttributeIsRefused() throws {
        let tree = try FixtureTree(umockdev: Self.charger(online: "1") + Self.battery(["status": "Charging", "capacity": "50"]))
        defer { tree.remove() }
        let capacity = tree.url("class/power_supply/BAT0/capacity").path
        unlink(capacity)
        #expect(mkfifo(capacity, 0o600) == 0)
        let s = tree.snapshot()   // would block for ever in open(2) without O_NONBLOCK
        let b = try #require(s.supplies.first { $0.name == "BAT0" })
        #expect(b.capacity == nil)
        #expect(b.notes.contains { $0.contains("capacity") && $0.contains("a FIFO, not a regular file") })
        guard case .failure(let e) = FileIO.read(capacity) else { Issue.record("a FIFO was read"); return }
        #expect(e.description.contains(capacity))
    }
}
