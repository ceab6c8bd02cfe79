import ArgumentParser
import BgtaskAudit
import BgtaskBus

/// Shell completion of task ids: the tasks the audit trail knows (latest first) and what bgtaskd has
/// pending, if it answers within half a second. Never prints errors: a completion must stay quiet.
enum TaskIDCompletion {
    static let kind: CompletionKind = .custom { _, _, prefix in ids(prefix: prefix) }

    static func ids(prefix: String) -> [String] {
        var out: [String] = []
        if let audit = try? State.audit(write: false), let latest = try? audit.latestPerTask(since: 0, limit: 200) {
            out += latest.map(\.taskID)
        }
        if let bus = try? BusConnection(), let reply = try? bus.call("ListPending", [], timeoutMs: 500), case .dicts(let tasks)? = reply.first {
            out += tasks.compactMap { $0["id"]?.string }
        }
        var seen = Set<String>()
        return out.filter { $0.hasPrefix(prefix) && seen.insert($0).inserted }
    }
}
