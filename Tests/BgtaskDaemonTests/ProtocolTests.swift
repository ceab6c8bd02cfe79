@testable import BgtaskBus
import CGio
import BgtaskProtocol
import Foundation
import Testing

/// The values generated from data/io.github.bgtask.Scheduler1.xml: what the daemon reads from a caller and what
/// the CLI and the library read from the daemon.
@Suite struct ProtocolTests {
    @Test("a string goes onto the bus as it is, a NUL in it (GVariant allows none) as U+FFFD, at any length")
    func stringsOntoTheBus() throws {
        for s in ["plain", "a\u{0}b", String(repeating: "x", count: 1 << 20) + "\u{0}", String(repeating: "é", count: 1 << 20)] {
            let v = BusValue.string(s).variant()
            defer { g_variant_unref(v) }
            #expect(BusValue.from(v) == .string(s.replacingOccurrences(of: "\u{0}", with: "\u{FFFD}")))
        }
    }

    @Test("bytes go onto the bus as ay and come back equal, empty, NUL and invalid UTF-8 included; the page method's reply is (ay s)")
    func bytesOntoTheBus() throws {
        for b: [UInt8] in [[], [0], Array("{\"id\":\"é\"}\n{}".utf8), [0xFF, 0xFE, 0x41], Array(repeating: 0x7B, count: 1 << 20)] {
            let v = BusValue.bytes(b).variant()
            defer { g_variant_unref(v) }
            #expect(String(cString: g_variant_get_type_string(v)) == "ay")
            #expect(BusValue.from(v) == .bytes(b))
        }
        #expect(SchedulerMethod.listPendingJSON.replySignature == "(ays)")
    }

    @Test("a Submit's options go onto the bus and come back equal; absent keys stay absent")
    func submitOptionsRoundTrip() throws {
        var o = SubmitOptions(id: "backup", requiresExternalPower: true)
        o.earliest = 1_800_000_000
        o.retry = 3
        o.onCalendar = "Mon..Fri 01:00"
        let v = o.variant
        #expect(v["id"] == .string("backup") && v["requires_external_power"] == .bool(true) && v["retry"] == .uint32(3))
        #expect(v["kind"] == nil && v["every"] == nil, "\(v)")
        #expect(try SubmitOptions(variant: v) == o)
    }

    @Test("an unknown key in a request is refused naming it, the method and the known keys; a reply's unknown key is ignored")
    func strictRequestsLenientReplies() throws {
        let e = #expect(throws: ProtocolError.self) { try SubmitOptions(variant: ["id": .string("x"), "requires_charger": .bool(true)]) }
        #expect(e?.key == "requires_charger" && e?.message.contains("Submit's options") == true && e?.message.contains("requires_external_power") == true,
                "\(String(describing: e))")
        #expect(e?.busError.name == "org.freedesktop.DBus.Error.InvalidArgs")
        let status = try DaemonStatus(variant: ["version": .string("9"), "pid": .uint32(7), "pending": .uint32(0), "running": .uint32(1),
                                                "state_directory": .string("/s"), "from_a_newer_daemon": .bool(true)])
        #expect(status.pid == 7 && status.running == 1 && status.policyWarning == nil)
    }

    @Test("a key of the wrong type is an error naming the key and what it must be; a missing required key too")
    func wrongTypesAndMissingKeys() {
        let e = #expect(throws: ProtocolError.self) { try SubmitOptions(variant: ["window": .uint32(7)]) }
        #expect(e?.message.hasPrefix("window must be a string: HH:MM-HH:MM") == true, "\(String(describing: e))")
        let n = #expect(throws: ProtocolError.self) { try SubmitOptions(variant: ["earliest": .double(.infinity)]) }
        #expect(n?.key == "earliest", "\(String(describing: n))")
        let r = #expect(throws: ProtocolError.self) { try AppRequest(variant: ["kind": .string("refresh")]) }
        #expect(r?.message == "identifier (s) is required", "\(String(describing: r))")
    }

    @Test("whole numbers arrive in whatever integer type a caller picked (busctl, gdbus), and only in range")
    func wholeNumbersOfAnyWidth() throws {
        #expect(try SubmitOptions(variant: ["retry": .int32(5)]).retry == 5)
        #expect(try SubmitOptions(variant: ["retry": .double(5)]).retry == 5)
        #expect(throws: ProtocolError.self) { try SubmitOptions(variant: ["retry": .double(2.5)]) }
        #expect(throws: ProtocolError.self) { try SubmitOptions(variant: ["retry": .int64(-1)]) }
        #expect(try SubmitOptions(variant: ["earliest": .uint64(1_800_000_000)]).earliest == 1_800_000_000)
    }

    @Test("the methods' signatures are the XML's, and every error name is unique")
    func methodsAndErrors() {
        #expect(SchedulerMethod.submit.signature == "(a{sv}as)" && SchedulerMethod.submit.replySignature == "(s)")
        #expect(SchedulerMethod.appProgress.signature == "(sstt)")
        #expect(SchedulerSignal.launch.signature == "(sss)")
        #expect(Set(SchedulerError.allCases.map(\.rawValue)).count == SchedulerError.allCases.count)
        #expect(SchedulerBus.xml.contains("<method name=\"\(SchedulerMethod.listPending.rawValue)\">"))
    }

    @Test("a manifest entry permits its identifier exactly, or prefix.* with a non-empty suffix")
    func identifierPatterns() {
        #expect(IdentifierPattern.permits("com.example.refresh", "com.example.refresh"))
        #expect(!IdentifierPattern.permits("com.example.refresh", "com.example.refresh2"))
        #expect(IdentifierPattern.permits("com.example.export.*", "com.example.export.1"))
        #expect(!IdentifierPattern.permits("com.example.export.*", "com.example.export."))
        #expect(!IdentifierPattern.permits("com.example.export.*", "com.example.exporter"))
    }
}
