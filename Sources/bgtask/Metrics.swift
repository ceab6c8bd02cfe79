import ArgumentParser
import BgtaskAudit
import BgtaskBus
import BgtaskProtocol
import BgtaskConfig
import BgtaskCore
import BgtaskJSON
import BgtaskPolicy
#if canImport(Glibc)
@preconcurrency import Glibc
#endif

extension Bgtask {
    struct Metrics: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "metrics",
            abstract: "Print Prometheus metrics: tasks by state, wait and run times, expiries by cause, energy.",
            discussion: """
            In the Prometheus text format that node_exporter's textfile collector reads (--output writes the file \
            atomically: into a temporary file beside it, then renamed). Queue sizes come from bgtaskd when it \
            runs (it is not started for this: bgtask_daemon_up is 0 then); the rest from the audit trail, over \
            the last --window. Exit status: 0; 73 when --output cannot be written.
            """)

        @Option(name: .long, help: ArgumentHelp("The runs counted: those that ended within this long.", valueName: "duration"),
                transform: DurationArgument.parse)
        var window: DurationArgument = DurationArgument(argument: "24h")!

        @Option(name: .long, help: ArgumentHelp("Write to this file atomically instead of stdout (a textfile collector's directory).", valueName: "file"),
                completion: .file(extensions: ["prom"]))
        var output: String?

        func run() throws {
            let text = Metrics.render(queue: Metrics.queue(), runs: Metrics.runs(since: wallClockNow() - window.seconds), window: window.text)
            guard let path = output else { print(text, terminator: ""); return }
            do { try Metrics.writeAtomically(text, to: path) } catch {
                err("\(error)", status: ExitStatus.cantCreate)
                throw ExitCode(ExitStatus.cantCreate)
            }
        }

        /// What one finished run contributes.
        struct Run {
            var waited: Double?
            var ran: Double?
            var result: String        // ok, failed, expired, gave_up
            var cause: String?        // what expired it: a rule id, budget, cancelled …
            var energyWh: Double?
        }

        /// bgtaskd's queue, if it runs now (a metrics scrape must not start it by D-Bus activation).
        static func queue() -> (pending: Int, running: Int)? {
            guard let bus = TaskIDCompletion.daemon(),
                  case .dict(let d)? = try? bus.call(.getStatus, [], timeoutMs: 2000).first, let s = try? DaemonStatus(variant: d) else { return nil }
            return (Int(s.pending), Int(s.running))
        }

        /// The runs that ended since `since`, from the audit trail (none when there is no trail yet).
        static func runs(since: Double) -> [Run] {
            guard let audit = (try? State.audit(write: false)) ?? nil, let entries = try? audit.entriesOfRuns(endedSince: since) else { return [] }
            var byRun: [String: [AuditEntry]] = [:]
            for e in entries { byRun[e.runID, default: []].append(e) }
            var out: [Run] = []
            for (_, es) in byRun {
                guard let end = es.last(where: { ["finished", "gave-up"].contains($0.event) }), end.time >= since else { continue }
                let first = es.first!, started = es.first { $0.event == "started" }
                var r = Run(result: "ok")
                r.waited = started.map { $0.time - first.time }
                r.ran = started.map { end.time - $0.time }
                if end.event == "gave-up" { r.result = "gave_up" }
                else if let expired = es.last(where: { $0.event == "expired" }) {
                    r.result = "expired"
                    r.cause = Metrics.cause(expired)
                } else if end.exitStatus != 0 { r.result = "failed" }
                r.energyWh = end.energyWh
                out.append(r)
            }
            return out
        }

        /// The rule that expired a run, or what else did (its budget, a cancel, the app, a debug command).
        static func cause(_ e: AuditEntry) -> String {
            if case .array(let rules)? = try? JSONValue.parse(e.rules), case .object(let first)? = rules.first,
               case .string(let id)? = first.first(where: { $0.0 == "id" })?.1 { return id }
            let d = e.detail.lowercased()
            for (word, cause) in [("budget", "budget"), ("cancel", "cancelled"), ("debug", "debug"), ("sleep", "sleep")] where d.contains(word) {
                return cause
            }
            return "other"
        }

        static let waitBuckets: [Double] = [1, 10, 60, 300, 900, 3600, 14_400, 43_200, 86_400]
        static let runBuckets: [Double] = [1, 10, 60, 300, 900, 3600, 14_400]

        static func render(queue: (pending: Int, running: Int)?, runs: [Run], window: String) -> String {
            var out = ""
            func family(_ name: String, _ type: String, _ help: String) {
                out += "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n"
            }
            /// A label value escaped as the text format wants (backslash, quote, newline).
            func label(_ v: String) -> String {
                var o = ""
                for c in v {
                    switch c {
                    case "\\": o += "\\\\"
                    case "\"": o += "\\\""
                    case "\n": o += "\\n"
                    default: o.append(c)
                    }
                }
                return o
            }
            func number(_ v: Double) -> String {
                if v == v.rounded() && abs(v) < 1e15 { return String(Int64(v)) }
                return String(v)
            }
            family("bgtask_daemon_up", "gauge", "Whether bgtaskd answered on the session bus.")
            out += "bgtask_daemon_up \(queue == nil ? 0 : 1)\n"
            if let q = queue {
                family("bgtask_tasks", "gauge", "Tasks in bgtaskd's queue, by state.")
                out += "bgtask_tasks{state=\"waiting\"} \(q.pending)\nbgtask_tasks{state=\"running\"} \(q.running)\n"
            }
            func histogram(_ name: String, _ help: String, _ values: [Double], _ buckets: [Double]) {
                family(name, "histogram", help)
                for b in buckets { out += "\(name)_bucket{le=\"\(number(b))\"} \(values.filter { $0 <= b }.count)\n" }
                out += "\(name)_bucket{le=\"+Inf\"} \(values.count)\n\(name)_sum \(number(values.reduce(0, +)))\n\(name)_count \(values.count)\n"
            }
            histogram("bgtask_run_wait_seconds", "How long runs that ended in the last \(window) waited before they started.",
                      runs.compactMap(\.waited), waitBuckets)
            histogram("bgtask_run_duration_seconds", "How long runs that ended in the last \(window) ran.", runs.compactMap(\.ran), runBuckets)
            family("bgtask_runs", "gauge", "Runs that ended in the last \(window), by result.")
            for result in ["ok", "failed", "expired", "gave_up"] {
                out += "bgtask_runs{result=\"\(result)\"} \(runs.filter { $0.result == result }.count)\n"
            }
            let causes = Dictionary(grouping: runs.compactMap(\.cause), by: { $0 }).sorted { $0.key < $1.key }
            family("bgtask_expiries", "gauge", "Runs expired in the last \(window), by what expired them (a rule's id, budget, cancelled …).")
            for (cause, list) in causes { out += "bgtask_expiries{cause=\"\(label(cause))\"} \(list.count)\n" }
            family("bgtask_energy_joules", "gauge", "Energy the runs that ended in the last \(window) used, where a source measured it (J; Wh × 3600).")
            out += "bgtask_energy_joules \(number(runs.compactMap(\.energyWh).reduce(0, +) * 3600))\n"
            family("bgtask_energy_unknown_runs", "gauge", "Runs that ended in the last \(window) with no power source to measure them.")
            out += "bgtask_energy_unknown_runs \(runs.filter { $0.energyWh == nil && $0.ran != nil }.count)\n"
            return out
        }

        /// Into a temporary file in the same directory, then renamed: a collector never reads half a file.
        static func writeAtomically(_ text: String, to path: String) throws {
            let dir = path.contains("/") ? String(path[..<path.lastIndex(of: "/")!]) : "."
            let tmp = (dir.isEmpty ? "" : dir) + "/.bgtask-metrics-\(getpid()).tmp"
            let fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0o644)
            guard fd >= 0 else { throw SystemFailure(path: tmp, what: "open") }
            let bytes = Array(text.utf8)
            let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            let synced = fsync(fd) == 0
            close(fd)
            guard written == bytes.count, synced else { unlink(tmp); throw SystemFailure(path: tmp, what: "write") }
            guard rename(tmp, path) == 0 else { let e = SystemFailure(path: path, what: "rename"); unlink(tmp); throw e }
        }

        struct SystemFailure: Error, CustomStringConvertible {
            let path: String, what: String, errno: Int32
            init(path: String, what: String) { self.path = path; self.what = what; self.errno = Glibc.errno }
            var description: String { "\(what) \(path): \(String(cString: strerror(errno)))" }
        }
    }
}
