#if canImport(Glibc)
@preconcurrency import Glibc
import BgtaskFiles
#endif

/// What the whole machine draws now, from the best source this user may read, named, with how far to trust
/// it — or why there is none. Never a made-up number: no source, no value.
public struct PowerDraw: Sendable, Equatable {
    /// Watts now (battery sources), or nil for a counter.
    public var watts: Double?
    /// A cumulative energy counter in joules (RAPL), compared between two readings.
    public var counterJoules: Double?
    /// Where the counter wraps (RAPL's `max_energy_range_uj`), in joules.
    public var counterRangeJoules: Double?
    /// What was read: `RAPL package energy (intel-rapl:0)`, `BAT0 power_now`, `BAT0 current_now × voltage_now`.
    public var source: String
    /// How far to trust it.
    public var uncertainty: String
}

public enum SystemPower {
    /// RAPL's package domains (`intel-rapl:N`, not their `intel-rapl:N:M` subdomains, which they include),
    /// then a discharging system battery's `power_now`, or `current_now × voltage_now`.
    /// `why` says what was found wanting, for the output that shows "unknown".
    public static func read(root: SysfsRoot, supplies: [PowerSupply]) -> (draw: PowerDraw?, why: String) {
        var notes: [String] = []
        let rapl = readRAPL(root: root)
        if let r = rapl.draw { return (r, "") }
        if let n = rapl.why { notes.append(n) }
        if let b = batteryDraw(supplies) { return (b, "") }
        let batteries = supplies.filter { $0.isSystemBattery && $0.present != false }
        if batteries.isEmpty {
            notes.append("no system battery")
        } else if !batteries.contains(where: { $0.status?.lowercased() == "discharging" }) {
            notes.append("on external power, where the battery does not measure the machine's draw")
        } else {
            notes.append("the discharging battery reports neither power_now nor current_now and voltage_now")
        }
        return (nil, notes.joined(separator: "; "))
    }

    static func batteryDraw(_ supplies: [PowerSupply]) -> PowerDraw? {
        // While discharging the battery's outflow is the machine's draw; charging or full, it is not.
        let discharging = supplies.filter { $0.isSystemBattery && $0.present != false && $0.status?.lowercased() == "discharging" }
        var watts = 0.0, names: [String] = [], how: [String] = []
        for b in discharging {
            if let p = b.powerW, p > 0, p < 1000 {
                watts += p; names.append(b.name); how.append("power_now")
            } else if let a = b.currentA, let v = b.voltageV, a > 0, v > 0, a * v < 1000 {
                watts += a * v; names.append(b.name); how.append("current_now × voltage_now")
            }
        }
        guard !names.isEmpty else { return nil }
        let what = zip(names, how).map { "\($0) \($1)" }.joined(separator: " + ")
        return PowerDraw(watts: watts, source: what,
                         uncertainty: "±15%: the battery's own gauge, averaged by its firmware over seconds")
    }

    /// RAPL's package counters, summed; nil with the reason when there are none or they may not be read.
    static func readRAPL(root: SysfsRoot) -> (draw: PowerDraw?, why: String?) {
        let reader = DeviceReader(root: root)
        let packages = reader.devicePaths(subsystem: "powercap").filter { p in
            let name = p.split(separator: "/").last.map(String.init) ?? ""
            return name.hasPrefix("intel-rapl:") && name.split(separator: ":").count == 2
        }
        guard !packages.isEmpty else { return (nil, nil) }
        var joules = 0.0, range = 0.0, names: [String] = []
        for p in packages.sorted() {
            let name = p.split(separator: "/").last.map(String.init) ?? p
            switch FileIO.attribute(p + "/energy_uj") {
            case .text(let t):
                guard let uj = Double(t), uj >= 0 else { continue }
                joules += uj / 1e6
                if case .text(let r) = FileIO.attribute(p + "/max_energy_range_uj"), let v = Double(r), v > 0 { range += v / 1e6 }
                names.append(name)
            case .unreadable(let e) where e.errno == EACCES || e.errno == EPERM:
                return (nil, "RAPL (\(p)/energy_uj) is readable only by root since Linux 5.10; a udev rule can let a group read it: "
                        + "SUBSYSTEM==\"powercap\", ACTION==\"add\", RUN+=\"/bin/chgrp power %S%p/energy_uj\", RUN+=\"/bin/chmod g+r %S%p/energy_uj\"")
            default:
                continue
            }
        }
        guard !names.isEmpty else { return (nil, "RAPL has no readable energy_uj") }
        return (PowerDraw(watts: nil, counterJoules: joules, counterRangeJoules: range > 0 ? range : nil,
                          source: "RAPL package energy (\(names.joined(separator: ", ")))",
                          uncertainty: "±5% for the CPU package; the rest of the machine (screen, disks) is not in it"), nil)
    }

    /// CPU time spent by the whole machine (busy, not idle or iowait), in seconds: the denominator of a task's
    /// share. nil when /proc/stat cannot be read.
    public static func busyCPUSeconds(root: SysfsRoot) -> Double? {
        guard case .success(let text) = FileIO.read(root.proc + "/stat", limit: 16 * 1024),
              let line = text.split(separator: "\n").first(where: { $0.hasPrefix("cpu ") }) else { return nil }
        let f = line.split(separator: " ").dropFirst().compactMap { Double($0) }
        guard f.count >= 8 else { return nil }
        // user nice system idle iowait irq softirq steal
        let busy = f[0] + f[1] + f[2] + f[5] + f[6] + f[7]
        let hz = Double(sysconf(Int32(_SC_CLK_TCK)))
        return busy / (hz > 0 ? hz : 100)
    }
}
