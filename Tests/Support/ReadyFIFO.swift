import Foundation

/// A named pipe a child writes a line to once it is ready (a trap set, a file open): the test waits on the
/// pipe's readability, an event, instead of sleeping or polling for a file. Linux reports no hang-up on a FIFO
/// that no writer has opened yet, so the wait lasts until the first write or the deadline.
public final class ReadyFIFO {
    public let path: String
    private let fd: Int32

    public init(in directory: URL, name: String = "ready") throws {
        path = directory.appendingPathComponent(name).path
        guard mkfifo(path, 0o600) == 0 else {
            throw NSError(domain: NSPOSIXErrorDomain, code: Int(errno), userInfo: [NSLocalizedDescriptionKey: "mkfifo \(path): \(String(cString: strerror(errno)))"])
        }
        // Non-blocking: opening the read end does not wait for a writer.
        fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else {
            throw NSError(domain: NSPOSIXErrorDomain, code: Int(errno), userInfo: [NSLocalizedDescriptionKey: "open \(path): \(String(cString: strerror(errno)))"])
        }
    }

    deinit { close(fd) }

    /// True once a writer has written (or opened and closed the pipe) within `seconds`.
    public func wait(within seconds: Double) -> Bool {
        let end = Date().addingTimeInterval(seconds)
        while true {
            let left = end.timeIntervalSinceNow
            guard left > 0 else { return false }
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let n = poll(&p, 1, Int32(min(left * 1000, 60_000).rounded(.up)))
            if n > 0 { return true }
            if n < 0 && errno != EINTR { return false }
        }
    }
}
