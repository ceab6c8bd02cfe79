#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskConfig
import BgtaskCore
import BgtaskPolicy
import BgtaskProtocol
import BgtaskRun

/// An app that talks to the daemon (the BackgroundTasks library in it).
final class AppClient {
    let id: String
    /// Its unique name on the bus: launches and expirations are sent to it alone.
    var connection: String
    var pid: pid_t?
    var registered: Set<String> = []
    /// It said it has registered its launch handlers: tasks may be delivered now.
    var ready = false
    init(id: String, connection: String, pid: pid_t?) {
        self.id = id
        self.connection = connection
        self.pid = pid
    }
}

/// What bgtaskd knows of apps, kept together: the app methods (below) and the broker's launches act on it.
final class AppRoster {
    /// Manifests by app id, and the files that did not load: read at start, on SIGHUP and on `SetAppEnabled`.
    var manifests: [String: AppManifest] = [:]
    var errors: [PolicyError] = []
    /// Apps the user switched off (`bgtask apps disable`).
    var disabled: Set<String> = []
    /// Apps on the bus, by app id.
    var clients: [String: AppClient] = [:]
    /// Continued tasks' progress and titles, by task key.
    var views: [String: AppTaskView] = [:]
    /// App processes bgtaskd started for background work, by app id.
    var launched: [String: TaskProcess] = [:]
    /// Why each app task was last expired (shown when it ends).
    var expiredReasons: [String: String] = [:]
    /// How many apps were connected at the last round (a change re-decides how often zones are read).
    var clientsAtLastRound = 0
    /// The last ConditionsChanged sent.
    var announced = Conditions()
}

/// A continued task's progress and what the user sees of it.
struct AppTaskView {
    var title: String?
    var subtitle: String?
    var completed: UInt64 = 0
    var total: UInt64 = 0
}

/// What an app task asks of the app broker (bgtaskd): hand it to its app, tell the app it expires, end the app.
protocol AppBroker: AnyObject {
    func deliver(_ t: AppTask, kind: TaskKind) -> String
    func tellExpire(_ t: AppTask, reason: String)
    func endApp(_ t: AppTask) -> String
}

/// The supervisor's stand-in for a process, for a task that runs inside its app.
final class AppTask: AppTaskHooks {
    unowned let broker: AppBroker
    let app: String
    let identifier: String
    /// Started but not yet handed to the app (it is being launched, or has not said it is ready).
    var delivered = false
    /// The app said its launch handler runs (`AppLaunchReceived`): from then on, leaving the bus is its failure.
    var handling = false
    /// Times the app left before handling it and was launched again for it (bounded: an app that always does so).
    var relaunches = 0
    /// bgtaskd ended it after its expiration and grace (counted against the app).
    var endedByUs = false
    init(broker: AppBroker, app: String, identifier: String) {
        self.broker = broker
        self.app = app
        self.identifier = identifier
    }
    func start(_ s: Supervisor) -> String { broker.deliver(self, kind: s.machine.task.kind) }
    func expire(_ s: Supervisor, reason: String) { broker.tellExpire(self, reason: reason) }
    func kill(_ s: Supervisor) -> String { endedByUs = true; return broker.endApp(self) }
}
