import CLinux
import Foundation
import Testing

/// The command lookup bgt_spawn makes before it spawns (the shell that runs the command looks it up again the same
/// way): what execvp would find, or the errno an exec would fail with, for a child in another working directory.
@Suite("the spawn's command lookup")
struct SpawnLookupTests {
    func which(_ file: String, path: String?, base: String? = nil) -> (Int32, String) {
        var buf = [CChar](repeating: 0, count: 4096)
        let rc = path.map { p in p.withCString { bgt_which(file, $0, base, &buf, buf.count) } } ?? bgt_which(file, nil, base, &buf, buf.count)
        return (rc, String(cString: buf))
    }

    @Test("on PATH: the first executable; a file without an execute bit is EACCES only where nothing later is executable; nowhere is ENOENT")
    func lookupOnPath() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("which-\(UUID().uuidString)")
        let a = dir.appendingPathComponent("a"), b = dir.appendingPathComponent("b")
        for d in [a, b] { try FileManager.default.createDirectory(at: d, withIntermediateDirectories: true) }
        defer { try? FileManager.default.removeItem(at: dir) }
        FileManager.default.createFile(atPath: a.appendingPathComponent("tool").path, contents: Data("x".utf8), attributes: [.posixPermissions: 0o644])
        FileManager.default.createFile(atPath: b.appendingPathComponent("tool").path, contents: Data("x".utf8), attributes: [.posixPermissions: 0o755])
        FileManager.default.createFile(atPath: a.appendingPathComponent("plain").path, contents: Data("x".utf8), attributes: [.posixPermissions: 0o644])
        let path = "\(a.path):\(b.path)"
        #expect(which("tool", path: path) == (0, b.appendingPathComponent("tool").path))
        // As root, access(X_OK) needs an execute bit somewhere: 0644 is refused for root too.
        #expect(which("plain", path: path).0 == EACCES)
        #expect(which("nothing-of-that-name", path: path).0 == ENOENT)
        #expect(which("", path: path).0 == ENOENT)
        // A directory is not a command.
        #expect(which(a.path, path: path).0 == EACCES)
        // With a slash: taken as it is, relative to the child's working directory.
        #expect(which("b/tool", path: "/nonexistent", base: dir.path) == (0, dir.path + "/b/tool"))
        #expect(which("b/none", path: "/nonexistent", base: dir.path).0 == ENOENT)
        // An empty PATH element is the child's working directory.
        #expect(which("tool", path: ":/nonexistent", base: b.path) == (0, b.path + "/./tool"))
        // No PATH at all: glibc's default.
        #expect(which("sh", path: nil).0 == 0)
    }
}
