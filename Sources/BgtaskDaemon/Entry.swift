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
/// full (`Daemon.wake`). 10,000 tasks waiting for power then cost a row each, and one verdict per class.
final class Entry {
    var row: QueuedTask
    private(set) var awake: Supervisor?
    private(set) var rest: Supervisor.Rest?
    init(row: QueuedTask, supervisor: Supervisor) {
        self.row = row
        awake = supervisor
    }

    /// Its supervisor: running tasks always have one, waiting ones once woken (`Daemon.wake`).
    var supervisor: Supervisor { awake! }
    var isResting: Bool { awake == nil }

    /// Lets the supervisor go if it may rest (see `Supervisor.rest`); the run id goes into the row, as a new
    /// supervisor must carry on the same story.
    func sleepIfIdle() -> Verdict? {
        guard let s = awake, let r = s.rest else { return nil }
        row.runID = s.runOptions.runID
        rest = r
        awake = nil
        return r.verdict
    }

    func wake(_ s: Supervisor) {
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
        journal.send(e, task: task, runID: e.runID ?? runID)
    }
}
