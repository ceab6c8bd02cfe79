#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskConfig
import BgtaskJSON
import BgtaskPolicy
import BgtaskStorage
import GRDB

/// One request in the daemon's queue: what to run, under which requirements, and where it is in its life.
/// Times are seconds since the epoch (they must survive a reboot).
public struct QueuedTask: Sendable, Equatable, Codable, FetchableRecord, PersistableRecord {
    public static let databaseTableName = "request"
    /// The identifier: one pending request per identifier (a resubmit replaces it).
    public var id: String
    /// The app that submitted it (its manifest id), or "cli" for the command line.
    public var app: String
    public var kind: TaskKind
    /// JSON array of the command's arguments.
    public var argv: String
    public var requiresExternalPower = false
    public var requiresNetwork = false
    public var requiresUnmetered = false
    public var cpuHeavy = false
    public var userInitiated = false
    /// Not before this time (`earliestBeginDate`).
    public var earliest: Double?
    /// `--every`: the period, and the instant periods are counted from.
    public var every: Double?
    public var anchor: Double?
    /// `--on-calendar`: a systemd calendar event, as written; `--between`: its daily window (`01:00-06:00`).
    public var calendar: String?
    public var window: String?
    /// `--retry N`: how many times a failed run is retried, and how many failures so far.
    public var retry = 0
    public var failures = 0
    public var budget: Double?
    public var submitted: Double
    /// The submitter's working directory.
    public var directory: String?
    /// "pending" or "running".
    public var state = "pending"
    /// Of the current or last run: its audit-trail run id, process group, the group leader's start time and cgroup.
    public var runID: String?
    public var pgid: Int32?
    public var childStart: Int64?
    public var cgroup: Containment?
    public var started: Double?
    /// The run token its processes carry in their environment (`RunProcesses`), written before the spawn.
    public var token: String?
    /// App tasks: what the user sees of a continued task, its submission strategy (queue, fail), resources (JSON list).
    public var title: String?
    public var subtitle: String?
    public var strategy: String?
    public var resources: String?
    /// Who cancelled the run this running row records ("bgtask cancel", an app…): a cancel is the request's end, so
    /// neither a crash's recovery nor a stop queues it again (nil: not cancelled).
    public var cancelled: String?

    /// A task an app handles (its command is the app's, from its manifest), not a command of its own.
    public var isAppTask: Bool { app != "cli" }

    public init(id: String, app: String = "cli", kind: TaskKind, argv: [String], submitted: Double) {
        self.id = id
        self.app = app
        self.kind = kind
        self.argv = JSONValue.array(argv.map { .string($0) }).rendered
        self.submitted = submitted
    }

    /// The table's columns, in the order of `values`.
    static let columns = ["id", "app", "kind", "argv", "requires_external_power", "requires_network", "requires_unmetered",
                          "cpu_heavy", "user_initiated", "earliest", "every", "anchor", "retry", "failures", "budget", "submitted",
                          "directory", "state", "run_id", "pgid", "child_start", "cgroup", "started", "title", "subtitle",
                          "strategy", "resources", "token", "calendar", "window", "cancelled"]

    /// Its values, in the order of `columns`.
    var values: [(any DatabaseValueConvertible)?] {
        [id, app, kind.rawValue, argv, requiresExternalPower, requiresNetwork, requiresUnmetered, cpuHeavy, userInitiated,
         earliest, every, anchor, retry, failures, budget, submitted, directory, state, runID, pgid, childStart, cgroup?.description,
         started, title, subtitle, strategy, resources, token, calendar, window, cancelled]
    }

    /// Columns written by hand: GRDB's Codable encoder is the slow part of a Submit's write.
    public func encode(to c: inout PersistenceContainer) {
        for (name, value) in zip(QueuedTask.columns, values) { c[name] = value }
    }

    /// Every request reads the columns in the order of `columns`, so a row is read by position.
    public static var databaseSelection: [any SQLSelectable] { columns.map { Column($0) } }

    /// Read by hand as well, by position (`databaseSelection`): a daemon starting with 10,000 persisted requests
    /// decodes each one, and a lookup by name lowercases the name each time.
    public init(row r: Row) throws {
        id = r[0] ?? ""
        app = r[1] ?? "cli"
        kind = TaskKind(rawValue: r[2] ?? "") ?? .processing
        argv = r[3] ?? "[]"
        requiresExternalPower = r[4] ?? false
        requiresNetwork = r[5] ?? false
        requiresUnmetered = r[6] ?? false
        cpuHeavy = r[7] ?? false
        userInitiated = r[8] ?? false
        earliest = r[9]
        every = r[10]
        anchor = r[11]
        retry = r[12] ?? 0
        failures = r[13] ?? 0
        budget = r[14]
        submitted = r[15] ?? 0
        directory = r[16]
        state = r[17] ?? "pending"
        runID = r[18]
        pgid = r[19]
        childStart = r[20]
        cgroup = (r[21] as String?).flatMap(Containment.init)
        started = r[22]
        title = r[23]
        subtitle = r[24]
        strategy = r[25]
        resources = r[26]
        token = r[27]
        calendar = r[28]
        window = r[29]
        cancelled = r[30]
    }

    enum CodingKeys: String, CodingKey {
        case id, app, kind, argv, requiresExternalPower = "requires_external_power", requiresNetwork = "requires_network"
        case requiresUnmetered = "requires_unmetered", cpuHeavy = "cpu_heavy", userInitiated = "user_initiated"
        case earliest, every, anchor, retry, failures, budget, submitted, directory, state, runID = "run_id", pgid
        case childStart = "child_start", cgroup, started, title, subtitle, strategy, resources, token, calendar, window, cancelled
    }

    /// This request waiting again (after a crash, a retry, or for its next period): no process, no start.
    public func requeued(runID: String) -> QueuedTask {
        var r = self
        r.state = "pending"; r.runID = runID; r.pgid = nil; r.childStart = nil; r.cgroup = nil; r.started = nil; r.token = nil
        r.cancelled = nil
        return r
    }

    /// The command, decoded (an empty list if the stored text is not a JSON array of strings).
    public var command: [String] {
        guard case .array(let a)? = try? JSONValue.parse(argv) else { return [] }
        return a.compactMap { if case .string(let s) = $0 { return s }; return nil }
    }

    /// The policy's view of it.
    public var fields: TaskFields {
        var t = TaskFields(id: id, kind: kind)
        t.requiresExternalPower = requiresExternalPower
        t.requiresNetwork = requiresNetwork
        t.requiresUnmetered = requiresUnmetered
        t.cpuHeavy = cpuHeavy
        t.userInitiated = userInitiated
        t.window = window.flatMap(ClockWindow.init)
        return t
    }
}

public struct QueueError: Error, CustomStringConvertible {
    public var path: String
    public var message: String
    public var description: String { "\(path): \(message)" }
}

/// The daemon's queue in SQLite (`queue.sqlite` in the state directory; WAL, full sync): what survives a
/// restart, a crash and a reboot. Only bgtaskd writes it; one daemon per user holds its lock.
/// Unchecked: its only state is GRDB's DatabaseQueue, which serialises every access.
public final class QueueStore: @unchecked Sendable {
    public let path: String
    /// Replaced only when the file was removed or replaced under it (`HeldFile`), on the writer's thread.
    private(set) var db: DatabaseQueue
    let configuration: Configuration
    /// The file this connection writes, as its path named it at the open (or after a restore).
    var held: HeldFile?
    /// Told when the file at `path` was found removed or replaced and what was held was written back.
    public var onRestore: ((String) -> Void)?
    public static let file = "queue.sqlite"
    static let kind = StateDatabase(applicationID: "bgtQ", tables: ["request", "app_usage", "app_standing", "transition"],
                                    migrations: ["v1", "v2-apps", "v3-app-usage", "v4-run-token", "v5-app-standing", "v6-calendar-window", "v7-transitions"],
                                    what: "queue")

    /// Frees SQLite's page cache (it fills with the whole queue as the daemon takes it up at start).
    public func releaseMemory() { db.releaseMemory() }

    /// `busyTimeout`: how long a statement waits for a lock another process holds on the file before it fails
    /// (a test makes it short, to see what a daemon does with a write that cannot be made).
    public init(path: String, busyTimeout: Double = 5) throws {
        self.path = path
        do { try SecureDirectory.checkFile(path) } catch { throw QueueError(path: path, message: error.message) }
        var config = Configuration()
        // GRDB's queues default to userInitiated, whose libdispatch workers ask for nice -2: refused to an
        // unprivileged process and logged to the journal each time. Background work's QoS (nice 10) is allowed.
        config.qos = .background
        config.busyMode = .timeout(busyTimeout)
        // WAL with synchronous=NORMAL: a commit is in the WAL (the OS has it) when Submit replies, so a killed or
        // crashed daemon loses nothing; only a power cut can lose the last submits, which saves an fsync per call.
        config.prepareDatabase { db in try db.execute(sql: "PRAGMA synchronous = NORMAL") }
        var opened: DatabaseQueue?
        configuration = config
        do {
            db = try Connections.open(path: path, configuration: config)
            opened = db
            held = HeldFile(path: path)
            // Before any write: a file that is not bgtask's queue is refused untouched.
            switch try db.read({ try QueueStore.kind.verdict($0) }) {
            case .foreign(let why): throw QueueError(path: path, message: "is an SQLite database of something else (\(why)); refusing to use it")
            case .adoptable: try db.writeWithoutTransaction { try QueueStore.kind.claim($0) }
            case .ours: break
            }
            try db.writeWithoutTransaction { try $0.execute(sql: "PRAGMA journal_mode = WAL") }
            var m = DatabaseMigrator()
            m.registerMigration("v1") { db in
                // One pending and one running request per identifier at most: a task may resubmit itself while it runs.
                try db.create(table: "request") { t in
                    t.column("id", .text).notNull()
                    t.column("state", .text).notNull().defaults(to: "pending")
                    t.primaryKey(["id", "state"])
                    t.column("app", .text).notNull()
                    t.column("kind", .text).notNull()
                    t.column("argv", .text).notNull()
                    for flag in ["requires_external_power", "requires_network", "requires_unmetered", "cpu_heavy", "user_initiated"] {
                        t.column(flag, .boolean).notNull().defaults(to: false)
                    }
                    t.column("earliest", .double)
                    t.column("every", .double)
                    t.column("anchor", .double)
                    t.column("retry", .integer).notNull().defaults(to: 0)
                    t.column("failures", .integer).notNull().defaults(to: 0)
                    t.column("budget", .double)
                    t.column("submitted", .double).notNull()
                    t.column("directory", .text)
                    t.column("run_id", .text)
                    t.column("pgid", .integer)
                    t.column("child_start", .integer)
                    t.column("cgroup", .text)
                    t.column("started", .double)
                }
                try db.create(index: "request_app", on: "request", columns: ["app"])
            }
            m.registerMigration("v2-apps") { db in
                try db.alter(table: "request") { t in
                    t.add(column: "title", .text)
                    t.add(column: "subtitle", .text)
                    t.add(column: "strategy", .text)
                    t.add(column: "resources", .text)
                }
            }
            m.registerMigration("v3-app-usage") { db in
                try db.create(table: "app_usage") { t in
                    t.column("app", .text).notNull()
                    t.column("day", .integer).notNull()
                    t.column("seconds", .double).notNull()
                    t.primaryKey(["app", "day"])
                }
            }
            m.registerMigration("v4-run-token") { db in
                try db.alter(table: "request") { t in t.add(column: "token", .text) }
            }
            m.registerMigration("v5-app-standing") { db in
                // Tasks the system had to end for each app, not yet made good by tasks it completed.
                try db.create(table: "app_standing") { t in
                    t.column("app", .text).primaryKey()
                    t.column("ended", .integer).notNull()
                }
            }
            m.registerMigration("v6-calendar-window") { db in
                try db.alter(table: "request") { t in
                    t.add(column: "calendar", .text)
                    t.add(column: "window", .text)
                }
            }
            m.registerMigration("v7-transitions") { db in
                // The machine's history of a few readings (the charger, the person, heat, the network), for the
                // learned start estimate and `bgtask report`; kept 60 days.
                try db.create(table: "transition") { t in
                    t.column("time", .double).notNull()
                    t.column("name", .text).notNull()
                    t.column("value", .text).notNull()
                }
                try db.create(index: "transition_name_time", on: "transition", columns: ["name", "time"])
            }
            m.registerMigration("v8-request-order") { db in
                // The queue read in submission order a page at a time (start-up takes it up in slices).
                try db.create(index: "request_state_order", on: "request", columns: ["state", "submitted", "id"])
            }
            m.registerMigration("v9-cancelled") { db in
                try db.alter(table: "request") { t in t.add(column: "cancelled", .text) }
            }
            m.registerMigration("v10-run-boot") { db in
                // The boot its running rows were written in: a pid and a start tick mean nothing in another one.
                try db.create(table: "meta") { t in
                    t.column("key", .text).primaryKey()
                    t.column("value", .text).notNull()
                }
            }
            try m.migrate(db)
        } catch let e as QueueError {
            opened.map(Connections.close)
            throw e
        } catch {
            opened.map(Connections.close)
            throw QueueError(path: path, message: DiskSpace.explain(error, file: path) ?? "\(error)")
        }
    }

    deinit { Connections.close(db) }

    public func all() throws -> [QueuedTask] {
        try db.read { try QueuedTask.order(Column("submitted"), Column("id")).fetchAll($0) }
    }

    /// The boot (`/proc/sys/kernel/random/boot_id`) the running rows were written in, as the daemon that wrote
    /// them recorded it at its start; nil if no daemon has since boots were kept.
    public func runBoot() throws -> String? {
        try db.read { try String.fetchOne($0, sql: "SELECT value FROM meta WHERE key = 'run_boot'") }
    }

    /// Recorded at a daemon's start, before it writes any running row (one daemon lives in one boot).
    public func setRunBoot(_ boot: String) throws {
        try transaction { try $0.execute(sql: "INSERT OR REPLACE INTO meta (key, value) VALUES ('run_boot', ?)", arguments: [boot]) }
    }

    /// The requests in one state (`running`: what a daemon that died left), without reading the rest.
    public func all(state: String) throws -> [QueuedTask] {
        try db.read { try QueuedTask.filter(Column("state") == state).order(Column("submitted"), Column("id")).fetchAll($0) }
    }

    /// At most `limit` requests in `state` after (`submitted`, `id`) in submission order, then by id: the queue
    /// read a page at a time through its index, so the first page costs what a page does, whatever the queue holds.
    public func page(state: String, after: (submitted: Double, id: String)?, limit: Int) throws -> [QueuedTask] {
        try db.read { db in
            var q = QueuedTask.filter(Column("state") == state)
            if let a = after { q = q.filter(sql: "(submitted, id) > (?, ?)", arguments: [a.submitted, a.id]) }
            return try q.order(Column("submitted"), Column("id")).limit(limit).fetchAll(db)
        }
    }

    /// The requests in `state` of the given ids (those that are there), read 500 at a time.
    public func rows(ids: [String], state: String) throws -> [QueuedTask] {
        // A few (the first in line for a slot): one prepared statement each, in one read, not an IN list made anew.
        // Outside a transaction (GRDB's read adds four statements around one): each SELECT is its own snapshot, and
        // the daemon, the only writer, is the caller.
        if ids.count <= 16 {
            return try db.inDatabase { db in
                let statement = try db.cachedStatement(sql: QueueStore.getSQL)
                return try ids.compactMap { try QueuedTask.fetchOne(statement, arguments: [$0, state]) }
            }
        }
        var out: [QueuedTask] = []
        var i = 0
        while i < ids.count {
            let chunk = Array(ids[i..<min(ids.count, i + 500)])
            try db.read { db in
                out += try QueuedTask.filter(Column("state") == state && chunk.contains(Column("id"))).fetchAll(db)
            }
            i += 500
        }
        return out
    }

    /// How many requests are in `state`.
    public func count(state: String) throws -> Int {
        try db.read { try QueuedTask.filter(Column("state") == state).fetchCount($0) }
    }

    public func get(_ id: String, state: String = "pending") throws -> QueuedTask? {
        // One SELECT, its own snapshot: no transaction around it (see `rows`).
        try db.inDatabase { try QueuedTask.fetchOne($0.cachedStatement(sql: QueueStore.getSQL), arguments: [id, state]) }
    }
    /// One row by its key, prepared once: the rows of the first tasks in line for a slot are read one by one, on
    /// the way from a charger plug to their start.
    static let getSQL = "SELECT " + QueuedTask.columns.joined(separator: ", ") + " FROM request WHERE id = ? AND state = ?"

    /// A number that changes whenever a row of this store is written or deleted (SQLite's count of the rows this
    /// connection changed, the daemon being the only writer): what something made from the stored queue depends on.
    public var changes: Int { db.inDatabase { $0.totalChangesCount } }

    /// Inserts or replaces (one request per identifier and state).
    public func put(_ t: QueuedTask) throws {
        // One statement (the row of this id and state, if any, is replaced): half the cost of save's UPDATE-then-INSERT.
        // Prepared once and kept: GRDB's record insert builds a container and its SQL on every Submit.
        try transaction { db in
            try db.cachedStatement(sql: QueueStore.putSQL).execute(arguments: StatementArguments(t.values))
        }
    }

    static let putSQL = "INSERT OR REPLACE INTO request (" + QueuedTask.columns.joined(separator: ", ") + ") VALUES ("
        + QueuedTask.columns.map { _ in "?" }.joined(separator: ", ") + ")"
    /// The same row, not written over one of its id and state (the key): a run's next request after a newer one.
    static let putUnlessPendingSQL = putSQL.replacingOccurrences(of: "INSERT OR REPLACE", with: "INSERT OR IGNORE")

    /// A run's start into the queue, in one transaction: the request in state `from` ("pending": it starts now;
    /// "running": what is known of its run since) becomes the running one, with the run's columns (run id, token,
    /// process group, start time, containment, when). The rest of the row is the stored one: nothing changes a
    /// request's other columns while it waits. A row not there (taken from the file under us) is written whole.
    public func markRunning(_ t: QueuedTask, from state: String = "pending") throws {
        // One UPDATE of six columns, prepared once and kept: this write may be on the way from a charger plug to
        // the task's start (a DELETE and a 30-column INSERT took 0.14 ms inside bgtaskd, this 0.12).
        let run: [(any DatabaseValueConvertible)?] = [t.runID, t.token, t.pgid, t.childStart, t.cgroup?.description, t.started, t.id, state]
        try transaction { db in
            try db.cachedStatement(sql: QueueStore.startSQL).execute(arguments: StatementArguments(run))
            guard db.changesCount == 0 else { return }
            var r = t
            r.state = "running"
            try db.cachedStatement(sql: QueueStore.putSQL).execute(arguments: StatementArguments(r.values))
        }
    }
    /// OR REPLACE: a running row of the id left by a run whose end was not written gives way to this one.
    static let startSQL = "UPDATE OR REPLACE request SET state = 'running', run_id = ?, token = ?, pgid = ?, child_start = ?, cgroup = ?, "
        + "started = ? WHERE id = ? AND state = ?"
    static let deleteSQL = "DELETE FROM request WHERE id = ? AND state = ?"
    static let deleteRunSQL = "DELETE FROM request WHERE id = ? AND state = 'pending' AND run_id = ?"
    static let cancelSQL = "UPDATE request SET cancelled = ? WHERE id = ? AND state = 'running'"

    @discardableResult
    public func remove(_ id: String, state: String) throws -> Bool {
        try transaction { db in
            try db.cachedStatement(sql: QueueStore.deleteSQL).execute(arguments: [id, state])
            return db.changesCount > 0
        }
    }

    /// A request's end, in one transaction: its row in `state` goes ("running": a run's end; "pending": a wait
    /// given up), and for a run, a pending row of the same run too (`runID`: a start whose running row could not be
    /// written left the request pending); `next`, the request waiting again (a retry, the next period or elapse), is
    /// written unless a request of that id is already pending (one submitted while it ran takes precedence).
    public func end(_ id: String, state: String, runID: String, next: QueuedTask?) throws {
        try transaction { db in
            try db.cachedStatement(sql: QueueStore.deleteSQL).execute(arguments: [id, state])
            if state == "running" { try db.cachedStatement(sql: QueueStore.deleteRunSQL).execute(arguments: [id, runID]) }
            if let n = next {
                try db.cachedStatement(sql: QueueStore.putUnlessPendingSQL).execute(arguments: StatementArguments(n.values))
            }
        }
    }

    /// A cancel, in one transaction: the pending request of `id` goes, and its running row (if it runs) says who
    /// cancelled it. Returns whether a pending request was removed.
    @discardableResult
    public func cancel(_ id: String, by who: String) throws -> Bool {
        try transaction { db in
            try db.cachedStatement(sql: QueueStore.deleteSQL).execute(arguments: [id, "pending"])
            let removed = db.changesCount > 0
            try db.cachedStatement(sql: QueueStore.cancelSQL).execute(arguments: [who, id])
            return removed
        }
    }

    /// The connection to write with, once the path is seen to name its file still (one `stat`): a write made to a
    /// file removed or replaced under the daemon would be acknowledged and then lost at the next start.
    func writer() throws -> DatabaseQueue {
        let now = HeldFile(path: path)
        if let n = now, n == held { return db }
        do {
            onRestore?(try HeldFile.writeBack(&db, held: &held, at: path, configuration: configuration))
        } catch let e as DatabaseRestoreError {
            throw QueueError(path: e.path, message: e.message)
        }
        return db
    }

    /// A write transaction whose BEGIN and COMMIT are prepared once and kept, like the statements inside it:
    /// GRDB's `write` prepares both anew each time, through its authorizer, on every Submit, start and end.
    private func transaction<T>(_ body: (Database) throws -> T) throws -> T {
        try writer().writeWithoutTransaction { db in
            try db.cachedStatement(sql: "BEGIN IMMEDIATE TRANSACTION").execute()
            do {
                let result = try body(db)
                try db.cachedStatement(sql: "COMMIT TRANSACTION").execute()
                return result
            } catch {
                if db.isInsideTransaction { try? db.rollback() }
                throw error
            }
        }
    }

    /// Each app's background runtime on battery on `day` (days since the epoch, local time).
    public func usage(day: Int) throws -> [String: Double] {
        try db.read { db in
            var out: [String: Double] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT app, seconds FROM app_usage WHERE day = ?", arguments: [day]) {
                out[row["app"]] = row["seconds"]
            }
            return out
        }
    }

    /// Keeps `day`'s figures (and forgets days older than a week).
    public func saveUsage(day: Int, seconds: [String: Double]) throws {
        try writer().write { db in
            for (app, s) in seconds {
                try db.execute(sql: "INSERT INTO app_usage (app, day, seconds) VALUES (?, ?, ?) ON CONFLICT (app, day) DO UPDATE SET seconds = excluded.seconds",
                               arguments: [app, day, s])
            }
            try db.execute(sql: "DELETE FROM app_usage WHERE day < ?", arguments: [day - 7])
        }
    }

    /// Each app's count of tasks the system had to end (apps with none are absent).
    public func standing() throws -> [String: Int] {
        try db.read { db in
            var out: [String: Int] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT app, ended FROM app_standing") { out[row["app"]] = row["ended"] }
            return out
        }
    }

    public func setStanding(app: String, ended: Int) throws {
        try writer().write { db in
            if ended <= 0 { try db.execute(sql: "DELETE FROM app_standing WHERE app = ?", arguments: [app]); return }
            try db.execute(sql: "INSERT INTO app_standing (app, ended) VALUES (?, ?) ON CONFLICT (app) DO UPDATE SET ended = excluded.ended",
                           arguments: [app, ended])
        }
    }

    /// Readings that changed, as the daemon saw them (`name`, its value as text), in one transaction.
    public func recordTransitions(_ changes: [(time: Double, name: String, value: String)]) throws {
        guard !changes.isEmpty else { return }
        try transaction { db in
            let insert = try db.cachedStatement(sql: "INSERT INTO transition (time, name, value) VALUES (?, ?, ?)")
            for c in changes { try insert.execute(arguments: [c.time, c.name, c.value]) }
        }
    }

    /// One reading's changes since `since`, oldest first — with the last change before it, so the value at
    /// `since` is known.
    public func transitions(_ name: String, since: Double) throws -> [(time: Double, value: String)] {
        try db.read { try QueueStore.transitions($0, name, since: since) }
    }

    /// The readings' history as another process reads it (`bgtask report`): the file opened read-only, not
    /// migrated, nothing written; each name's changes from the last one before `since` on. Empty without a file.
    public static func readTransitions(path: String, names: [String], since: Double) throws -> [String: [(time: Double, value: String)]] {
        guard access(path, R_OK) == 0 else { return [:] }
        var config = Configuration()
        config.readonly = true
        let db = try DatabaseQueue(path: path, configuration: config)
        return try db.read { db in
            guard try db.tableExists("transition") else { return [:] }
            var out: [String: [(time: Double, value: String)]] = [:]
            for name in names { out[name] = try QueueStore.transitions(db, name, since: since) }
            return out
        }
    }

    static func transitions(_ db: Database, _ name: String, since: Double) throws -> [(time: Double, value: String)] {
        let sql = """
            SELECT time, value FROM (SELECT time, value FROM transition WHERE name = ? AND time < ? ORDER BY time DESC LIMIT 1)
            UNION ALL SELECT time, value FROM transition WHERE name = ? AND time >= ? ORDER BY time
            """
        return try Row.fetchAll(db, sql: sql, arguments: [name, since, name, since]).map { ($0["time"], $0["value"]) }
    }

    /// Forgets changes older than `before` (the history is kept 60 days).
    public func pruneTransitions(before: Double) throws {
        try writer().write { try $0.execute(sql: "DELETE FROM transition WHERE time < ?", arguments: [before]) }
    }
}
