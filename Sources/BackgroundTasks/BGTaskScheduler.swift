import Foundation

/// Apple's `BGTaskScheduler` on Linux: registers the app's launch handlers with `bgtaskd` (the per-user
/// scheduler on the session bus), submits its requests, and runs its handlers when the daemon launches
/// them. An app needs a manifest (`bgtask/apps/APP-ID.toml`) naming its permitted identifiers, as Info.plist
/// does on iOS; see docs/porting.md.
/// Unchecked: its one property is a constant `DaemonLink`, whose state is behind its lock.
public final class BGTaskScheduler: NSObject, @unchecked Sendable {
    /// The scheduler of this process.
    public static let shared = BGTaskScheduler()

    let link = DaemonLink()

    override init() { super.init() }

    /// Registers the handler that runs when a task with `identifier` is launched. Register every refresh and
    /// processing handler before the app finishes launching (the library tells the daemon the app is ready at
    /// its first submit, when the main queue first turns, or half a second after the last registration);
    /// continued tasks may register later, when the person acts.
    ///
    /// - Parameters:
    ///   - queue: where the handler runs; nil makes a serial background queue.
    /// - Returns: false, with the reason on stderr, if the identifier is not permitted by the app's manifest,
    ///   is registered already, or the scheduler cannot be reached. (Apple's asserts; a library should not
    ///   take the app down.)
    @discardableResult
    public func register(forTaskWithIdentifier identifier: String, using queue: DispatchQueue? = nil,
                         launchHandler: @escaping (BGTask) -> Void) -> Bool {
        link.register(identifier, queue: queue, handler: launchHandler)
    }

    /// The unlabelled form the WWDC25 slide shows (`register("id") { task in … }`).
    @discardableResult
    public func register(_ identifier: String, using queue: DispatchQueue? = nil,
                         launchHandler: @escaping (BGTask) -> Void) -> Bool {
        link.register(identifier, queue: queue, handler: launchHandler)
    }

    /// Queues a request; a pending request with the same identifier is replaced.
    /// - Throws: `BGTaskScheduler.Error` — `.notPermitted` (identifier or kind not in the manifest),
    ///   `.unavailable` (no scheduler, or the person turned the app's background work off, or `.gpu` where
    ///   none is usable), `.tooManyPendingTaskRequests`, `.immediateRunIneligible` (`.fail` strategy, no room now).
    public func submit(_ taskRequest: BGTaskRequest) throws {
        try link.submit(taskRequest)
    }

    /// Cancels the pending request with this identifier (a running task of it is expired).
    public func cancel(taskRequestWithIdentifier identifier: String) {
        link.cancel(identifier)
    }

    /// Cancels every pending request of the app.
    public func cancelAllTaskRequests() {
        link.cancelAll()
    }

    /// The app's pending requests, on a background queue.
    public func getPendingTaskRequests(completionHandler: @escaping ([BGTaskRequest]) -> Void) {
        let link = self.link
        // The app's handler (Apple's is not @Sendable): called once, on the queue below.
        nonisolated(unsafe) let handler = completionHandler
        BGTaskScheduler.pendingQueue.async { handler(link.pending()) }
    }

    /// A serial queue, not a global one: libdispatch's first worker on a global queue starts its workqueue
    /// monitor (a wake-up every second for the life of the app, on a thread that asks for a nice value the app
    /// may not have: a journal line). See `Connections` in BgtaskStorage.
    static let pendingQueue = DispatchQueue(label: "BackgroundTasks.pending", qos: .background)

    /// The app's pending requests.
    public func pendingTaskRequests() async -> [BGTaskRequest] {
        let link = self.link
        return await withCheckedContinuation { (c: CheckedContinuation<[BGTaskRequest], Never>) in
            BGTaskScheduler.pendingQueue.async { c.resume(returning: link.pending()) }
        }
    }

    /// What continued tasks may ask for here: `.gpu` only when a DRM render node exists and this user may
    /// open it.
    public class var supportedResources: BGContinuedProcessingTaskRequest.Resources {
        shared.link.supportedResources()
    }

    /// The same, as the third-party reference page writes it (`BGTaskScheduler.shared.supportedResources`).
    public var supportedResources: BGContinuedProcessingTaskRequest.Resources {
        link.supportedResources()
    }

    // MARK: Linux extras

    /// The app's id (its manifest's `id`). Found by itself: `BGTASK_APP_ID` (set when bgtaskd launches the
    /// app), `FLATPAK_ID`, else the one manifest that permits the first identifier used. Set it before the
    /// first call where that is ambiguous.
    public var applicationIdentifier: String? {
        get { link.currentAppID }
        set { link.setAppID(newValue) }
    }

    /// Whether bgtaskd started this process to run its tasks (`BGTASK_LAUNCHED_FOR_BACKGROUND=1`), as
    /// iOS's launch for background work: the app should register its handlers and open no window.
    public var isLaunchedForBackground: Bool {
        ProcessInfo.processInfo.environment["BGTASK_LAUNCHED_FOR_BACKGROUND"] == "1"
    }
}

extension BGTaskScheduler {
    /// Apple's bridged error: `catch let e as BGTaskScheduler.Error { switch e.code { … } }`, or
    /// `catch BGTaskScheduler.Error.notPermitted`.
    public struct Error: CustomNSError, LocalizedError, Hashable, CustomStringConvertible {
        public enum Code: Int, Sendable, Hashable {
            /// No scheduler here, or the person turned the app's background work off.
            case unavailable = 1
            /// Too many pending requests of the app (`daemon.max_pending_per_app`), or submitted too fast.
            case tooManyPendingTaskRequests = 2
            /// The identifier or task kind is not in the app's manifest.
            case notPermitted = 3
            /// A continued request with the `.fail` strategy that cannot start now.
            case immediateRunIneligible = 4
        }

        public let code: Code
        /// What the scheduler said (the rule, the manifest's path, the limit).
        public let message: String

        public init(_ code: Code, message: String = "") {
            self.code = code
            self.message = message
        }

        public static var errorDomain: String { BGTaskSchedulerErrorDomain }
        public var errorCode: Int { code.rawValue }
        public var errorUserInfo: [String: Any] { [NSLocalizedDescriptionKey: errorDescription ?? ""] }
        public var errorDescription: String? {
            let what: String
            switch code {
            case .unavailable: what = "background tasks are unavailable"
            case .tooManyPendingTaskRequests: what = "too many pending task requests"
            case .notPermitted: what = "the task is not permitted"
            case .immediateRunIneligible: what = "the task cannot run immediately"
            }
            return message.isEmpty ? what : "\(what): \(message)"
        }
        public var description: String { "BGTaskScheduler.Error(\(code)): \(errorDescription ?? "")" }

        public static var unavailable: Code { .unavailable }
        public static var tooManyPendingTaskRequests: Code { .tooManyPendingTaskRequests }
        public static var notPermitted: Code { .notPermitted }
        public static var immediateRunIneligible: Code { .immediateRunIneligible }

        public static func == (a: Error, b: Error) -> Bool { a.code == b.code }
        public func hash(into h: inout Hasher) { h.combine(code) }
    }
}

/// The error domain, under Apple's name (`(error as NSError).domain == BGTaskSchedulerErrorDomain`).
public let BGTaskSchedulerErrorDomain = "BGTaskSchedulerErrorDomain"

/// `catch BGTaskScheduler.Error.notPermitted { … }`, as Foundation's bridged errors allow.
public func ~= (code: BGTaskScheduler.Error.Code, error: any Swift.Error) -> Bool {
    (error as? BGTaskScheduler.Error)?.code == code
}
