#if canImport(Glibc)
@preconcurrency import Glibc
#endif
@testable import BgtaskRun
import Testing

/// What a spawned command's environment is made of, without a copy of this process's own entries.
@Suite("a command's environment")
struct SpawnEnvironmentTests {
    @Test("for the spawn: this process's own entries less those the task sets (by whole name), then the task's, as environment(adding:) says")
    func spawnEnvironment() throws {
        // Names of this process's environment, read, not set: a test that set one would race other tests' spawns.
        let path = try #require(getenv("PATH").map { String(cString: $0) })
        let extra = ["PATH=/task/bin", "PAT=1", "BGTASK_TASK_ID=t"]
        let (entries, copies) = TaskProcess.environmentForSpawn(adding: extra)
        defer { copies.forEach { free($0) } }
        #expect(entries.last.map { $0 == nil } == true, "ends with the NULL execve needs")
        let made = entries.compactMap { $0.map { String(cString: $0) } }
        #expect(made == TaskProcess.environment(adding: extra))
        #expect(made.suffix(3) == extra[...])
        #expect(!made.contains("PATH=" + path), "the task's PATH replaces this process's")
        #expect(made.filter { $0.hasPrefix("PATH=") } == ["PATH=/task/bin"], "PAT= is another name: PATH is not dropped for it, only replaced")
        // Only the task's entries are copies; the others are this process's own strings.
        #expect(copies.count == 3)
        var own = 0
        var e = environ
        while let p = e.pointee { if entries.contains(p) { own += 1 }; e += 1 }
        #expect(own == entries.count - 1 - copies.count)
    }
}
