import ArgumentParser
import BgtaskBus
import BgtaskConfig
import BgtaskCore
import BgtaskJSON
import BgtaskPolicy

extension Bgtask {
    struct Tasks: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "What bgtaskd runs now: state, CPU share, runtime, budget left.")

        @Flag(name: .long, help: "Print the list as JSON.")
        var json = false

        func run() throws {
            guard case .dicts(let tasks)? = try DaemonClient.call("ListRunning").first else { return }
            if json { print(DaemonClient.json(.dicts(tasks)).rendered); return }
            if tasks.isEmpty { out("nothing running"); return }
            for t in tasks {
                var line = "\(t["id"]?.string ?? "?"): \(t["state"]?.string ?? "")"
                if let p = t["pid"]?.number { line += ", pid \(Int(p))" }
                if let c = t["cpu_share"]?.number { line += ", \(Int(c.rounded()))% of a CPU" }
                if let r = t["runtime"]?.number { line += ", running \(formatDuration(r.rounded()))" }
                if let b = t["budget_left"]?.number { line += ", \(formatDuration(b.rounded())) of budget left" }
                out(line)
            }
        }
    }
}
