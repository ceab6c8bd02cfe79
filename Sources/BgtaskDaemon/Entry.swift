#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskAudit
import BgtaskBus
import BgtaskProtocol
import BgtaskConfig
import BgtaskCore
import BgtaskPolicy
import BgtaskProbes
import BgtaskQueue
import BgtaskRun
@preconcurrency import CLinux

/// A task the daemon knows: its stored request and the supervisor driving it — or, while it rests, what its
/// supervisor knew. A waiting task that only a change of conditions can start (waiting for the charger, say)
/// rests: its supervisor is let go and the scheduler asks the fast verdict of its class on each change
/// (`Scheduler.wake`); when that verdict changes, a new supervisor takes up its holds and decision and decides in
/// full (`Daemon.wake`). A resting task's row is let go too: the queue in SQLite holds it, and it is read back
/// when the task wakes or is listed. 10,000 tasks waiting for power then cost an id, a rest and the scheduler's
/// indexes each, and one verdict per class.
final class Entry {
    let id: String
    /// Its row while it is awake or runs (nil while it rests: `row` reads it back). Boxed: an optional row stored
    /// inline would keep its whole size in every resting entry.
    private final class Held {
        var row: QueuedTask
        init(_ row: QueuedTask) { self.row = row }
    }
    private var held: Held?
    private unowned let store: QueueStore
    private(set) var awake: Supervisor?
    private(set) var rest: Supervisor.Rest?
    init(row: QueuedTask, supervisor: Supervisor, store: QueueStore) {
        id = row.id
        held = Held(row)
        self.store = store
        awake = supervisor
    }

    /// Its stored request: the one held while it is awake, else the queue's (a resting task's was written before it
    /// rested). A row gone from the file under us leaves a placeholder that starts nothing (its command is empty).
    var row: QueuedTask {
        get {
            if let h = held { return h.row }
            return (try? store.get(id, state: "pending")) ?? QueuedTask(id: id, kind: .processing, argv: [], submitted: 0)
        }
        set {
            if let h = held { h.row = newValue } else { held = Held(newValue) }
        }
    }

    /// Its row if it holds one (awake or running), without reading the queue.
    var heldRow: QueuedTask? { held?.row }

    /// Holds `r` as its row (read in a batch by the caller, for tasks waking together).
    func hold(_ r: QueuedTask) { if held == nil, r.id == id { held = Held(r) } }

    /// Its supervisor: running tasks always have one, waiting ones once woken (`Daemon.wake`).
    var supervisor: Supervisor { awake! }
    var isResting: Bool { awake == nil }

    /// Lets the supervisor and the row go if it may rest (see `Supervisor.rest`). A new supervisor carries on the
    /// same story: its run id is the stored row's, or made from the row alone (`Daemon.runID(of:)`).
    func sleepIfIdle() -> Verdict? {
        guard let s = awake, let r = s.rest else { return nil }
        rest = r
        awake = nil
        held = nil
        return r.verdict
    }

    func wake(_ s: Supervisor) {
        if held == nil { held = Held(row) }
        if let r = rest { s.resume(r) }
        rest = nil
        awake = s
    }

    /// Why it waits, as `pending` says it, awake or not.
    var waitingReason: String { awake?.waitingReason ?? rest?.reason ?? "" }
    var waitingRule: (id: String, location: String)? { awake != nil ? awake!.waitingRule : rest?.rule }
    var isWaiting: Bool { awake.map { $0.machine.phase == .waiting } ?? true }
}

/// Gives each task's events its own run id in the shared audit trail, and sends them to the journal too.
final class TaskObserver: RunObserver {
    let audit: AuditLog
    let journal: Journal
    let runID: String
    init(audit: AuditLog, journal: Journal, runID: String) {
        self.audit = audit
        self.journal = journal
        self.runID = runID
    }
    func record(_ event: RunEvent, task: TaskFields) {
        var e = event
        if e.runID == nil { e.runID = runID }
        audit.record(e, task: task)
        // A run's end is on disk before it is said: `why` right after "finished" tells it (the rest of a round's
        // entries are written together at its end).
        if e.kind == .finished || e.kind == .gaveUp { audit.flush() }
        journal.send(e, task: task, runID: e.runID ?? runID)
    }
}
