#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import GRDB

/// A database file as its connection holds it, and as its path names it: SQLite keeps writing to the file it
/// opened, so a `queue.sqlite` removed, or replaced by another file, under a running writer would take every
/// write acknowledged afterwards with it (the next start opens the path, not the descriptor). A writer looks
/// before each write (one `stat`); when the path no longer names its file, it puts what it holds back there:
/// whatever took the path is moved aside (`NAME.replaced-EPOCH`, with its WAL), and the held database is copied
/// to a new file at the path through SQLite's backup, which the writer then uses. Nothing is lost either way.
public struct HeldFile: Sendable, Equatable {
    public let device: UInt64
    public let inode: UInt64

    /// What `path` names now (nil: nothing).
    public init?(path: String) {
        var st = stat()
        guard stat(path, &st) == 0 else { return nil }
        device = UInt64(st.st_dev)
        inode = UInt64(st.st_ino)
    }

    /// `restore`, for a writer that keeps its connection and its file in `connection` and `held`: both replaced by
    /// the new ones. Returns the sentence for the log.
    public static func writeBack(_ connection: inout DatabaseQueue, held: inout HeldFile?, at path: String,
                                 configuration: Configuration) throws -> String {
        let (fresh, file, said) = try restore(connection, at: path, configuration: configuration, now: Double(time(nil)))
        connection = fresh
        held = file
        return said
    }

    /// The file at `path` is not `held` any more: the database `held` is written back there. Returns the new
    /// connection, what the path now names, and a sentence for the log.
    public static func restore(_ connection: DatabaseQueue, at path: String, configuration: Configuration,
                               now: Double) throws -> (DatabaseQueue, HeldFile, String) {
        var what = "\(path) was removed under its writer"
        if HeldFile(path: path) != nil {
            let aside = "\(path).replaced-\(Int(now))"
            for suffix in ["", "-wal", "-shm"] where access(path + suffix, F_OK) == 0 {
                guard rename(path + suffix, aside + suffix) == 0 else {
                    throw DatabaseRestoreError(path: path + suffix, message: "cannot move it aside: \(String(cString: strerror(errno)))")
                }
            }
            what = "\(path) was replaced under its writer (the other file is now \(aside))"
        } else {
            // A WAL or index left by the removed file is the old file's (still open here through their descriptors):
            // the new file must not take them up.
            for suffix in ["-wal", "-shm"] { unlink(path + suffix) }
        }
        let fresh = try Connections.open(path: path, configuration: configuration)
        do {
            try connection.backup(to: fresh)
        } catch {
            Connections.close(fresh)
            throw DatabaseRestoreError(path: path, message: "cannot write back what was held: \(error)")
        }
        guard let now = HeldFile(path: path) else {
            Connections.close(fresh)
            throw DatabaseRestoreError(path: path, message: "is gone again")
        }
        Connections.close(connection)
        return (fresh, now, what + "; what was held is written back to it")
    }
}

public struct DatabaseRestoreError: Error, CustomStringConvertible {
    public var path: String
    public var message: String
    public var description: String { "\(path): \(message)" }
}
