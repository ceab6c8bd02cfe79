import BgtaskPolicy
import Foundation
import Testing

let badPolicies = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("BadPolicies")

struct BadPolicy: CustomTestStringConvertible, Sendable {
    var file: String
    var testDescription: String { file }
}

let badPolicyFiles: [BadPolicy] = ((try? FileManager.default.contentsOfDirectory(atPath: badPolicies.path)) ?? [])
    .filter { $0.hasSuffix(".toml") }.sorted().map(BadPolicy.init)

@Suite("Broken policy files fail with the right file:line:column")
struct BadPolicyTests {
    @Test("there are at least 15 kinds of mistake on file")
    func enoughKindsOfMistake() {
        #expect(badPolicyFiles.count >= 15)
    }

    /// Each file's first line says `# expect: LINE:COL message`; the first error must be exactly there.
    @Test("each broken file is rejected at the place it declares", arguments: badPolicyFiles)
    func rejectedAtDeclaredPlace(_ bad: BadPolicy) throws {
        let text = try String(contentsOf: badPolicies.appendingPathComponent(bad.file), encoding: .utf8)
        let header = try #require(text.split(separator: "\n").first.map(String.init))
        let spec = header.replacingOccurrences(of: "# expect: ", with: "")
        let position = spec.prefix { $0 != " " }
        let message = String(spec.dropFirst(position.count + 1))
        let parts = position.split(separator: ":").compactMap { Int($0) }
        try #require(parts.count == 2, "bad header in \(bad.file)")

        switch PolicyFile.parse(text, path: bad.file) {
        case .success:
            Issue.record("\(bad.file) was accepted")
        case .failure(let errors):
            let first = try #require(errors.errors.first)
            #expect(first.location.file == bad.file)
            #expect(first.location.line == parts[0], "\(first)")
            #expect(first.location.column == parts[1], "\(first)")
            #expect(first.message.contains(message), "\(first)")
            // The printed form leads with file:line:col and shows the offending line.
            #expect(first.description.hasPrefix("\(bad.file):\(parts[0]):\(parts[1]): "))
            let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
            #expect(first.sourceLine == String(lines[parts[0] - 1]))
        }
    }

    @Test("a file with several mistakes reports each of them")
    func allErrorsReported() {
        let text = """
        [battery]
        low_pct = 20
        [[rule]]
        id = "a"
        when = 'battery.pct < 20'
        verdict = "defer"
        [[rule]]
        id = "b"
        when = 'power.external'
        verdict = "stopp"
        """
        guard case .failure(let e) = PolicyFile.parse(text, path: "many.toml") else { Issue.record("accepted"); return }
        #expect(e.errors.map(\.location.line) == [2, 5, 10])
        #expect(e.errors[2].message.contains("did you mean 'pause'?") == false)
        #expect(e.errors[2].message.contains("unknown verdict 'stopp'"))
    }
}
