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

/// One process of an app that talks to the daemon (the BackgroundTasks library in it), known by its connection:
/// two processes of one app are two clients, each with its own handlers, readiness and tasks.
final class AppClient {
    let id: String
    /// Its unique name on the bus: launches and expirations are sent to it alone.
    let connection: String
    var pid: pid_t?
    var registered: Set<String> = []
    /// It said it has registered its launch handlers: tasks may be delivered now.
    var ready = false
    /// When it said so, in the roster's order: new work goes to the process that said so last.
    var readyOrder = 0
    init(id: String, connection: String, pid: pid_t?) {
        self.id = id
        self.connection = connection
        self.pid = pid
    }

    /// A client is one app on one connection (a connection that speaks for two apps is two clients).
    struct Key: Hashable {
        var connection: String
        var app: String
    }
    var key: Key { Key(connection: connection, app: id) }
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
    /// Processes of apps on the bus, by connection: one process's leaving ends what was handed to it, not what
    /// another process of the app runs.
    var clients: [AppClient.Key: AppClient] = [:]
    private var readyCount = 0
    /// Continued tasks' progress and titles, by task key.
    var views: [String: AppTaskView] = [:]
    /// App processes bgtaskd started for background work, by app id.
    var launched: [String: TaskProcess] = [:]
    /// Why each app task was last expired (shown when it ends).
    var expiredReasons: [String: String] = [:]
    /// Who submitted each app task that waits or runs, by task key: the connection (`AppSubmit`'s sender).
    var submitters: [String: String] = [:]
    /// Automatic relaunches, per app: bounded, with a backoff.
    var relaunches = RelaunchBudget()
    /// Apps whose relaunch waits out its backoff (a task started meanwhile waits for it, not for a launch of its own).
    var relaunchDue: Set<String> = []

    func clients(of app: String) -> [AppClient] { clients.values.filter { $0.id == app } }

    /// Where a task of `app` is handed: the process bgtaskd launched for background work if it is ready (a task is
    /// background work), else the process that said it was ready last; nil if none is ready.
    func readyClient(of app: String) -> AppClient? {
        let ready = clients(of: app).filter(\.ready)
        if let launched = launched[app]?.pid, let c = ready.first(where: { $0.pid == launched }) { return c }
        return ready.max { $0.readyOrder < $1.readyOrder }
    }

    func markReady(_ c: AppClient) {
        guard !c.ready else { return }
        readyCount += 1
        c.ready = true
        c.readyOrder = readyCount
    }
}

/// How often bgtaskd launches an app again by itself (its process ended before it took its tasks: it exited
/// before registering, or left the bus before it said its handler runs): at most `limit` times within `window`,
/// each after a longer wait than the one before; beyond that, not before the oldest of them leaves the window.
/// docs/protocol.md ("How relaunches are bounded").
struct RelaunchBudget {
    static let limit = 3
    static let window = 300.0
    /// Monotonic times of each app's relaunches within the window.
    private(set) var times: [String: [Double]] = [:]
    /// Apps whose relaunches are used up, and until when no launch of them is made.
    private var spent: [String: Double] = [:]

    enum Verdict: Equatable {
        /// Launch it again after `delay` seconds (0 for the first relaunch in the window, then 1 s, 2 s, …): the
        /// relaunch `number` of `limit`.
        case after(delay: Double, number: Int)
        /// Not launched again before `until` (monotonic).
        case spent(until: Double)
    }

    /// The next relaunch of `app` at `now`, counted if it is allowed.
    mutating func next(_ app: String, now: Double) -> Verdict {
        let recent = (times[app] ?? []).filter { now - $0 < RelaunchBudget.window }
        guard recent.count < RelaunchBudget.limit else {
            times[app] = recent
            let until = recent[0] + RelaunchBudget.window
            spent[app] = until
            return .spent(until: until)
        }
        times[app] = recent + [now]
        return .after(delay: recent.isEmpty ? 0 : Double(1 << (recent.count - 1)), number: recent.count + 1)
    }

    /// Until when any launch of `app` is refused (nil: it may be launched): its relaunches were used up, and a task
    /// started meanwhile would only launch it to fail once more.
    mutating func refused(_ app: String, now: Double) -> Double? {
        guard let until = spent[app] else { return nil }
        if until > now { return until }
        spent[app] = nil
        return nil
    }
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
    func deliver(_ t: AppTask, kind: TaskKind) throws(AppStartError) -> String
    func tellExpire(_ t: AppTask, reason: String)
    func endApp(_ t: AppTask) -> String
}

/// The supervisor's stand-in for a process, for a task that runs inside its app.
final class AppTask: AppTaskHooks {
    unowned let broker: any AppTaskBroker
    let app: String
    let identifier: String
    /// The connection it was handed to (nil: started but not yet handed over — the app is being launched, or has
    /// not said it is ready). That process's leaving ends it or hands it again; another process's does not.
    var handedTo: String?
    var delivered: Bool { handedTo != nil }
    /// The app said its launch handler runs (`AppLaunchReceived`): from then on, leaving the bus is its failure.
    var handling = false
    /// bgtaskd ended it after its expiration and grace (counted against the app).
    var endedByUs = false
    init(broker: any AppTaskBroker, app: String, identifier: String) {
        self.broker = broker
        self.app = app
        self.identifier = identifier
    }
    func start(_ s: Supervisor) throws(AppStartError) -> String { try broker.deliver(self, kind: s.machine.task.kind) }
    func expire(_ s: Supervisor, reason: String) { broker.tellExpire(self, reason: reason) }
    func kill(_ s: Supervisor) -> String { endedByUs = true; return broker.endApp(self) }
}
