import BgtaskDaemon
import Foundation
import Testing

let repoRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../..").standardized

@Suite("bgtaskd's published interface")
struct InterfaceTests {
    @Test("data/io.github.bgtask.Scheduler1.xml is the interface the daemon exports, byte for byte")
    func publishedXMLIsExported() throws {
        let file = try String(contentsOf: repoRoot.appendingPathComponent("data/io.github.bgtask.Scheduler1.xml"), encoding: .utf8)
        #expect(file == SchedulerInterface.xml)
    }

    @Test("every method and signal of the interface is documented in docs/protocol.md")
    func protocolDocumentsEveryMember() throws {
        let doc = try String(contentsOf: repoRoot.appendingPathComponent("docs/protocol.md"), encoding: .utf8)
        let names = SchedulerInterface.xml.split(separator: "\n").compactMap { line -> String? in
            guard let r = line.range(of: "<method name=\"") ?? line.range(of: "<signal name=\"") else { return nil }
            return String(line[r.upperBound...].prefix { $0 != "\"" })
        }
        #expect(names.count >= 9)
        for n in names { #expect(doc.contains("`\(n)"), "docs/protocol.md does not document \(n)") }
    }
}
