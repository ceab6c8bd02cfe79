#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import CGio

/// A D-Bus value in the shapes the scheduler's interface uses (a small, typed mirror of GVariant).
public indirect enum BusValue: Sendable, Equatable {
    case string(String)
    case bool(Bool)
    case int64(Int64)
    case uint64(UInt64)
    case uint32(UInt32)
    /// `i` (notification ids, hint values)
    case int32(Int32)
    /// `y` (a notification's urgency)
    case byte(UInt8)
    case double(Double)
    case strings([String])
    /// `ay`: text sent as bytes, which GLib neither checks as UTF-8 nor scans for its end (a page of JSON lines is
    /// megabytes: as `s` it was checked on each side of the bus and copied into and out of Swift strings).
    case bytes([UInt8])
    /// `a{sv}`
    case dict([String: BusValue])
    /// `aa{sv}`
    case dicts([[String: BusValue]])
    /// A struct of any members, e.g. `(sv)` or `(sasb)` (systemd's unit properties).
    case tuple([BusValue])
    /// An array whose element type is given (so an empty one has a type too), e.g. `a(sv)`.
    case array(element: String, [BusValue])
    /// `v`
    case variant(BusValue)

    public var string: String? { if case .string(let s) = self { return s }; return nil }
    public var bool: Bool? { if case .bool(let b) = self { return b }; return nil }
    public var strings: [String]? { if case .strings(let s) = self { return s }; return nil }
    public var bytes: [UInt8]? { if case .bytes(let b) = self { return b }; return nil }
    public var number: Double? {
        switch self {
        case .int64(let v): return Double(v)
        case .uint64(let v): return Double(v)
        case .uint32(let v): return Double(v)
        case .int32(let v): return Double(v)
        case .byte(let v): return Double(v)
        case .double(let v): return v
        default: return nil
        }
    }

    /// A new floating GVariant (consumed by whatever it is handed to).
    func variant() -> OpaquePointer {
        switch self {
        case .string(let s): return g_variant_new_string(BusValue.validUTF8(s))
        case .bool(let b): return g_variant_new_boolean(b ? 1 : 0)
        case .int64(let v): return g_variant_new_int64(gint64(v))
        case .uint64(let v): return g_variant_new_uint64(guint64(v))
        case .uint32(let v): return g_variant_new_uint32(v)
        case .int32(let v): return g_variant_new_int32(v)
        case .byte(let v): return g_variant_new_byte(v)
        case .double(let v): return g_variant_new_double(v)
        case .strings(let a):
            var children: [OpaquePointer?] = a.map { g_variant_new_string(BusValue.validUTF8($0)) }
            return cgio_new_array("s", &children, gsize(children.count))
        case .bytes(let b): return b.withUnsafeBufferPointer { cgio_new_bytes($0.baseAddress, gsize($0.count)) }
        case .dict(let d): return BusValue.dictVariant(d)
        case .dicts(let ds):
            var children: [OpaquePointer?] = ds.map { BusValue.dictVariant($0) }
            return cgio_new_array("a{sv}", &children, gsize(children.count))
        case .tuple(let members):
            var children: [OpaquePointer?] = members.map { $0.variant() }
            return g_variant_new_tuple(&children, gsize(children.count))
        case .array(let element, let items):
            var children: [OpaquePointer?] = items.map { $0.variant() }
            return cgio_new_array(element, &children, gsize(children.count))
        case .variant(let inner): return g_variant_new_variant(inner.variant())
        }
    }

    static func dictVariant(_ d: [String: BusValue]) -> OpaquePointer {
        var entries: [OpaquePointer?] = d.keys.sorted().map { k in
            g_variant_new_dict_entry(g_variant_new_string(validUTF8(k)), g_variant_new_variant(d[k]!.variant()))
        }
        return cgio_new_array("{sv}", &entries, gsize(entries.count))
    }

    /// GVariant strings must be UTF-8 without NUL; Swift strings are UTF-8, but may hold NUL.
    static func validUTF8(_ s: String) -> String {
        // memchr over the bytes: a page of JSON lines is megabytes, and a generic `contains` went byte by byte.
        let hasNUL = s.utf8.withContiguousStorageIfAvailable { b in b.baseAddress.map { memchr($0, 0, b.count) != nil } ?? false } ?? s.utf8.contains(0)
        return hasNUL ? String(String.UnicodeScalarView(s.unicodeScalars.map { $0.value == 0 ? "\u{FFFD}" : $0 })) : s
    }

    /// Reads a GVariant of a supported type; nil for anything else.
    public static func from(_ v: OpaquePointer) -> BusValue? {
        let type = String(cString: g_variant_get_type_string(v))
        switch type {
        case "s", "o": return .string(String(cString: g_variant_get_string(v, nil)))
        case "b": return .bool(g_variant_get_boolean(v) != 0)
        case "x": return .int64(Int64(g_variant_get_int64(v)))
        case "t": return .uint64(UInt64(g_variant_get_uint64(v)))
        case "u": return .uint32(g_variant_get_uint32(v))
        case "i": return .int32(g_variant_get_int32(v))
        case "y": return .byte(g_variant_get_byte(v))
        case "d": return .double(g_variant_get_double(v))
        case "v":
            let inner = g_variant_get_variant(v)!
            defer { g_variant_unref(inner) }
            return from(inner)
        case "as":
            return .strings(mapChildren(v) { c in String(cString: g_variant_get_string(c, nil)) })
        case "ay":
            var n: gsize = 0
            guard let p = g_variant_get_fixed_array(v, &n, 1), n > 0 else { return .bytes([]) }
            return .bytes(Array(UnsafeRawBufferPointer(start: p, count: Int(n)).bindMemory(to: UInt8.self)))
        case "a{sv}":
            return .dict(dict(v))
        case "aa{sv}":
            return .dicts(mapChildren(v) { dict($0) })
        default: return nil
        }
    }

    /// Each child of a container, read by `body` while it is alive. (A child of a serialised GVariant — any
    /// message body — is a new instance each time it is fetched; it must not be read after its unref.)
    static func mapChildren<T>(_ v: OpaquePointer, _ body: (OpaquePointer) -> T) -> [T] {
        (0..<Int(g_variant_n_children(v))).map { i in
            let c = g_variant_get_child_value(v, gsize(i))!
            defer { g_variant_unref(c) }
            return body(c)
        }
    }

    /// The values of a tuple or array (nil for a child of a type the interface does not use).
    static func values(_ v: OpaquePointer) -> [BusValue?] { mapChildren(v) { from($0) } }

    static func dict(_ v: OpaquePointer) -> [String: BusValue] {
        var out: [String: BusValue] = [:]
        _ = mapChildren(v) { e in
            let k = g_variant_get_child_value(e, 0)!, val = g_variant_get_child_value(e, 1)!
            defer { g_variant_unref(k); g_variant_unref(val) }
            if let x = from(val) { out[String(cString: g_variant_get_string(k, nil))] = x }
        }
        return out
    }
}

/// A D-Bus error reply, as a Swift error (client side) or to send (server side).
public struct BusError: Error, CustomStringConvertible, Equatable {
    public var name: String
    public var message: String
    public init(_ name: String, _ message: String) {
        self.name = name
        self.message = message
    }
    public var description: String { message }
    /// What this module says when no connection can be made or kept (the peer's own errors keep their names).
    public static let disconnected = "org.freedesktop.DBus.Error.Disconnected"
    public static let timedOut = "org.freedesktop.DBus.Error.TimedOut"
    public static let failed = "org.freedesktop.DBus.Error.Failed"
    /// Not a bus error: the peer answered with a reply of another type than the interface says (this module's
    /// own name; the message says what came and what was expected).
    public static let wrongReply = "io.github.bgtask.Error.WrongReply"
    /// The short form of the name (`NotPermitted`).
    public var shortName: String { name.split(separator: ".").last.map(String.init) ?? name }
}

/// One connection to a message bus (the session bus, or the address given).
/// Unchecked: calls and emits go through the GDBusConnection, which is thread-safe; `subscribe` and `onClosed`
/// change Swift-side lists, so each connection's are made from one thread (bgtaskd's loop; the library's only
/// inside its BusThread's `sync`).
public final class BusConnection: @unchecked Sendable {
    public let raw: OpaquePointer

    public init(address: String? = nil) throws(BusError) {
        if address == nil, let why = BusConnection.noSessionBus() { throw BusError(BusError.disconnected, why) }
        var err: UnsafeMutablePointer<GError>?
        let c: OpaquePointer? = address.map { a in a.withCString { cgio_connect($0, &err) } } ?? cgio_connect(nil, &err)
        guard let c else { throw BusError(BusError.disconnected, BusConnection.take(err)) }
        raw = c
        g_dbus_connection_set_exit_on_close(raw, 0)
    }

    /// A peer-to-peer connection to a server's own socket, not a message bus (systemd's
    /// `$XDG_RUNTIME_DIR/systemd/private`): no bus names; calls and signals go to and come from the peer.
    public init(peerSocket path: String) throws(BusError) {
        var err: UnsafeMutablePointer<GError>?
        guard let c = cgio_connect_peer(path, &err) else { throw BusError(BusError.disconnected, BusConnection.take(err)) }
        raw = c
        g_dbus_connection_set_exit_on_close(raw, 0)
    }

    /// Why there is no session bus to connect to, when none is named ($DBUS_SESSION_BUS_ADDRESS) and none is at its
    /// standard place ($XDG_RUNTIME_DIR/bus): GLib would otherwise try to autolaunch one and say "Cannot autolaunch
    /// D-Bus without X11 $DISPLAY", which is no reason on a server or in a container.
    static func noSessionBus() -> String? {
        if let a = getenv("DBUS_SESSION_BUS_ADDRESS"), a.pointee != 0 { return nil }
        let runtime = getenv("XDG_RUNTIME_DIR").map { String(cString: $0) } ?? ""
        var st = stat()
        if !runtime.isEmpty, stat(runtime + "/bus", &st) == 0 { return nil }
        return "DBUS_SESSION_BUS_ADDRESS is not set, " + (runtime.isEmpty ? "nor XDG_RUNTIME_DIR" : "and there is no " + runtime + "/bus")
    }

    /// A connection of its own to the session bus, not the process's shared one: a library inside an app
    /// must not change what the app's own GDBus connection does (exit-on-close, filters).
    public init(privateSession: Bool) throws(BusError) {
        if let why = BusConnection.noSessionBus() { throw BusError(BusError.disconnected, why) }
        var err: UnsafeMutablePointer<GError>?
        guard let c = cgio_connect_private_session(&err) else { throw BusError(BusError.disconnected, BusConnection.take(err)) }
        raw = c
        g_dbus_connection_set_exit_on_close(raw, 0)
    }

    /// The system bus (logind lives there).
    public init(system: Bool) throws(BusError) {
        var err: UnsafeMutablePointer<GError>?
        guard let c = cgio_system_bus(&err) else { throw BusError(BusError.disconnected, BusConnection.take(err)) }
        raw = c
        g_dbus_connection_set_exit_on_close(raw, 0)
    }

    deinit {
        for s in subscriptions { g_dbus_connection_signal_unsubscribe(raw, s.id) }
        if closedHandlerID != 0 { g_signal_handler_disconnect(UnsafeMutableRawPointer(raw), closedHandlerID) }
        g_object_unref(UnsafeMutableRawPointer(raw))
    }

    final class ClosedHandler {
        let action: () -> Void
        init(_ a: @escaping () -> Void) { action = a }
    }
    var closedHandler: ClosedHandler?
    var closedHandlerID: gulong = 0

    /// Runs `action` when the peer goes away (or the stream fails): a manager that exits, a bus that dies. Not
    /// for a connection this process lets go (the handler is disconnected first). One handler per connection.
    public func onClosed(_ action: @escaping () -> Void) {
        let h = ClosedHandler(action)
        closedHandler = h
        closedHandlerID = cgio_on_closed(raw, { ctx in
            Unmanaged<ClosedHandler>.fromOpaque(ctx!).takeUnretainedValue().action()
        }, Unmanaged.passUnretained(h).toOpaque())
    }

    final class Subscription {
        let handler: (String, String, [BusValue]) -> Void
        var id: guint = 0
        init(_ h: @escaping (String, String, [BusValue]) -> Void) { handler = h }
    }
    var subscriptions: [Subscription] = []

    /// Calls `handler(member, args)` for each matching signal, on the main loop of the calling thread.
    public func subscribe(sender: String, interface: String, member: String, path: String,
                          _ handler: @escaping (String, [BusValue]) -> Void) {
        subscribe(sender: sender, interface: interface, member: member, anyPath: false, path: path) { _, m, a in handler(m, a) }
    }

    /// The same for signals from any object of `sender` (`handler(path, member, args)`): one subscription for
    /// objects that come and go (KDE's job views).
    public func subscribe(sender: String?, interface: String, member: String,
                          _ handler: @escaping (String, String, [BusValue]) -> Void) {
        subscribe(sender: sender, interface: interface, member: member, anyPath: true, path: nil, handler)
    }

    func subscribe(sender: String?, interface: String, member: String, anyPath: Bool, path: String?,
                   _ handler: @escaping (String, String, [BusValue]) -> Void) {
        let sub = Subscription(handler)
        let fn: cgio_signal_fn = { ctx, _, path, member, params in
            let s = Unmanaged<Subscription>.fromOpaque(ctx!).takeUnretainedValue()
            s.handler(path.map { String(cString: $0) } ?? "", member.map { String(cString: $0) } ?? "",
                      params.map { BusValue.values($0).compactMap { $0 } } ?? [])
        }
        if let path { sub.id = cgio_subscribe(raw, sender, interface, member, path, fn, Unmanaged.passUnretained(sub).toOpaque()) }
        else { sub.id = cgio_subscribe(raw, sender, interface, member, nil, fn, Unmanaged.passUnretained(sub).toOpaque()) }
        subscriptions.append(sub)
    }

    /// logind's `Inhibit`: the lock is the returned descriptor (closing it releases the lock).
    public func inhibit(what: String, who: String, why: String, mode: String) throws(BusError) -> Int32 {
        var err: UnsafeMutablePointer<GError>?
        let fd = cgio_logind_inhibit(raw, what, who, why, mode, &err)
        if fd < 0 { throw BusError(BusError.failed, BusConnection.take(err)) }
        return fd
    }

    /// logind's delay locks, one call per kind. A combined `sleep:shutdown` is granted only if the caller may
    /// take the strictest of the two (logind 252 checks it against an action that wants an active local
    /// session), so a lingering user after logout, an ssh user or a headless box would get neither. The
    /// descriptors of the kinds taken, and why each other kind was refused.
    public func delayLocks(_ kinds: [String], who: String, why: String) -> (held: [String: Int32], refused: [String: String]) {
        var held: [String: Int32] = [:], refused: [String: String] = [:]
        for k in kinds {
            do { held[k] = try inhibit(what: k, who: who, why: why, mode: "delay") } catch { refused[k] = error.message }
        }
        return (held, refused)
    }

    /// logind's `InhibitDelayMaxUSec` in seconds (how long a delay lock may hold off sleep), 5 if it cannot be read.
    public func inhibitDelayMax() -> Double {
        let r = try? call("Get", [.string("org.freedesktop.login1.Manager"), .string("InhibitDelayMaxUSec")],
                          destination: "org.freedesktop.login1", path: "/org/freedesktop/login1",
                          interface: "org.freedesktop.DBus.Properties", timeoutMs: 2_000)
        var v = r?.first
        if case .variant(let inner)? = v { v = inner }
        guard let us = v?.number, us > 0 else { return 5 }
        return us / 1_000_000
    }

    static func take(_ err: UnsafeMutablePointer<GError>?) -> String {
        guard let e = err else { return "unknown error" }
        defer { g_error_free(e) }
        return String(cString: e.pointee.message)
    }

    /// Calls a method and waits for the reply (bounded by `timeoutMs`). Returns the reply's arguments.
    /// With `replySignature` (the out arguments' tuple: `(s)`, `(aa{sv}s)`, `()` for none), a reply of any other type is
    /// `BusError.wrongReply`: a peer is never trusted to answer as its interface says.
    public func call(_ method: String, _ args: [BusValue], destination: String?, path: String,
                     interface: String, timeoutMs: Int32 = 25_000, replySignature: String? = nil) throws(BusError) -> [BusValue] {
        var children: [OpaquePointer?] = args.map { $0.variant() }
        let params = g_variant_new_tuple(&children, gsize(children.count))
        var err: UnsafeMutablePointer<GError>?
        guard let reply = g_dbus_connection_call_sync(raw, destination, path, interface, method, params, nil,
                                                      G_DBUS_CALL_FLAGS_NONE, timeoutMs, nil, &err) else {
            guard let e = err else { throw BusError(BusError.failed, "no reply") }
            let remote = g_dbus_error_get_remote_error(e).map { p -> String in defer { g_free(p) }; return String(cString: p) }
            if remote != nil { g_dbus_error_strip_remote_error(e) }
            let message = String(cString: e.pointee.message)
            let name = remote ?? (e.pointee.domain != g_io_error_quark() ? BusError.failed
                                  : e.pointee.code == Int32(G_IO_ERROR_TIMED_OUT.rawValue) ? BusError.timedOut : BusError.disconnected)
            g_error_free(e)
            throw BusError(name, message)
        }
        defer { g_variant_unref(reply) }
        if let want = replySignature {
            let got = String(cString: g_variant_get_type_string(reply))
            if got != want {
                throw BusError(BusError.wrongReply, "\(destination ?? "the peer") answered \(method) with \(got), not \(want)")
            }
        }
        return BusValue.values(reply).compactMap { $0 }
    }

    final class Reply {
        let handler: (Result<[BusValue], BusError>) -> Void
        init(_ h: @escaping (Result<[BusValue], BusError>) -> Void) { handler = h }
    }

    /// Calls a method without waiting: `reply` runs on the calling thread's main loop when the answer (or
    /// the timeout) comes. For peers that may be slow (a notification server), so the loop never stalls.
    public func callAsync(_ method: String, _ args: [BusValue], destination: String, path: String, interface: String,
                          timeoutMs: Int32 = 5_000, reply: @escaping (Result<[BusValue], BusError>) -> Void) {
        var children: [OpaquePointer?] = args.map { $0.variant() }
        let params = g_variant_new_tuple(&children, gsize(children.count))
        cgio_call_async(raw, destination, path, interface, method, params, timeoutMs, { ctx, r, name, message in
            let box = Unmanaged<Reply>.fromOpaque(ctx!).takeRetainedValue()
            if let r {
                box.handler(.success(BusValue.values(r).compactMap { $0 }))
            } else {
                box.handler(.failure(BusError(name.map { String(cString: $0) } ?? BusError.failed,
                                              message.map { String(cString: $0) } ?? "no reply")))
            }
        }, Unmanaged.passRetained(Reply(reply)).toOpaque())
    }

    /// Runs the calling thread's main context until `done()` holds: a client without a main loop of its own waits
    /// so for a `callAsync` reply (one it asked for before it began to work on the previous one).
    public static func iterate(until done: () -> Bool) {
        let context = g_main_context_get_thread_default() ?? g_main_context_default()
        while !done() { g_main_context_iteration(context, 1) }
    }

    /// Whether a name has an owner on the bus (asks the bus itself, which answers at once).
    public func hasOwner(_ name: String) -> Bool {
        let r = try? call("NameHasOwner", [.string(name)], destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                          interface: "org.freedesktop.DBus", timeoutMs: 2_000)
        return r?.first?.bool ?? false
    }

    /// Emits a signal to every listener.
    public func emit(_ member: String, _ args: [BusValue], path: String, interface: String) {
        var children: [OpaquePointer?] = args.map { $0.variant() }
        let params = g_variant_new_tuple(&children, gsize(children.count))
        g_dbus_connection_emit_signal(raw, nil, path, interface, member, params, nil)
    }

    /// Emits a signal to one connection only (an app's launches and expirations).
    public func emitTo(_ destination: String, _ member: String, _ args: [BusValue], path: String, interface: String) {
        var children: [OpaquePointer?] = args.map { $0.variant() }
        let params = g_variant_new_tuple(&children, gsize(children.count))
        g_dbus_connection_emit_signal(raw, destination, path, interface, member, params, nil)
    }

    /// This connection's unique name on the bus (":1.42").
    public var uniqueName: String { g_dbus_connection_get_unique_name(raw).map { String(cString: $0) } ?? "" }

    /// Sends what is queued (signals) before the process goes on or exits.
    public func flush() { g_dbus_connection_flush_sync(raw, nil, nil) }
}

/// A method call received by an exported object.
public struct BusCall {
    public let sender: String
    public let method: String
    /// The arguments, read (nil for any of a type the interface does not use).
    public let args: [BusValue?]
    /// The argument types as sent, e.g. "(a{sv}as)" (GDBus checks them against the XML before we see the call).
    public let signature: String

    public init(sender: String, method: String, args: [BusValue?], signature: String) {
        self.sender = sender
        self.method = method
        self.args = args
        self.signature = signature
    }
}

/// A caller's credentials as the bus gave them. `pidfd` is the bus's own handle on the process (dbus-daemon
/// 1.15.2+, dbus-broker), which cannot be confused with a later process that reuses the pid; closed with this.
public final class PeerCredentials {
    public let uid: uid_t?
    public let pid: pid_t?
    public let pidfd: Int32
    /// The LSM label (AppArmor's `snap.NAME.APP (enforce)`, SELinux's context), when the bus knows one.
    public let securityLabel: String?
    public init(uid: uid_t?, pid: pid_t?, pidfd: Int32, securityLabel: String?) {
        self.uid = uid
        self.pid = pid
        self.pidfd = pidfd
        self.securityLabel = securityLabel
    }
    deinit { if pidfd >= 0 { close(pidfd) } }
}

/// An object exported on a connection; every call goes to `handle`, whose result is the reply.
public final class BusObject {
    public typealias Handler = (BusCall) -> Result<[BusValue], BusError>
    let connection: BusConnection
    var registration: guint = 0
    let handle: Handler

    public init(connection: BusConnection, path: String, xml: String, handle: @escaping Handler) throws(BusError) {
        self.connection = connection
        self.handle = handle
        var err: UnsafeMutablePointer<GError>?
        let ctx = Unmanaged.passUnretained(self).toOpaque()
        registration = cgio_register(connection.raw, path, xml, { ctx, sender, method, params, invocation in
            let me = Unmanaged<BusObject>.fromOpaque(ctx!).takeUnretainedValue()
            me.dispatch(sender: sender.map { String(cString: $0) } ?? "", method: String(cString: method!), params: params!,
                        invocation: invocation!)
        }, ctx, &err)
        if registration == 0 { throw BusError(BusError.failed, BusConnection.take(err)) }
    }

    deinit { if registration != 0 { g_dbus_connection_unregister_object(connection.raw, registration) } }

    /// A call's arguments at most this large (serialized), and a dictionary argument at most this many keys:
    /// refused before they are read into Swift values, so a hostile call cannot stall the loop or grow memory.
    public var maxArgumentBytes = 1 << 20
    public var maxDictionaryKeys = 256
    /// Told after such a call is refused (GDBus read all of it first: memory to give back).
    public var onOversized: (() -> Void)?

    func dispatch(sender: String, method: String, params: OpaquePointer, invocation: OpaquePointer) {
        if let why = oversized(params) {
            g_dbus_method_invocation_return_dbus_error(invocation, "org.freedesktop.DBus.Error.LimitsExceeded", why)
            onOversized?()
            return
        }
        let call = BusCall(sender: sender, method: method, args: BusValue.values(params),
                           signature: String(cString: g_variant_get_type_string(params)))
        switch handle(call) {
        case .success(let values):
            var children: [OpaquePointer?] = values.map { $0.variant() }
            g_dbus_method_invocation_return_value(invocation, g_variant_new_tuple(&children, gsize(children.count)))
        case .failure(let e):
            g_dbus_method_invocation_return_dbus_error(invocation, e.name, BusValue.validUTF8(e.message))
        }
    }

    func oversized(_ params: OpaquePointer) -> String? {
        let size = Int(g_variant_get_size(params))
        if size > maxArgumentBytes { return "the call's arguments are \(size) bytes, over \(maxArgumentBytes)" }
        for i in 0..<Int(g_variant_n_children(params)) {
            let child = g_variant_get_child_value(params, gsize(i))!
            defer { g_variant_unref(child) }
            if String(cString: g_variant_get_type_string(child)).hasPrefix("a{"), Int(g_variant_n_children(child)) > maxDictionaryKeys {
                return "argument \(i + 1) has \(g_variant_n_children(child)) keys, over \(maxDictionaryKeys)"
            }
        }
        return nil
    }

    /// What the bus says of a caller (never what the caller claims): `GetConnectionCredentials`, asked anew
    /// each time (the daemon keeps what it concludes, per unique name).
    public func credentials(of sender: String) -> PeerCredentials? {
        var c = cgio_credentials()
        var err: UnsafeMutablePointer<GError>?
        guard cgio_sender_credentials(connection.raw, sender, &c, &err) != 0 else {
            if let e = err { g_error_free(e) }
            return nil
        }
        let label = withUnsafeBytes(of: c.label) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        return PeerCredentials(uid: c.uid == UInt32.max ? nil : uid_t(c.uid), pid: c.pid == 0 ? nil : pid_t(c.pid),
                               pidfd: c.pidfd, securityLabel: label.isEmpty ? nil : label)
    }

    /// Takes the well-known name; false if another process has it.
    public func ownName(_ name: String) throws(BusError) -> Bool {
        var err: UnsafeMutablePointer<GError>?
        let r = cgio_request_name(connection.raw, name, &err)
        if r == 0 { throw BusError(BusError.failed, BusConnection.take(err)) }
        return r == 1 || r == 4   // primary owner, or already the owner
    }
}
