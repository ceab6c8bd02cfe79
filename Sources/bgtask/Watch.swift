import BgtaskJSON
import ArgumentParser
import BgtaskCore
import BgtaskProbes
import BgtaskConfig
import BgtaskPolicy
import Dispatch
import Synchronization
#if canImport(Glibc)
@preconcurrency import Glibc
#endif

extension Bgtask {
    struct Watch: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "watch",
            abstract: "Print condition changes as they happen, one line (or JSON object) each.",
            discussion: """
            Event-driven: udev's netlink monitor (power_supply, thermal, net), rtnetlink, and UPower, \
            NetworkManager and power-profiles-daemon signals. Thermal zones have no temperature events, so \
            they are read every --thermal-interval while watching (never when there are no zones). \
            Gauges are said once they have moved enough: storage.free_bytes (of the current directory) when it has \
            moved 1 % of the filesystem or crosses [storage] low_mb, so a busy disk is not a line every read. \
            Ctrl-C, SIGTERM or SIGHUP end it between two lines, so a --record file never ends in half a line; \
            the exit status is then 128 plus the signal's number.
            """)

        @OptionGroup var probe: ProbeOptionsGroup

        @Flag(name: .long, help: "One JSON object per line: {\"time\", \"trigger\", \"initial\", \"changes\": {path: {old, new}}}.")
        var json = false

        @Option(name: .long, help: ArgumentHelp("Also append each update, with every condition, to this JSON-lines file.", valueName: "file"))
        var record: String?

        @Option(name: .long, help: ArgumentHelp("Seconds between thermal zone reads (0: never).", valueName: "seconds"))
        var thermalInterval: Double = 2

        @Option(name: .long, help: ArgumentHelp("Exit after this many lines (the first, the current state, counts).", valueName: "n"))
        var count: Int?

        func validate() throws {
            if thermalInterval < 0 || thermalInterval > 3600 { throw ValidationError("--thermal-interval must be 0...3600 seconds") }
            if let c = count, c < 1 { throw ValidationError("--count must be at least 1") }
        }

        func run() throws {
            var recordFile: UnsafeMutablePointer<FILE>?
            if let path = record {
                guard let f = fopen(path, "a") else {
                    throw ValidationError("--record \(path): \(String(cString: strerror(errno)))")
                }
                recordFile = f
            }
            let interval: Int32? = thermalInterval > 0 ? Int32(thermalInterval * 1000) : nil
            // The policy's thresholds (battery low, [idle] after) make the readings match what `run` and bgtaskd
            // decide from; a broken layer is left out with the warning every command gives, the others' in force.
            let (policy, errors) = PolicyLayers.load(PolicyLayers.sources(extra: []))
            PolicyLayers.warnLeftOut(errors)
            let settings = policy.settings
            let options = WatchOptions(probe: probe.probeOptions.applying(settings), thermalIntervalMs: interval)
            let done = DispatchSemaphore(value: 0)
            let printer = LinePrinter(json: json, record: recordFile, limit: count)
            // Ctrl-C, SIGTERM and SIGHUP end it between two lines, never inside one: a line of the --record
            // trace takes more than one write(2) once it passes stdio's buffer, and a fatal signal can also
            // cut a write short. Blocked here, before any other thread exists, so every thread inherits it.
            var ending = sigset_t()
            sigemptyset(&ending)
            for s in [SIGINT, SIGTERM, SIGHUP] { sigaddset(&ending, s) }
            pthread_sigmask(SIG_BLOCK, &ending, nil)
            let endingSet = ending
            do {
                try startThread {
                    var set = endingSet, sig: Int32 = 0
                    guard sigwait(&set, &sig) == 0 else { return }
                    printer.stop()
                    fflush(nil)
                    _exit(128 + sig)   // as a shell reports a signal's end; no atexit work under running threads
                }
                _ = try ConditionWatcher.start(options, deliver: printer.print, finished: { done.signal() })
            } catch {
                DaemonClient.fail("cannot watch: \(error)", ExitStatus.tempFail)
            }
            done.wait()
            printer.stop()
            if let f = recordFile { fclose(f) }
        }
    }
}

/// Prints on the watcher thread; counts lines for --count. Unchecked: every line, and `printed`, is written
/// under `stopped`'s lock; the rest is set in `init`.
final class LinePrinter: @unchecked Sendable {
    let json: Bool
    let record: UnsafeMutablePointer<FILE>?
    let limit: Int?
    var printed = 0

    init(json: Bool, record: UnsafeMutablePointer<FILE>?, limit: Int?) {
        self.json = json
        self.record = record
        self.limit = limit
    }

    /// Held while a line is printed; true once no more may be.
    private let stopped = Mutex(false)

    /// No line after this one; waits for a line being printed.
    func stop() {
        stopped.withLock { $0 = true }
    }

    func print(_ update: ConditionUpdate) -> Bool {
        stopped.withLock { stopped in
            guard !stopped else { return false }
            return printLine(update)
        }
    }

    private func printLine(_ update: ConditionUpdate) -> Bool {
        let time = WatchLine.timestamp()
        Swift.print(json ? WatchLine.json(update, time: time).rendered : Terminal.safe(WatchLine.human(update, time: time)))
        if let f = record {
            fputs(WatchLine.record(update, time: time).rendered + "\n", f)
            fflush(f)
        }
        printed += 1
        return limit.map { printed < $0 } ?? true
    }
}

enum WatchLine {
    /// RFC 3339 UTC with milliseconds, e.g. 2026-11-22T02:15:52.598Z.
    static func timestamp() -> String {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        var t = ts.tv_sec
        var tm = tm()
        gmtime_r(&t, &tm)
        func pad(_ v: Int32, _ w: Int) -> String { let s = String(v); return String(repeating: "0", count: max(0, w - s.count)) + s }
        return "\(pad(tm.tm_year + 1900, 4))-\(pad(tm.tm_mon + 1, 2))-\(pad(tm.tm_mday, 2))T\(pad(tm.tm_hour, 2)):\(pad(tm.tm_min, 2)):\(pad(tm.tm_sec, 2)).\(pad(Int32(ts.tv_nsec / 1_000_000), 3))Z"
    }

    static func changes(_ u: ConditionUpdate) -> JSONValue {
        .object(u.changes.map { ($0.path, .object([("old", $0.old ?? .null), ("new", $0.new)])) })
    }

    static func json(_ u: ConditionUpdate, time: String) -> JSONValue {
        .object([("time", .string(time)), ("trigger", .string(u.trigger)), ("initial", .bool(u.initial)),
                 ("changes", changes(u))])
    }

    /// The replayable form: every condition, not only what changed.
    static func record(_ u: ConditionUpdate, time: String) -> JSONValue {
        TraceFile.line(time: time, trigger: u.trigger, initial: u.initial, changed: u.changes.map(\.path), conditions: u.snapshot.conditions)
    }

    static func human(_ u: ConditionUpdate, time: String) -> String {
        if u.initial { return "\(time) \(u.snapshot.summary)" }
        if u.changes.isEmpty { return "\(time) no change  [\(u.trigger)]" }
        let parts = u.changes.filter { $0.path != "power.reason" }.map { c in
            "\(c.path) \(c.old.map { show($0, c.path) } ?? "∅") → \(show(c.new, c.path))"
        }
        var line = "\(time) \(parts.joined(separator: " · "))"
        if parts.isEmpty {
            // Only the words changed (another supply now tells the same verdict): say the new words.
            line += "power: \(u.snapshot.power.reason)"
        } else if u.changes.contains(where: { $0.path == "power.external" }) {
            line += " — \(u.snapshot.power.reason)"
        }
        return line + "  [\(u.trigger)]"
    }

    /// A value as a person reads it: a byte count (`…_bytes`) in binary units, as reasons fill it (`--json` keeps the
    /// number).
    static func show(_ v: JSONValue, _ path: String = "") -> String {
        if case .string(let s) = v { return s }
        if path.hasSuffix("_bytes"), case .number(let n) = v { return Policy.bytesText(n) }
        return v.rendered
    }
}
