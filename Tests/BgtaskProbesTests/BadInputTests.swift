import BgtaskJSON
import Foundation
import Testing
@testable import BgtaskProbes
import BgtaskTestSupport
import BgtaskFiles

@Suite("Odd sysfs values never crash a probe")
struct BadInputTests {
    /// A battery and a zone with every kind of junk real firmware has been seen to produce.
    static let odd = """
    P: /devices/LNXSYSTM:00/LNXSYBUS:00/PNP0C0A:00/power_supply/BAT0
    E: SUBSYSTEM=power_supply
    E: POWER_SUPPLY_NAME=BAT0
    A: type=Battery\\n
    A: status=Discharging\\n
    A: present=1\\n
    A: capacity=nan\\n
    A: energy_now=-5000\\n
    A: power_now=abc\\n
    A: voltage_now=-1\\n

    P: /devices/LNXSYSTM:00/LNXSYBUS:00/ACPI0003:00/power_supply/AC
    E: SUBSYSTEM=power_supply
    A: type=Mains\\n
    A: online=7\\n

    P: /devices/virtual/thermal/thermal_zone0
    E: SUBSYSTEM=thermal
    A: type=INT3400\\n
    A: temp=garbage\\n
    A: trip_point_0_type=critical\\n
    A: trip_point_0_temp=-273250\\n

    P: /devices/virtual/thermal/thermal_zone1
    E: SUBSYSTEM=thermal
    A: type=acpitz\\n
    A: temp=45000\\n
    A: trip_point_0_type=critical\\n
    A: trip_point_0_temp=0\\n
    A: trip_point_1_type=passive\\n
    A: trip_point_1_temp=NaN\\n
    A: trip_point_2_type=hot\\n
    A: trip_point_2_temp=90000\\n
    """

    @Test("NaN, negative, garbage, missing and unreadable values become null with a reason")
    func oddBatteryValuesBecomeNull() throws {
        let tree = try FixtureTree(umockdev: Self.odd)
        defer { tree.remove() }
        // A directory where a file should be: read() fails with EISDIR, like an EIO from a flaky gauge.
        try FileManager.default.createDirectory(at: tree.url("class/power_supply/BAT0/energy_full"), withIntermediateDirectories: true)
        let s = tree.snapshot()
        let bat = try #require(s.supplies.first { $0.name == "BAT0" })
        #expect(bat.capacity == nil)
        #expect(bat.energyNowWh == nil)
        #expect(bat.energyFullWh == nil)
        #expect(bat.powerW == nil)
        #expect(bat.notes.contains { $0.contains("capacity: 'nan'") })
        #expect(bat.notes.contains { $0.contains("energy_now: -5000 is negative") })
        #expect(bat.notes.contains { $0.contains("power_now: 'abc' is not a number") })
        #expect(bat.notes.contains { $0.contains("energy_full") && $0.contains("EISDIR") })
        #expect(s.battery.percent == nil)
        #expect(s.battery.warning == nil)          // unknown percent: no made-up warning
        #expect(s.battery.timeToEmptySeconds == nil)
        #expect(s.power.external == false)         // still discharging: that much is known
        let ac = try #require(s.supplies.first { $0.name == "AC" })
        #expect(ac.online == nil)
        #expect(ac.notes.contains { $0.contains("online: '7'") })
        #expect(s.json.at(path: "battery.percent") == .null)
    }

    @Test("a USB PD charger in its programmable mode (online = 2, the kernel's POWER_SUPPLY_ONLINE_PROGRAMMABLE) is online")
    func programmableOnlineIsOnline() throws {
        let tree = try FixtureTree(umockdev: """
        P: /devices/pci0000:00/0000:00:14.0/usb1/1-1/power_supply/ucsi-source-psy-USBC000:001
        E: SUBSYSTEM=power_supply
        A: type=USB\\n
        A: usb_type=C [PD] PD_PPS\\n
        A: online=2\\n

        P: /devices/LNXSYSTM:00/LNXSYBUS:00/PNP0C0A:00/power_supply/BAT0
        E: SUBSYSTEM=power_supply
        A: type=Battery\\n
        A: status=Charging\\n
        A: present=1\\n
        A: capacity=60\\n
        """)
        defer { tree.remove() }
        let s = tree.snapshot()
        let usb = try #require(s.supplies.first { $0.name.hasPrefix("ucsi") })
        #expect(usb.online == true)
        #expect(usb.notes.isEmpty, "\(usb.notes)")
        #expect(s.power.external == true)
    }

    @Test("a zone without a temperature and absurd trips are set aside, with reasons")
    func absurdTripsAndTemperaturesAreIgnored() throws {
        let tree = try FixtureTree(umockdev: Self.odd)
        defer { tree.remove() }
        let s = tree.snapshot()
        let int3400 = try #require(s.zones.first { $0.type == "INT3400" })
        #expect(!int3400.isUsable)
        #expect(int3400.notes.contains { $0.contains("not a number") })
        #expect(int3400.ignoredTrips.count == 1)
        let acpitz = try #require(s.zones.first { $0.type == "acpitz" })
        #expect(acpitz.trips.map(\.celsius) == [90])
        #expect(acpitz.ignoredTrips.count == 2)
        // Serious at the 90 °C hot trip; critical falls back above it.
        #expect(acpitz.thresholds().serious == 90)
        #expect(s.thermal.state == .nominal)
        #expect(s.thermal.zone == "acpitz")
    }

    @Test("a missing or unreadable file is an error naming the path and errno")
    func readErrorsCarryPathAndErrno() throws {
        let tree = try FixtureTree(umockdev: "")
        defer { tree.remove() }
        let missing = tree.url("nope").path
        #expect(FileIO.attribute(missing) == .missing)
        let result = FileIO.read(tree.root.path)   // a directory
        guard case .failure(let e) = result else { Issue.record("reading a directory succeeded"); return }
        #expect(e.path == tree.root.path)
        #expect(e.errnoName == "EISDIR")
        #expect(e.description.contains(tree.root.path))
    }

    @Test("a zone whose only temperature is zero or negative reports no state, not nominal")
    func noUsableZoneMeansUnknownState() throws {
        let tree = try FixtureTree.load("thermal/procfs-bcm2835-and-negative-acpitz.umockdev")
        defer { tree.remove() }
        try tree.set("class/thermal/thermal_zone0/temp", "0\n")
        let s = tree.snapshot()
        #expect(s.thermal.state == nil)
        #expect(s.thermal.reason.contains("no thermal zone has a usable temperature"))
    }
}

@Suite("Change detection for watch")
struct DifferTests {
    @Test("the first diff reports everything; unchanged values are not reported again")
    func firstDiffReportsAllThenOnlyChanges() {
        var d = ConditionDiffer()
        let a: [(String, JSONValue)] = [("power.external", .bool(true)), ("battery.percent", .number(50))]
        #expect(d.changes(to: a).count == 2)
        #expect(d.changes(to: a).isEmpty)
        let b: [(String, JSONValue)] = [("power.external", .bool(false)), ("battery.percent", .number(50))]
        #expect(d.changes(to: b) == [ConditionChange(path: "power.external", old: .bool(true), new: .bool(false))])
    }

    @Test("gauges move inside a dead band silently, and drift is reported once it adds up")
    func deadBandSuppressesJitterButNotDrift() {
        var d = ConditionDiffer()
        _ = d.changes(to: [("thermal.celsius", .number(50.0))])
        #expect(d.changes(to: [("thermal.celsius", .number(50.6))]).isEmpty)
        #expect(d.changes(to: [("thermal.celsius", .number(50.9))]).isEmpty)
        #expect(d.changes(to: [("thermal.celsius", .number(51.0))]).count == 1)
        // A gauge becoming unknown is always news.
        #expect(d.changes(to: [("thermal.celsius", .null)]).count == 1)
    }

    @Test("storage.free_bytes is news once it moves 1 % of the filesystem, or with storage.low as the threshold is crossed")
    func freeBytesMoveByAPercentOrAcrossTheThreshold() {
        var d = ConditionDiffer()
        d.storageSize(100_000_000)
        func at(_ free: Double, low: Bool) -> [String] {
            d.changes(to: [("storage.free_bytes", .number(free)), ("storage.low", .bool(low))]).map(\.path)
        }
        #expect(at(50_000_000, low: false) == ["storage.free_bytes", "storage.low"])
        #expect(at(49_500_000, low: false).isEmpty)            // 0.5 %
        #expect(at(49_100_000, low: false).isEmpty)            // 0.9 % from what was said
        #expect(at(48_900_000, low: false) == ["storage.free_bytes"])
        #expect(at(48_800_000, low: true) == ["storage.free_bytes", "storage.low"])   // 0.1 %, but across
        #expect(at(48_900_000, low: false) == ["storage.free_bytes", "storage.low"])
        // An unknown size: every change is news, as before the size was known.
        d.storageSize(nil)
        #expect(at(48_899_999, low: false) == ["storage.free_bytes"])
    }
}

@Suite("JSON output")
struct JSONTests {
    @Test("strings are escaped, integers have no fraction, nulls are kept")
    func rendering() {
        let v = JSONValue.object([("a", .string("q\"\\\n\u{1}")), ("b", .number(42)), ("c", .number(4.5)), ("d", .null)])
        #expect(v.rendered == #"{"a":"q\"\\\n\u0001","b":42,"c":4.5,"d":null}"#)
    }

    @Test("the byte writer writes each number as the value renderer does: whole ones by their digits, signs, zero, the 1e15 bound, fractions, non-finite as null")
    func numbersWrittenAlike() {
        var values: [Double] = [0, -0.0, 1, -1, 9, 10, 42, -100, 1e14, 999_999_999_999_999, -999_999_999_999_999, 1e15, -1e15,
                                1.5, -2.25, 1_764_000_000.25, 1e300, .nan, .infinity, -.infinity, 0.1]
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<500 { values.append(Double(Int64.random(in: -2_000_000_000_000_000...2_000_000_000_000_000, using: &generator))) }
        for n in values {
            var out = JSONBytes()
            out.number(n)
            var text = ""
            JSONValue.number(n, into: &text)
            #expect(out.text == text, "\(n)")
        }
    }

    @Test("any string survives rendering and parsing: escapes amid runs of plain text, at either end, multi-byte letters")
    func stringsRoundTrip() throws {
        let pieces = ["", "plain", "\"", "\\", "\n", "\u{0}", "\u{1f}", "\t", "é", "日本", "🔋", " ", "/"]
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<500 {
            let s = (0..<Int.random(in: 0...6, using: &generator)).map { _ in pieces.randomElement(using: &generator)! }.joined()
            let text = JSONValue.string(s).rendered
            #expect(!text.utf8.contains(where: { $0 < 0x20 }), "no raw control byte in \(text.debugDescription)")
            #expect(try JSONValue.parse(text) == .string(s), "\(s.debugDescription) → \(text)")
        }
    }
}

@Suite("The watcher as an AsyncSequence")
struct WatcherStreamTests {
    @Test("updates(_:) yields the current state first, and ending the loop stops the watcher")
    func asyncStreamYieldsInitialState() async throws {
        let tree = try FixtureTree.load("laptop-node-exporter.umockdev")
        defer { tree.remove() }
        var first: ConditionUpdate?
        let ended = DispatchSemaphore(value: 0)
        for try await u in ConditionWatcher.updates(WatchOptions(probe: tree.options(), thermalIntervalMs: nil), finished: { ended.signal() }) {
            first = u
            break
        }
        // Leaving the loop ends the stream, which stops the watcher: its thread finishes.
        #expect(ended.wait(timeout: .now() + 5) == .success, "the watcher kept running after the loop ended")
        let u = try #require(first)
        #expect(u.initial)
        #expect(u.trigger == "start")
        #expect(u.snapshot.power.external == false)
        #expect(u.changes.contains { $0.path == "battery.percent" && $0.new == .number(81.2) })
    }
}
