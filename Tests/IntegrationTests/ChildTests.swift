import BgtaskTestSupport
import Foundation
import Testing

/// Whether this test process still holds a descriptor on `target` (a readlink of /proc/self/fd/N, e.g. "pipe:[123]").
private func holds(_ target: String) -> Bool {
    let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
    return fds.contains { (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + $0)) == target }
}

/// A CI run once crashed in Foundation's `Process.run()` after the suite had leaked ~1,300 descriptors, so the
/// helpers that start every child are held to leaving none behind.
@Suite("the tests' child processes leave nothing behind")
struct ChildTests {
    @Test("a Child that has exited has closed both its pipes, and its status and output are kept")
    func childClosesItsPipes() throws {
        let child = try Child("/bin/sh", ["-c", "readlink /proc/self/fd/1; readlink /proc/self/fd/2 >&2; exit 7"])
        let out = try #require(child.line(within: 10), "\(child.stderr)")
        #expect(out.hasPrefix("pipe:["))
        #expect(child.waitExit(within: 10) == 7)
        #expect(child.line(within: 10) == nil)   // nil only once both pipes reached end of file and were closed
        let err = child.stderr.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(err.hasPrefix("pipe:[") && err != out)
        #expect(!holds(out) && !holds(err))
    }

    @Test("Child.run closes its pipes, and the child inherits no descriptor above 2")
    func runClosesItsPipes() throws {
        let (status, out, _) = try Child.run("/bin/sh", ["-c", "readlink /proc/self/fd/1; ls /proc/self/fd"])
        #expect(status == 0)
        let lines = out.split(separator: "\n").map(String.init)
        let pipe = try #require(lines.first)
        #expect(pipe.hasPrefix("pipe:["))
        #expect(!holds(pipe))
        // ls lists 0, 1, 2 and the descriptor of the directory it reads, nothing of the test process's.
        #expect(lines.dropFirst().compactMap { Int($0) }.filter { $0 > 2 }.count <= 1, "\(lines)")
    }

    @Test("a child starts with no signal blocked, as a shell or systemd would start it, whatever the test thread blocks")
    func childStartsWithNoSignalBlocked() throws {
        var block = sigset_t(), old = sigset_t()
        sigemptyset(&block)
        sigaddset(&block, SIGTERM)
        sigaddset(&block, SIGCHLD)
        pthread_sigmask(SIG_BLOCK, &block, &old)
        defer { pthread_sigmask(SIG_SETMASK, &old, nil) }
        let (status, out, _) = try Child.run("/bin/sh", ["-c", "grep ^SigBlk: /proc/self/status"])
        #expect(status == 0)
        #expect(out.trimmingCharacters(in: .whitespacesAndNewlines).hasSuffix(String(repeating: "0", count: 16)), "\(out)")
    }

    @Test("Child.run kills a child still running at its deadline and reports the signal")
    func runEnforcesItsDeadline() throws {
        let started = Date()
        let (status, _, _) = try Child.run("/bin/sleep", ["30"], deadline: 0.5)
        #expect(status == SIGKILL)
        #expect(Date().timeIntervalSince(started) < 20)
    }
}
