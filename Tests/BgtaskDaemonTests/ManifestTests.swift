#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import Foundation
import BgtaskConfig
import BgtaskPolicy
import Testing

@Suite("app manifests")
struct ManifestTests {
    @Test("a manifest's permitted identifiers: exact (case-sensitive) or prefix.* wildcards, which need something after the dot")
    func permits() throws {
        let m = try AppManifest.parse("""
        id = "com.example.Export"
        command = ["/usr/bin/export", "--background"]
        permitted_identifiers = ["com.example.export.refresh", "com.example.export.jobs.*"]
        """, path: "/x/com.example.Export.toml").get()
        #expect(m.permits("com.example.export.refresh"))
        #expect(!m.permits("com.example.export.Refresh"))
        #expect(m.permits("com.example.export.jobs.42"))
        #expect(!m.permits("com.example.export.jobs."))
        #expect(!m.permits("com.example.export.jobs"))
        #expect(m.kinds == AppManifest.allKinds)
    }

    @Test("malformed manifests are reported at file:line, each problem named", arguments: [
        ("id = \"com.example.A\"\ncommand = [\"/bin/a\"]\npermitted_identifiers = [\"x\"]\nbogus = 1\n", "com.example.A.toml:4", "unknown key 'bogus'"),
        ("id = \"com.example.Other\"\ncommand = [\"/bin/a\"]\npermitted_identifiers = [\"x\"]\n", "com.example.A.toml:1", "does not match the file's name"),
        ("id = \"com.example.A\"\ncommand = [\"a\"]\npermitted_identifiers = [\"x\"]\n", "com.example.A.toml:2", "absolute path"),
        ("id = \"com.example.A\"\ncommand = [\"/bin/a\"]\npermitted_identifiers = [\"x.*.y\"]\n", "com.example.A.toml:3", "permitted identifier"),
        ("id = \"com.example.A\"\ncommand = [\"/bin/a\"]\npermitted_identifiers = [\"x\"]\nkinds = [\"nightly\"]\n", "com.example.A.toml:4", "nightly unknown"),
        ("id = \"com.example.A\"\ncommand = [\"/bin/a\"]\npermitted_identifiers = 3\n", "com.example.A.toml:3", "must be a list of strings"),
        ("id = \"com.example.A\"\ncommand = [\"/bin/a\"\n", "com.example.A.toml:", "TOML"),
        ("id = \"com.example.A\"\ncommand = [\"/bin/a\"]\n", "com.example.A.toml:1", "'permitted_identifiers' is missing"),
    ])
    func malformed(_ c: (String, String, String)) {
        switch AppManifest.parse(c.0, path: "/apps/com.example.A.toml") {
        case .success: Issue.record("accepted: \(c.0)")
        case .failure(let e):
            #expect(e.description.contains(c.1), "\(e.description)")
            #expect(e.description.contains(c.2), "\(e.description)")
        }
    }

    @Test("'cli' is reserved for the command line's own work")
    func cliIsReserved() {
        guard case .failure(let e) = AppManifest.parse("id = \"cli\"\ncommand = [\"/bin/a\"]\npermitted_identifiers = [\"x\"]\n", path: "/a/cli.toml") else {
            Issue.record("accepted"); return
        }
        #expect(e.description.contains("reserved"))
    }
}

@Suite("app manifests are read only from files the daemon's user (or root) owns and nobody else may write")
struct ManifestOwnershipTests {
    func directory() throws -> String {
        var template = Array("/tmp/bgtask-manifests-XXXXXX".utf8CString)
        guard let d = mkdtemp(&template) else { throw PathError(path: "/tmp", message: "mkdtemp failed") }
        return String(cString: d)
    }

    func write(_ dir: String, _ id: String) -> String {
        let path = "\(dir)/\(id).toml"
        let text = "id = \"\(id)\"\ncommand = [\"/bin/true\"]\npermitted_identifiers = [\"\(id).refresh\"]\n"
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        _ = text.withCString { Glibc.write(fd, $0, strlen($0)) }
        close(fd)
        return path
    }

    @Test("a group-writable manifest is skipped with its path and mode; another user's is skipped when bgtaskd runs as root")
    func foreignOrWritableManifestsAreSkipped() throws {
        let dir = try directory()
        defer { _ = try? FileManager.default.removeItem(atPath: dir) }
        _ = write(dir, "com.example.Mine")
        let writable = write(dir, "com.example.Writable")
        chmod(writable, 0o664)
        var expected: Set<String> = ["com.example.Mine"]
        if geteuid() == 0 {
            // As root with another user's XDG_DATA_HOME (sudo -E): their manifest would run its command as root.
            chown(write(dir, "com.example.Theirs"), 1000, 1000)
        } else {
            expected.insert("com.example.Theirs")
            _ = write(dir, "com.example.Theirs")
        }
        let (apps, errors) = AppManifests.load(directories: [dir])
        #expect(Set(apps.keys) == expected)
        #expect(errors.contains { $0.description.contains("com.example.Writable.toml") && $0.description.contains("writable by group or others (mode 664)") },
                "\(errors)")
        if geteuid() == 0 {
            #expect(errors.contains { $0.description.contains("com.example.Theirs.toml") && $0.description.contains("belongs to uid 1000, not to root") },
                    "\(errors)")
        }
    }
}
