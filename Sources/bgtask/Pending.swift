#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import ArgumentParser
import BgtaskAudit
import BgtaskBus
import BgtaskProtocol
import BgtaskConfig
import BgtaskCore
import BgtaskJSON
import BgtaskPolicy

extension Bgtask {
    struct Pending: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "pending",
            abstract: "What waits in bgtaskd's queue: a table that scans like list-timers, or with --long everything that holds each task back.",
            discussion: """
            Columns: ID; STATE (waiting, or retry N/M after a failure); NEXT and LEFT (the earliest time it could run \
            — its earliest date from --at, --on-calendar, --every or a retry's backoff, every hold still running, its \
            --between window, rules of the clock — and how far off, as systemctl list-timers shows them; `-` when only \
            a change of conditions can start it, such as the charger or the network coming); LAST and RESULT (its last run, from the audit trail); WHY (the deciding \
            rule's reason, and how many other things hold it back). --long lists every one of them with its rule and \
            file:line, as dumpsys lists unsatisfied constraints.
            """)

        @Flag(name: .long, help: "Print the list as JSON (each task with `unmet`: everything that holds it back).")
        var json = false

        @Flag(name: [.customShort("l"), .long], help: "Prose: each task with everything that holds it back, rule and file:line.")
        var long = false

        @Option(help: ArgumentHelp("One page: at most this many tasks (1 to \(RequestBounds.pageMost)); the cursor of the next page goes to stderr.",
                                   valueName: "n"))
        var limit: UInt32?

        @Option(help: ArgumentHelp("Start after this cursor, as a page printed it (with --limit).", valueName: "cursor"))
        var after: String?

        func validate() throws {
            if let l = limit, !(1...RequestBounds.pageMost).contains(l) {
                throw ValidationError("--limit: a number of tasks from 1 to \(RequestBounds.pageMost)")
            }
        }

        func run() throws {
            if json {
                // Written as the pages come, so that a queue of 100,000 is never held whole: one array, compact.
                // Each task with what its last run used, from the audit trail (the first 200, as the table's LAST).
                let audit = (try? State.audit(write: false)) ?? nil
                let weekAgo = wallClockNow() - 7 * 86_400
                var written = 0
                // The array opens with what goes in it: a call that fails first (no daemon) leaves stdout empty.
                var opened = false
                func open() { if !opened { fputs("[", stdout); opened = true } }
                func write(_ value: @autoclosure () -> JSONValue, line: Substring?) {
                    var text = written > 0 ? "," : ""
                    var v: JSONValue?
                    if written < 200, let a = audit {
                        let value = value()
                        v = value
                        if case .object(var fields) = value, case .string(let id)? = value["id"],
                           let f = (try? a.entries(task: id, since: weekAgo))?.last(where: { $0.event == "finished" }) {
                            fields.append(("last_energy_wh", f.energyWh.map { JSONValue.number($0) } ?? .null))
                            fields.append(("last_energy", JSONValue(f.energy)))
                            fields.append(("last_cpu_seconds", JSONValue(f.cpuSeconds)))
                            v = .object(fields)
                        }
                    }
                    if let v { text += v.rendered } else if let line { text += line } else { text += value().rendered }
                    open()
                    fputs(text, stdout)
                    written += 1
                }
                // bgtaskd writes each task as this command would (`BusValue.json`): the lines are copied as they are.
                var (next, supported) = DaemonClient.pendingJSONPages(limit: limit, after: after) { lines in
                    lines.withUnsafeBufferPointer { page in
                        // Copied as they are only once each line is known to be one JSON object (strict: a raw control
                        // character, which could reach a terminal, is not JSON); a page that is not, is not copied.
                        if let bad = JSONCheck.firstBadLine(page) {
                            DaemonClient.wrongReply(.listPendingJSON, "a line that is not a JSON object (line \(bad + 1) of a page of \(page.count) bytes)")
                        }
                        var start = 0
                        // The first tasks one by one (each may gain its last run's energy).
                        while start < page.count, written < 200, audit != nil {
                            let end = Pending.lineEnd(page, from: start)
                            let line = String(decoding: UnsafeBufferPointer(rebasing: page[start..<end]), as: UTF8.self)
                            write((try? JSONValue.parse(line)) ?? .null, line: line[...])
                            start = end + 1
                        }
                        guard start < page.count else { return }
                        // The rest of the page as it is, each line's end made the array's comma, written from the
                        // reply's own bytes (a copy into a String and out again was half the CLI's time).
                        open()
                        if written > 0 { fputs(",", stdout) }
                        Pending.writeLinesAsElements(UnsafeBufferPointer(rebasing: page[start...]))
                        written += 1
                    }
                }
                if !supported {
                    next = DaemonClient.pendingPages(limit: limit, after: after) { page in
                        for t in page { write(BusValue.dict(t).json, line: nil) }
                    }
                }
                open()
                print("]")
                if let n = next { Pending.nextPage(n) }
                return
            }
            if case .dict(let s)? = (try? DaemonClient.call(.getStatus))?.first, let w = (try? DaemonStatus(variant: s))?.policyWarning {
                out("warning: \(w)")
            }
            var tasks: [PendingTask] = []
            let next = DaemonClient.pendingPages(limit: limit, after: after) { page in
                tasks += DaemonClient.typed(.listPendingPage, page, PendingTask.init(variant:))
            }
            if tasks.isEmpty { out("nothing pending") }
            else if long {
                // Each task's last run and what it cost, from the audit trail (bounded, as the table's LAST).
                let audit = tasks.count <= 200 ? (try? State.audit(write: false)) ?? nil : nil
                for t in tasks { prose(t, audit: audit) }
            }
            else { table(tasks) }
            if let n = next { Pending.nextPage(n) }
        }

        /// Writes the lines of a page's bytes to stdout with a comma for each line's end: JSON objects one a line become the
        /// elements of the array being written.
        static func writeLinesAsElements(_ u: UnsafeBufferPointer<UInt8>) {
            var start = 0
            while start < u.count {
                let end = lineEnd(u, from: start)
                fwrite(u.baseAddress! + start, 1, end - start, stdout)
                if end < u.count { fputc(0x2C, stdout) }
                start = end + 1
            }
        }

        /// The index of the first newline at or after `start`, or the end.
        static func lineEnd(_ u: UnsafeBufferPointer<UInt8>, from start: Int) -> Int {
            guard let base = u.baseAddress, start < u.count, let nl = memchr(base + start, 0x0A, u.count - start) else { return u.count }
            return UnsafePointer<UInt8>(nl.assumingMemoryBound(to: UInt8.self)) - base
        }

        /// Where the next page starts, on stderr: the page itself stays what a script reads.
        static func nextPage(_ cursor: String) {
            fputs("bgtask pending: more follow; the next page: --after '\(cursor)'\n", stderr)
        }

        func prose(_ t: PendingTask, audit: AuditLog?) {
            var line = "\(t.id): \(t.reason)"
            if let r = t.nextRun { line += "; could run \(r > wallClockNow() ? "from \(untilText(r))" : "now")" }
            if let n = t.nextCheck { line += "; looked at again \(untilText(n)) if nothing changes before" }
            else { line += "; looked at again when conditions change" }
            if let e = t.every { line += " (every \(formatDuration(e)))" }
            if let c = t.calendar { line += " (on calendar '\(c)')" }
            if let w = t.window { line += " (between \(w))" }
            if let l = t.likely { line += "; \(l)" }
            out(line)
            for u in t.unmet {
                let at = u["rule"]?.string.map { " — rule \($0) (\(u["location"]?.string ?? ""))" } ?? ""
                out("  unmet: \(u["reason"]?.string ?? "")\(at)")
            }
            if let f = (try? audit?.entries(task: t.id, since: wallClockNow() - 7 * 86_400))??.last(where: { $0.event == "finished" }) {
                out("  last run: finished \(clockText(f.time)), \(f.detail)" + (Story.cost(f).map { "; \($0)" } ?? ""))
            }
        }

        func table(_ tasks: [PendingTask]) {
            // The last run of each task from the audit trail (bounded: a queue of thousands is not looked up one by one).
            let audit = tasks.count <= 200 ? (try? State.audit(write: false)) ?? nil : nil
            let weekAgo = wallClockNow() - 7 * 86_400
            var rows: [[String]] = [["ID", "STATE", "NEXT", "LEFT", "LAST", "RESULT", "WHY"]]
            for t in tasks {
                let id = t.id
                var state = "waiting"
                if t.failures > 0 { state = "retry \(t.failures)/\(t.retry)" }
                var next = "-", left = "-"
                // The earliest time it could run, not when it is looked at again (`next_check` in --json).
                if let n = t.nextRun {
                    next = clockText(n)
                    left = n > wallClockNow() ? formatDuration((n - wallClockNow()).rounded(.up)) : "now"
                }
                var last = "-", result = "-"
                if let a = audit, let f = (try? a.entries(task: id, since: weekAgo))?.last(where: { $0.event == "finished" }) {
                    last = clockText(f.time)
                    result = f.exitStatus.map { $0 == 0 ? "ok" : "exit \($0)" } ?? f.detail
                }
                let others = t.unmet.count - 1
                var why = t.reason
                if why.count > 70 { why = String(why.prefix(69)) + "…" }
                if others > 0 { why += " (+\(others) more: --long)" }
                rows.append([id, state, next, left, last, result, why])
            }
            let widths = (0..<6).map { c in rows.map { $0[c].count }.max() ?? 0 }
            for r in rows {
                out((0..<6).map { r[$0].padding(toLength: widths[$0], withPad: " ", startingAt: 0) }.joined(separator: "  ") + "  " + r[6])
            }
        }
    }
}
