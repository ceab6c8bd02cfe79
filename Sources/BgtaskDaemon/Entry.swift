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

/// An awake task: its stored request and the supervisor driving it, waiting or running. A waiting task that only a
/// change of conditions can start (waiting for the charger, say) rests instead: it has no entry, its supervisor is
/// let go, the queue in SQLite holds its row, and the scheduler keeps its id in the group of tasks alike with the
/// state their supervisors rested on (`Scheduler.rest`). When its class's verdict changes (`Scheduler.wake`), a new
/// entry's supervisor takes up that state and decides in full (`QueueDriver.awaken`). 100,000 tasks waiting for power
/// then cost an id and a time each, and one verdict per class.
final class Entry {
    var row: QueuedTask
    let supervisor: Supervisor
    /// What its run's end left in the queue, once written (`QueueDriver.persistEnd`, when the run ended).
    var ended: EndOfRun?
    /// The filesystem of its working directory when it is not the one the watcher reads (`QueueDriver.ownFilesystem`):
    /// its `storage.*` are its own, so it is given conditions of its own and never rests in a group.
    let filesystem: UInt64?
    init(row: QueuedTask, supervisor: Supervisor, filesystem: UInt64? = nil) {
        self.row = row
        self.supervisor = supervisor
        self.filesystem = filesystem
    }
    var id: String { row.id }
    var isWaiting: Bool { supervisor.machine.phase == .waiting }
}

/// What a run's end leaves: the request waiting again (a retry, the next period or elapse, a wait for its conditions),
/// if any, and what is said of it.
struct EndOfRun {
    let next: QueuedTask?
    let said: String?
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
