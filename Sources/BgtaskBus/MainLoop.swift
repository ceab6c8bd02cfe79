#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import CGio

/// The GLib main loop of the calling thread's default context, with file descriptors and one re-armable
/// timer. GDBus dispatches method calls here; nothing wakes it unless something happens (no Swift
/// concurrency, which wakes a process every second on Linux).
public final class MainLoop {
    let loop: OpaquePointer
    var watches: [Watch] = []
    var timer: guint = 0
    var timerAction: (() -> Void)?
    var later: [Later] = []

    final class Later {
        /// Dropped once it has run: what it captured (bgtaskd's restore held the whole queue read from disk)
        /// is freed then, not when the next `after` sweeps the list.
        var action: (() -> Void)?
        var id: guint = 0
        init(_ action: @escaping () -> Void) { self.action = action }
    }

    final class Watch {
        let action: () -> Void
        var id: guint = 0
        init(_ action: @escaping () -> Void) { self.action = action }
    }

    public init() { loop = g_main_loop_new(nil, 0) }
    deinit {
        if timer != 0 { g_source_remove(timer) }
        for w in watches { g_source_remove(w.id) }
        for l in later where l.id != 0 { g_source_remove(l.id) }
        g_main_loop_unref(loop)
    }

    /// Runs what is due now on the default context, without waiting for anything (a loop driven by its caller,
    /// as a test drives a daemon in its own thread).
    public func runPending() {
        while g_main_context_pending(nil) != 0 { g_main_context_iteration(nil, 0) }
    }

    /// Runs the default context, waiting for its events, until `done` says so or `seconds` have passed (a caller
    /// that drives the loop itself and waits for something it delivers). Whether `done` came true.
    @discardableResult
    public func iterate(until done: () -> Bool, within seconds: Double) -> Bool {
        // The flag outlives this call's stack frame only as long as its timeout source: both go in the defer.
        let late = UnsafeMutablePointer<Bool>.allocate(capacity: 1)
        late.initialize(to: false)
        let id = g_timeout_add(guint(max(1, seconds * 1000)), { ctx in
            ctx!.assumingMemoryBound(to: Bool.self).pointee = true
            return 0
        }, late)
        defer {
            if !late.pointee { g_source_remove(id) }
            late.deallocate()
        }
        while !done() {
            if late.pointee { return false }
            g_main_context_iteration(nil, 1)
        }
        return true
    }

    /// Calls `action` whenever `fd` is readable (or hung up), for as long as the loop lives.
    public func watch(fd: Int32, _ action: @escaping () -> Void) {
        let w = Watch(action)
        w.id = g_unix_fd_add(fd, GIOCondition(G_IO_IN.rawValue | G_IO_HUP.rawValue | G_IO_ERR.rawValue), { _, _, ctx in
            Unmanaged<Watch>.fromOpaque(ctx!).takeUnretainedValue().action()
            return 1
        }, Unmanaged.passUnretained(w).toOpaque())
        watches.append(w)
    }

    /// One timer: fires once, `seconds` from now (rounded up to a millisecond); nil cancels it.
    public func setTimer(in seconds: Double?, _ action: @escaping () -> Void) {
        if timer != 0 { g_source_remove(timer); timer = 0 }
        guard let s = seconds else { timerAction = nil; return }
        timerAction = action
        let ms = guint(max(0, min(3_600_000, (s * 1000).rounded(.up))))
        timer = g_timeout_add(ms, { ctx in
            let me = Unmanaged<MainLoop>.fromOpaque(ctx!).takeUnretainedValue()
            me.timer = 0
            me.timerAction?()
            return 0
        }, Unmanaged.passUnretained(self).toOpaque())
    }

    /// Calls `action` once, `seconds` from now, independently of the main timer (debounces, retries).
    public func after(_ seconds: Double, _ action: @escaping () -> Void) {
        let l = Later(action)
        later.append(l)
        l.id = g_timeout_add(guint(max(0, min(3_600_000, (seconds * 1000).rounded(.up)))), { ctx in
            let l = Unmanaged<Later>.fromOpaque(ctx!).takeUnretainedValue()
            let action = l.action
            l.action = nil
            l.id = 0
            action?()
            return 0
        }, Unmanaged.passUnretained(l).toOpaque())
        later.removeAll { $0.id == 0 && $0 !== l }
    }

    public func run() { g_main_loop_run(loop) }
    public func quit() { g_main_loop_quit(loop) }
}
