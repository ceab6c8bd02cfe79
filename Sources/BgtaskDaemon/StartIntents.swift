#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskFiles

/// A file of lines of tab-separated fields in the state directory, appended one `write(2)` a line and emptied when
/// what it stands in for has reached the queue: what must survive a crash at any instant without waiting for
/// SQLite's lock (`StartIntents`, `UnwrittenEnds`). It need not reach the disk: a power loss ends the commands too.
final class FieldLines {
    let path: String
    private let fd: Int32
    private var written = false
    /// Why the file cannot be written (not a regular file, an open error).
    let problem: String?
    /// Read back at most this much (a round's lines, each under 1 KB; more is damage, not lines).
    static let readLimit = 1 << 20

    init(directory: String, file: String) {
        path = directory + "/" + file
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

    /// Appends one line in one write; an error (a field that would break the line, a full disk) is said.
    func append(_ fields: [String]) -> String? {
        if let p = problem { return p }
        if fields.contains(where: { $0.utf8.contains(where: { $0 == 0x09 || $0 == 0x0a }) }) { return "a tab or a line break in its identifiers" }
        let line = Array((fields.joined(separator: "\t") + "\n").utf8)
        let n = line.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        guard n == line.count else {
            let why = n < 0 ? String(cString: strerror(errno)) : "a short write"
            // A partial line is no line: the file starts again empty (every earlier line's content has reached the
            // queue by now), and the caller writes to the queue instead.
            _ = ftruncate(fd, 0)
            return "\(path): \(why)"
        }
        written = true
        return nil
    }

    /// What every line stood for is in the queue: nothing to replay.
    func clear() {
        guard written else { return }
        forget()
    }

    /// The lines a previous daemon left; a line that is not `count` non-empty fields is left out.
    func lines(fields count: Int) -> [[String]] {
        guard case .success(let bytes) = FileIO.readBytes(path, limit: FieldLines.readLimit, noFollow: true) else { return [] }
        return bytes.split(separator: 0x0a).compactMap { line in
            let f = line.split(separator: 0x09, omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }
            return f.count == count && !f.contains(where: \.isEmpty) ? f : nil
        }
    }

    /// After a replay (or a clear): the next lines are this daemon's.
    func forget() {
        written = false
        if fd >= 0 { _ = ftruncate(fd, 0) }
    }
}

/// The starts under way, one line each (`id TAB run id TAB run token`), appended to `starting` in the state
/// directory just before a command is spawned, and emptied once every start of the round has its running row in
/// the queue. A crash between the spawn and that row leaves the line: the next daemon replays it into the queue
/// (`QueueDriver.replayIntents`), and crash recovery then finds the command by its token, as it finds any run whose
/// pid was never written. One `write(2)` on the way from a plug to the spawn, where a queue transaction took
/// 0.11–0.14 ms here.
final class StartIntents {
    struct Intent: Equatable {
        let id: String
        let runID: String
        let token: String
    }

    static let file = "starting"
    let lines: FieldLines
    var path: String { lines.path }
    /// Why the file cannot be written: starts then go to the queue.
    var problem: String? { lines.problem }

    init(directory: String) { lines = FieldLines(directory: directory, file: StartIntents.file) }

    /// Appends the start in one write; an error is said.
    func record(_ i: Intent) -> String? { lines.append([i.id, i.runID, i.token]) }

    /// Every start has its running row (or did not happen): nothing to replay.
    func clear() { lines.clear() }

    /// The starts a previous daemon left.
    func left() -> [Intent] { lines.lines(fields: 3).map { Intent(id: $0[0], runID: $0[1], token: $0[2]) } }

    /// After a replay (or a clear): the next starts are this daemon's.
    func forget() { lines.forget() }
}

/// Runs' ends the queue could not take when they came (its lock held past its busy timeout by another process, a
/// full disk), one line each in `ended` (`id TAB run id TAB next`, next being `done` or `EARLIEST FAILURES`, `-`
/// for no earliest date), until a retry has written them (`QueueDriver.writeUnwritten`). A daemon that dies first
/// leaves the lines: the next one applies them before its crash recovery (`QueueDriver.replayEnds`), so a run that
/// ended is never taken for one a crash interrupted, and never run again.
final class UnwrittenEnds {
    struct End: Equatable {
        let id: String
        let runID: String
        /// The request waiting again after it (a retry, its next period or elapse, a wait for its conditions): its
        /// earliest date and failures so far; nil when the request is over.
        let next: (earliest: Double?, failures: Int)?
        static func == (a: End, b: End) -> Bool {
            a.id == b.id && a.runID == b.runID && a.next?.earliest == b.next?.earliest && a.next?.failures == b.next?.failures
        }
    }

    static let file = "ended"
    let lines: FieldLines

    init(directory: String) { lines = FieldLines(directory: directory, file: UnwrittenEnds.file) }

    func record(_ e: End) -> String? {
        let next = e.next.map { "\($0.earliest.map { String($0) } ?? "-") \($0.failures)" } ?? "done"
        return lines.append([e.id, e.runID, next])
    }

    /// The ends a previous daemon (or this one) could not write to the queue; a line whose next does not read is
    /// left out.
    func left() -> [End] {
        lines.lines(fields: 3).compactMap { f in
            if f[2] == "done" { return End(id: f[0], runID: f[1], next: nil) }
            let parts = f[2].split(separator: " ")
            guard parts.count == 2, let failures = Int(parts[1]) else { return nil }
            let earliest = parts[0] == "-" ? nil : Double(parts[0])
            guard earliest != nil || parts[0] == "-" else { return nil }
            return End(id: f[0], runID: f[1], next: (earliest, failures))
        }
    }

    /// Every end is in the queue.
    func forget() { lines.forget() }
}
