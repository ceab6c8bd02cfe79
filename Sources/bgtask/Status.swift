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
            StatusReport(options: probe.probeOptions, json: json, verbose: verbose).print()
        }

        /// The plainest forms — `status` with any of `--json`, `--verbose`/`-v`, `--no-dbus` — read
        /// without the argument parser: status bars run them every few seconds, and the parser's reflection of the
        /// command's arguments was a fifth of the run (docs/benchmarks.md, "What the numbers rest on"). Anything else
        /// returns nil and is parsed as usual. `status --json` and `status --json --sysfs-root DIR` (parsed) are
        /// checked to print the same in the integration tests.
        static func plain(_ args: ArraySlice<String>) -> StatusReport? {
            // Flags only, in any order (repeats included, as the parser takes them); anything else is parsed.
            let known: Set<String> = ["--json", "--verbose", "-v", "--no-dbus"]
            guard args.allSatisfy(known.contains) else { return nil }
            return StatusReport(options: ProbeOptionsGroup.probeOptions(sysfsRoot: nil, procRoot: nil, noDbus: args.contains("--no-dbus")),
                                json: args.contains("--json"), verbose: args.contains("--verbose") || args.contains("-v"))
        }
    }
}

/// What `bgtask status` prints, from plain values (the parsed command and `Status.plain` both end here).
struct StatusReport {
    var options: ProbeOptions
    var json: Bool
    var verbose: Bool

    func print() {
        State.recover(probe: options, audit: nil, quiet: json)
        let snap = Prober(options: options).snapshot()
        if json {
            Swift.print(snap.json.rendered)
            return
        }
        out(snap.summary)
        if verbose {
            out("  power:   \(snap.power.reason)")
            out("  battery: \(snap.battery.reason)")
            out("  thermal: \(snap.thermal.reason)")
            out("  network: \(snap.network.reason); metered from \(snap.network.meteredSource)")
            out("  profile: \(snap.system.powerProfileSource)")
            out("  user:    \(snap.user.reason)")
            out("  storage: \(snap.storage.reason)")
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
