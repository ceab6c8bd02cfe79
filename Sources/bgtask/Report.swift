import ArgumentParser
import BgtaskAudit
import BgtaskConfig
import BgtaskCore
import BgtaskJSON
import BgtaskPolicy
import BgtaskQueue
#if canImport(Glibc)
@preconcurrency import Glibc
#endif

extension Bgtask {
    struct Report: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "report",
            abstract: "What the tasks cost (runs, CPU, energy, expiries), and a picture of the day against the charger, battery, heat, presence and network.",
            discussion: """
            Without --html or --svg: a table of each task's runs that ended in the window, the CPU seconds and \
            energy (Wh, where a power source measured it) they recorded, and its expiries, from the audit trail \
            (--json for scripts). With --html or --svg: one self-contained file (no network, no script) with a \
            lane per task — waiting, running, throttled, paused, expired — and a lane per reading, from the audit \
            trail and bgtaskd's history of the readings; the page adds the table. A stretch nobody read (bgtaskd \
            not running, or not reading heat because no task's verdict depended on it) is drawn as "not read", \
            with the readings a task's run recorded then as marks: never a value nobody read. Point at a bar for \
            the rule and file:line that decided it. The picture's window is fitted to the last 24 hours' entries \
            unless --since says. `bgtask policy simulate --html` draws the same from a recorded trace. Exit \
            status: 0; 2 for a bad option; 73 when a file cannot be written.
            """)

        @Option(name: .long, help: ArgumentHelp("How far back (24h, 7d; default: 24h, the picture fitted to its entries).", valueName: "duration"),
                transform: DurationArgument.parse)
        var since: DurationArgument?

        @Option(name: .long, help: ArgumentHelp("Write an HTML page here.", valueName: "file"), completion: .file(extensions: ["html"]))
        var html: String?

        @Option(name: .long, help: ArgumentHelp("Write an SVG image here.", valueName: "file"), completion: .file(extensions: ["svg"]))
        var svg: String?

        @Flag(name: .long, help: "Print the costs as JSON.")
        var json = false

        mutating func validate() throws {
            if let since, since.seconds < 60 || since.seconds > 60 * 86_400 { throw ValidationError("--since \(since): from 1m to 60d") }
            if json && (html != nil || svg != nil) { throw ValidationError("--json prints the costs: give it without --html and --svg") }
        }

        func run() throws {
            let now = wallClockNow()
            let from = now - (since?.seconds ?? 86_400)
            let entries = Report.entries(since: from)
            let costs = TaskCost.costs(entries, since: from, until: now)
            guard html != nil || svg != nil else {
                if json {
                    print(JSONValue.object([("since", .number(from)), ("until", .number(now)), ("tasks", .array(costs.tasks.map(\.json))),
                                            ("total", costs.total.json)]).rendered)
                } else {
                    Report.table(costs, from: from, to: now).forEach { out($0) }
                }
                return
            }
            let start = since == nil ? Report.fitted(entries, from: from, to: now) : from
            let timeline = Report.timeline(from: start, to: now, entries: entries)
            for (path, text) in [(html, timeline.html(costs: Report.htmlTable(costs))), (svg, timeline.svg())] {
                guard let p = path else { continue }
                do { try Metrics.writeAtomically(text, to: p) } catch {
                    err("\(error)", status: ExitStatus.cantCreate)
                    throw ExitCode(ExitStatus.cantCreate)
                }
            }
        }

        /// The audit trail's entries from a day before `since` (a task waiting since then is drawn from its start).
        /// A trail that cannot be read (a full disk) is said: the report then shows no task, and says why.
        static func entries(since: Double) -> [AuditEntry] {
            let audit: AuditLog?
            do { audit = try State.audit(write: false) } catch {
                err("\(error); the report shows no tasks")
                audit = nil
            }
            guard let audit else { return [] }
            do { return try audit.entries(since: since - 86_400) } catch {
                err("\(error); the report shows no tasks")
                return []
            }
        }

        /// The picture's start: the first entry in the window, less a margin (a twentieth of what it spans, a
        /// minute at least), and at least 5 minutes before now — not a fixed day that squeezes half an hour into 2 %.
        static func fitted(_ entries: [AuditEntry], from: Double, to now: Double) -> Double {
            guard let first = entries.lazy.map(\.time).filter({ $0 >= from }).min() else { return from }
            let margin = max(60, (now - first) / 20)
            return max(from, min(first - margin, now - 300))
        }

        static func table(_ c: (tasks: [TaskCost], total: TaskCost), from: Double, to now: Double) -> [String] {
            var lines = ["runs that ended from \(clockText(from, now: now)) to now (\(clockText(now, now: now))), from the audit trail"]
            guard !c.tasks.isEmpty else { return lines + ["no task ran or expired then"] }
            func cpu(_ t: TaskCost) -> String { t.runs == t.cpuUnknownRuns && t.runs > 0 ? "-" : TaskCost.fixed(t.cpuSeconds, 1) }
            func wh(_ t: TaskCost) -> String { t.energyWh.map { TaskCost.fixed($0, 3) } ?? "-" }
            let rows = [["TASK", "RUNS", "CPU S", "ENERGY WH", "EXPIRIES"]]
                + (c.tasks + (c.tasks.count > 1 ? [c.total] : [])).map { [$0.task, String($0.runs), cpu($0), wh($0), String($0.expiries)] }
            let widths = (0..<5).map { i in rows.map { $0[i].count }.max()! }
            for r in rows {
                lines.append((0..<5).map { i in i == 0 ? r[i].padding(toLength: widths[i], withPad: " ", startingAt: 0)
                    : String(repeating: " ", count: widths[i] - r[i].count) + r[i] }.joined(separator: "  "))
            }
            if c.total.energyUnmeasuredRuns > 0 {
                lines.append("energy: \(c.total.energyUnmeasuredRuns) run(s) had no power source to measure them (counted as unknown, not 0)")
            }
            if c.total.cpuUnknownRuns > 0 { lines.append("CPU: \(c.total.cpuUnknownRuns) run(s) recorded none (an older trail)") }
            return lines
        }

        static func htmlTable(_ c: (tasks: [TaskCost], total: TaskCost)) -> String {
            guard !c.tasks.isEmpty else { return "" }
            var h = "<table class=\"costs\">\n<tr><th>task</th><th>runs</th><th>CPU s</th><th>energy (Wh)</th><th>expiries</th></tr>\n"
            for t in c.tasks + (c.tasks.count > 1 ? [c.total] : []) {
                let wh = t.energyWh.map { TaskCost.fixed($0, 3) } ?? "unmeasured"
                h += "<tr><td>\(Timeline.escape(t.task))</td><td>\(t.runs)</td><td>\(TaskCost.fixed(t.cpuSeconds, 1))</td>"
                h += "<td>\(wh)\(t.energyUnmeasuredRuns > 0 && t.energyWh != nil ? " (\(t.energyUnmeasuredRuns) unmeasured)" : "")</td><td>\(t.expiries)</td></tr>\n"
            }
            return h + "</table>\n"
        }

        static let readingNames = ["power.external", "battery.percent", "thermal.state", "thermal.celsius", "user.idle", "network.online"]

        static func timeline(from start: Double, to end: Double, entries: [AuditEntry]) -> Timeline {
            var t = Timeline(start: start, end: end, title: "bgtask: \(Report.hostname())")
            // The readings first, from bgtaskd's history (none when it never ran), and what the runs recorded.
            let dir = try? StatePaths.stateDirectory()
            let history = dir.flatMap { try? QueueStore.readTransitions(path: $0 + "/" + QueueStore.file, names: readingNames, since: start) } ?? [:]
            // Only entries inside a stretch the history did not read are looked into (parsing every entry's readings
            // would double the cost of a month's report).
            let unread = Report.unread(history, from: start, to: end)
            // (In time order: the trail's id order is not, quite — a run's supervisor appends as it goes.)
            let inside = entries.filter { e in Report.within(unread, e.time) }.sorted { $0.time < $1.time }
            Report.readings(history, samples: Report.samples(inside, apart: (end - start) / t.plotWidth), into: &t)
            // Then each task, from the audit trail.
            var byTask: [String: [AuditEntry]] = [:]
            var order: [String] = []
            for e in entries {
                if byTask[e.taskID] == nil { order.append(e.taskID) }
                byTask[e.taskID, default: []].append(e)
            }
            for id in order {
                let es = byTask[id]!
                guard es.contains(where: { $0.time >= start }) || !["finished", "gave-up", "failed"].contains(es.last!.event) else { continue }
                t.addTask(id, events: es.map(Report.event))
            }
            return t
        }

        /// The stretches where some reading of the history was not read: before its first row, and from each
        /// `unread` row to the next (merged where they overlap).
        static func unread(_ h: [String: [(time: Double, value: String)]], from start: Double, to end: Double) -> [(Double, Double)] {
            var spans: [(Double, Double)] = []
            for name in readingNames {
                let c = h[name] ?? []
                guard let first = c.first else { spans.append((start, end)); continue }
                if first.time > start { spans.append((start, first.time)) }
                for (i, row) in c.enumerated() where row.value == ReadingHistory.unreadText {
                    spans.append((max(start, row.time), i + 1 < c.count ? c[i + 1].time : end))
                }
            }
            var merged: [(Double, Double)] = []
            for sp in spans.sorted(by: { $0.0 < $1.0 }) where sp.1 > sp.0 {
                if let last = merged.last, sp.0 <= last.1 { merged[merged.count - 1].1 = max(last.1, sp.1) } else { merged.append(sp) }
            }
            return merged
        }

        /// Whether `t` is inside one of these sorted, disjoint stretches (a binary search: a month may have thousands).
        static func within(_ spans: [(Double, Double)], _ t: Double) -> Bool {
            var lo = 0, hi = spans.count
            while lo < hi {
                let mid = (lo + hi) / 2
                if spans[mid].1 <= t { lo = mid + 1 } else { hi = mid }
            }
            return lo < spans.count && spans[lo].0 <= t
        }

        /// The readings the audit trail's entries recorded (the conditions at a start, each rule's own readings), as
        /// the history writes them: name → (time, text).
        /// At most one entry's readings a pixel (`apart` seconds): a month's 24,000 entries are not all parsed to
        /// draw 1,000 pixels.
        static func samples(_ entries: [AuditEntry], apart: Double = 0) -> [String: [(time: Double, value: String)]] {
            var out: [String: [(time: Double, value: String)]] = [:]
            var took = false
            func take(_ v: JSONValue, at time: Double) {
                guard case .object(let m) = v else { return }
                for (name, value) in m where readingNames.contains(name) {
                    let text: String
                    switch value {
                    case .bool(let b): text = b ? "true" : "false"
                    case .number(let n) where n.isFinite: text = String(Int(n.rounded()))
                    case .string(let s): text = s
                    default: continue
                    }
                    if out[name]?.last?.time != time {
                        out[name, default: []].append((time, text))
                        took = true
                    }
                }
            }
            // A start's conditions hold every reading, a rule's readings only its own: each kind a pixel apart.
            var nextConditions = -Double.infinity, nextRules = -Double.infinity
            for e in entries {
                if e.time >= nextConditions, let c = e.conditions, let v = try? JSONValue.parse(c) {
                    took = false
                    take(v, at: e.time)
                    if took { nextConditions = e.time + apart }
                }
                // Most entries' rules read nothing worth drawing: parsed only when some rule's readings are not empty.
                if e.time >= nextRules, e.rules.contains("\"readings\":{\""), case .array(let rules)? = try? JSONValue.parse(e.rules) {
                    took = false
                    for case .object(let m) in rules { if let r = m.first(where: { $0.0 == "readings" })?.1 { take(r, at: e.time) } }
                    if took { nextRules = e.time + apart }
                }
            }
            return out
        }

        static func readings(_ h: [String: [(time: Double, value: String)]], samples: [String: [(time: Double, value: String)]] = [:],
                             into t: inout Timeline) {
            func numbers(_ c: [(time: Double, value: String)]) -> [(time: Double, value: Double?)] { c.map { ($0.time, Double($0.value)) } }
            func points(_ c: [(time: Double, value: String)]?) -> [(time: Double, value: Double)] { (c ?? []).compactMap { v in Double(v.value).map { (v.time, $0) } } }
            func nulls(_ c: [(time: Double, value: String)]) -> Set<Double> { Set(c.filter { $0.value == "null" }.map(\.time)) }
            func yesNo(_ yes: String, _ no: String) -> (String) -> String { { $0 == "true" ? yes : $0 == "false" ? no : "unknown" } }
            // A lane where the history has rows, or where only runs read the value (no bgtaskd ran then).
            func has(_ name: String) -> [(time: Double, value: String)]? {
                let c = h[name] ?? []
                return c.isEmpty && (samples[name] ?? []).isEmpty ? nil : c
            }
            if let c = has("power.external") { t.addStates("charger", changes: c, samples: samples["power.external"] ?? [], describe: yesNo("on the charger", "on battery")) }
            if let c = has("battery.percent") { t.addSeries("battery", changes: numbers(c), samples: points(samples["battery.percent"]), noValue: nulls(c), unit: "%") }
            if let c = has("thermal.state") { t.addStates("heat", changes: c, samples: samples["thermal.state"] ?? []) }
            if let c = has("thermal.celsius") { t.addSeries("temperature", changes: numbers(c), samples: points(samples["thermal.celsius"]), noValue: nulls(c), unit: "°C") }
            if let c = has("user.idle") { t.addStates("person", changes: c, samples: samples["user.idle"] ?? [], describe: yesNo("away", "present")) }
            if let c = has("network.online") { t.addStates("network", changes: c, samples: samples["network.online"] ?? [], describe: yesNo("online", "offline")) }
        }

        static func event(_ e: AuditEntry) -> Timeline.TaskEvent {
            var rule: String?, reason: String?
            if case .array(let rules)? = try? JSONValue.parse(e.rules), case .object(let m)? = rules.first {
                let f = Dictionary(m, uniquingKeysWith: { a, _ in a })
                if case .string(let id)? = f["id"], case .string(let origin)? = f["origin"] { rule = "\(id) (\(origin))" }
                if case .string(let r)? = f["reason"] { reason = r }
            }
            return Timeline.TaskEvent(time: e.time, event: e.event, detail: e.detail, rule: rule, reason: reason)
        }

        static func hostname() -> String {
            var buf = [CChar](repeating: 0, count: 256)
            guard gethostname(&buf, buf.count - 1) == 0 else { return "this machine" }
            return String(decoding: buf.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
    }
}
