import Foundation

/// A child process whose stdout is read line by line, with deadlines instead of sleeps.
public final class Child: @unchecked Sendable {
    public let process = Process()
    private let lock = NSCondition()
    private var lines: [String] = []
    private var partial = Data()
    private var errLines: [String] = []
    private var errPartial = Data()
    private var closed = false
    public private(set) var stderr = ""
    /// Everything read from stdout so far (for a failing test's message).
    public private(set) var stdout = ""
    private let exited = DispatchSemaphore(value: 0)

    /// The environment right now (umockdev's setenv of UMOCKDEV_DIR included), plus overrides.
    public static func environment(_ overrides: [String: String?] = [:]) -> [String: String] {
        var env: [String: String] = [:]
        var p = environ
        while let e = p.pointee {
            let s = String(cString: e)
            if let eq = s.firstIndex(of: "=") { env[String(s[..<eq])] = String(s[s.index(after: eq)...]) }
            p += 1
        }
        for (k, v) in overrides { env[k] = v }
        return env
    }

    public init(_ executable: String, _ arguments: [String], environment: [String: String] = Child.environment()) throws {
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.environment = environment
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = FileHandle.nullDevice
        out.fileHandleForReading.readabilityHandler = { [weak self] h in
            let d = h.availableData
            self?.feed(d)
        }
        err.fileHandleForReading.readabilityHandler = { [weak self] h in
            let d = h.availableData
            guard let self, !d.isEmpty else { return }
            self.lock.lock()
            self.stderr += String(decoding: d, as: UTF8.self)
            self.errPartial.append(d)
            while let nl = self.errPartial.firstIndex(of: 0x0A) {
                self.errLines.append(String(decoding: self.errPartial[self.errPartial.startIndex..<nl], as: UTF8.self))
                self.errPartial.removeSubrange(self.errPartial.startIndex...nl)
            }
            self.lock.broadcast()
            self.lock.unlock()
        }
        process.terminationHandler = { [exited] _ in exited.signal() }
        try process.run()
    }

    private func feed(_ d: Data) {
        lock.lock()
        defer { lock.broadcast(); lock.unlock() }
        if d.isEmpty { closed = true; return }
        stdout += String(decoding: d, as: UTF8.self)
        partial.append(d)
        while let nl = partial.firstIndex(of: 0x0A) {
            lines.append(String(decoding: partial[partial.startIndex..<nl], as: UTF8.self))
            partial.removeSubrange(partial.startIndex...nl)
        }
    }

    /// The next line satisfying `match`, skipping others; nil at the deadline or at EOF.
    public func line(within seconds: Double, where match: (String) -> Bool = { _ in true }) -> String? {
        let deadline = Date().addingTimeInterval(seconds)
        lock.lock()
        defer { lock.unlock() }
        while true {
            while !lines.isEmpty {
                let l = lines.removeFirst()
                if match(l) { return l }
            }
            if closed { return nil }
            if !lock.wait(until: deadline) { return nil }
        }
    }

    /// The next stderr line satisfying `match`; nil at the deadline or when stdout has closed.
    public func errorLine(within seconds: Double, where match: (String) -> Bool = { _ in true }) -> String? {
        let deadline = Date().addingTimeInterval(seconds)
        lock.lock()
        defer { lock.unlock() }
        while true {
            while !errLines.isEmpty {
                let l = errLines.removeFirst()
                if match(l) { return l }
            }
            if !lock.wait(until: deadline) { return nil }
        }
    }

    /// Waits for the process to exit (bounded) and returns its status, or nil.
    public func waitExit(within seconds: Double) -> Int32? {
        guard exited.wait(timeout: .now() + seconds) == .success else { return nil }
        exited.signal()
        return process.terminationStatus
    }

    /// SIGTERM, a grace period, then SIGKILL (upowerd, for one, may not exit on SIGTERM).
    public func stop(grace: Double = 3) {
        guard !stopped else { return }
        stopped = true
        // Bounded throughout: Foundation learns of an exit through a socket the child inherits, so a
        // grandchild that outlives it (an orphaned command) can delay the news indefinitely.
        if process.isRunning {
            process.terminate()
            if exited.wait(timeout: .now() + grace) == .timedOut {
                kill(process.processIdentifier, SIGKILL)
                _ = exited.wait(timeout: .now() + 5)
            }
        } else {
            _ = exited.wait(timeout: .now() + 5)
        }
    }
    private var stopped = false

    /// Runs to completion and returns (status, stdout, stderr); killed (SIGKILL, status 9 by signal) if it
    /// is still running after `deadline` seconds, so no test waits for ever on a hung child.
    public static func run(_ executable: String, _ arguments: [String],
                           environment: [String: String] = Child.environment(), deadline: Double = 60) throws -> (Int32, String, String) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: executable)
        p.arguments = arguments
        p.environment = environment
        let out = Pipe(), err = Pipe()
        p.standardOutput = out
        p.standardError = err
        p.standardInput = FileHandle.nullDevice
        try p.run()
        let pid = p.processIdentifier
        let timer = DispatchSource.makeTimerSource(queue: .global())
        timer.schedule(deadline: .now() + deadline)
        timer.setEventHandler { kill(pid, SIGKILL) }
        timer.resume()
        defer { timer.cancel() }
        let o = out.fileHandleForReading.readDataToEndOfFile()
        let e = err.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        return (p.terminationStatus, String(decoding: o, as: UTF8.self), String(decoding: e, as: UTF8.self))
    }

    /// The built `bgtaskd` beside `bgtask`.
    public static var bgtaskdPath: String {
        URL(fileURLWithPath: bgtaskPath).deletingLastPathComponent().appendingPathComponent("bgtaskd").path
    }

    /// The built `bgtask` beside the running test or benchmark binary (or `BGTASK_BIN`).
    public static var bgtaskPath: String {
        if let p = ProcessInfo.processInfo.environment["BGTASK_BIN"] { return p }
        return URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
            .deletingLastPathComponent().appendingPathComponent("bgtask").path
    }
}
