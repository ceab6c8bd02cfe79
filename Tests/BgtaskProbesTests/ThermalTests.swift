import Foundation
import Testing
@testable import BgtaskProbes
import BgtaskTestSupport

struct ThermalCase: CustomTestStringConvertible, Sendable {
    var file: String
    var state: ThermalState?
    var celsius: Double?
    var zone: String?
    var usableZones: Int
    var ignoredTrips: Int
    var decidingSerious: Double?
    var testDescription: String { file }
}

let thermalCases: [ThermalCase] = [
    // SEN1: passive 85.05 → serious; the iwlwifi passive trips at -32768 °C are ignored.
    .init(file: "thermald-231-skylake-trips", state: .nominal, celsius: 52, zone: "pch_skylake",
          usableZones: 3, ignoredTrips: 3, decidingSerious: nil),
    // INT3400 (DPTF) has no temperature: listed, never deciding.
    .init(file: "thermald-250-cannonlake-zones", state: .nominal, celsius: 61, zone: "pch_cannonlake",
          usableZones: 6, ignoredTrips: 0, decidingSerious: nil),
    // Only an active (fan) trip: fallback thresholds, and 74 °C is past the 70 °C fair line.
    .init(file: "rpi4-active-trip-fan", state: .fair, celsius: 74, zone: "cpu-thermal",
          usableZones: 1, ignoredTrips: 0, decidingSerious: 85),
    .init(file: "lenovo-z500-acpitz", state: .nominal, celsius: 54, zone: "acpitz",
          usableZones: 1, ignoredTrips: 0, decidingSerious: 127),
    // acpitz at -44 °C is not a temperature; bcm2835 has no trips.
    .init(file: "procfs-bcm2835-and-negative-acpitz", state: .nominal, celsius: 49.9, zone: "bcm2835_thermal",
          usableZones: 1, ignoredTrips: 0, decidingSerious: 85),
    // A critical trip at 20.8 °C on a desktop is firmware junk.
    .init(file: "lm-sensors-desktop-acpitz-absurd-crit", state: .nominal, celsius: 16.8, zone: "acpitz",
          usableZones: 1, ignoredTrips: 1, decidingSerious: 85),
]

@Suite("Thermal zones of real recordings")
struct ThermalFixtureTests {
    @Test("each recording reads as the machine was", arguments: thermalCases)
    func recordingReadsAsRecorded(_ c: ThermalCase) throws {
        let tree = try FixtureTree.load("thermal/\(c.file).umockdev")
        defer { tree.remove() }
        let s = tree.snapshot()
        #expect(s.thermal.state == c.state, "\(s.thermal.reason)")
        #expect(s.thermal.celsius == c.celsius)
        #expect(s.thermal.zone == c.zone)
        #expect(s.zones.filter(\.isUsable).count == c.usableZones)
        #expect(s.zones.flatMap(\.ignoredTrips).count == c.ignoredTrips)
        if let serious = c.decidingSerious {
            #expect(s.zones.contains { $0.isUsable && $0.thresholds().serious == serious })
        }
    }

    @Test("SEN1's own trips decide: serious at its passive trip, critical at its critical trip")
    func zoneTripsDecideTheState() throws {
        let tree = try FixtureTree.load("thermal/thermald-231-skylake-trips.umockdev")
        defer { tree.remove() }
        let expectations: [(String, ThermalState)] = [
            ("74000", .nominal), ("76000", .fair), ("85050", .serious), ("96050", .serious), ("126050", .critical),
        ]
        for (temp, state) in expectations {
            try tree.set("class/thermal/thermal_zone5/temp", temp + "\n")
            let s = tree.snapshot()
            #expect(s.thermal.state == state, "at \(temp): \(s.thermal.reason)")
        }
    }

    @Test("hysteresis: a reading wobbling just under a boundary keeps the state until it falls by the trip's hysteresis")
    func hysteresisHoldsStateNearBoundary() throws {
        let tree = try FixtureTree.load("thermal/thermald-231-skylake-trips.umockdev")
        defer { tree.remove() }
        let zone = { (temp: String) -> ThermalZone in
            try! tree.set("class/thermal/thermal_zone5/temp", temp + "\n")
            return DeviceReader(root: tree.options().root).thermalZones().first { $0.type == "SEN1" }!
        }
        // Serious at 85.05 °C with a 2 °C trip hysteresis.
        #expect(zone("85100").state(previous: .fair) == .serious)
        #expect(zone("84000").state(previous: .serious) == .serious)     // within 2 °C: holds
        #expect(zone("83100").state(previous: .serious) == .serious)
        #expect(zone("83000").state(previous: .serious) == .fair)        // fell by more than 2 °C
        #expect(zone("84000").state(previous: nil) == .fair)             // no history: no hold
        // Rising is never delayed.
        #expect(zone("85050").state(previous: .nominal) == .serious)
    }

    @Test("the snapshot threads per-zone state through, so wobbling does not flap")
    func snapshotSequenceDoesNotFlap() throws {
        let tree = try FixtureTree.load("thermal/rpi4-active-trip-fan.umockdev")
        defer { tree.remove() }
        var previous: [String: ThermalState] = [:]
        var states: [ThermalState?] = []
        for temp in ["69000", "70100", "69500", "68200", "70050", "66900"] {
            try tree.set("class/thermal/thermal_zone0/temp", temp + "\n")
            let s = Prober(options: tree.options()).snapshot(previousZoneStates: previous)
            previous = s.zoneStates
            states.append(s.thermal.state)
        }
        // The fan trip carries 10 °C hysteresis, which also holds the fair state down to 60 °C.
        #expect(states == [.nominal, .fair, .fair, .fair, .fair, .fair])
    }
}

@Suite("Network links and routes of real recordings")
struct NetworkFixtureTests {
    @Test("a wwan link with operstate unknown and carrier 1 is up, cellular and metered")
    func wwanDefaultRouteIsCellularAndMetered() throws {
        let tree = try FixtureTree.load("network/qmi-four-links.umockdev")
        defer { tree.remove() }
        let s = tree.snapshot(proc: "network/qmi-wwan-default.proc")
        #expect(s.network.online == true)
        #expect(s.network.kind == "cellular")
        #expect(s.network.interface == "wwp0s20f0u2i1")
        #expect(s.network.metered == true)
        let byName = Dictionary(uniqueKeysWithValues: s.links.map { ($0.name, $0) })
        #expect(byName["wlp9s0"]?.kind == .wifi)
        #expect(byName["wlp9s0"]?.isUp == false)          // dormant: associated, not authenticated
        #expect(byName["enp0s31f6"]?.isUp == false)
        #expect(byName["lo"]?.kind == .loopback)
    }

    @Test("the lowest-metric default route picks the link; ethernet is not assumed metered")
    func lowestMetricRouteWins() throws {
        let tree = try FixtureTree.load("network/qmi-four-links.umockdev")
        defer { tree.remove() }
        let s = tree.snapshot(proc: "network/qmi-usb-eth-and-wwan.proc")
        #expect(s.network.interface == "enp0s13f0u2u4")
        #expect(s.network.kind == "ethernet")
        #expect(s.network.metered == nil)
    }

    @Test("a default route on a dormant wifi link is not online")
    func dormantLinkIsOffline() throws {
        let tree = try FixtureTree.load("network/qmi-four-links.umockdev")
        defer { tree.remove() }
        let s = tree.snapshot(proc: "network/qmi-dormant-wifi-only.proc")
        #expect(s.network.online == false)
        #expect(s.network.reason.contains("no default route"))
    }

    @Test("a modem whose operstate stays unknown still counts as up")
    func unknownOperstateWithCarrierIsUp() throws {
        let tree = try FixtureTree.load("network/i3blocks-wwan-operstate-unknown.umockdev")
        defer { tree.remove() }
        let s = tree.snapshot(proc: "network/i3blocks-wwan-default.proc")
        #expect(s.network.online == true)
        #expect(s.network.kind == "cellular")
    }

    @Test("NetworkManager's Metered wins over the link kind; guesses count", arguments: [
        (UInt32(0), Optional<Bool>.none), (1, true), (2, false), (3, true), (4, false),
    ])
    func networkManagerMeteredMeaning(value: UInt32, expected: Bool?) throws {
        let tree = try FixtureTree.load("network/qmi-four-links.umockdev")
        defer { tree.remove() }
        let r = DeviceReader(root: tree.options(proc: FixtureTree.fixtures.appendingPathComponent("network/qmi-usb-eth-and-wwan.proc").path).root)
        let (routes, readable) = r.defaultRoutes()
        let reading = NetworkAnalysis.analyze(r.networkLinks(routes: routes), nmMetered: value, routesReadable: readable)
        #expect(reading.metered == expected)
        if expected != nil { #expect(reading.meteredSource.contains("NetworkManager")) }
    }

    @Test("IPv6 default routes count; reject routes and lo do not")
    func ipv6DefaultRoutes() {
        let v6 = """
        00000000000000000000000000000000 00 00000000000000000000000000000000 00 fe800000000000000000000000000001 00000400 00000001 00000000 00000003     eth0
        00000000000000000000000000000000 00 00000000000000000000000000000000 00 00000000000000000000000000000000 ffffffff 00000001 00000000 00200200       lo
        fe800000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0
        """
        let r = Routes.parse(ipv4: nil, ipv6: v6)
        #expect(r == [DefaultRoute(interface: "eth0", metric: 0x400, family: "ipv6")])
    }
}
