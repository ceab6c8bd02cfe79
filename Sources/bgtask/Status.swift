import ArgumentParser
import BgtaskProbes

extension Bgtask {
    struct Status: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show power, battery, thermal, network and power-profile state, and where each came from.")

        @OptionGroup var probe: ProbeOptionsGroup

        @Flag(name: .long, help: "Print JSON: nested objects whose dotted paths are the condition names policies use.")
        var json = false

        @Flag(name: .shortAndLong, help: "Also say why each reading is what it is.")
        var verbose = false

        func run() throws {
            let snap = Prober(options: probe.probeOptions).snapshot()
            if json {
                print(snap.json.rendered)
                return
            }
            print(snap.summary)
            if verbose {
                print("  power:   \(snap.power.reason)")
                print("  battery: \(snap.battery.reason)")
                print("  thermal: \(snap.thermal.reason)")
                print("  network: \(snap.network.reason); metered from \(snap.network.meteredSource)")
                print("  profile: \(snap.system.powerProfileSource)")
                print("  upower:  \(snap.upower.reason)")
                if let d = snap.disagreement { print("  note:    \(d)") }
                for s in snap.supplies {
                    for n in s.notes { print("  \(s.name): \(n)") }
                }
                for z in snap.zones {
                    for n in z.notes + z.ignoredTrips { print("  \(z.name): \(n)") }
                }
            }
        }
    }
}
