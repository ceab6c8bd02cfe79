#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskPolicy
import BgtaskJSON
import BgtaskConfig
import BgtaskCore
import BgtaskStorage
import GRDB

/// One stored decision: what happened to a task, the verdict, each rule in effect with its `file:line`,
/// and the readings those rules looked at.
public struct AuditEntry: Sendable, Equatable, Codable, FetchableRecord, PersistableRecord {
    public static let databaseTableName = "decision"
    public var id: Int64?
    /// Seconds since the epoch.
    public var time: Double
    public var runID: String
    public var taskID: String
    public var event: String
    public var verdict: String?
    public var detail: String
    /// JSON: [{"id", "origin", "verdict", "reason", "readings": {name: value}}]
    public var rules: String
    /// JSON: the conditions at that moment (only for starts and resumes, where `why` says what changed).
    public var conditions: String?
    public var exitStatus: Int32?
    /// At a run's end: the energy it used, and the summary with its source (or why it is unknown).
    public var energyWh: Double?
    public var energy: String?
    /// At a run's end: the CPU seconds its processes used (nil: unknown, or a trail from before "v6 cpu").
    public var cpuSeconds: Double?

    public init(id: Int64?, time: Double, runID: String, taskID: String, event: String, verdict: String?, detail: String,
                rules: String, conditions: String?, exitStatus: Int32?, energyWh: Double? = nil, energy: String? = nil,
                cpuSeconds: Double? = nil) {
        self.cpuSeconds = cpuSeconds
        self.energyWh = energyWh
        self.energy = energy
        self.id = id
        self.time = time
        self.runID = runID
        self.taskID = taskID
        self.event = event
        self.verdict = verdict
        self.detail = detail
        self.rules = rules
        self.conditions = conditions
        self.exitStatus = exitStatus
    }

    enum CodingKeys: String, CodingKey {
        case id, time, runID = "run_id", taskID = "task_id", event, verdict, detail, rules, conditions, exitStatus = "exit_status"
        case energyWh = "energy_wh", energy, cpuSeconds = "cpu_seconds"
    }

    public mutating func didInsert(_ inserted: InsertionSuccess) { id = inserted.rowID }
}

/// A problem with the audit database, naming it.
public struct AuditError: Error, CustomStringConvertible {
    public var path: String
    public var message: String
    /// The trail exists but no writer has finished creating it: a reader sees no entries.
    public var empty = false
    public var description: String { "\(path): \(message)" }
}

/// The audit trail: `$XDG_STATE_HOME/bgtask/audit.sqlite` (or `/var/lib/bgtask` for root), in WAL
/// mode, so what was written survives the process being killed. Bounded: entries older
/// than `retentionDays` and any beyond `maxEntries` are deleted when a run starts. A `task` table keeps
/// each task's latest entry, so `why` and `log` read what they show, not the whole history.
/// Unchecked: GRDB's DatabaseQueue serialises the database; `runID`, `batching` and the buffer belong to the one
/// thread that records (bgtaskd's loop, `bgtask run`'s), as bgtask uses it.
public final class AuditLog: RunObserver, @unchecked Sendable {
    public let path: String
    /// Replaced only when the file was removed or replaced under it, on the recording thread (`writer()`).
    private(set) var db: DatabaseQueue
    let configuration: Configuration
    var held: HeldFile?
    /// Told when the trail's file was found removed or replaced under this writer, and what was done.
    public var onRestore: ((String) -> Void)?
    public static let retentionDays = 30.0
    /// Frees SQLite's page cache (a daemon's start prunes and reads the trail).
    public func releaseMemory() { db.releaseMemory() }
    public static let maxEntries = 100_000
    public var runID = ""
    /// Entries are kept until `flush()` (the daemon writes once per round of events: one transaction for a
    /// condition change that touches 10,000 waiting tasks, and none on a reply's path).
    public var batching = false
    var buffer: [AuditEntry] = []

    /// Opens (creating if absent) the database at `path`, whose directory the caller has checked
    /// (`SecureDirectory`). A file that is a link, not ours, not SQLite, or an SQLite database of
    /// something else is refused before anything is written to it.
    public init(path: String, readOnly: Bool = false) throws {
        self.path = path
        do { try SecureDirectory.checkFile(path) } catch { throw AuditError(path: path, message: error.message) }
        try AuditLog.checkHeader(path)
        var config = Configuration()
        // GRDB's queues default to userInitiated, whose libdispatch workers ask for nice -2: refused to an
        // unprivileged process and logged to the journal each time. Background work's QoS (nice 10) is allowed.
        config.qos = .background
        config.readonly = readOnly
        config.busyMode = .timeout(5)
        // synchronous=NORMAL, as the queue it describes (`QueueStore`): a commit is in the WAL once written, so a killed
        // or crashed writer loses nothing; a power cut may lose the last rounds' entries, as it may the last submits.
        // FULL synced every round, a third of a Submit's cost.
        config.prepareDatabase { db in
            if !db.configuration.readonly { try db.execute(sql: "PRAGMA synchronous = NORMAL") }
        }
        var opened: DatabaseQueue?
        configuration = config
        do {
            db = try Connections.open(path: path, configuration: config)
            opened = db
            held = HeldFile(path: path)
            // One connection for the check and the work (see `Connections` for what a second one would cost).
            let db = self.db
            let kind = AuditLog.kind
            func check() throws -> StateDatabase.Verdict {
                let v = try db.read { try kind.verdict($0) }
                if case .foreign(let why) = v {
                    throw AuditError(path: path, message: "is an SQLite database of something else (\(why)), not bgtask's audit trail; refusing to write to it")
                }
                return v
            }
            if readOnly {
                // A first run may be creating the tables: wait for it (it holds the lock), then read them or nothing.
                try AuditLog.withLock(path + ".lock", shared: true) {
                    _ = try check()
                    if try !db.read({ try AuditLog.readable.isSubset(of: migrator.appliedIdentifiers($0)) }) {
                        throw AuditError(path: path, message: "holds no entries yet", empty: true)
                    }
                }
            } else {
                // Many first runs at once must not all create the tables: one checks and migrates, the others wait.
                try AuditLog.withLock(path + ".lock") {
                    if try check() == .adoptable { try db.writeWithoutTransaction { try kind.claim($0) } }
                    // WAL is a property of the file: set only once the file is known to be ours.
                    try db.writeWithoutTransaction { try $0.execute(sql: "PRAGMA journal_mode = WAL") }
                    try migrator.migrate(db)
                }
            }
        } catch let e as AuditError {
            opened.map(Connections.close)
            throw e
        } catch {
            opened.map(Connections.close)
            throw AuditError(path: path, message: DiskSpace.explain(error, file: path) ?? "\(error)")
        }
    }

    deinit { Connections.close(db) }

    /// The connection to write with, once the path is seen to name its file still (one `stat`). The trail has
    /// several writers (bgtaskd, each `bgtask run`), so what is done holds the trail's lock and looks again: a trail
    /// removed is written back from what this writer holds (`HeldFile`); one that another writer put back, or a
    /// new one, is taken up as it is.
    func writer() throws -> DatabaseQueue {
        if let n = HeldFile(path: path), n == held { return db }
        try AuditLog.withLock(path + ".lock") {
            if let n = HeldFile(path: path) {
                guard n != held else { return }
                let other = try Connections.open(path: path, configuration: configuration)
                guard try other.read({ try AuditLog.kind.verdict($0) }) == .ours else {
                    Connections.close(other)
                    throw AuditError(path: path, message: "was replaced under bgtask by a file that is not its audit trail; refusing to write to it")
                }
                Connections.close(db)
                db = other
                held = n
                onRestore?("\(path) was replaced under its writer by another audit trail; writing to that one")
                return
            }
            do {
                onRestore?(try HeldFile.writeBack(&db, held: &held, at: path, configuration: configuration))
            } catch let e as DatabaseRestoreError {
                throw AuditError(path: e.path, message: e.message)
            }
        }
        return db
    }

    /// Before anything else: an existing, non-empty file must at least be an SQLite database.
    static func checkHeader(_ path: String) throws {
        var st = stat()
        guard lstat(path, &st) == 0, st.st_size > 0 else { return }
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { throw AuditError(path: path, message: "cannot be read: \(String(cString: strerror(errno)))") }
        var head = [UInt8](repeating: 0, count: 16)
        let n = read(fd, &head, 16)
        close(fd)
        head = Array(head.prefix(max(0, n)))
        guard head.count >= 16, Array(head.prefix(16)) == Array("SQLite format 3\0".utf8) else {
            throw AuditError(path: path, message: "is not an SQLite database (not bgtask's audit trail); refusing to touch it")
        }
    }

    /// Runs `body` holding the trail's lock: exclusive for a writer's migration; shared for a reader, which
    /// creates nothing (no lock file: no writer has begun, nothing to wait for).
    static func withLock<T>(_ lockPath: String, shared: Bool = false, _ body: () throws -> T) throws -> T {
        let fd = shared ? open(lockPath, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) : open(lockPath, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600)
        if fd < 0, shared, errno == ENOENT { return try body() }
        guard fd >= 0 else { throw AuditError(path: lockPath, message: String(cString: strerror(errno))) }
        defer { close(fd) }
        while flock(fd, shared ? LOCK_SH : LOCK_EX) != 0 {
            guard errno == EINTR else { throw AuditError(path: lockPath, message: "flock: \(String(cString: strerror(errno)))") }
        }
        defer { flock(fd, LOCK_UN) }
        return try body()
    }

    public func prune(now: Double) throws {
        try writer().write { db in
            try db.execute(sql: "DELETE FROM decision WHERE time < ?", arguments: [now - AuditLog.retentionDays * 86_400])
            try db.execute(sql: """
                DELETE FROM decision WHERE id <= (SELECT id FROM decision ORDER BY id DESC LIMIT 1 OFFSET ?)
                """, arguments: [AuditLog.maxEntries])
            if db.changesCount > 0 {
                try db.execute(sql: "DELETE FROM task WHERE NOT EXISTS (SELECT 1 FROM decision WHERE decision.id = task.last_id)")
            }
        }
    }

    public func append(_ e: AuditEntry) throws { try append(contentsOf: [e]) }

    /// Entries in one transaction, each also recorded as its task's latest; followers are woken once.
    public func append(contentsOf entries: [AuditEntry]) throws {
        // Statements prepared once and kept, arguments given as they are: each Submit records its first wait, and
        // a record's Codable insert and a statement parsed anew were a tenth of its CPU.
        try writer().write { db in
            let insert = try db.cachedStatement(sql: AuditLog.insertSQL), latest = try db.cachedStatement(sql: AuditLog.latestSQL)
            for e in entries {
                try insert.execute(arguments: [e.time, e.runID, e.taskID, e.event, e.verdict, e.detail, e.rules, e.conditions,
                                               e.exitStatus, e.energyWh, e.energy, e.cpuSeconds])
                try latest.execute(arguments: [e.taskID, db.lastInsertedRowID, e.time])
            }
        }
        // Followers (`bgtask log`) watch this file: it changes only after the commit is visible, unlike
        // the WAL, whose frames are written before SQLite publishes the commit in its mmap'd index.
        let fd = open(changedPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0o600)
        if fd >= 0 { close(fd) }
    }

    public var changedPath: String { path + ".changed" }

    static let insertSQL = """
        INSERT INTO decision (time, run_id, task_id, event, verdict, detail, rules, conditions, exit_status, energy_wh, energy, cpu_seconds)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
        """
    static let latestSQL = """
        INSERT INTO task (task_id, last_id, last_time) VALUES (?, ?, ?)
        ON CONFLICT (task_id) DO UPDATE SET last_id = excluded.last_id, last_time = excluded.last_time
        """

    // MARK: RunObserver

    public func record(_ event: RunEvent, task: TaskFields) {
        let rules: JSONValue = .array((event.decision?.matches ?? []).map { m in
            .object([("id", .string(m.ruleID)), ("origin", .string(m.location.description)), ("verdict", .string(m.verdict.rawValue)),
                     ("reason", .string(m.reason)), ("readings", .object(m.readings.map { ($0.name, json($0.value)) }))])
        })
        let keepConditions = [.started, .resumed, .unthrottled].contains(event.kind)
        let entry = AuditEntry(
            id: nil, time: wallClock(), runID: event.runID ?? runID, taskID: task.id, event: event.kind.rawValue,
            verdict: event.decision?.verdict.rawValue, detail: event.detail, rules: rules.rendered,
            conditions: keepConditions ? JSONValue.object(event.conditions.sorted { $0.key < $1.key }.map { ($0.key, json($0.value)) }).rendered : nil,
            exitStatus: event.exitStatus, energyWh: event.energyWh, energy: event.energy, cpuSeconds: event.cpuSeconds)
        if batching { buffer.append(entry); return }
        do { try append(entry) } catch {
            fputs("bgtask: audit trail \(path): \(error)\n", stderr)
        }
    }

    /// Writes what `batching` kept, in one transaction.
    public func flush() {
        guard !buffer.isEmpty else { return }
        let entries = buffer
        buffer = []
        do { try append(contentsOf: entries) } catch {
            fputs("bgtask: audit trail \(path): \(DiskSpace.explain(error, file: path) ?? "\(error)") (\(entries.count) entries lost)\n", stderr)
        }
    }

    // MARK: Reading

    public func entries(task: String? = nil, since: Double? = nil, run: String? = nil, after id: Int64 = 0) throws -> [AuditEntry] {
        try db.read { db in
            var q = AuditEntry.filter(Column("id") > id)
            if let t = task { q = q.filter(Column("task_id") == t) }
            if let s = since { q = q.filter(Column("time") >= s) }
            if let r = run { q = q.filter(Column("run_id") == r) }
            return try q.order(Column("id")).fetchAll(db)
        }
    }

    /// The entries of the runs that ended (finished or gave up) since `since`, run by run, each in order: only those
    /// runs are read, not the waits of a queue of thousands still pending — and in the run index's own order, so
    /// SQLite sorts nothing (a sort by id spilled every row, rules and readings included, to a temporary file). The
    /// inner WHERE repeats `decision_ends`'s own, which is what lets SQLite use that partial index.
    public func entriesOfRuns(endedSince since: Double) throws -> [AuditEntry] {
        try db.read { db in
            try AuditEntry.fetchAll(db, sql: """
                SELECT * FROM decision WHERE run_id IN
                  (SELECT run_id FROM decision WHERE event IN ('finished', 'gave-up') AND time >= ?)
                ORDER BY run_id, id
                """, arguments: [since])
        }
    }

    /// One run's entries, in order, found through the run index (a task may have 50,000 entries).
    public func entries(run: String) throws -> [AuditEntry] {
        try db.read { db in
            try AuditEntry.fetchAll(db, sql: "SELECT * FROM decision INDEXED BY decision_run WHERE run_id = ? ORDER BY id", arguments: [run])
        }
    }

    /// The last `n` entries, oldest first (the tail, read from the end: the table may hold 100,000).
    public func tail(_ n: Int) throws -> [AuditEntry] {
        guard n > 0 else { return [] }
        return try db.read { db in
            try AuditEntry.fetchAll(db, sql: "SELECT * FROM decision ORDER BY id DESC LIMIT ?", arguments: [n]).reversed()
        }
    }

    /// The newest entry's id (0 when empty).
    public func lastID() throws -> Int64 {
        try db.read { try Int64.fetchOne($0, sql: "SELECT MAX(id) FROM decision") ?? 0 }
    }

    /// The latest run of a task (its id), or nil.
    public func latestRun(task: String) throws -> String? {
        try db.read { db in
            try String.fetchOne(db, sql: "SELECT run_id FROM decision WHERE task_id = ? ORDER BY id DESC LIMIT 1", arguments: [task])
        }
    }

    /// The words of each of these runs' waits as last told, where its task's latest entry is a deferral of that run
    /// (run id → detail): a story a new supervisor carries on without telling the same wait again. Found through the
    /// `task` table, one statement for the lot: CROSS JOIN keeps SQLite from walking every deferral through the event
    /// index instead (its choice for a list of 100 ids, 93 % of a start's CPU at 100,000 pending).
    public func lastDeferrals(of runs: [(task: String, run: String)]) throws -> [String: String] {
        guard !runs.isEmpty else { return [:] }
        var told: [String: String] = [:]
        // SQLite's default bound on a statement's parameters is 32,766.
        for start in stride(from: 0, to: runs.count, by: 30_000) {
            let part = runs[start..<min(runs.count, start + 30_000)]
            try db.read { db in
                let rows = try Row.fetchCursor(db, sql: AuditLog.lastDeferralsSQL(part.count), arguments: StatementArguments(part.map(\.task)))
                while let r = try rows.next() { told[r["run_id"]] = r["detail"] }
            }
        }
        let wanted = Set(runs.map(\.run))
        return told.filter { wanted.contains($0.key) }
    }

    static func lastDeferralsSQL(_ tasks: Int) -> String {
        """
        SELECT d.run_id, d.detail FROM task t CROSS JOIN decision d ON d.id = t.last_id
        WHERE t.task_id IN (\(Array(repeating: "?", count: tasks).joined(separator: ","))) AND d.event = 'deferred'
        """
    }

    /// SQLite's plan for a statement of this trail, one step a line (tests: which indexes a look-up walks).
    func queryPlan(_ sql: String, arguments: [String]) throws -> String {
        try db.read { db in
            try Row.fetchAll(db, sql: "EXPLAIN QUERY PLAN " + sql, arguments: StatementArguments(arguments)).map { $0["detail"] as String }.joined(separator: "\n")
        }
    }

    /// The last entry of each task since a time, newest first, at most `limit` tasks (from the `task` table).
    public func latestPerTask(since: Double, limit: Int = Int.max) throws -> [AuditEntry] {
        try db.read { db in
            try AuditEntry.fetchAll(db, sql: """
                SELECT d.* FROM task t JOIN decision d ON d.id = t.last_id WHERE t.last_time >= ? ORDER BY t.last_id DESC LIMIT ?
                """, arguments: [since, min(limit, Int(Int32.max))])
        }
    }
}

func json(_ v: PolicyValue) -> JSONValue { ConditionConversion.json(v) }

/// Seconds since the epoch (the one clock of the trail: Core's).
public func wallClock() -> Double { wallClockNow() }

extension AuditEntry {
    /// As `why --json` and `log --json` print it.
    public var json: JSONValue {
        .object([
            ("time", .number(time)), ("time_iso", .string(isoText(time))), ("run", .string(runID)), ("task", .string(taskID)), ("event", .string(event)),
            ("verdict", JSONValue(verdict)), ("detail", .string(detail)),
            ("rules", (try? JSONValue.parse(rules)) ?? .array([])),
            ("conditions", conditions.flatMap { try? JSONValue.parse($0) } ?? .null),
            ("exit_status", JSONValue(exitStatus.map(Int.init))),
        ] + (event == "finished" ? [("energy_wh", energyWh.map { JSONValue.number($0) } ?? .null), ("energy", JSONValue(energy)),
                                        ("cpu_seconds", cpuSeconds.map { JSONValue.number($0) } ?? .null)] : []))
    }
}
