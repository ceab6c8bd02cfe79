#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import CLinux
import BgtaskFiles

/// A detached OS thread: the udev/netlink poll loop and the GLib main loop each need one of their own,
/// since libudev and GLib objects are bound to the thread that uses them.
/// Throws when the thread cannot be made (EAGAIN: the process's or the user's thread limit).
public func startThread(_ body: @escaping @Sendable () -> Void) throws(SystemError) {
    // Unchecked: it holds only a @Sendable closure, handed once to the new thread.
    final class Box: @unchecked Sendable { let body: @Sendable () -> Void; init(_ b: @escaping @Sendable () -> Void) { body = b } }
    let ctx = Unmanaged.passRetained(Box(body)).toOpaque()
    var tid = pthread_t()
    let rc = pthread_create(&tid, nil, { raw in
        let box = Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue()
        box.body()
        return nil
    }, ctx)
    guard rc == 0 else {
        Unmanaged<Box>.fromOpaque(ctx).release()
        throw SystemError("pthread_create", path: "", errno: rc)
    }
    pthread_detach(tid)
}

/// A pipe whose read end is polled to wake a thread from another one.
/// Unchecked: its descriptors never change; writing and reading them are system calls, safe from any thread.
public final class WakePipe: @unchecked Sendable {
    public let readFD: Int32
    let writeFD: Int32
    /// Throws when no pipe can be made (EMFILE, ENFILE).
    public init() throws(SystemError) {
        var fds: [Int32] = [0, 0]
        guard bgt_pipe(&fds) == 0 else { throw SystemError("pipe2", path: "", errno: errno) }
        readFD = fds[0]; writeFD = fds[1]
    }
    deinit { close(readFD); close(writeFD) }
    public func wake() { var b: UInt8 = 1; _ = write(writeFD, &b, 1) }
    public func drain() { var buf = [UInt8](repeating: 0, count: 64); while read(readFD, &buf, 64) > 0 {} }
}

/// rtnetlink: link and route changes, which produce no uevents (operstate, carrier, default routes).
final class RouteMonitor {
    let fd: Int32
    init?() {
        let s = bgt_rtnetlink_socket()
        guard s >= 0 else { return nil }
        fd = s
    }
    deinit { close(fd) }
    /// We re-read sysfs and /proc rather than parse messages: drain and report whether anything came,
    /// and whether the kernel dropped messages (ENOBUFS: the buffer overflowed, changes were lost).
    func drain() -> (got: Bool, overflow: Bool) {
        var buf = [UInt8](repeating: 0, count: 8192)
        var got = false, overflow = false
        while true {
            let n = recv(fd, &buf, buf.count, 0)
            if n > 0 { got = true; continue }
            if n < 0 && errno == EINTR { continue }
            // Reported once, then the socket reads on: keep draining what came after.
            if n < 0 && errno == ENOBUFS && !overflow { overflow = true; continue }
            break
        }
        return (got, overflow)
    }
}
