import ArgumentParser
import BgtaskBus
import BgtaskProtocol
import BgtaskConfig
import BgtaskCore
import BgtaskJSON
import BgtaskPolicy
import BgtaskRun
@preconcurrency import CLinux
#if canImport(Glibc)
@preconcurrency import Glibc
#endif

extension Bgtask {
    struct Tasks: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "tasks",
            abstract: "What runs now, by bgtaskd or a foreground bgtask run: state, CPU share, runtime, budget left, and progress bars for continued tasks.",
            discussion: """
            On a terminal the list stays up on the alternate screen, as top's does, and is redrawn as tasks change; \
            Ctrl-C (or q and Enter… any end: SIGINT, SIGTERM, SIGHUP, bgtaskd going away) puts the screen back as it \
            was. --once or a pipe prints it once. WHY is the rule that throttles or pauses a task, with its file:line. \
            BY is who runs it: bgtaskd, or run for a `bgtask run` in the foreground (from its record in the runtime \
            directory; one whose bgtask run was killed is not listed). Without a reachable bgtaskd the foreground runs \
            are still listed, bgtaskd's absence is said on stderr, and the exit status is 69, as for every command \
            that asks bgtaskd.
            """)

        @Flag(name: .long, help: "Print the list as JSON, once.")
        var json = false

        @Flag(name: .long, help: "Print the list once, even on a terminal.")
        var once = false

        /// One task of the list: one bgtaskd runs, or a foreground `bgtask run` (its record).
        struct Row {
            var task: RunningTask
            /// `bgtaskd`, or `run` for a foreground `bgtask run`.
            var by: String
            /// The `bgtask run` that supervises it (a foreground run's).
            var supervisor: pid_t?
            /// As `--json` prints it.
            var dict: [String: BusValue]

            init(daemon task: RunningTask, _ dict: [String: BusValue]) {
                self.task = task
                by = "bgtaskd"
                self.dict = dict.merging(["by": .string(by)]) { a, _ in a }
            }

            /// Only what the record and /proc say: no command, CPU share or budget (the record keeps none).
            init(run: LiveRun) {
                let r = run.record
                task = RunningTask(id: r.task.id, app: "", kind: r.task.kind.rawValue, state: r.state, command: [],
                                   pid: UInt32(r.pgid), runtime: run.runtime, cpuCap: run.cpuCap)
                by = "run"
                supervisor = r.supervisorPID
                dict = ["id": .string(r.task.id), "by": .string(by), "kind": .string(r.task.kind.rawValue), "state": .string(r.state),
                        "pid": .uint32(UInt32(r.pgid)), "supervisor_pid": .uint32(UInt32(r.supervisorPID)), "run_id": .string(r.runID)]
                if let t = run.runtime { dict["runtime"] = .double(t) }
                if let c = run.cpuCap { dict["cpu_cap"] = .uint32(c) }
            }
        }

        /// Said after why bgtaskd could not be asked.
        static let onlyForeground = "; listed only the foreground `bgtask run`s"

        /// The live foreground `bgtask run`s (none when the runtime directory cannot be told: no run could have written there).
        static func foreground() -> [Row] {
            guard let dir = try? StatePaths.runtimeDirectory() else { return [] }
            return ActiveTasks.live(runtimeDirectory: dir).map(Row.init(run:))
        }

        /// bgtaskd's running tasks on `bus`, or why it cannot be asked; a reply that is not as the interface says ends the CLI.
        static func daemonRows(_ bus: BusConnection) -> Result<[Row], DaemonClient.Unreachable> {
            DaemonClient.asking(bus) { bus throws(BusError) in try bus.call(.listRunning, []) }.map { reply in
                guard case .dicts(let dicts)? = reply.first else { DaemonClient.wrongReply(.listRunning, "a reply of another type") }
                return zip(DaemonClient.typed(.listRunning, dicts, RunningTask.init(variant:)), dicts).map { Row(daemon: $0, $1) }
            }
        }

        func run() throws {
            // The signals that end the live view are blocked before any bus connection exists: GDBus's thread
            // inherits the mask, so none of them can kill the process behind the alternate screen's back.
            let live = !json && !once && isatty(1) == 1
            var mask = sigset_t()
            sigemptyset(&mask)
            for s in [SIGINT, SIGTERM, SIGHUP, SIGWINCH] { sigaddset(&mask, s) }
            if live { sigprocmask(SIG_BLOCK, &mask, nil) }
            // Without bgtaskd the foreground runs are still told, and its absence said (stderr, exit 69) once they are.
            var unreachable: String?, bus: BusConnection?, daemon: [Row] = []
            switch DaemonClient.connect().flatMap({ b in Tasks.daemonRows(b).map { (b, $0) } }) {
            case .success(let (b, rows)): bus = b; daemon = rows
            case .failure(let gone): unreachable = gone.sentence + Tasks.onlyForeground
            }
            func said() throws {
                guard let unreachable else { return }
                err(unreachable, status: ExitStatus.unavailable)
                throw ExitCode(ExitStatus.unavailable)
            }
            let rows = daemon + Tasks.foreground()
            if json {
                print(BusValue.dicts(rows.map(\.dict)).json.rendered)
                return try said()
            }
            guard live else {
                for l in Tasks.lines(rows) { out(l) }
                return try said()
            }
            // Live: redrawn when the daemon says a task changed or progressed, and each second for the clocks (and the
            // foreground runs, which say nothing on the bus); on the alternate screen (restored however it ends), with
            // the signals that end it read from a signalfd so the restore runs on the loop, not in a signal handler.
            let loop = MainLoop()
            let sfd = signalfd(-1, &mask, Int32(SFD_CLOEXEC | SFD_NONBLOCK))
            var gone: String?, status = ExitStatus.ok
            func draw() {
                var now: [Row] = []
                if let bus {
                    do {
                        guard case .dicts(let dicts)? = try bus.call(.listRunning, []).first else { throw BusError(BusError.wrongReply, "") }
                        now = try zip(dicts.map { d throws(ProtocolError) in try RunningTask(variant: d) }, dicts).map { Row(daemon: $0, $1) }
                    } catch let e as BusError where e.name != BusError.wrongReply {
                        gone = "bgtaskd went away"; loop.quit(); return
                    } catch {
                        // Said once the screen is back (the whole CLI's words for it), the view ended: nothing of it is shown.
                        gone = "bgtaskd answered ListRunning with a reply of another type: \(DaemonClient.wrongReplyTail)"
                        status = ExitStatus.software
                        loop.quit(); return
                    }
                }
                now += Tasks.foreground()
                let lines = Tasks.table(now, width: Tasks.columns(), daemon: unreachable == nil)
                print("\u{1B}[H\u{1B}[2J" + Terminal.safe(lines.joined(separator: "\n"), keepNewlines: true), terminator: "")
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
            if let bus { for signal in [SchedulerSignal.taskChanged, .taskProgress] { bus.subscribe(signal) { _, _ in draw() } } }
            func tick() { loop.setTimer(in: 1) { draw(); tick() } }
            draw()
            tick()
            loop.run()
            // Said by the deferred restore, once the screen is back: on the alternate screen it would be lost.
            if let unreachable, gone == nil {
                gone = unreachable
                status = ExitStatus.unavailable
            }
            if status != ExitStatus.ok { throw ExitCode(status) }
        }

        /// The terminal's width (80 when it cannot be told).
        static func columns() -> Int {
            var ws = winsize()
            return ioctl(1, UInt(TIOCGWINSZ), &ws) == 0 && ws.ws_col > 20 ? Int(ws.ws_col) : 80
        }

        /// The live view: one row a task, as `top` lays it out, WHY cut to the terminal's width. `daemon`: bgtaskd answered.
        static func table(_ rows: [Row], width: Int, daemon: Bool = true) -> [String] {
            let header = "bgtask tasks — \(clockText(wallClockNow())) — \(rows.count) running"
                + (daemon ? "" : " (bgtaskd is not reachable: only foreground `bgtask run`s)") + " (Ctrl-C ends)"
            if rows.isEmpty { return [header, "", "nothing running"] }
            var cells = [["ID", "BY", "STATE", "CPU", "POWER", "RUNTIME", "BUDGET", "WHY"]]
            var bars: [Int: String] = [:]
            for row in rows {
                let t = row.task
                var state = t.state
                // The daemon's state already says a cap ("throttled 25%"): said once, not "throttled 25% 25%".
                if let cap = t.cpuCap, !state.hasSuffix(" \(cap)%") { state += " \(cap)%" }
                cells.append([t.id, row.by, state,
                              t.cpuShare.map { "\(Int($0.rounded()))%" } ?? "-",
                              t.watts.map { Tasks.watts($0) } ?? "-",
                              t.runtime.map { formatDuration($0.rounded()) } ?? "-",
                              t.budgetLeft.map { formatDuration($0.rounded()) + " left" } ?? "-",
                              t.reason ?? t.title ?? row.supervisor.map { "bgtask run, pid \($0)" } ?? ""])
                if let done = t.progressCompleted, let total = t.progressTotal, total > 0 {
                    bars[cells.count - 1] = "    " + bar(Double(done) / Double(total))
                }
            }
            let fixed = cells[0].count - 1
            let widths = (0..<fixed).map { c in cells.map { $0[c].count }.max() ?? 0 }
            var out = [header, ""]
            for (i, r) in cells.enumerated() {
                var line = (0..<fixed).map { r[$0].padding(toLength: widths[$0], withPad: " ", startingAt: 0) }.joined(separator: "  ") + "  " + r[fixed]
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

        static func lines(_ rows: [Row]) -> [String] {
            if rows.isEmpty { return ["nothing running"] }
            return rows.map { row in
                let t = row.task
                var line = "\(t.id): \(t.state)"
                if let title = t.title { line += " — \(title)" + (t.subtitle.map { " (\($0))" } ?? "") }
                if let p = t.pid { line += ", pid \(p)" }
                if let u = t.unit { line += ", unit \(u)" }
                if let c = t.cpuShare { line += ", \(Int(c.rounded()))% of a CPU" }
                if let w = t.watts { line += ", \(watts(w))" }
                if let r = t.runtime { line += ", running \(formatDuration(r.rounded()))" }
                if let b = t.budgetLeft { line += ", \(formatDuration(b.rounded())) of budget left" }
                if let s = row.supervisor { line += ", by bgtask run (pid \(s))" }
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
