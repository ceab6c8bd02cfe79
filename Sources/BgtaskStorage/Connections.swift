import Foundation
import GRDB
import Synchronization

/// Where bgtask's GRDB queues are opened and closed, and why none is ever freed.
///
/// GRDB marks each `DatabaseQueue`'s dispatch queue with a queue-specific value. When that dispatch queue is
/// freed, libdispatch runs the value's destructor on a global queue; the first such worker of a process starts
/// libdispatch's workqueue monitor, a timer that wakes the process every second for the rest of its life on a
/// manager thread that asks for nice -4. An unprivileged process may not have it, so every bgtask and bgtaskd
/// that freed a queue logged "Failed to set thread priority for worker thread … errno=13" to the
/// journal (libdispatch's `_dispatch_worker_thread`). So a connection is closed when its owner is done with it,
/// and the closed queue — a few hundred bytes, no file — is kept until the process exits.
public enum Connections {
    private static let kept = Mutex<[DatabaseQueue]>([])

    /// A queue on `path`, kept for the life of the process.
    public static func open(path: String, configuration: Configuration) throws -> DatabaseQueue {
        let q = try DatabaseQueue(path: path, configuration: configuration)
        kept.withLock { $0.append(q) }
        return q
    }

    /// Closes the connection (SQLite's file handles and WAL index); the queue itself stays kept. A failed close
    /// (a statement still open) leaves it to the process's exit, which loses nothing: every commit is in the file.
    public static func close(_ q: DatabaseQueue) {
        try? q.close()
    }
}
