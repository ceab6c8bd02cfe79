import BgtaskBus

/// A value from the bus that is not what the interface says: the key it was under, and why, for InvalidArgs.
public struct ProtocolError: Error, Sendable, Equatable, CustomStringConvertible {
    public let key: String
    public let message: String
    public init(key: String, _ message: String) {
        self.key = key
        self.message = message
    }
    public var description: String { message }
    /// As the daemon replies with it.
    public var busError: BusError { SchedulerError.invalidArgs(message) }
}

extension BusValue {
    /// Whole numbers of any integer type (and doubles with no fraction): busctl and gdbus callers pick their own.
    func whole<T: FixedWidthInteger>(_: T.Type) -> T? {
        switch self {
        case .uint64(let v): return T(exactly: v)
        case .uint32(let v): return T(exactly: v)
        case .int64(let v): return T(exactly: v)
        case .int32(let v): return T(exactly: v)
        case .byte(let v): return T(exactly: v)
        case .double(let v): return v.isFinite ? T(exactly: v) : nil
        default: return nil
        }
    }
    var wholeUInt32: UInt32? { whole(UInt32.self) }
    var wholeUInt64: UInt64? { whole(UInt64.self) }
    var wholeInt64: Int64? { whole(Int64.self) }
}

extension BusConnection {
    /// Calls a method of bgtaskd and waits for the reply (bounded by `timeoutMs`).
    public func call(_ method: SchedulerMethod, _ args: [BusValue] = [], timeoutMs: Int32 = 25_000) throws(BusError) -> [BusValue] {
        try call(method.rawValue, args, destination: SchedulerBus.name, path: SchedulerBus.path, interface: SchedulerBus.interface, timeoutMs: timeoutMs,
                 replySignature: method.replySignature)
    }

    /// One page of the waiting tasks (`ListPendingPage`): its tasks, and the cursor of the next page (nil after the last).
    public func pendingPage(_ range: PageRange, timeoutMs: Int32 = 25_000) throws(BusError) -> (tasks: [[String: BusValue]], next: String?) {
        let reply = try call(.listPendingPage, [.dict(range.variant)], timeoutMs: timeoutMs)
        guard reply.count == 2, case .dicts(let tasks) = reply[0], let next = reply[1].string else {
            throw BusError(BusError.wrongReply, "\(SchedulerBus.name) answered ListPendingPage with other than \(SchedulerMethod.listPendingPage.replySignature)")
        }
        return (tasks, next.isEmpty ? nil : next)
    }

    /// One page of the waiting tasks as JSON text (`ListPendingJSON`): one task a line, and the cursor of the next
    /// page (nil after the last).
    public func pendingJSON(_ range: PageRange, timeoutMs: Int32 = 25_000) throws(BusError) -> (lines: [UInt8], next: String?) {
        try Self.jsonPage(call(.listPendingJSON, [.dict(range.variant)], timeoutMs: timeoutMs))
    }

    /// `pendingJSON` page after page from `range` to the last, each page given to `body` as it comes. Each next
    /// page is asked for before `body` is given the one that came, so bgtaskd makes it while the client writes.
    /// An error ends it (pages given to `body` before it stay given).
    public func pendingJSONPages(_ range: PageRange, timeoutMs: Int32 = 25_000, _ body: ([UInt8]) -> Void) throws(BusError) {
        var range = range
        var reply: Result<[BusValue], BusError>?
        func ask() {
            callAsync(SchedulerMethod.listPendingJSON.rawValue, [.dict(range.variant)], destination: SchedulerBus.name,
                      path: SchedulerBus.path, interface: SchedulerBus.interface, timeoutMs: timeoutMs) { reply = $0 }
        }
        ask()
        while true {
            BusConnection.iterate { reply != nil }
            let page = try Self.jsonPage(reply!.get())
            reply = nil
            if let next = page.next {
                range.after = next
                ask()
            }
            body(page.lines)
            if page.next == nil { return }
        }
    }

    static func jsonPage(_ reply: [BusValue]) throws(BusError) -> (lines: [UInt8], next: String?) {
        guard reply.count == 2, let lines = reply[0].bytes, let next = reply[1].string else {
            throw BusError(BusError.wrongReply, "\(SchedulerBus.name) answered ListPendingJSON with other than \(SchedulerMethod.listPendingJSON.replySignature)")
        }
        return (lines, next.isEmpty ? nil : next)
    }

    /// The waiting task `id` as `ListPendingPage` tells it, nil if it does not wait.
    public func pendingTask(_ id: String, timeoutMs: Int32 = 25_000) throws(BusError) -> [String: BusValue]? {
        var r = PageRange()
        r.id = id
        return try pendingPage(r, timeoutMs: timeoutMs).tasks.first
    }

    /// Emits one of the scheduler's signals to every listener, or to one connection.
    public func emit(_ signal: SchedulerSignal, _ args: [BusValue], to destination: String? = nil) {
        if let destination {
            emitTo(destination, signal.rawValue, args, path: SchedulerBus.path, interface: SchedulerBus.interface)
        } else {
            emit(signal.rawValue, args, path: SchedulerBus.path, interface: SchedulerBus.interface)
        }
    }

    /// Runs `handler` for each of the scheduler's `signal` (on the thread's main loop).
    public func subscribe(_ signal: SchedulerSignal, _ handler: @escaping (String, [BusValue]) -> Void) {
        subscribe(sender: SchedulerBus.name, interface: SchedulerBus.interface, member: signal.rawValue, path: SchedulerBus.path, handler)
    }
}

/// Bounds every side of the interface applies the same way.
public enum RequestBounds {
    /// How far ahead a date (`earliest`) or a period (`every`) may be: ten years.
    public static let farthestAhead: Double = 3650 * 86_400
    public static let maxArguments = 4096
    public static let maxCommandBytes = 256 * 1024
    public static let maxDirectoryBytes = 4096
    /// Submits per caller per second, averaged over a burst of `submitBurst`.
    public static let submitsPerSecond = 200.0
    public static let submitBurst = 1000.0
    /// A page of `ListPending`: 1,000 tasks unless asked, 10,000 at most (about 4 MB of reply).
    public static let pageDefault: UInt32 = 1000
    public static let pageMost: UInt32 = 10_000
}

/// An app manifest's `permitted_identifiers` entry: an identifier exactly, or `prefix.*` with a non-empty suffix.
public enum IdentifierPattern {
    public static func permits(_ entry: String, _ identifier: String) -> Bool {
        if entry.hasSuffix(".*") {
            let prefix = entry.dropLast()
            return identifier.count > prefix.count && identifier.hasPrefix(prefix)
        }
        return entry == identifier
    }
}
