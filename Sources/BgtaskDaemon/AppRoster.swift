#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskBus
import BgtaskConfig
import BgtaskCore
import BgtaskPolicy
import BgtaskProtocol
import BgtaskQueue
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

/// What the app broker asks of the queue. The broker turns the apps' calls into these commands and keeps the rest
/// (manifests, identity, clients, launches) to itself; the queue (`QueueDriver`) answers them.
protocol AppQueue: AnyObject {
    /// The running task `key` (nil: none runs now).
    func runningTask(_ key: String) -> Entry?
    /// The task `key` that runs or is being started (nil: neither).
    func startingTask(_ key: String) -> Entry?
    /// The app's running tasks.
    func runningTasks(app: String) -> [Entry]
    /// The keys of the app's waiting requests.
    func waitingIDs(app: String) -> [String]
    func waitingKind(_ key: String) -> TaskKind?
    /// The app's waiting requests as `bgtask pending` lists them, each with its row if it is awake.
    func pending(app: String) -> [(task: PendingTask, row: QueuedTask?)]
    /// How many of the app's tasks the system ended and it has not made good, and how long its refresh work waits for it.
    func standing(app: String) -> (ended: Int, holdBack: Double)
    /// One more of the app's tasks ended by the system, recorded: how that is said.
    func countAgainst(_ app: String) -> String
    /// The app completed `key` in time: one ended task made good.
    func madeGood(_ app: String, by key: String)
    /// Why the request may not be queued (the app's limits, the caller's submit rate); nil: it may.
    func refusal(_ row: QueuedTask, sender: String) -> String?
    /// Why the task could not start at once, as `.fail` asks to know; nil: it would start.
    func cannotStartNow(_ row: QueuedTask) -> String?
    /// Stores the request and queues it (replacing the app's pending one of that identifier).
    func enqueue(_ row: QueuedTask) -> Result<Void, BusError>
    func cancel(_ key: String, by who: String) -> Result<String, BusError>
    /// What a call or an app's leaving changed is acted on now (not at the next event).
    func actOnChanges()
    /// A bus name left: what is kept of it as a caller goes.
    func callerLeft(_ name: String)
    /// Ends processes that are not waited for: SIGTERM now, SIGKILL after `grace` (`QueueDriver.end`).
    func end(grace: Double, _ targets: @escaping () -> [pid_t])
    var presenter: Presenter { get }
}

/// What bgtaskd knows of apps, kept together: the app broker's methods and launches act on it.
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
}

/// A continued task's progress and what the user sees of it.
struct AppTaskView {
    var title: String?
    var subtitle: String?
    var completed: UInt64 = 0
    var total: UInt64 = 0
}

/// What an app task asks of the app broker: hand it to its app, tell the app it expires, end the app.
protocol AppTaskBroker: AnyObject {
    func deliver(_ t: AppTask, kind: TaskKind) -> String
    func tellExpire(_ t: AppTask, reason: String)
    func endApp(_ t: AppTask) -> String
}

/// The supervisor's stand-in for a process, for a task that runs inside its app.
final class AppTask: AppTaskHooks {
    unowned let broker: any AppTaskBroker
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
    init(broker: any AppTaskBroker, app: String, identifier: String) {
        self.broker = broker
        self.app = app
        self.identifier = identifier
    }
    func start(_ s: Supervisor) -> String { broker.deliver(self, kind: s.machine.task.kind) }
    func expire(_ s: Supervisor, reason: String) { broker.tellExpire(self, reason: reason) }
    func kill(_ s: Supervisor) -> String { endedByUs = true; return broker.endApp(self) }
}
