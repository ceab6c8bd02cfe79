import ArgumentParser
import BgtaskBus
import BgtaskProtocol
import BgtaskConfig
import BgtaskJSON
import BgtaskProbes
import BgtaskRun
#if canImport(Glibc)
@preconcurrency import Glibc
#endif

extension Bgtask {
    struct Doctor: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "doctor",
            abstract: "Check what bgtask needs and reads, one line each, with what to do; exit 1 when something is wrong.",
            discussion: """
            The policy layers, the state directory, bgtaskd, the systemd user manager, the CPU cap mechanism, and \
            every source of readings: power supplies, thermal zones, UPower, NetworkManager, power-profiles-daemon, \
            logind and the desktop's idle monitor. A source that is absent is said plainly (a VM has no battery); only \
            what stops bgtask from working is a problem.
            """)

        @Flag(name: .long, help: "Print the checks as JSON: [{check, status (ok, note, problem), detail}].") var json = false

        enum Status: String { case ok, note, problem }
        struct Line { var check: String; var status: Status; var detail: String }

        func run() throws {
            var lines: [Line] = []
            func add(_ check: String, _ status: Status, _ detail: String) { lines.append(Line(check: check, status: status, detail: detail)) }

            // The policy, every layer.
            let sources = PolicyLayers.sources(extra: [])
            let (policy, errors) = PolicyLayers.load(sources)
            if errors.isEmpty {
                add("policy", .ok, "\(sources.count) layer(s), \(policy.rules.count) rules: " + sources.map(\.name).joined(separator: ", "))
            } else {
                add("policy", .problem, PolicyLayers.leftOutWarning + ": " + errors.map(\.description).joined(separator: "; ") + " — fix it (bgtask policy check)")
            }

            // The state directory: the user's own, not a link, writable.
            do {
                let dir = try StatePaths.preparedStateDirectory()
                if access(dir, W_OK) == 0 { add("state directory", .ok, dir) }
                else { add("state directory", .problem, "\(dir) is not writable: \(String(cString: strerror(errno)))") }
            } catch {
                add("state directory", .problem, "\(error)")
            }

            // bgtaskd on the session bus (what to do when it is not reachable depends on the user manager, below).
            var bgtaskdUnreachable: String?
            let bgtaskdLine = lines.count
            switch Result(catching: { () throws(BusError) -> [BusValue] in try BusConnection().call(.getStatus, [], timeoutMs: 3000) }) {
            case .success(let reply):
                if case .dict(let d)? = reply.first {
                    switch Result(catching: { () throws(ProtocolError) in try DaemonStatus(variant: d) }) {
                    case .success(let s):
                        if let w = s.policyWarning { add("bgtaskd", .problem, "running (pid \(s.pid)) with a warning: \(w)") }
                        else { add("bgtaskd", .ok, "running (pid \(s.pid), version \(s.version)), \(s.pending) pending, \(s.running) running") }
                    case .failure(let e):
                        add("bgtaskd", .problem, "running, but its status does not read as this bgtask's: \(e) (another version?)")
                    }
                }
            case .failure(let e):
                bgtaskdUnreachable = e.message
            }

            // The systemd user manager: tasks as transient units in background.slice.
            let runtime = getenv("XDG_RUNTIME_DIR").map { String(cString: $0) } ?? ""
            let userManager = !runtime.isEmpty && access(runtime + "/systemd/private", F_OK) == 0
            if let why = bgtaskdUnreachable {
                // What to do about it where it can be done: systemctl only where a user manager runs.
                let start = userManager ? "systemctl --user enable --now bgtaskd"
                    : "start it with `bgtaskd &` (no systemd user manager runs for this session)"
                lines.insert(Line(check: "bgtaskd", status: .note, detail: "not reachable (\(why)): `bgtask submit` needs it — \(start)"),
                             at: bgtaskdLine)
            }
            if userManager {
                add("user manager", .ok, "systemd --user runs: bgtaskd's tasks are transient units in background.slice")
            } else {
                add("user manager", .note, "no systemd user manager for this session: bgtaskd runs tasks as its own children")
            }

            // The CPU cap.
            let cap = CapMechanism.availableHere()
            add("CPU cap", cap.mechanism == "signals" ? .note : .ok, "\(cap.mechanism): \(cap.detail)")

            // The readings, with where each came from.
            let snap = Prober(options: ProbeOptionsGroup.probeOptions(sysfsRoot: nil, procRoot: nil, noDbus: false)
                .applying(policy.settings)).snapshot()
            add("power", snap.power.external == nil ? .note : .ok, snap.power.reason)
            add("battery", .ok, snap.battery.reason)
            add("thermal", snap.zones.isEmpty ? .note : .ok, snap.zones.isEmpty ? "no thermal zones: thermal.state is unknown" : snap.thermal.reason)
            add("network", .ok, snap.network.reason)
            add("UPower", snap.upower.available ? .ok : .note, snap.upower.reason)
            add("NetworkManager", snap.network.metered == nil ? .note : .ok, "metered from \(snap.network.meteredSource)")
            add("power-profiles-daemon", snap.system.powerProfile == nil ? .note : .ok, snap.system.powerProfileSource)
            add("presence", snap.user.idle == nil ? .note : .ok,
                snap.user.reason + (snap.user.idle == nil ? ": processing work is not held for the person at the machine" : ""))
            add("storage", snap.storage.low == true ? .problem : .ok, snap.storage.reason)

            if json {
                print(JSONValue.array(lines.map { .object([("check", .string($0.check)), ("status", .string($0.status.rawValue)),
                                                           ("detail", .string($0.detail))]) }).rendered)
            } else {
                let width = lines.map(\.check.count).max() ?? 0
                for l in lines {
                    let mark = l.status == .ok ? "ok     " : (l.status == .note ? "note   " : "PROBLEM")
                    out("\(mark) \(l.check.padding(toLength: width, withPad: " ", startingAt: 0))  \(l.detail)")
                }
            }
            if lines.contains(where: { $0.status == .problem }) { throw ExitCode(1) }
        }
    }
}
