#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import CGio
import Synchronization

/// A thread of its own running a GLib main loop on a private context: where a library inside an app
/// receives its signals and runs its timers, whatever the app's own main thread does (a GTK loop,
/// `dispatchMain()`, or nothing). It sleeps until a message or a timer arrives — no polling.
/// Unchecked: `timers` is a Mutex; `thread` is set in `init` only; the context and the loop are GLib's, which may be
/// attached to, woken and quit from any thread.
public final class BusThread: @unchecked Sendable {
    let context: OpaquePointer
    let loop: OpaquePointer
    var thread = pthread_t()
    /// Timers by id, so a cancelled one is never called.
    let timers = Mutex<[UInt32: Box]>([:])

    /// Unchecked: its action is handed over, never shared: it is called once, on this thread (GLib's invoke or
    /// timeout on this context), and the caller keeps no reference to it.
    final class Box: @unchecked Sendable {
        let action: () -> Void
        init(_ action: @escaping () -> Void) { self.action = action }
    }

    /// Throws when the thread cannot be made (EAGAIN: the process's or the user's thread limit).
    public init() throws(BusError) {
        context = g_main_context_new()
        loop = g_main_loop_new(context, 0)
        let started = Semaphore()
        let start = Unmanaged.passRetained(StartBox(self, started)).toOpaque()
        let rc = pthread_create(&thread, nil, { arg in
            let b = Unmanaged<StartBox>.fromOpaque(arg!).takeRetainedValue()
            let me = b.owner
            // Signals subscribed from this thread are dispatched to this context.
            g_main_context_push_thread_default(me.context)
            b.started.signal()
            g_main_loop_run(me.loop)
            g_main_context_pop_thread_default(me.context)
            return nil
        }, start)
        guard rc == 0 else {
            Unmanaged<StartBox>.fromOpaque(start).release()
            g_main_loop_unref(loop)
            g_main_context_unref(context)
            throw BusError(BusError.failed, "cannot start the bus thread (pthread_create: \(String(cString: strerror(rc))))")
        }
        started.wait()
    }

    final class ResultBox<T> { var value: T? }

    final class StartBox {
        let owner: BusThread
        let started: Semaphore
        init(_ o: BusThread, _ s: Semaphore) { owner = o; started = s }
    }

    /// Whether the caller is this thread.
    public var isCurrent: Bool { g_main_context_is_owner(context) != 0 }

    /// Runs `body` on this thread and waits for it (at once if called from it).
    public func sync<T>(_ body: @escaping () -> T) -> T {
        if isCurrent { return body() }
        let result = ResultBox<T>()
        let done = Semaphore()
        let box = Box { result.value = body(); done.signal() }
        cgio_invoke(context, { ctx in Unmanaged<Box>.fromOpaque(ctx!).takeRetainedValue().action() },
                    Unmanaged.passRetained(box).toOpaque())
        done.wait()
        return result.value!
    }

    /// Runs `body` on this thread soon.
    public func async(_ body: @escaping () -> Void) {
        cgio_invoke(context, { ctx in Unmanaged<Box>.fromOpaque(ctx!).takeRetainedValue().action() },
                    Unmanaged.passRetained(Box(body)).toOpaque())
    }

    /// Calls `body` once on this thread, `seconds` from now; the returned id cancels it.
    @discardableResult
    public func after(_ seconds: Double, _ body: @escaping () -> Void) -> UInt32 {
        let box = Box(body)
        let ms = guint(max(0, min(3_600_000, (seconds * 1000).rounded(.up))))
        // The id is only known after attaching; the callback looks itself up under the lock.
        return timers.withLock { timers in
            let holder = Holder()
            let id = cgio_timeout(context, ms, { ctx in
                let h = Unmanaged<Holder>.fromOpaque(ctx!).takeRetainedValue()
                h.owner?.takeTimer(h.id)?.action()
            }, Unmanaged.passRetained(holder).toOpaque())
            holder.owner = self
            holder.id = id
            timers[id] = box
            return id
        }
    }

    final class Holder {
        weak var owner: BusThread?
        var id: UInt32 = 0
    }

    func takeTimer(_ id: UInt32) -> Box? {
        timers.withLock { $0.removeValue(forKey: id) }
    }

    /// Cancels a timer from `after`; nothing happens if it already ran.
    public func cancel(_ id: UInt32) {
        guard timers.withLock({ $0.removeValue(forKey: id) }) != nil else { return }
        async { [context] in cgio_source_remove(context, id) }
    }
}

/// A counting semaphore over a mutex and a condition variable. Unchecked: its count is read and written only
/// under its mutex.
final class Semaphore: @unchecked Sendable {
    var m = pthread_mutex_t()
    var c = pthread_cond_t()
    var count = 0
    init() { pthread_mutex_init(&m, nil); pthread_cond_init(&c, nil) }
    deinit { pthread_cond_destroy(&c); pthread_mutex_destroy(&m) }
    func signal() { pthread_mutex_lock(&m); count += 1; pthread_cond_signal(&c); pthread_mutex_unlock(&m) }
    func wait() {
        pthread_mutex_lock(&m)
        while count == 0 { pthread_cond_wait(&c, &m) }
        count -= 1
        pthread_mutex_unlock(&m)
    }
}
