import BgtaskStorage
import GRDB

/// The trail's tables: what marks the file as bgtask's, and the migrations that made and keep its schema.
extension AuditLog {
    static let kind = StateDatabase(applicationID: "bgtA", tables: ["decision", "task"],
                                    migrations: ["v1", "v2 task index", "v3 energy", "v4 ends index", "v5 fewer index writes",
                                                "v6 cpu"], what: "audit trail")
    /// The migrations that made the tables and columns a reader uses; the later ones change only indexes, so a reader
    /// newer than the writer that last opened the trail (a package upgraded under a running daemon) still reads it.
    static let readable: Set<String> = ["v1", "v2 task index", "v3 energy"]

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
        // Each task's latest entry, kept on every append: `why` without an id reads this, not the history.
        m.registerMigration("v2 task index") { db in
            try db.execute(sql: """
                CREATE TABLE task (task_id TEXT PRIMARY KEY NOT NULL, last_id INTEGER NOT NULL, last_time DOUBLE NOT NULL);
                INSERT INTO task (task_id, last_id, last_time) SELECT task_id, MAX(id), MAX(time) FROM decision GROUP BY task_id;
                CREATE INDEX task_last ON task (last_id);
                CREATE INDEX decision_task_id ON decision (task_id, id);
                """)
        }
        // What each run used, recorded at its end.
        m.registerMigration("v3 energy") { db in
            try db.alter(table: "decision") { t in
                t.add(column: "energy_wh", .double)
                t.add(column: "energy", .text)
            }
        }
        // The runs that ended in a window (`bgtask metrics`), found without reading the waits of a long queue.
        m.registerMigration("v4 ends index") { db in
            try db.create(index: "decision_event_time", on: "decision", columns: ["event", "time"])
        }
        // Each entry wrote nine pages; now six (a Submit's entry is a third of its CPU). `decision_task_time` did what
        // `decision_task_id` does; the ends index holds only ends, not every wait; `task` is keyed by its id alone.
        m.registerMigration("v5 fewer index writes") { db in
            try db.execute(sql: """
                DROP INDEX decision_task_time;
                DROP INDEX decision_event_time;
                CREATE INDEX decision_ends ON decision (time) WHERE event IN ('finished', 'gave-up');
                CREATE TABLE task_keyed (task_id TEXT PRIMARY KEY NOT NULL, last_id INTEGER NOT NULL, last_time DOUBLE NOT NULL) WITHOUT ROWID;
                INSERT INTO task_keyed SELECT task_id, last_id, last_time FROM task;
                DROP TABLE task;
                ALTER TABLE task_keyed RENAME TO task;
                CREATE INDEX task_last ON task (last_id);
                """)
        }
        // What each run's processes used of the CPU, recorded at its end (`bgtask report`'s costs).
        m.registerMigration("v6 cpu") { db in
            try db.alter(table: "decision") { t in t.add(column: "cpu_seconds", .double) }
        }
        return m
    }
}
