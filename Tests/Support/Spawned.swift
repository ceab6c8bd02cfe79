import CLinux
import Foundation

/// A process spawned by the tests, reaped by a thread of its own.
///
/// Not Foundation's `Process`: on Linux its `run()` lists /proc/self/fd and copies each entry's whole
/// 256-byte `d_name`, which reads past the end of the directory buffer once the caller has ~1,300
/// descriptors open (a CI run crashed there, SIGSEGV in memcpy); and it learns of an exit through a
/// socket the child inherits, so an orphan that keeps it open delays the news and leaks the socket.
public final class Spawned: @unchecked Sendable {
    public let processIdentifier: Int32
    private let lock = NSCondition()
    private var waitStatus: Int32?

    /// Spawns `executable` in a process group of its own, with the signal mask and dispositions reset (as
    /// a login shell would start it) and no descriptor but 0, 1 and 2: `stdin`, `stdout`, `stderr`, each
    /// dup'ed from the given descriptor, or /dev/null when nil.
    public init(_ executable: String, _ arguments: [String], environment: [String: String],
                stdin: Int32? = nil, stdout: Int32? = nil, stderr: Int32? = nil) throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        for (target, source) in [(Int32(0), stdin), (1, stdout), (2, stderr)] {
            if let source {
                posix_spawn_file_actions_adddup2(&actions, source, target)
            } else {
                posix_spawn_file_actions_addopen(&actions, target, "/dev/null", target == 0 ? O_RDONLY : O_WRONLY, 0)
            }
        }
        posix_spawn_file_actions_addclosefrom_np(&actions, 3)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t(), all = sigset_t()
        sigemptyset(&none)
        sigfillset(&all)
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setpgroup(&attributes, 0)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        let argv: [UnsafeMutablePointer<CChar>?] = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp: [UnsafeMutablePointer<CChar>?] = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { (argv + envp).forEach { free($0) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
        guard rc == 0 else {
            throw NSError(domain: NSPOSIXErrorDomain, code: Int(rc),
                          userInfo: [NSLocalizedDescriptionKey: "posix_spawn \(executable): \(String(cString: strerror(rc)))"])
        }
        processIdentifier = pid
        Thread.detachNewThread { [self] in
            var status: Int32 = 0
            while waitpid(processIdentifier, &status, 0) == -1 && errno == EINTR {}
            lock.lock()
            waitStatus = status
            lock.broadcast()
            lock.unlock()
        }
    }

    public var isRunning: Bool {
        lock.lock()
        defer { lock.unlock() }
        return waitStatus == nil
    }

    /// Waits until the process has been reaped or the deadline passes; true if it has.
    public func wait(until deadline: Date) -> Bool {
        lock.lock()
        defer { lock.unlock() }
        while waitStatus == nil {
            if !lock.wait(until: deadline) { return waitStatus != nil }
        }
        return true
    }

    /// The exit code, or the number of the signal that ended it (as Foundation's `terminationStatus`).
    public var terminationStatus: Int32 {
        lock.lock()
        defer { lock.unlock() }
        guard let s = waitStatus else { preconditionFailure("\(processIdentifier) is still running") }
        return s & 0x7f == 0 ? (s >> 8) & 0xff : s & 0x7f
    }

    /// True when a signal ended the process.
    public var wasSignalled: Bool {
        lock.lock()
        defer { lock.unlock() }
        guard let s = waitStatus else { return false }
        return s & 0x7f != 0 && s & 0x7f != 0x7f
    }

    public func terminate() { kill(processIdentifier, SIGTERM) }
    public func interrupt() { kill(processIdentifier, SIGINT) }
}

/// A close-on-exec pipe, (read, write).
func closeOnExecPipe() throws -> (Int32, Int32) {
    var fds: [Int32] = [-1, -1]
    guard pipe2(&fds, O_CLOEXEC) == 0 else {
        throw NSError(domain: NSPOSIXErrorDomain, code: Int(errno), userInfo: [NSLocalizedDescriptionKey: "pipe2"])
    }
    return (fds[0], fds[1])
}

/// Reads `fds` until each has reached end of file, handing every chunk to `chunk(index, data)`, then closes
/// them. With a deadline, gives up (closing them) when it passes; returns false then.
@discardableResult
func drain(_ fds: [Int32], until deadline: Date? = nil, _ chunk: (Int, Data) -> Void) -> Bool {
    var open = fds.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
    var alive = open.count
    var buffer = [UInt8](repeating: 0, count: 65536)
    defer { fds.forEach { close($0) } }
    while alive > 0 {
        var timeout: Int32 = -1
        if let deadline {
            let left = deadline.timeIntervalSinceNow
            if left <= 0 { return false }
            timeout = Int32(min(left * 1000 + 1, 60_000))
        }
        let n = poll(&open, nfds_t(open.count), timeout)
        if n < 0 { if errno == EINTR { continue }; return false }
        for i in open.indices where open[i].fd >= 0 && open[i].revents != 0 {
            let got = buffer.withUnsafeMutableBytes { read(open[i].fd, $0.baseAddress, $0.count) }
            if got > 0 {
                chunk(i, Data(buffer[0..<got]))
            } else if got == 0 || (errno != EINTR && errno != EAGAIN) {
                open[i].fd = -1   // poll ignores negative descriptors
                alive -= 1
            }
        }
    }
    return true
}
