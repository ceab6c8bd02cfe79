import Foundation

/// A child process whose stdout is read line by line, with deadlines instead of sleeps.
public final class Child: @unchecked Sendable {
    public let process: Spawned
    private let lock = NSCondition()
    private var lines: [String] = []
    private var partial = Data()
    private var errLines: [String] = []
    private var errPartial = Data()
    private var closed = false
    public private(set) var stderr = ""
    /// Everything read from stdout so far (for a failing test's message).
    public private(set) var stdout = ""

    /// The environment right now (umockdev's setenv of UMOCKDEV_DIR included), plus overrides.
    public static func environment(_ overrides: [String: String?] = [:]) -> [String: String] {
        var env: [String: String] = [:]
        var p = environ
        while let e = p.pointee {
            let s = String(cString: e)
            if let eq = s.firstIndex(of: "=") { env[String(s[..<eq])] = String(s[s.index(after: eq)...]) }
            p += 1
        }
        // The machine's own session bus (a desktop's idle monitor) must not decide a test: one is named where needed.
        env["DBUS_SESSION_BUS_ADDRESS"] = "unix:path=/nonexistent/bgtask-tests-have-no-session-bus"
        for (k, v) in overrides { env[k] = v }
        return env
    }

    /// With `stdin`, the child reads what `write(_:)` sends (else /dev/null).
    public init(_ executable: String, _ arguments: [String], environment: [String: String] = Child.environment(), stdin: Bool = false) throws {
        let (outR, outW) = try closeOnExecPipe()
        let (errR, errW) = try closeOnExecPipe()
        let input = stdin ? try closeOnExecPipe() : nil
        defer { close(outW); close(errW); if let i = input { close(i.0) } }
        do {
            process = try Spawned(executable, arguments, environment: environment, stdin: input?.0, stdout: outW, stderr: errW)
        } catch {
            close(outR); close(errR); if let i = input { close(i.1) }
            throw error
        }
        inputFD = input?.1 ?? -1
        // One reader thread for both pipes; it closes them at end of file, so a finished child leaves no descriptor.
        Thread.detachNewThread { [weak self] in
            drain([outR, errR]) { index, data in
                guard let self else { return }
                if index == 0 { self.feed(data) } else { self.feedError(data) }
            }
            self?.feed(Data())
        }
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

    private func feedError(_ d: Data) {
        lock.lock()
        defer { lock.broadcast(); lock.unlock() }
        stderr += String(decoding: d, as: UTF8.self)
        errPartial.append(d)
        while let nl = errPartial.firstIndex(of: 0x0A) {
            errLines.append(String(decoding: errPartial[errPartial.startIndex..<nl], as: UTF8.self))
            errPartial.removeSubrange(errPartial.startIndex...nl)
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

    /// The next stderr line satisfying `match`; nil at the deadline or when both pipes have closed.
    public func errorLine(within seconds: Double, where match: (String) -> Bool = { _ in true }) -> String? {
        let deadline = Date().addingTimeInterval(seconds)
        lock.lock()
        defer { lock.unlock() }
        while true {
            while !errLines.isEmpty {
                let l = errLines.removeFirst()
                if match(l) { return l }
            }
            if closed { return nil }
            if !lock.wait(until: deadline) { return nil }
        }
    }

    /// Waits for the process to exit (bounded) and returns its status, or nil.
    /// The exit status, once the child has exited and what it wrote has been read (a descendant that keeps the
    /// pipes open is waited for at most 2 s more): a test that reads `stderr` right after sees the last line.
    public func waitExit(within seconds: Double) -> Int32? {
        let deadline = Date().addingTimeInterval(seconds)
        guard process.wait(until: deadline) else { return nil }
        lock.lock()
        let until = min(deadline, Date().addingTimeInterval(2))
        while !closed && lock.wait(until: until) {}
        lock.unlock()
        return process.terminationStatus
    }

    /// SIGTERM, a grace period, then SIGKILL (upowerd, for one, may not exit on SIGTERM).
    /// Sends `text` to the child's stdin (a child started with `stdin: true`).
    public func write(_ text: String) {
        guard inputFD >= 0 else { return }
        var bytes = Array(text.utf8)[...]
        while !bytes.isEmpty {
            let n = bytes.withUnsafeBytes { Glibc.write(inputFD, $0.baseAddress, $0.count) }
            if n <= 0 { if errno == EINTR { continue }; return }
            bytes = bytes.dropFirst(n)
        }
    }
    private var inputFD: Int32 = -1
    deinit { if inputFD >= 0 { close(inputFD) } }

    public func stop(grace: Double = 3) {
        guard !stopped else { return }
        stopped = true
        if inputFD >= 0 { close(inputFD); inputFD = -1 }
        if process.isRunning {
            process.terminate()
            if !process.wait(until: Date().addingTimeInterval(grace)) {
                kill(process.processIdentifier, SIGKILL)
                _ = process.wait(until: Date().addingTimeInterval(5))
            }
        }
    }
    private var stopped = false

    /// Runs to completion and returns (status, stdout, stderr); killed (SIGKILL, status 9 by signal) if it
    /// is still running after `deadline` seconds, so no test waits for ever on a hung child.
    public static func run(_ executable: String, _ arguments: [String],
                           environment: [String: String] = Child.environment(), deadline: Double = 60) throws -> (Int32, String, String) {
        let (outR, outW) = try closeOnExecPipe()
        let (errR, errW) = try closeOnExecPipe()
        let p: Spawned
        do {
            defer { close(outW); close(errW) }
            p = try Spawned(executable, arguments, environment: environment, stdout: outW, stderr: errW)
        } catch {
            close(outR); close(errR)
            throw error
        }
        let end = Date().addingTimeInterval(deadline)
        var out = Data(), err = Data()
        // A grandchild that keeps a pipe open past the deadline does not hold the test either.
        drain([outR, errR], until: end) { index, data in if index == 0 { out.append(data) } else { err.append(data) } }
        if !p.wait(until: end) {
            kill(p.processIdentifier, SIGKILL)
            _ = p.wait(until: Date().addingTimeInterval(30))   // SIGKILL cannot be refused
        }
        return (p.terminationStatus, String(decoding: out, as: UTF8.self), String(decoding: err, as: UTF8.self))
    }

    /// The built `bgtaskd` beside `bgtask`.
    public static var bgtaskdPath: String {
        URL(fileURLWithPath: bgtaskPath).deletingLastPathComponent().appendingPathComponent("bgtaskd").path
    }

    /// The full CLI beside `bgtask` (its front hands it every command but a plain submit).
    public static var bgtaskCLIPath: String {
        URL(fileURLWithPath: bgtaskPath).deletingLastPathComponent().appendingPathComponent("bgtask-cli").path
    }

    /// The built `bgtask` beside the running test or benchmark binary (or `BGTASK_BIN`).
    public static var bgtaskPath: String {
        if let p = ProcessInfo.processInfo.environment["BGTASK_BIN"] { return p }
        return URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
            .deletingLastPathComponent().appendingPathComponent("bgtask").path
    }
}
