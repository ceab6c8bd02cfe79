@testable import BgtaskRun
import BgtaskConfig
import BgtaskPolicy
import Foundation
import Testing

/// What `bgtask tasks` reads of the foreground runs: the records of live supervisors, nothing else, nothing touched.
@Suite("ActiveTasks.live: the live supervisors' records, read only")
struct ActiveTasksTests {
    @Test("a live supervisor's record is listed with its state and cap; another boot's, a dead supervisor's (same pid, another start), a malformed one and a claimed one are not, and all are left where they were")
    func liveRecordsOnly() throws {
        let runtime = FileManager.default.temporaryDirectory.appendingPathComponent("bgtask-active-\(UUID().uuidString)").path
        try #require(mkdir(runtime, 0o700) == 0)
        defer { try? FileManager.default.removeItem(atPath: runtime) }
        // This process stands in for a live `bgtask run`: its record, written as bgtask run writes it.
        let active = try ActiveTasks(runtimeDirectory: runtime)
        active.started(pgid: getpid(), cgroup: .processGroup, runID: "fg-1", task: TaskFields(id: "fg", kind: .regular), grace: 5)
        active.update(state: "throttled 25%")
        let mine = try #require(active.record)

        // The parent is alive: only what the record says of it tells it is not the supervisor recorded.
        let parent = getppid(), start = try #require(ProcInfo.startTime(parent))
        func write(_ name: String, _ text: String) throws {
            try text.write(toFile: runtime + "/active/" + name, atomically: false, encoding: .utf8)
            chmod(runtime + "/active/" + name, 0o600)
        }
        var otherBoot = mine
        otherBoot.supervisorPID = parent; otherBoot.supervisorStart = start; otherBoot.bootID = "another-boot"
        try write("\(parent).rec", otherBoot.text)
        var dead = mine
        dead.supervisorPID = getpid(); dead.supervisorStart += 1
        try write("\(getpid()).rec.\(parent).claim", dead.text)
        try write("999999.rec", "boot_id=\n")
        let before = try FileManager.default.contentsOfDirectory(atPath: runtime + "/active").sorted()

        let live = ActiveTasks.live(runtimeDirectory: runtime)
        #expect(live.map(\.record) == [mine])
        #expect(live.first?.record.state == "throttled 25%" && live.first?.cpuCap == 25)
        #expect(live.first?.runtime.map { $0 >= 0 } == true)
        #expect(try FileManager.default.contentsOfDirectory(atPath: runtime + "/active").sorted() == before, "a listing removes nothing")

        // The same pid with another start time is a dead supervisor, not this one.
        active.record?.supervisorStart += 1
        active.write()
        #expect(ActiveTasks.live(runtimeDirectory: runtime).isEmpty)
    }
}
