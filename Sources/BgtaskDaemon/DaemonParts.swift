#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskAudit
import BgtaskBus
import BgtaskConfig
import BgtaskCore
import BgtaskPolicy
import BgtaskProtocol
import BgtaskQueue
import BgtaskRun

/// What bgtaskd keeps on disk, opened together at start: its state directory (the user's own, not a link), the lock
/// that makes it the only daemon for that directory, the queue, the audit trail, and the journal beside them.
final class StateFiles {
    let directory: String
    let output: String
    /// Held for the daemon's life (flock): a second bgtaskd on the same directory is refused.
    let lockFD: Int32
    let store: QueueStore
    let audit: AuditLog
    /// Where decisions also go, for journalctl and log shippers (nothing when journald does not listen).
    let journal = Journal()
    /// The starts under way, for a crash between a spawn and its running row.
    let intents: StartIntents
    /// Runs' ends the queue could not take yet, for a daemon that dies before it does.
    let ends: UnwrittenEnds

    init(_ options: DaemonOptions) throws(DaemonError) {
        do {
            directory = try options.places.map { p throws(PathError) in try SecureDirectory.prepare(p.stateDirectory) } ?? StatePaths.preparedStateDirectory()
            output = try SecureDirectory.prepare(directory + "/output")
        } catch { throw DaemonError(message: "state directory \(error)", status: ExitStatus.cantCreate) }
        // One daemon per user and state directory, whatever bus it is on.
        lockFD = open(directory + "/bgtaskd.lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard lockFD >= 0, flock(lockFD, LOCK_EX | LOCK_NB) == 0 else {
            if lockFD >= 0 { close(lockFD) }
            throw DaemonError(message: "another bgtaskd is running for \(directory) (its lock bgtaskd.lock is held)", status: ExitStatus.tempFail)
        }
        do {
            store = try QueueStore(path: directory + "/" + QueueStore.file, busyTimeout: options.queueBusyTimeout)
            audit = try AuditLog(path: directory + "/" + StatePaths.auditFile)
            audit.batching = true
        } catch {
            close(lockFD)
            throw DaemonError(message: "\(error)", status: ExitStatus.cantCreate)
        }
        intents = StartIntents(directory: directory)
        ends = UnwrittenEnds(directory: directory)
    }
}

/// The policy in force and how it is kept: the layers as loaded, what did not load, and the watch on their
/// directories (a change reloads; a broken file keeps the last good policy).
final class PolicyInForce {
    /// As every supervisor refers to it (one reference each, not a copy).
    var ref: PolicyRef
    /// What is wrong with the layers now (a file left out, a reload refused), for `status` and the log.
    var warning: PolicyWarning?
    /// The policy layers' and manifests' directories, watched (nil without inotify).
    var watch: ConfigWatch?
    /// The configuration directories as they were when first read (`Daemon.watchConfiguration`).
    var atStart: [String]
    init(_ policy: Policy, warning: PolicyWarning?, atStart: [String]) {
        ref = PolicyRef(policy)
        self.warning = warning
        self.atStart = atStart
    }
}

/// What the loop keeps from one round of events to the next.
struct RoundState {
    /// How far start-up has taken up the stored queue: after which row, and whether all of it (nil: not begun).
    var restoring: (after: (submitted: Double, id: String)?, done: Bool)?
    /// SIGTERM came: running tasks end and wait in the queue, and the loop ends after them.
    var stopping = false
    /// A task began to rest in a new group since the last round: whether zones must be read is asked again then
    /// (a resting task has no supervisor for the loop to ask).
    var newlyResting = false
    /// Once nothing has run for a while, what start-up or the last run used is given back (`QueueDriver.release`).
    var quiet = Memory.QuietSpell()
    /// Supervisors made so far (each command task's run token is unique with it).
    var supervisorsMade = 0
    /// A task was spawned in this round: what only prepares (the next spare output file, the readings' history)
    /// waits a moment, so that the new process, at idle priority, is not kept off a CPU by it.
    var spawnedThisRound = false
    /// The readings' changes not yet written, and whether their write is due.
    var historyDue: [(time: Double, name: String, value: String)] = []
    var housekeepingDue = false
    /// The rows of the first resting tasks in line, kept from when they began to rest.
    var kept = KeptRows()
    /// When the last reply that lists 1,000 tasks or more went out (its heap goes back 2 s after the last of them).
    var lastLargeReply: Double?
    /// How many apps were connected at the last round (a change re-decides how often zones are read).
    var appsConnected = 0
    /// Starts and ends the queue could not take when they came, in order, and when they are tried again.
    var unwritten = UnwrittenWrites()
}

/// Writes to the queue that failed (another process held its lock past the busy timeout, a full disk), kept in the
/// order they came and tried again a second apart (each try may wait out the busy timeout): a run's start whose
/// running row is missing, a run's end (also in `UnwrittenEnds`, for a daemon that dies first).
struct UnwrittenWrites {
    struct Write {
        let id: String
        let isStart: Bool
        let write: (QueueStore) throws -> Void
    }
    static let retryInterval = 1.0
    private(set) var writes: [Write] = []
    /// When the next try is due (monotonic clock); nil with nothing to write.
    private(set) var due: Double?

    var isEmpty: Bool { writes.isEmpty }
    var hasStart: Bool { writes.contains(where: \.isStart) }

    mutating func add(_ w: Write, now: Double) {
        if !w.isStart { runEnded(w.id) }
        writes.append(w)
        if due == nil { due = now + UnwrittenWrites.retryInterval }
    }

    /// The run of `id` ended: a start of it still to write is dropped, since the end's transaction removes the
    /// request of that run whatever its state, and a start written after it would bring back a running row.
    mutating func runEnded(_ id: String) {
        writes.removeAll { $0.isStart && $0.id == id }
        if writes.isEmpty { due = nil }
    }

    /// Tries each in order, stopping at the first that fails again (the queue is still held): true once all are written.
    mutating func retry(_ store: QueueStore, now: Double) -> Bool {
        while let w = writes.first {
            do { try w.write(store) } catch {
                due = now + UnwrittenWrites.retryInterval
                return false
            }
            writes.removeFirst()
        }
        due = nil
        return true
    }
}

/// The rows of the first tasks in line of each resting group, kept from when each began to rest: a plug that
/// wakes the group starts them without reading the queue back (a row read was a tenth of the millisecond from a
/// plug to the spawn). At most `perGroup` a group, the slots a plug can fill at once, `most` in all, and only rows
/// of up to `largest` bytes of command (a command may be 256 KiB: 256 of those would be 64 MB). A row is
/// the queue's while its task rests (nothing writes a resting task's row), and is dropped once the task is awake
/// again or gone; a task not kept is read from the queue as before.
struct KeptRows {
    static let most = 256
    static let largest = 4096
    private var rows: [String: (group: Int, row: QueuedTask)] = [:]
    private var perGroup: [Int: Int] = [:]

    var count: Int { rows.count }

    mutating func keep(_ row: QueuedTask, group: Int, perGroup most: Int) {
        guard rows[row.id] == nil, rows.count < KeptRows.most, perGroup[group, default: 0] < most,
              row.argv.utf8.count <= KeptRows.largest else { return }
        rows[row.id] = (group, row)
        perGroup[group, default: 0] += 1
    }

    /// The row of `id`, no longer kept (nil: it was not).
    @discardableResult
    mutating func take(_ id: String) -> QueuedTask? {
        guard let k = rows.removeValue(forKey: id) else { return nil }
        let n = perGroup[k.group, default: 1] - 1
        perGroup[k.group] = n > 0 ? n : nil
        return k.row
    }
}

/// What is wrong with the policy's layers: what it means for the policy in force, and each file's error.
struct PolicyWarning {
    let what: String
    let errors: [PolicyError]
    /// With each error's line of the file and its caret (`status`, `pending`, `policy reload`).
    var text: String { what + ": " + errors.map(\.description).joined(separator: "; ") }
    /// One line, where and what of each error (the log: the journal keeps a line an entry, and the snippet's line
    /// breaks came out as `\x0a`).
    var line: String { what + ": " + errors.map(\.summary).joined(separator: "; ") }
}

/// The conditions as bgtaskd last heard them: the watcher's newest readings, their merge with the daemon's own
/// (`system.preparing_sleep`) made once per change, and which changes go into the readings' history.
final class CurrentReadings {
    /// The newest readings from the watcher (before the daemon's own conditions are added).
    var latest: [String: PolicyValue]? { didSet { merged = nil } }
    /// Dropped whenever the readings or the sleep state change (`QueueDriver.conditions`).
    var merged: [String: PolicyValue]? { didSet { byFilesystem = [:]; directories = [:] } }
    /// The merged conditions with `storage.*` read on another filesystem (a task's working directory), one per
    /// filesystem (`st_dev`), not per task: dropped with `merged`, read again on the next change of any reading.
    var byFilesystem: [UInt64: [String: PolicyValue]] = [:]
    /// The filesystem the watcher's `storage.*` describe (`ProbeOptions.storagePath`), once known.
    var watchedFilesystem: UInt64?
    /// Each working directory's filesystem, as found since the last change of readings: a restart that takes up
    /// 100,000 tasks submitted from one directory stats it once.
    var directories: [String: UInt64] = [:]
    /// Which readings' changes go into the history (for the start estimate and `bgtask report`).
    var history = ReadingHistory()
    /// Whether the history was last told heat is read (bgtaskd polls no zone while no verdict depends on one).
    var thermalRead = true
    /// What apps were last told of them (`ConditionsChanged`).
    var announced = Conditions()
}

/// The scheduler's signals to every listener (TaskChanged, ConditionsChanged), held until the round of events that
/// made them is done, then sent in order: a task spawned in a round then starts without GDBus's thread and the bus
/// daemon taking its CPU to carry its own TaskChanged (0.1–0.2 ms of its first millisecond, measured here), and a
/// round that starts or ends many tasks wakes that thread once. Signals to one app (Launch, Expire) are not held.
final class Announcements {
    private let bus: BusConnection
    private let loop: MainLoop
    private(set) var held: [(signal: SchedulerSignal, args: [BusValue])] = []

    init(bus: BusConnection, loop: MainLoop) {
        self.bus = bus
        self.loop = loop
    }

    func emit(_ signal: SchedulerSignal, _ args: [BusValue]) {
        // The loop's next turn: after the callback that is running now, and the round it ends with.
        if held.isEmpty { loop.after(0) { [weak self] in self?.send() } }
        held.append((signal, args))
    }

    /// Sends what is held (also before the daemon exits).
    func send() {
        let due = held
        held = []
        for h in due { bus.emit(h.signal, h.args) }
    }
}
