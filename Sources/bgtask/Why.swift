import ArgumentParser
import BgtaskAudit
import BgtaskPolicy
import BgtaskProbes
#if canImport(Glibc)
@preconcurrency import Glibc
#endif

extension Bgtask {
    struct Why: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Tell the story of a task: what it waited for, which rule (file:line) decided, and what happened.",
            discussion: "Without a task id: every task seen recently and where it stands now.")

        @Argument(help: ArgumentHelp("The task id (`bgtask run --id`, default the command's name).", valueName: "id"))
        var id: String?

        @Option(name: .long, help: ArgumentHelp("How far back to look (default 1d).", valueName: "duration"))
        var since: String = "1d"

        @Flag(name: .long, help: "Every run of the task since --since, not only the latest.")
        var all = false

        @Flag(name: .long, help: "Print JSON: the entries and the story.")
        var json = false

        func validate() throws {
            if parseDuration(since) == nil { throw ValidationError("--since \(since): a duration such as 2h or 7d") }
        }

        func run() throws {
            let dir = StatePaths.directory
            guard access(dir + "/audit.sqlite", R_OK) == 0 else {
                print(json ? "[]" : "no audit trail yet (\(dir)/audit.sqlite): nothing has run through bgtask")
                return
            }
            let audit = try StatePaths.openAudit(dir, readOnly: true)
            let from = wallClock() - (parseDuration(since) ?? 86_400)
            guard let id else {
                let latest = try audit.latestPerTask(since: from)
                if json {
                    print(JSONValue.array(latest.map(entryJSON)).rendered)
                } else if latest.isEmpty {
                    print("no task in the last \(since)")
                } else {
                    latest.forEach { print(Story.summary($0)) }
                }
                return
            }
            let entries = try audit.entries(task: id, since: from)
            var runs: [String] = []
            for e in entries where !runs.contains(e.runID) { runs.append(e.runID) }
            if !all, let last = runs.last { runs = [last] }
            if runs.isEmpty {
                if json { print("[]") } else { print("no record of \(id) in the last \(since)") }
                throw ExitCode(1)
            }
            if json {
                print(JSONValue.array(runs.map { r in
                    let es = entries.filter { $0.runID == r }
                    return .object([("run", .string(r)), ("story", .string(Story.tell(es))), ("entries", .array(es.map(entryJSON)))])
                }).rendered)
            } else {
                for r in runs { print(Story.tell(entries.filter { $0.runID == r })) }
            }
        }
    }
}

func entryJSON(_ e: AuditEntry) -> JSONValue {
    .object([
        ("time", .number(e.time)), ("run", .string(e.runID)), ("task", .string(e.taskID)), ("event", .string(e.event)),
        ("verdict", JSONValue(e.verdict)), ("detail", .string(e.detail)),
        ("rules", (try? JSONValue.parse(e.rules)) ?? .array([])),
        ("conditions", e.conditions.flatMap { try? JSONValue.parse($0) } ?? .null),
        ("exit_status", JSONValue(e.exitStatus.map(Int.init))),
    ])
}
