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
            abstract: "Draw a picture of the day: every task's runs against the charger, battery, heat, presence and network.",
            discussion: """
            One self-contained file (no network, no script): an HTML page (--html) or an SVG image (--svg) with a \
            lane per task — waiting, running, throttled, paused, expired — and a lane per reading, from the audit \
            trail and bgtaskd's history of the readings. Point at a bar for the rule and file:line that decided \
            it. `bgtask policy simulate --html` draws the same from a recorded trace. Exit status: 0; 2 without \
            --html or --svg; 73 when a file cannot be written.
            """)

        @Option(name: .long, help: ArgumentHelp("How far back (24h, 7d).", valueName: "duration"), transform: DurationArgument.parse)
        var since: DurationArgument = DurationArgument(argument: "24h")!

        @Option(name: .long, help: ArgumentHelp("Write an HTML page here.", valueName: "file"), completion: .file(extensions: ["html"]))
        var html: String?

        @Option(name: .long, help: ArgumentHelp("Write an SVG image here.", valueName: "file"), completion: .file(extensions: ["svg"]))
        var svg: String?

        mutating func validate() throws {
            if html == nil && svg == nil { throw ValidationError("say where the picture goes: --html FILE or --svg FILE (or both)") }
            if since.seconds < 60 || since.seconds > 60 * 86_400 { throw ValidationError("--since \(since): from 1m to 60d") }
        }

        func run() throws {
            let now = wallClockNow()
            let timeline = Report.timeline(from: now - since.seconds, to: now)
            for (path, text) in [(html, timeline.html()), (svg, timeline.svg())] {
                guard let p = path else { continue }
                do { try Metrics.writeAtomically(text, to: p) } catch {
                    err("\(error)", status: ExitStatus.cantCreate)
                    throw ExitCode(ExitStatus.cantCreate)
                }
            }
        }

        static func timeline(from start: Double, to end: Double) -> Timeline {
            var t = Timeline(start: start, end: end, title: "bgtask: \(Report.hostname())")
            // The readings first, from bgtaskd's history (none when it never ran).
            let dir = try? StatePaths.stateDirectory()
            let history = dir.flatMap { try? QueueStore.readTransitions(path: $0 + "/" + QueueStore.file,
                                                                         names: ["power.external", "battery.percent", "thermal.state",
                                                                                 "thermal.celsius", "user.idle", "network.online"], since: start) } ?? [:]
            Report.readings(history, into: &t)
            // Then each task, from the audit trail.
            // A trail that cannot be read (a full disk) is said: the report then shows no task, and says why.
            let audit: AuditLog?
            do { audit = try State.audit(write: false) } catch {
                err("\(error); the report shows no tasks")
                audit = nil
            }
            if let audit, let entries = try? audit.entries(since: start - 86_400) {
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
            }
            return t
        }

        static func readings(_ h: [String: [(time: Double, value: String)]], into t: inout Timeline) {
            if let c = h["power.external"], !c.isEmpty {
                t.addStates("charger", changes: c) { $0 == "true" ? "on the charger" : $0 == "false" ? "on battery" : "unknown" }
            }
            if let c = h["battery.percent"], !c.isEmpty { t.addSeries("battery", changes: c.compactMap { v in Double(v.value).map { (v.time, $0) } }, unit: "%") }
            if let c = h["thermal.state"], !c.isEmpty { t.addStates("heat", changes: c) }
            if let c = h["thermal.celsius"], !c.isEmpty { t.addSeries("temperature", changes: c.compactMap { v in Double(v.value).map { (v.time, $0) } }, unit: "°C") }
            if let c = h["user.idle"], !c.isEmpty { t.addStates("person", changes: c) { $0 == "true" ? "away" : $0 == "false" ? "present" : "unknown" } }
            if let c = h["network.online"], !c.isEmpty { t.addStates("network", changes: c) { $0 == "true" ? "online" : $0 == "false" ? "offline" : "unknown" } }
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
