import ArgumentParser
import BgtaskBus
import BgtaskConfig
import BgtaskCore
import BgtaskJSON
import BgtaskPolicy
#if canImport(Glibc)
@preconcurrency import Glibc
#endif

extension Bgtask {
    struct Tasks: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "tasks",
            abstract: "What bgtaskd runs now: state, CPU share, runtime, budget left, and progress bars for continued tasks.",
            discussion: "On a terminal the list stays up and is redrawn as tasks change (Ctrl-C ends it); --once or a pipe prints it once.")

        @Flag(name: .long, help: "Print the list as JSON, once.")
        var json = false

        @Flag(name: .long, help: "Print the list once, even on a terminal.")
        var once = false

        func run() throws {
            guard case .dicts(let tasks)? = try DaemonClient.call("ListRunning").first else { return }
            if json { print(DaemonClient.json(.dicts(tasks)).rendered); return }
            guard !once, isatty(1) == 1, let bus = try? BusConnection() else {
                for l in Tasks.lines(tasks) { out(l) }
                return
            }
            // Live: redrawn when the daemon says a task changed or progressed, and each second for the clocks.
            let loop = MainLoop()
            func draw() {
                guard let reply = try? bus.call("ListRunning", []), case .dicts(let now)? = reply.first else { loop.quit(); return }
                print("\u{1B}[H\u{1B}[2J" + Terminal.safe(Tasks.lines(now).joined(separator: "\n"), keepNewlines: true))
                fflush(stdout)
            }
            for member in ["TaskChanged", "TaskProgress"] {
                bus.subscribe(sender: SchedulerBus.name, interface: SchedulerBus.interface, member: member, path: SchedulerBus.path) { _, _ in draw() }
            }
            func tick() { loop.setTimer(in: 1) { draw(); tick() } }
            draw()
            tick()
            loop.run()
        }

        static func lines(_ tasks: [[String: BusValue]]) -> [String] {
            if tasks.isEmpty { return ["nothing running"] }
            return tasks.map { t in
                var line = "\(t["id"]?.string ?? "?"): \(t["state"]?.string ?? "")"
                if let title = t["title"]?.string { line += " — \(title)" + (t["subtitle"]?.string.map { " (\($0))" } ?? "") }
                if let p = t["pid"]?.number { line += ", pid \(Int(p))" }
                if let u = t["unit"]?.string { line += ", unit \(u)" }
                if let c = t["cpu_share"]?.number { line += ", \(Int(c.rounded()))% of a CPU" }
                if let r = t["runtime"]?.number { line += ", running \(formatDuration(r.rounded()))" }
                if let b = t["budget_left"]?.number { line += ", \(formatDuration(b.rounded())) of budget left" }
                if let done = t["progress_completed"]?.number, let total = t["progress_total"]?.number, total > 0 {
                    line += "\n    " + bar(done / total)
                }
                return line
            }
        }

        /// `[██████░░░░░░░░░░░░░░]  30%`
        static func bar(_ fraction: Double) -> String {
            let f = max(0, min(1, fraction.isFinite ? fraction : 0))
            let width = 20, filled = Int((f * Double(width)).rounded(.down))
            return "[" + String(repeating: "█", count: filled) + String(repeating: "░", count: width - filled) + "] "
                + String(String(repeating: " ", count: 3) + String(Int((f * 100).rounded(.down)))).suffix(3) + "%"
        }
    }
}
