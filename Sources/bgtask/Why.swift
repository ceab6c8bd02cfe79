import BgtaskJSON
import ArgumentParser
import BgtaskAudit
import BgtaskBus
import BgtaskProtocol
import BgtaskCore
import BgtaskConfig
import BgtaskPolicy
import BgtaskProbes
import BgtaskStorage
#if canImport(Glibc)
@preconcurrency import Glibc
#endif

extension Bgtask {
    struct Why: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "why",
            abstract: "Tell the story of a task: what it waited for, which rule (file:line) decided, and what happened.",
            discussion: "Without a task id: the 20 most recent tasks (--all: every task since --since) and where each stands now.")

        @Argument(help: ArgumentHelp("The task id (`bgtask run --id`, default the command's name).", valueName: "id"), completion: TaskIDCompletion.kind)
        var id: String?

        @Option(name: .long, help: ArgumentHelp("How far back to look (default 1d).", valueName: "duration"), transform: DurationArgument.parse)
        var since: DurationArgument = DurationArgument(argument: "1d")!

        @Flag(name: .long, help: "Every run of the task since --since, not only the latest; without an id, every task.")
        var all = false

        static let recentTasks = 20

        @Flag(name: .long, help: "Print JSON: the entries and the story.")
        var json = false

        func validate() throws {
        }

        func run() throws {
            State.recover(probe: ProbeOptions(root: SysfsRoot.fromEnvironment()), audit: nil, quiet: false)
            let audit: AuditLog
            do {
                guard let a = try State.audit(write: false) else {
                    let dir = (try? StatePaths.stateDirectory()) ?? "the state directory"
                    print(json ? "[]" : "no audit trail yet (\(dir)/\(StatePaths.auditFile)): nothing has run through bgtask")
                    return
                }
                audit = a
            } catch let e as State.Failure {
                err(e.message)
                throw ExitCode(e.status)
            }
            let from = wallClock() - since.seconds
            do { try tell(audit, from: from) } catch let e as ExitCode { throw e } catch {
                err("audit trail \(audit.path): \(DiskSpace.explain(error, file: audit.path) ?? "\(error)")")
                throw ExitCode(ExitStatus.failure)
            }
        }

        /// A task's line in the list: where it stands, and for a run its expiry ended (SIGTERM, then its end by a
        /// signal) what the story says of it — "expired 16:52:10: its 10m budget ran out", not "killed by signal 15".
        static func listLine(_ last: AuditEntry, _ audit: AuditLog) -> String {
            guard last.event == "finished", last.detail.contains("signal"),
                  let expiry = (try? audit.entries(task: last.taskID, run: last.runID))?.last(where: { $0.event == "expired" })
            else { return Story.summary(last) }
            return "\(last.taskID): expired \(Story.clock(expiry.time)): \(Story.because(expiry)); ended \(Story.clock(last.time)) by that expiry (\(last.detail))"
        }

        func tell(_ audit: AuditLog, from: Double) throws {
            guard let id else {
                let limit = all ? Int.max : Why.recentTasks
                var latest = try audit.latestPerTask(since: from, limit: limit == Int.max ? limit : limit + 1)
                let more = latest.count > limit
                if more { latest.removeLast() }
                if json {
                    print(JSONValue.array(latest.map(\.json)).rendered)
                } else if latest.isEmpty {
                    print("no task in the last \(since)")
                } else {
                    latest.forEach { print(Terminal.safe(Why.listLine($0, audit))) }
                    if more { print("(older tasks not shown: bgtask why --all)") }
                }
                return
            }
            // One pass: the runs in order, each with its entries (the latest run is found by index).
            var order: [String] = []
            var byRun: [String: [AuditEntry]] = [:]
            if all {
                for e in try audit.entries(task: id, since: from) {
                    if byRun[e.runID] == nil { order.append(e.runID) }
                    byRun[e.runID, default: []].append(e)
                }
            } else if let run = try audit.latestRun(task: id) {
                let es = try audit.entries(run: run).filter { $0.taskID == id }
                if let last = es.last, last.time >= from { order = [run]; byRun[run] = es }
            }
            if order.isEmpty {
                if json { print("[]") } else { print("no record of \(Terminal.safe(id)) in the last \(since)") }
                throw ExitCode(ExitStatus.failure)
            }
            if json {
                print(JSONValue.array(order.map { r in
                    let es = byRun[r] ?? []
                    return .object([("run", .string(r)), ("story", .string(Story.tell(es))), ("entries", .array(es.map(\.json)))])
                }).rendered)
            } else {
                // A request waiting to run again (a retry, the next period): its last run first, which is what ended.
                if !all, let latest = order.first, !(byRun[latest] ?? []).contains(where: { $0.event == "started" }),
                   let previous = try audit.entries(task: id, since: from).last(where: { $0.runID != latest && $0.event != "deferred" })?.runID {
                    let es = try audit.entries(run: previous).filter { $0.taskID == id }
                    print(Terminal.safe("Last run: " + Story.tell(es), keepNewlines: true))
                }
                for r in order { print(Terminal.safe(Story.tell(byRun[r] ?? []), keepNewlines: true)) }
                if let next = Why.nextRun(id) { print(Terminal.safe(next)) }
            }
        }

        /// The queued request of a repeating or retrying task, if bgtaskd already runs (it is not started for this):
        /// "Next: retry 1 of 3, not before 13:26:58, in 4m."; "Next: every 1d, not before tomorrow 02:00:00, in 11h".
        static func nextRun(_ id: String) -> String? {
            guard let bus = try? BusConnection(),
                  case .bool(true)? = try? bus.call("NameHasOwner", [.string(SchedulerBus.name)], destination: "org.freedesktop.DBus",
                                                    path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus", timeoutMs: 2000).first,
                  let d = (try? bus.pendingTask(id, timeoutMs: 5000)) ?? nil, let t = try? PendingTask(variant: d) else { return nil }
            var parts: [String] = []
            if t.failures > 0 { parts.append("retry \(t.failures) of \(t.retry)") }
            if let e = t.every { parts.append("every \(formatDuration(e))") }
            if let c = t.calendar { parts.append("on calendar '\(c)'") }
            if let w = t.window { parts.append("between \(w)") }
            if let at = t.earliest, at > wallClockNow() { parts.append("not before \(untilText(at))") }
            else {
                // Every rule that holds it back now, not only the one that decides (each with its own hold).
                let rules = t.unmet.filter { $0["what"]?.string == "rule" }.compactMap { $0["reason"]?.string }
                parts.append("waiting: " + (rules.count > 1 ? rules.joined(separator: "; and ") : t.reason))
                if let r = t.nextRun, r > wallClockNow() { parts.append("could run from \(untilText(r))") }
            }
            if let l = t.likely { parts.append(l) }
            return "Next: " + parts.joined(separator: ", ") + "."
        }
    }
}

