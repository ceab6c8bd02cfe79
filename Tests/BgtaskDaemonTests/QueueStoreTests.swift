import BgtaskConfig
import BgtaskQueue
import Foundation
import Testing

@Suite("the queue's SQLite file")
struct QueueStoreTests {
    /// A row with every column set to something other than its default, so a column read from the wrong place shows.
    static func fullRow(_ id: String, submitted: Double) -> QueuedTask {
        var r = QueuedTask(id: id, app: "com.example.App", kind: .refresh, argv: ["restic", "backup", "~"], submitted: submitted)
        r.requiresExternalPower = true; r.requiresNetwork = true; r.requiresUnmetered = true; r.cpuHeavy = true; r.userInitiated = true
        r.earliest = 1_764_003_600; r.every = 86_400; r.anchor = 1_764_000_001; r.calendar = "Mon..Fri 01:00"; r.window = "01:00-05:00"
        r.retry = 3; r.failures = 2; r.budget = 600; r.directory = "/home/u"; r.state = "running"; r.runID = id + "-run"
        r.pgid = 4242; r.childStart = 123_456; r.cgroup = .unit("bgtask-\(id).service"); r.started = 1_764_000_100
        r.token = "tok"; r.title = "Title"; r.subtitle = "Sub"; r.strategy = "fail"; r.resources = #"["gpu"]"#
        return r
    }

    @Test("every column of a row reads back as it was written, whichever way it is read (by id, by ids, a page, the state)")
    func everyColumnRoundTrips() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("bgtask-queue-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = try QueueStore(path: dir.appendingPathComponent("queue.sqlite").path)
        let rows = (0..<3).map { Self.fullRow("t\($0)", submitted: 1_764_000_000 + Double($0)) }
        for r in rows { try store.put(r) }
        #expect(try store.get("t1", state: "running") == rows[1])
        #expect(try store.rows(ids: ["t2", "t0"], state: "running").sorted { $0.id < $1.id } == [rows[0], rows[2]])
        #expect(try store.page(state: "running", after: (rows[0].submitted, "t0"), limit: 5) == [rows[1], rows[2]])
        #expect(try store.all(state: "running") == rows)
        // Many ids at once (an IN list, in chunks) read the same rows as a few (one prepared statement each).
        let many = (0..<40).map { i -> QueuedTask in var r = Self.fullRow("m\(i)", submitted: 1_764_100_000 + Double(i)); r.state = "pending"; return r }
        for r in many { try store.put(r) }
        #expect(try store.rows(ids: many.map(\.id), state: "pending").sorted { $0.submitted < $1.submitted } == many)
        // Marking one running moves it: no pending row is left, the running one has every column.
        try store.markRunning(many[3])
        var running = many[3]
        running.state = "running"
        #expect(try store.get("m3", state: "pending") == nil)
        #expect(try store.get("m3", state: "running") == running)
        // What is learnt of the run since (its pid) goes to its running row only: a request of that id submitted
        // while it runs stays pending as it was.
        try store.put(many[3])
        running.pgid = 4242
        running.childStart = 99
        try store.markRunning(running, from: "running")
        #expect(try store.get("m3", state: "running") == running)
        #expect(try store.get("m3", state: "pending") == many[3])
        // A row not there (taken from the file under us) is written whole.
        try store.markRunning(many[5], from: "running")
        var fifth = many[5]
        fifth.state = "running"
        #expect(try store.get("m5", state: "running") == fifth)
    }
}
