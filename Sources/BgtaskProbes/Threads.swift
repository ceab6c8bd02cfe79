#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import CLinux

/// A detached OS thread: the udev/netlink poll loop and the GLib main loop each need one of their own,
/// since libudev and GLib objects are bound to the thread that uses them.
public func startThread(_ body: @escaping @Sendable () -> Void) {
    final class Box: @unchecked Sendable { let body: @Sendable () -> Void; init(_ b: @escaping @Sendable () -> Void) { body = b } }
    let ctx = Unmanaged.passRetained(Box(body)).toOpaque()
    var tid = pthread_t()
    let rc = pthread_create(&tid, nil, { raw in
        let box = Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue()
        box.body()
        return nil
    }, ctx)
    precondition(rc == 0, "pthread_create failed: \(rc)")
    pthread_detach(tid)
}

/// A pipe whose read end is polled to wake a thread from another one.
public final class WakePipe: @unchecked Sendable {
    public let readFD: Int32
    let writeFD: Int32
    public init() {
        var fds: [Int32] = [0, 0]
        precondition(bgt_pipe(&fds) == 0, "pipe2 failed")
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
