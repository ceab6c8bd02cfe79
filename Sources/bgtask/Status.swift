import ArgumentParser
import BgtaskProbes
import BgtaskConfig

extension Bgtask {
    struct Status: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "status", 
            abstract: "Show power, battery, thermal, network and power-profile state, and where each came from.")

        @OptionGroup var probe: ProbeOptionsGroup

        @Flag(name: .long, help: "Print JSON: nested objects whose dotted paths are the condition names policies use.")
        var json = false

        @Flag(name: .shortAndLong, help: "Also say why each reading is what it is.")
        var verbose = false

        func run() throws {
            State.recover(probe: probe.probeOptions, audit: nil, quiet: json)
            let snap = Prober(options: probe.probeOptions).snapshot()
            if json {
                print(snap.json.rendered)
                return
            }
            out(snap.summary)
            if verbose {
                out("  power:   \(snap.power.reason)")
                out("  battery: \(snap.battery.reason)")
                out("  thermal: \(snap.thermal.reason)")
                out("  network: \(snap.network.reason); metered from \(snap.network.meteredSource)")
                out("  profile: \(snap.system.powerProfileSource)")
                out("  upower:  \(snap.upower.reason)")
                if let d = snap.disagreement { out("  note:    \(d)") }
                for s in snap.supplies {
                    for n in s.notes { out("  \(s.name): \(n)") }
                }
                for z in snap.zones {
                    for n in z.notes + z.ignoredTrips { out("  \(z.name): \(n)") }
                }
            }
        }
    }
}
