import ArgumentParser
import BgtaskAudit
import BgtaskBus
import BgtaskProtocol

/// Shell completion of task ids: first what bgtaskd has queued or runs now (when it already runs: a completion
/// must not start it by D-Bus activation, and waits at most half a second), then the tasks the audit trail
/// knows, latest first. Never prints errors: a completion must stay quiet.
enum TaskIDCompletion {
    enum Source { case pending, running, history }

    /// Ids for commands that take any task (why, output).
    static let kind: CompletionKind = .custom { _, _, prefix in ids(prefix: prefix, from: [.pending, .running, .history]) }
    /// Ids in the queue: cancel.
    static let queued: CompletionKind = .custom { _, _, prefix in ids(prefix: prefix, from: [.pending, .running]) }
    static let pending: CompletionKind = .custom { _, _, prefix in ids(prefix: prefix, from: [.pending]) }
    static let running: CompletionKind = .custom { _, _, prefix in ids(prefix: prefix, from: [.running]) }

    static func ids(prefix: String, from sources: [Source]) -> [String] {
        var out: [String] = []
        let live = sources.contains(.pending) || sources.contains(.running) ? daemon() : nil
        for source in sources {
            switch source {
            case .pending: out += live.map { bus in ((try? bus.pendingPage(PageRange(limit: RequestBounds.pageMost), timeoutMs: 500))?.tasks ?? []).compactMap { $0["id"]?.string } } ?? []
            case .running: out += live.map { list($0, .listRunning) } ?? []
            case .history:
                if let audit = try? State.audit(write: false), let latest = try? audit.latestPerTask(since: 0, limit: 200) {
                    out += latest.map(\.taskID)
                }
            }
        }
        var seen = Set<String>()
        return out.filter { $0.hasPrefix(prefix) && seen.insert($0).inserted }
    }

    /// The bus, if bgtaskd owns its name on it now.
    static func daemon() -> BusConnection? {
        guard let bus = try? BusConnection(),
              case .bool(true)? = try? bus.call("NameHasOwner", [.string(SchedulerBus.name)], destination: "org.freedesktop.DBus",
                                                path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus", timeoutMs: 500).first
        else { return nil }
        return bus
    }

    static func list(_ bus: BusConnection, _ method: SchedulerMethod) -> [String] {
        guard let reply = try? bus.call(method, [], timeoutMs: 500), case .dicts(let tasks)? = reply.first else { return [] }
        return tasks.compactMap { $0["id"]?.string }
    }
}
