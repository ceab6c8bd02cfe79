import Foundation
import Testing
@testable import BgtaskProbes
import BgtaskTestSupport

/// The machine's draw for per-task energy: the best readable source, named, or none with the reason.
@Suite("system power: RAPL, a discharging battery, or unknown with why")
struct SystemPowerTests {
    static func battery(status: String, power: String? = "10000000", current: String? = nil, voltage: String? = nil) -> String {
        var s = """
        P: /devices/LNXSYSTM:00/PNP0C0A:00/power_supply/BAT0
        E: SUBSYSTEM=power_supply
        A: type=Battery\\n
        A: present=1\\n
        A: status=\(status)\\n
        A: energy_full=50000000\\n
        A: energy_now=25000000\\n

        """
        if let p = power { s += "A: power_now=\(p)\\n\n" }
        if let c = current { s += "A: current_now=\(c)\\n\n" }
        if let v = voltage { s += "A: voltage_now=\(v)\\n\n" }
        return s
    }

    static let rapl = """
    P: /devices/virtual/powercap/intel-rapl/intel-rapl:0
    E: SUBSYSTEM=powercap
    A: name=package-0\\n
    A: energy_uj=123456789\\n
    A: max_energy_range_uj=262143328850\\n

    P: /devices/virtual/powercap/intel-rapl/intel-rapl:0/intel-rapl:0:0
    E: SUBSYSTEM=powercap
    A: name=core\\n
    A: energy_uj=999\\n

    """

    func read(_ text: String) throws -> (PowerDraw?, String) {
        let tree = try FixtureTree(umockdev: text)
        defer { tree.remove() }
        let root = SysfsRoot(sysfs: tree.root.path, proc: "/nonexistent")
        return SystemPower.read(root: root, supplies: DeviceReader(root: root).powerSupplies())
    }

    @Test("a discharging battery's power_now is the machine's draw, named")
    func batteryPowerNow() throws {
        let (d, _) = try read(Self.battery(status: "Discharging"))
        #expect(d?.watts == 10 && d?.source == "BAT0 power_now")
    }

    @Test("without power_now: current_now × voltage_now (2 A at 11.4 V is 22.8 W)")
    func currentTimesVoltage() throws {
        let (d, _) = try read(Self.battery(status: "Discharging", power: nil, current: "2000000", voltage: "11400000"))
        let w = try #require(d?.watts)
        #expect(abs(w - 22.8) < 1e-9 && d?.source == "BAT0 current_now × voltage_now")
    }

    @Test("charging or full, the battery does not measure the draw: unknown, and says why")
    func onExternalPower() throws {
        for status in ["Charging", "Full", "Not charging"] {
            let (d, why) = try read(Self.battery(status: status))
            #expect(d == nil && why.contains("on external power"), "\(status): \(why)")
        }
        let (none, why) = try read("")
        #expect(none == nil && why.contains("no system battery"))
    }

    @Test("RAPL's package counters come first, subdomains not counted twice, with the counter's wrap")
    func raplFirst() throws {
        let (d, _) = try read(Self.rapl + Self.battery(status: "Discharging"))
        #expect(d?.counterJoules == 123.456789 && d?.counterRangeJoules == 262143.32885, "\(String(describing: d))")
        #expect(d?.source == "RAPL package energy (intel-rapl:0)" && d?.watts == nil)
    }

    @Test("the machine's busy CPU seconds come from /proc/stat's cpu line (idle and iowait left out)")
    func busyFromProcStat() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("bgtask-proc-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        try "cpu  100 20 30 5000 70 4 6 0 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n".write(to: dir.appendingPathComponent("stat"), atomically: true, encoding: .utf8)
        let hz = Double(sysconf(Int32(_SC_CLK_TCK)))
        #expect(SystemPower.busyCPUSeconds(root: SysfsRoot(sysfs: "/nonexistent", proc: dir.path)) == 160 / hz)
    }
}
