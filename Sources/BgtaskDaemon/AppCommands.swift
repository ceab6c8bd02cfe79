#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskBus
import BgtaskCore
import BgtaskPolicy
import BgtaskProtocol
import BgtaskQueue
import BgtaskStorage
import BgtaskRun

/// The queue's side of the app broker's commands (`AppQueue`).
extension QueueDriver: AppQueue {
    func runningTask(_ key: String) -> Entry? { running[key] }
    func startingTask(_ key: String) -> Entry? { running[key] ?? queue.awake[key] }
    func runningTasks(app: String) -> [Entry] { running.values.filter { $0.row.app == app } }
    func waitingIDs(app: String) -> [String] { queue.waitingIDs(app: app) }
    func waitingKind(_ key: String) -> TaskKind? { queue.job(key)?.fields.kind }

    func pending(app: String) -> [(task: PendingTask, row: QueuedTask?)] {
        listPending(listed(queue.waitingIDs(app: app))).map { ($0, queue.awake[$0.id]?.row) }
    }

    func standing(app: String) -> (ended: Int, holdBack: Double) {
        (queue.standing[app] ?? 0, queue.refreshHoldBack(app: app))
    }

    func countAgainst(_ app: String) -> String {
        let n = queue.endedBySystem(app: app)
        do { try store.setStanding(app: app, ended: n) } catch { say("\(app): cannot record its standing: \(error)") }
        return "counted against \(app) (\(n) not made good): its refresh work now waits \(formatDuration(Schedule.refreshHoldBack(ended: n))) longer"
    }

    func madeGood(_ app: String, by key: String) {
        guard let n = queue.madeGood(app: app) else { return }
        do { try store.setStanding(app: app, ended: n) } catch { say("\(app): cannot record its standing: \(error)") }
        say("\(key): completed in time; \(app) has \(n) ended task(s) not made good")
    }

    func refusal(_ row: QueuedTask, sender: String) -> String? {
        if let why = queue.refusal(for: Scheduler.Job(fields: row.fields, app: row.app)) { return why }
        return allowSubmit(sender) ? nil : "too many submissions; slow down"
    }

    func cannotStartNow(_ row: QueuedTask) -> String? {
        guard let c = conditions(onFilesystem: ownFilesystem(row), directory: row.directory) else { return nil }
        let d = Policy.Evaluator(policy: policy, conditions: c, time: localTime()).decideNow(row.fields)
        let startsNow = (d.verdict == .run || d.verdict == .throttle) && queue.slotFree(for: row.fields) && row.earliest.map { $0 <= wallClockNow() } ?? true
        if startsNow { return nil }
        return d.matches.first.map { "\($0.reason) — rule \($0.ruleID) (\($0.location))" } ?? "no room to run it now"
    }

    func enqueue(_ row: QueuedTask) -> Result<Void, BusError> {
        do { try store.put(row) } catch { return .failure(SchedulerError.unavailable("cannot store the request (nothing was queued): \(DiskSpace.explain(error, file: store.path) ?? "\(error)")")) }
        // As a Submit: queued now, told pending and decided after the reply (a start then follows "pending").
        let e = add(row, decide: false)
        host.afterReply { [unowned self] in
            say("\(row.id): submitted by the app")
            announce.emit(.taskChanged, [.string(row.id), .string("pending")])
            if queue.awake[row.id] === e { decide(e) }
        }
        return .success(())
    }

    func actOnChanges() { host.actOnChanges() }
    var presenter: Presenter { host.presenter }

    func callerLeft(_ name: String) {
        host.callerLeft(name)
        queue.forgetSender(name)
    }
}
