#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskPolicy
import BgtaskProbes
import BgtaskRun
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

    public init(id: Int64?, time: Double, runID: String, taskID: String, event: String, verdict: String?, detail: String,
                rules: String, conditions: String?, exitStatus: Int32?) {
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
    }

    public mutating func didInsert(_ inserted: InsertionSuccess) { id = inserted.rowID }
}

/// The audit trail: `$XDG_STATE_HOME/bgtask/audit.sqlite` (or `/var/lib/bgtask` for root), in WAL
/// mode with full sync, so what was written survives the process being killed. Bounded: entries older
/// than `retentionDays` and any beyond `maxEntries` are deleted when a run starts.
public final class AuditLog: RunObserver, @unchecked Sendable {
    public let path: String
    let db: DatabaseQueue
    public static let retentionDays = 30.0
    public static let maxEntries = 100_000
    public var runID = ""

    public init(path: String, readOnly: Bool = false) throws {
        self.path = path
        var config = Configuration()
        config.readonly = readOnly
        config.busyMode = .timeout(5)
        config.prepareDatabase { db in
            if !db.configuration.readonly {
                try db.execute(sql: "PRAGMA journal_mode = WAL")
                try db.execute(sql: "PRAGMA synchronous = FULL")
            }
        }
        db = try DatabaseQueue(path: path, configuration: config)
        if !readOnly { try migrator.migrate(db) }
    }

    var migrator: DatabaseMigrator {
        var m = DatabaseMigrator()
        m.registerMigration("v1") { db in
            try db.create(table: "decision") { t in
                t.autoIncrementedPrimaryKey("id")
                t.column("time", .double).notNull()
                t.column("run_id", .text).notNull()
                t.column("task_id", .text).notNull()
                t.column("event", .text).notNull()
                t.column("verdict", .text)
                t.column("detail", .text).notNull()
                t.column("rules", .text).notNull()
                t.column("conditions", .text)
                t.column("exit_status", .integer)
            }
            try db.create(index: "decision_task_time", on: "decision", columns: ["task_id", "time"])
            try db.create(index: "decision_run", on: "decision", columns: ["run_id"])
        }
        return m
    }

    public func prune(now: Double) throws {
        try db.write { db in
            try db.execute(sql: "DELETE FROM decision WHERE time < ?", arguments: [now - AuditLog.retentionDays * 86_400])
            try db.execute(sql: """
                DELETE FROM decision WHERE id <= (SELECT id FROM decision ORDER BY id DESC LIMIT 1 OFFSET ?)
                """, arguments: [AuditLog.maxEntries])
        }
    }

    public func append(_ e: AuditEntry) throws {
        var e = e
        try db.write { try e.insert($0) }
        // Followers (`bgtask log`) watch this file: it changes only after the commit is visible, unlike
        // the WAL, whose frames are written before SQLite publishes the commit in its mmap'd index.
        let fd = open(changedPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        if fd >= 0 { close(fd) }
    }

    public var changedPath: String { path + ".changed" }

    // MARK: RunObserver

    public func record(_ event: RunEvent, task: TaskFields) {
        let rules: JSONValue = .array((event.decision?.matches ?? []).map { m in
            .object([("id", .string(m.ruleID)), ("origin", .string(m.location.description)), ("verdict", .string(m.verdict.rawValue)),
                     ("reason", .string(m.reason)), ("readings", .object(m.readings.map { ($0.name, json($0.value)) }))])
        })
        let keepConditions = [.started, .resumed, .unthrottled].contains(event.kind)
        let entry = AuditEntry(
            id: nil, time: wallClock(), runID: runID, taskID: task.id, event: event.kind.rawValue,
            verdict: event.decision?.verdict.rawValue, detail: event.detail, rules: rules.rendered,
            conditions: keepConditions ? JSONValue.object(event.conditions.sorted { $0.key < $1.key }.map { ($0.key, json($0.value)) }).rendered : nil,
            exitStatus: event.exitStatus)
        do { try append(entry) } catch {
            fputs("bgtask: audit trail \(path): \(error)\n", stderr)
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

    /// The latest run of a task (its id), or nil.
    public func latestRun(task: String) throws -> String? {
        try db.read { db in
            try String.fetchOne(db, sql: "SELECT run_id FROM decision WHERE task_id = ? ORDER BY id DESC LIMIT 1", arguments: [task])
        }
    }

    /// The last entry of each task since a time, newest first.
    public func latestPerTask(since: Double) throws -> [AuditEntry] {
        try db.read { db in
            try AuditEntry.fetchAll(db, sql: """
                SELECT * FROM decision WHERE id IN (SELECT MAX(id) FROM decision WHERE time >= ? GROUP BY task_id) ORDER BY id DESC
                """, arguments: [since])
        }
    }
}

func json(_ v: PolicyValue) -> JSONValue { ConditionConversion.json(v) }

public func wallClock() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_REALTIME, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
}
