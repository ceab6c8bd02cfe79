#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskFiles

/// The starts under way, one line each (`id TAB run id TAB run token`), appended to `starting` in the state
/// directory just before a command is spawned, and emptied once every start of the round has its running row in
/// the queue. A crash between the spawn and that row leaves the line: the next daemon replays it into the queue
/// (`QueueDriver.replayIntents`), and crash recovery then finds the command by its token, as it finds any run whose
/// pid was never written. One `write(2)` on the way from a plug to the spawn, where a queue transaction took
/// 0.11–0.14 ms here. It need not reach the disk: a power loss ends the commands too.
final class StartIntents {
    struct Intent: Equatable {
        let id: String
        let runID: String
        let token: String
    }

    static let file = "starting"
    /// Read back at most this much (a round's starts, each under 1 KB; more is damage, not intents).
    static let readLimit = 1 << 20
    let path: String
    private let fd: Int32
    private var written = false
    /// Why the file cannot be written (not a regular file, an open error): starts then go to the queue.
    let problem: String?

    init(directory: String) {
        path = directory + "/" + StartIntents.file
        var fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0o600)
        var problem: String?
        var st = stat()
        if fd < 0 {
            problem = "\(path): cannot be opened: \(String(cString: strerror(errno)))\(errno == ENXIO ? " (a FIFO?)" : "")"
        } else if fstat(fd, &st) != 0 || (st.st_mode & S_IFMT) != S_IFREG {
            problem = "\(path): \(FileIO.kindName(st.st_mode)), not a regular file"
            close(fd)
            fd = -1
        }
        self.fd = fd
        self.problem = problem
    }

    deinit { if fd >= 0 { close(fd) } }

    /// Appends the start in one write; an error (a field that would break the line, a full disk) is said.
    func record(_ i: Intent) -> String? {
        if let p = problem { return p }
        let fields = [i.id, i.runID, i.token]
        if fields.contains(where: { $0.utf8.contains(where: { $0 == 0x09 || $0 == 0x0a }) }) { return "a tab or a line break in its identifiers" }
        let line = Array((fields.joined(separator: "\t") + "\n").utf8)
        let n = line.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        guard n == line.count else {
            let why = n < 0 ? String(cString: strerror(errno)) : "a short write"
            // A partial line is no intent: the file starts again empty (every earlier start has its running row by
            // now), and the start goes to the queue instead.
            _ = ftruncate(fd, 0)
            return "\(path): \(why)"
        }
        written = true
        return nil
    }

    /// Every start has its running row (or did not happen): nothing to replay.
    func clear() {
        guard written else { return }
        forget()
    }

    /// The starts a previous daemon left; a line that is not three fields is left out.
    func left() -> [Intent] {
        guard case .success(let bytes) = FileIO.readBytes(path, limit: StartIntents.readLimit, noFollow: true) else { return [] }
        return bytes.split(separator: 0x0a).compactMap { line in
            let f = line.split(separator: 0x09, omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }
            guard f.count == 3, !f.contains(where: \.isEmpty) else { return nil }
            return Intent(id: f[0], runID: f[1], token: f[2])
        }
    }

    /// After a replay (or a clear): the next starts are this daemon's.
    func forget() {
        written = false
        if fd >= 0 { _ = ftruncate(fd, 0) }
    }
}
