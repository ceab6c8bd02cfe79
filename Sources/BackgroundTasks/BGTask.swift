import Foundation

/// A task the scheduler launched: handed to the launch handler registered for its identifier.
/// Unchecked: its expiration handler and completion are read and written under `lock`; the rest is constant.
open class BGTask: NSObject, @unchecked Sendable {
    /// The identifier the launch handler was registered for.
    public let identifier: String
    let lock = NSLock()
    var _expirationHandler: (() -> Void)?
    var completed = false
    weak var link: DaemonLink?

    init(identifier: String, link: DaemonLink) {
        self.identifier = identifier
        self.link = link
    }

    /// Called shortly before the task's time is up (a policy verdict, its budget, a cancel, the machine going
    /// to sleep): stop quickly, then call `setTaskCompleted(success:)`. Set to nil once it has run. A task
    /// without one is completed unsuccessfully instead of being warned, as on iOS.
    /// Called on a queue of the library's, not the launch handler's (which the work may be holding).
    open var expirationHandler: (() -> Void)? {
        get { lock.withLock { _expirationHandler } }
        set { lock.withLock { _expirationHandler = newValue } }
    }

    /// Tells the scheduler the work is done. Required, even after an expiration: a task that is not
    /// completed within `run.expire_grace` of its expiration is ended and that counts against the app.
    /// Only the first call counts.
    open func setTaskCompleted(success: Bool) {
        let first = lock.withLock { () -> Bool in
            if completed { return false }
            completed = true
            _expirationHandler = nil
            return true
        }
        if first { link?.completed(self, success: success) }
    }

    /// Takes the handler for an expiration (nil if the task is done or has none).
    func takeExpirationHandler() -> (handler: (() -> Void)?, done: Bool) {
        lock.withLock {
            let h = _expirationHandler
            _expirationHandler = nil
            return (h, completed)
        }
    }

    var isCompleted: Bool { lock.withLock { completed } }

    open override var description: String { "<\(type(of: self)): \(identifier)>" }
}

/// A short refresh launch (about 30 s).
open class BGAppRefreshTask: BGTask, @unchecked Sendable {}

/// A longer maintenance launch.
open class BGProcessingTask: BGTask, @unchecked Sendable {}

/// A continued task: the person sees `title`, `subtitle` and `progress` (a notification or KDE's job view,
/// with Cancel). Report progress: a task whose progress stalls is shown as stalled, then expired.
/// Unchecked: its title and subtitle are read and written under the task's `lock`; `progress` is Foundation's
/// Progress, which is thread-safe.
open class BGContinuedProcessingTask: BGTask, ProgressReporting, @unchecked Sendable {
    var _title: String
    var _subtitle: String
    /// Set `totalUnitCount` and advance `completedUnitCount`; the library samples it a few times a second
    /// and sends the scheduler what changed (KVO does not exist on Linux).
    public let progress: Progress

    init(identifier: String, title: String, subtitle: String, link: DaemonLink) {
        _title = title
        _subtitle = subtitle
        progress = Progress(totalUnitCount: 0)
        super.init(identifier: identifier, link: link)
    }

    open var title: String { lock.withLock { _title } }
    open var subtitle: String { lock.withLock { _subtitle } }

    /// Changes what the person sees.
    open func updateTitle(_ title: String, subtitle: String) {
        lock.withLock {
            _title = title
            _subtitle = subtitle
        }
        link?.updateTitle(self, title: title, subtitle: subtitle)
    }
}
