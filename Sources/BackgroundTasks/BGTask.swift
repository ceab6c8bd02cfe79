import Foundation
import Synchronization

/// A task the scheduler launched: handed to the launch handler registered for its identifier.
/// Unchecked: an open class (its subclasses are the app's); its expiration handler and completion are a Mutex, the
/// rest is constant.
open class BGTask: NSObject, @unchecked Sendable {
    /// The identifier the launch handler was registered for.
    public let identifier: String
    /// Unchecked: the app's expiration closure (not @Sendable, as Apple's), called once, on the library's queue.
    struct State: @unchecked Sendable {
        var expirationHandler: (() -> Void)?
        var completed = false
    }
    let state = Mutex(State())
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
        get { state.withLock { $0.expirationHandler } }
        set { state.withLock { $0.expirationHandler = newValue } }
    }

    /// Tells the scheduler the work is done. Required, even after an expiration: a task that is not
    /// completed within `run.expire_grace` of its expiration is ended and that counts against the app.
    /// Only the first call counts.
    open func setTaskCompleted(success: Bool) {
        let first = state.withLock { s -> Bool in
            if s.completed { return false }
            s.completed = true
            s.expirationHandler = nil
            return true
        }
        if first { link?.completed(self, success: success) }
    }

    /// Takes the handler for an expiration (nil if the task is done or has none).
    func takeExpirationHandler() -> (handler: (() -> Void)?, done: Bool) {
        state.withLock { s in
            let h = s.expirationHandler
            s.expirationHandler = nil
            return (h, s.completed)
        }
    }

    var isCompleted: Bool { state.withLock { $0.completed } }

    open override var description: String { "<\(type(of: self)): \(identifier)>" }
}

/// A short refresh launch (about 30 s).
open class BGAppRefreshTask: BGTask, @unchecked Sendable {}

/// A longer maintenance launch.
open class BGProcessingTask: BGTask, @unchecked Sendable {}

/// A continued task: the person sees `title`, `subtitle` and `progress` (a notification or KDE's job view,
/// with Cancel). Report progress: a task whose progress stalls is shown as stalled, then expired.
/// Unchecked: an open class; its title and subtitle are a Mutex; `progress` is Foundation's Progress, which is
/// thread-safe.
open class BGContinuedProcessingTask: BGTask, ProgressReporting, @unchecked Sendable {
    let shown: Mutex<(title: String, subtitle: String)>
    /// Set `totalUnitCount` and advance `completedUnitCount`; the library samples it a few times a second
    /// and sends the scheduler what changed (KVO does not exist on Linux).
    public let progress: Progress

    init(identifier: String, title: String, subtitle: String, link: DaemonLink) {
        shown = Mutex((title, subtitle))
        progress = Progress(totalUnitCount: 0)
        super.init(identifier: identifier, link: link)
    }

    open var title: String { shown.withLock { $0.title } }
    open var subtitle: String { shown.withLock { $0.subtitle } }

    /// Changes what the person sees.
    open func updateTitle(_ title: String, subtitle: String) {
        shown.withLock { $0 = (title, subtitle) }
        link?.updateTitle(self, title: title, subtitle: subtitle)
    }
}
