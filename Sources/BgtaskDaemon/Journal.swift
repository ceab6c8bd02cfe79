#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskCore
import BgtaskPolicy
import CSystemd

/// bgtaskd's decisions in the journal as structured entries, beside the audit trail (which stays the source
/// of `bgtask why`): `journalctl BGTASK_TASK=backup`, and fields a log shipper can index — BGTASK_TASK,
/// BGTASK_RUN, BGTASK_EVENT, BGTASK_RULE, BGTASK_VERDICT, one MESSAGE_ID for them all. Through libsystemd's
/// sd_journal_sendv, only where journald listens (its socket exists); nothing is sent otherwise.
struct Journal {
    /// The id of "a bgtask decision" (journalctl MESSAGE_ID=…), fixed for good.
    static let messageID = "cb0de88e28224280972d93079cee5ed6"
    static let socket = "/run/systemd/journal/socket"

    let enabled: Bool

    init(enabled: Bool = access(Journal.socket, W_OK) == 0) { self.enabled = enabled }

    /// The fields of one event, in the order they are sent.
    static func fields(_ e: RunEvent, task: TaskFields, runID: String) -> [String] {
        let rule = e.decision?.matches.first
        var text = "\(task.id): \(e.kind.rawValue)"
        if !e.detail.isEmpty { text += ": \(e.detail)" }
        // A deferral's detail already names its rule (as `bgtask why` shows it): not said twice.
        if let m = rule, e.kind != .started {
            let named = " — rule \(m.ruleID) (\(m.location))"
            if !text.hasSuffix(named) && !text.contains(named + ";") { text += named }
        }
        if let energy = e.energy { text += "; \(energy)" }
        let notice: Set<RunEvent.Kind> = [.expired, .killed, .failed, .lost, .gaveUp]
        var f = ["MESSAGE=" + text, "MESSAGE_ID=" + messageID, "PRIORITY=" + (notice.contains(e.kind) ? "5" : "6"),
                 "SYSLOG_IDENTIFIER=bgtaskd", "BGTASK_TASK=" + task.id, "BGTASK_RUN=" + runID, "BGTASK_EVENT=" + e.kind.rawValue]
        if let m = rule { f += ["BGTASK_RULE=" + m.ruleID, "BGTASK_RULE_ORIGIN=" + m.location.description] }
        if let v = e.decision?.verdict { f.append("BGTASK_VERDICT=" + v.rawValue) }
        if let s = e.exitStatus { f.append("BGTASK_EXIT_STATUS=\(s)") }
        if let wh = e.energyWh { f.append("BGTASK_ENERGY_WH=\(wh)") }
        return f
    }

    func send(_ e: RunEvent, task: TaskFields, runID: String) {
        guard enabled else { return }
        let fields = Journal.fields(e, task: task, runID: runID).map { Array($0.utf8) }
        let storage = fields.map { bytes -> UnsafeMutableBufferPointer<UInt8> in
            let b = UnsafeMutableBufferPointer<UInt8>.allocate(capacity: max(1, bytes.count))
            _ = b.initialize(from: bytes)
            return b
        }
        defer { for b in storage { b.deallocate() } }
        var iov = zip(storage.indices, fields).map { i, bytes in iovec(iov_base: UnsafeMutableRawPointer(storage[i].baseAddress), iov_len: bytes.count) }
        _ = iov.withUnsafeMutableBufferPointer { sd_journal_sendv($0.baseAddress, Int32($0.count)) }
    }
}
