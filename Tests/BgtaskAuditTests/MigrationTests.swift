@testable import BgtaskAudit
import Foundation
import GRDB
import Testing

@Suite("The audit trail: a trail an earlier bgtask wrote")
struct AuditMigrationTests {
    /// A trail as bgtask wrote it before "v5 fewer index writes": its schema as those migrations left it, two entries.
    func v4Trail() throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("audit-v4-\(UUID().uuidString).sqlite").path
        let db = try DatabaseQueue(path: path)
        try db.writeWithoutTransaction { db in
            try db.execute(sql: """
                PRAGMA application_id = \(AuditLog.kind.applicationID);
                PRAGMA journal_mode = WAL;
                CREATE TABLE grdb_migrations (identifier TEXT NOT NULL PRIMARY KEY);
                INSERT INTO grdb_migrations VALUES ('v1'), ('v2 task index'), ('v3 energy'), ('v4 ends index');
                CREATE TABLE "decision" ("id" INTEGER PRIMARY KEY AUTOINCREMENT, "time" DOUBLE NOT NULL, "run_id" TEXT NOT NULL,
                    "task_id" TEXT NOT NULL, "event" TEXT NOT NULL, "verdict" TEXT, "detail" TEXT NOT NULL, "rules" TEXT NOT NULL,
                    "conditions" TEXT, "exit_status" INTEGER, "energy_wh" DOUBLE, "energy" TEXT);
                CREATE INDEX "decision_task_time" ON "decision"("task_id", "time");
                CREATE INDEX "decision_run" ON "decision"("run_id");
                CREATE TABLE task (task_id TEXT PRIMARY KEY NOT NULL, last_id INTEGER NOT NULL, last_time DOUBLE NOT NULL);
                CREATE INDEX task_last ON task (last_id);
                CREATE INDEX decision_task_id ON decision (task_id, id);
                CREATE INDEX "decision_event_time" ON "decision"("event", "time");
                INSERT INTO decision (time, run_id, task_id, event, detail, rules) VALUES
                    (100, 'a-1', 'a', 'deferred', 'waiting for power', '[]'),
                    (200, 'a-1', 'a', 'finished', 'exit 0', '[]'),
                    (150, 'b-1', 'b', 'deferred', 'waiting for the network', '[]');
                INSERT INTO task VALUES ('a', 2, 200), ('b', 3, 150);
                """)
        }
        return path
    }

    @Test("a reader reads a trail whose writer has not taken the index-only migrations yet; a writer takes them and keeps every entry")
    func olderTrailReadThenMigrated() throws {
        let path = try v4Trail()
        // A CLI upgraded under a running daemon: the file is still at v4.
        let reader = try AuditLog(path: path, readOnly: true)
        #expect(try reader.entries().map(\.detail) == ["waiting for power", "exit 0", "waiting for the network"])
        #expect(try reader.latestPerTask(since: 0).map(\.taskID) == ["b", "a"])

        let writer = try AuditLog(path: path)
        #expect(try writer.entries().count == 3)
        #expect(try writer.latestRun(task: "a") == "a-1")
        #expect(try writer.lastDeferrals(of: [("a", "a-1"), ("b", "b-1")]) == ["b-1": "waiting for the network"])
        #expect(try writer.entriesOfRuns(endedSince: 150).map(\.detail) == ["waiting for power", "exit 0"])
        try writer.append(AuditEntry(id: nil, time: 300, runID: "b-1", taskID: "b", event: "gave-up", verdict: nil, detail: "gave up",
                                     rules: "[]", conditions: nil, exitStatus: nil))
        #expect(try writer.latestPerTask(since: 0).map(\.detail) == ["gave up", "exit 0"])
        #expect(try writer.entriesOfRuns(endedSince: 250).map(\.detail) == ["waiting for the network", "gave up"])

        let indexes = try DatabaseQueue(path: path).read { db in
            try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'index' AND name NOT LIKE 'sqlite_%' ORDER BY name")
        }
        #expect(indexes == ["decision_ends", "decision_run", "decision_task_id", "task_last"])
        // The ends are found through their own index, which a wait is never written to.
        let plan = try writer.queryPlan("SELECT run_id FROM decision WHERE event IN ('finished', 'gave-up') AND time >= ?", arguments: ["0"])
        #expect(plan.contains("decision_ends"), "\(plan)")
    }
}
