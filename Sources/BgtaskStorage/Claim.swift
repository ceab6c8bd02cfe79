import GRDB

/// What bgtask's SQLite files (`queue.sqlite`, `audit.sqlite`) share: each carries its own
/// `PRAGMA application_id`, and a file is checked before anything is written to it. Tables that merely
/// have bgtask's names (`request`, `task`, `decision`) do not make a file bgtask's.
public struct StateDatabase: Sendable {
    /// The application id in the file's header: four ASCII letters, as sqlite's own registry does.
    public let applicationID: Int32
    /// Every table the file may hold.
    public let tables: Set<String>
    /// Every migration bgtask has ever registered for it.
    public let migrations: Set<String>
    /// What it is, in messages ("queue", "audit trail").
    public let what: String

    public init(applicationID: String, tables: Set<String>, migrations: Set<String>, what: String) {
        self.applicationID = applicationID.utf8.reduce(Int32(0)) { $0 << 8 | Int32($1) }
        self.tables = tables.union(["grdb_migrations", "sqlite_sequence"])
        self.migrations = migrations
        self.what = what
    }

    public enum Verdict: Equatable {
        /// It carries bgtask's application id.
        case ours
        /// No tables yet, or an earlier bgtask's file (before the id was set): ours once the id is written.
        case adoptable
        /// Something else's; the reason says what.
        case foreign(String)
    }

    /// Reads the header and schema only.
    public func verdict(_ db: Database) throws -> Verdict {
        let id = try Int32.fetchOne(db, sql: "PRAGMA application_id") ?? 0
        if id == applicationID { return .ours }
        if id != 0 { return .foreign("its application_id is \(id), not bgtask's \(what) (\(applicationID))") }
        let present = try Set(String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table'"))
        if present.isEmpty { return .adoptable }
        if !present.isSubset(of: tables) {
            return .foreign("its tables are \(present.sorted().joined(separator: ", "))")
        }
        // An earlier bgtask recorded its migrations; a file that only borrows the table names did not.
        guard present.contains("grdb_migrations") else { return .foreign("it has no record of bgtask's migrations") }
        let done = try Set(String.fetchAll(db, sql: "SELECT identifier FROM grdb_migrations"))
        guard !done.isEmpty, done.isSubset(of: migrations) else {
            return .foreign("its migrations (\(done.sorted().joined(separator: ", "))) are not bgtask's")
        }
        return .adoptable
    }

    /// Sets the application id on a file `verdict` found adoptable (a header write: no transaction needed).
    public func claim(_ db: Database) throws {
        try db.execute(sql: "PRAGMA application_id = \(applicationID)")
    }
}
