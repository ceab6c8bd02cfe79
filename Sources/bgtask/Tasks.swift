import ArgumentParser
import BgtaskBus
import BgtaskProtocol
import BgtaskConfig
import BgtaskCore
import BgtaskJSON
import BgtaskPolicy
@preconcurrency import CLinux
#if canImport(Glibc)
@preconcurrency import Glibc
#endif

extension Bgtask {
    struct Tasks: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "tasks",
            abstract: "What bgtaskd runs now: state, CPU share, runtime, budget left, and progress bars for continued tasks.",
            discussion: """
            On a terminal the list stays up on the alternate screen, as top's does, and is redrawn as tasks change; \
            Ctrl-C (or q and Enter… any end: SIGINT, SIGTERM, SIGHUP, bgtaskd going away) puts the screen back as it \
            was. --once or a pipe prints it once. WHY is the rule that throttles or pauses a task, with its file:line.
            """)

        @Flag(name: .long, help: "Print the list as JSON, once.")
        var json = false

        @Flag(name: .long, help: "Print the list once, even on a terminal.")
        var once = false

        func run() throws {
            // The signals that end the live view are blocked before any bus connection exists: GDBus's thread
            // inherits the mask, so none of them can kill the process behind the alternate screen's back.
            let live = !json && !once && isatty(1) == 1
            var mask = sigset_t()
            sigemptyset(&mask)
            for s in [SIGINT, SIGTERM, SIGHUP, SIGWINCH] { sigaddset(&mask, s) }
            if live { sigprocmask(SIG_BLOCK, &mask, nil) }
            let (tasks, dicts) = try DaemonClient.items(.listRunning, [], RunningTask.init(variant:))
            if json { print(BusValue.dicts(dicts).json.rendered); return }
            guard live, let bus = try? BusConnection() else {
                for l in Tasks.lines(tasks) { out(l) }
                return
            }
            // Live: redrawn when the daemon says a task changed or progressed, and each second for the clocks; on
            // the alternate screen (restored however it ends), with the signals that end it read from a signalfd so
            // the restore runs on the loop, not in a signal handler.
            let loop = MainLoop()
            let sfd = signalfd(-1, &mask, Int32(SFD_CLOEXEC | SFD_NONBLOCK))
            var gone: String?, status = ExitStatus.ok
            func draw() {
                let now: [RunningTask]
                do {
                    guard case .dicts(let dicts)? = try bus.call(.listRunning, []).first else { throw BusError(BusError.wrongReply, "") }
                    now = try dicts.map { d throws(ProtocolError) in try RunningTask(variant: d) }
                } catch let e as BusError where e.name != BusError.wrongReply {
                    gone = "bgtaskd went away"; loop.quit(); return
                } catch {
                    // Said once the screen is back (the whole CLI's words for it), the view ended: nothing of it is shown.
                    gone = "bgtaskd answered ListRunning with a reply of another type: \(DaemonClient.wrongReplyTail)"
                    status = ExitStatus.software
                    loop.quit(); return
                }
                print("\u{1B}[H\u{1B}[2J" + Terminal.safe(Tasks.table(now, width: Tasks.columns()).joined(separator: "\n"), keepNewlines: true), terminator: "")
                fflush(stdout)
            }
            if sfd >= 0 {
                loop.watch(fd: sfd) {
                    var info = signalfd_siginfo()
                    while read(sfd, &info, MemoryLayout<signalfd_siginfo>.size) == MemoryLayout<signalfd_siginfo>.size {
                        if Int32(info.ssi_signo) == SIGWINCH { draw() } else { loop.quit() }
                    }
                }
            }
            print("\u{1B}[?1049h\u{1B}[?25l", terminator: "")    // the alternate screen; the cursor hidden
            defer {
                print("\u{1B}[?25h\u{1B}[?1049l", terminator: "")
                fflush(stdout)
                if let gone { err(gone) }
            }
            for signal in [SchedulerSignal.taskChanged, .taskProgress] { bus.subscribe(signal) { _, _ in draw() } }
            func tick() { loop.setTimer(in: 1) { draw(); tick() } }
            draw()
            tick()
            loop.run()
            if status != ExitStatus.ok { throw ExitCode(status) }
        }

        /// The terminal's width (80 when it cannot be told).
        static func columns() -> Int {
            var ws = winsize()
            return ioctl(1, UInt(TIOCGWINSZ), &ws) == 0 && ws.ws_col > 20 ? Int(ws.ws_col) : 80
        }

        /// The live view: one row a task, as `top` lays it out, WHY cut to the terminal's width.
        static func table(_ tasks: [RunningTask], width: Int) -> [String] {
            let header = "bgtask tasks — \(clockText(wallClockNow())) — \(tasks.count) running (Ctrl-C ends)"
            if tasks.isEmpty { return [header, "", "nothing running"] }
            var rows = [["ID", "STATE", "CPU", "POWER", "RUNTIME", "BUDGET", "WHY"]]
            var bars: [Int: String] = [:]
            for t in tasks {
                var state = t.state
                // The daemon's state already says a cap ("throttled 25%"): said once, not "throttled 25% 25%".
                if let cap = t.cpuCap, !state.hasSuffix(" \(cap)%") { state += " \(cap)%" }
                rows.append([t.id, state,
                             t.cpuShare.map { "\(Int($0.rounded()))%" } ?? "-",
                             t.watts.map { Tasks.watts($0) } ?? "-",
                             t.runtime.map { formatDuration($0.rounded()) } ?? "-",
                             t.budgetLeft.map { formatDuration($0.rounded()) + " left" } ?? "-",
                             t.reason ?? t.title ?? ""])
                if let done = t.progressCompleted, let total = t.progressTotal, total > 0 {
                    bars[rows.count - 1] = "    " + bar(Double(done) / Double(total))
                }
            }
            let widths = (0..<6).map { c in rows.map { $0[c].count }.max() ?? 0 }
            var out = [header, ""]
            for (i, r) in rows.enumerated() {
                var line = (0..<6).map { r[$0].padding(toLength: widths[$0], withPad: " ", startingAt: 0) }.joined(separator: "  ") + "  " + r[6]
                if line.count > width { line = String(line.prefix(width - 1)) + "…" }
                out.append(line)
                if let b = bars[i] { out.append(b) }
            }
            return out
        }

        /// `~3.2 W`, `~450 mW`.
        static func watts(_ w: Double) -> String {
            w >= 1 ? "~\(Double(Int((w * 10).rounded())) / 10) W" : "~\(Int((w * 1000).rounded())) mW"
        }

        static func lines(_ tasks: [RunningTask]) -> [String] {
            if tasks.isEmpty { return ["nothing running"] }
            return tasks.map { t in
                var line = "\(t.id): \(t.state)"
                if let title = t.title { line += " — \(title)" + (t.subtitle.map { " (\($0))" } ?? "") }
                if let p = t.pid { line += ", pid \(p)" }
                if let u = t.unit { line += ", unit \(u)" }
                if let c = t.cpuShare { line += ", \(Int(c.rounded()))% of a CPU" }
                if let w = t.watts { line += ", \(watts(w))" }
                if let r = t.runtime { line += ", running \(formatDuration(r.rounded()))" }
                if let b = t.budgetLeft { line += ", \(formatDuration(b.rounded())) of budget left" }
                if let r = t.reason { line += "; \(r)" }
                if let done = t.progressCompleted, let total = t.progressTotal, total > 0 {
                    line += "\n    " + bar(Double(done) / Double(total))
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
