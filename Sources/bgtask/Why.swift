import BgtaskJSON
import ArgumentParser
import BgtaskAudit
import BgtaskConfig
import BgtaskPolicy
import BgtaskProbes
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
                fputs(Terminal.safe("bgtask: " + e.message) + "\n", stderr)
                throw ExitCode(e.status)
            }
            let from = wallClock() - since.seconds
            do { try tell(audit, from: from) } catch let e as ExitCode { throw e } catch {
                fputs(Terminal.safe("bgtask: audit trail \(audit.path): \(error)") + "\n", stderr)
                throw ExitCode(ExitStatus.failure)
            }
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
                    latest.forEach { print(Terminal.safe(Story.summary($0))) }
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
                for r in order { print(Terminal.safe(Story.tell(byRun[r] ?? []))) }
            }
        }
    }
}

