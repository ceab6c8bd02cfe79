import ArgumentParser
import BgtaskProbes
import Foundation

extension Bgtask {
    struct Watch: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print condition changes as they happen, one line (or JSON object) each.",
            discussion: """
            Event-driven: udev's netlink monitor (power_supply, thermal, net), rtnetlink, and UPower, \
            NetworkManager and power-profiles-daemon signals. Thermal zones have no temperature events, so \
            they are read every --thermal-interval while watching (never when there are no zones).
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
            var recordHandle: FileHandle?
            if let path = record {
                if !FileManager.default.fileExists(atPath: path) {
                    guard FileManager.default.createFile(atPath: path, contents: nil) else {
                        throw ValidationError("--record \(path): cannot create the file")
                    }
                }
                guard let h = FileHandle(forWritingAtPath: path) else { throw ValidationError("--record \(path): cannot open for writing") }
                h.seekToEndOfFile()
                recordHandle = h
            }
            let interval: Int32? = thermalInterval > 0 ? Int32(thermalInterval * 1000) : nil
            let options = WatchOptions(probe: probe.probeOptions, thermalIntervalMs: interval)
            let done = DispatchSemaphore(value: 0)
            let printer = LinePrinter(json: json, record: recordHandle, limit: count)
            ConditionWatcher.start(options, deliver: printer.print, finished: { done.signal() })
            done.wait()
        }
    }
}

/// Prints on the watcher thread; counts lines for --count.
final class LinePrinter: @unchecked Sendable {
    let json: Bool
    let record: FileHandle?
    let limit: Int?
    var printed = 0

    init(json: Bool, record: FileHandle?, limit: Int?) {
        self.json = json
        self.record = record
        self.limit = limit
    }

    func print(_ update: ConditionUpdate) -> Bool {
        let time = WatchLine.timestamp()
        Swift.print(json ? WatchLine.json(update, time: time).rendered : WatchLine.human(update, time: time))
        record?.write(Data((WatchLine.record(update, time: time).rendered + "\n").utf8))
        printed += 1
        return limit.map { printed < $0 } ?? true
    }
}

enum WatchLine {
    static func timestamp() -> String {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return f.string(from: Date())
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
        .object([("time", .string(time)), ("trigger", .string(u.trigger)), ("initial", .bool(u.initial)),
                 ("changed", .array(u.changes.map { .string($0.path) })),
                 ("conditions", .object(u.snapshot.conditions))])
    }

    static func human(_ u: ConditionUpdate, time: String) -> String {
        if u.initial { return "\(time) \(u.snapshot.summary)" }
        let parts = u.changes.filter { $0.path != "power.reason" }.map { c in
            "\(c.path) \(c.old.map(show) ?? "∅") → \(show(c.new))"
        }
        var line = "\(time) \(parts.joined(separator: " · "))"
        if u.changes.contains(where: { $0.path == "power.external" }) { line += " — \(u.snapshot.power.reason)" }
        return line + "  [\(u.trigger)]"
    }

    static func show(_ v: JSONValue) -> String {
        if case .string(let s) = v { return s }
        return v.rendered
    }
}
