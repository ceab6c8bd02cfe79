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
