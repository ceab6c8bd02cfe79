#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskFiles
import CLinux
import Synchronization

/// A task's kept output: the last run's, and the one before it.
public enum OutputFile {
    /// At most this much of a finished run's output is kept (its end).
    public static let maxBytes = 1 << 20

    /// Before a run: the previous run's output becomes `PATH.1` (replacing an older one); so does the note
    /// of a run that went to the journal.
    public static func rotate(_ path: String) {
        var st = stat()
        if lstat(path + ".unit", &st) == 0, (st.st_mode & S_IFMT) == S_IFREG { rename(path + ".unit", path + ".1.unit") }
        else { unlink(path + ".1.unit") }
        guard lstat(path, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { return }
        if st.st_size > off_t(maxBytes) { keepTail(path, size: st.st_size) }
        rename(path, path + ".1")
    }

    /// This run's output goes to the journal, under its systemd unit: `PATH.unit` names the unit, for `bgtask output`.
    public static func noteUnit(_ path: String, unit: String) {
        let fd = Glibc.open(path + ".unit", O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return }
        defer { close(fd) }
        let line = unit + "\n"
        _ = Glibc.write(fd, line, line.utf8.count)
    }

    /// The unit a run's output went to, if it ran as one (`PATH.unit`; nil for a run whose output is in `PATH`).
    public static func unit(of path: String) -> String? {
        guard case .success(let bytes) = FileIO.readBytes(path + ".unit", limit: 512, noFollow: true) else { return nil }
        let name = String(decoding: bytes.prefix { $0 != 0x0a }, as: UTF8.self)
        // Only a name bgtaskd gives units: nothing else is handed to journalctl.
        let allowed = name.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x41 && $0 <= 0x5a) || ($0 >= 0x61 && $0 <= 0x7a) || $0 == 0x2d || $0 == 0x5f || $0 == 0x2e }
        guard name.hasPrefix("bgtask-"), name.hasSuffix(".service"), name.utf8.count <= 255, allowed else { return nil }
        return name
    }

    /// A running task's output is cut back to its last `maxBytes` once it grows past this (`bound`).
    public static let boundBytes = 2 * maxBytes

    /// A file made ahead for the next run's output, unnamed (O_TMPFILE) in the output directory, so that a start
    /// does not wait for the filesystem to make one: on ext4 without a journal that has just deleted many files,
    /// making an inode took 0.8 ms of the 2 ms between bgtaskd's wake-up and its spawn. Given its name by `open`.
    /// One per directory (a daemon has one), a few directories at most; -1 where there can be none (below).
    static let spares = Mutex<[String: Int32]>([:])
    static let sparesMost = 4

    /// Makes the spare for `directory` if there is none (bgtaskd, once its round's work is done). Where the
    /// kernel or the filesystem has no O_TMPFILE, there is none, and `open` creates the file as it always has.
    public static func prepareSpare(in directory: String) {
        spares.withLock { kept in
            guard kept[directory] == nil else { return }
            if kept.count >= sparesMost, let other = kept.first {
                if other.value >= 0 { Glibc.close(other.value) }
                kept[other.key] = nil
            }
            let fd = bgt_open_tmpfile(directory)
            // A filesystem without O_TMPFILE says so for good: not asked again after every round.
            if fd >= 0 { kept[directory] = fd } else if fd == -EOPNOTSUPP || fd == -EISDIR || fd == -EINVAL { kept[directory] = -1 }
        }
    }

    /// The spare of `path`'s directory, named `path` — which must not exist: linkat neither replaces nor follows
    /// what is there (a planted link or FIFO), and the file is then opened as without a spare, and refused.
    private static func takeSpare(named path: String) -> Int32? {
        guard let slash = path.utf8.lastIndex(of: UInt8(ascii: "/")) else { return nil }
        let directory = String(path[..<slash])
        let kept: Int32? = spares.withLock { kept in
            guard let fd = kept[directory], fd >= 0 else { return nil }
            kept[directory] = nil
            return fd
        }
        guard let fd = kept else { return nil }
        guard linkat(AT_FDCWD, "/proc/self/fd/\(fd)", AT_FDCWD, path, AT_SYMLINK_FOLLOW) == 0 else {
            Glibc.close(fd)
            return nil
        }
        _ = fcntl(fd, F_SETFL, O_WRONLY | O_APPEND)
        return fd
    }

    /// Opens the output file for a command's stdout and stderr: appended to, created 0600, never a link, and
    /// only a regular file — opened without blocking, so a FIFO planted there is refused, not waited on.
    public static func open(_ path: String) throws -> Int32 {
        if let fd = takeSpare(named: path) { return fd }
        let fd = Glibc.open(path, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY, 0o600)
        guard fd >= 0 else {
            let e = errno
            throw SpawnError(command: path, errno: e, detail: "its output file \(path) cannot be opened: \(String(cString: strerror(e)))\(e == ENXIO ? " (a FIFO?)" : "")")
        }
        var st = stat()
        guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else {
            Glibc.close(fd)
            throw SpawnError(command: path, errno: EINVAL, detail: "\(path) is \(FileIO.kindName(st.st_mode)), not a regular file: refused as the task's output")
        }
        _ = fcntl(fd, F_SETFL, O_WRONLY | O_APPEND)
        return fd
    }

    /// While a command writes: its output past `boundBytes` is cut back to about its last `maxBytes`, so a
    /// chatty task cannot fill the disk (and make every Submit fail). True if it was cut.
    @discardableResult
    public static func bound(_ path: String) -> Bool { dropFront(path, over: boundBytes) }

    /// Cuts the file's front off once what it holds passes `limit`, keeping at least its last `maxBytes`
    /// (up to a block more). The command and anything it left running may still be appending: the front
    /// is dropped by `fallocate` in one step (`bgt_drop_front`), so nothing they write meanwhile is lost. A
    /// punched file keeps its length, its front a hole: what it holds is measured from its first data, and
    /// readers start at its last `maxBytes`. Only on a filesystem with neither, the tail is copied.
    @discardableResult
    public static func dropFront(_ path: String, over limit: Int = maxBytes) -> Bool {
        let fd = Glibc.open(path, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { return false }
        let firstData = bgt_first_data(fd)
        guard st.st_size - firstData > off_t(limit) else { return false }
        let block = off_t(st.st_blksize > 0 ? st.st_blksize : 4096)
        let cut = (st.st_size - off_t(maxBytes)) / block * block
        guard cut > firstData else { return false }
        if bgt_drop_front(fd, cut) > 0 { return true }
        copyTail(fd, size: st.st_size)
        return true
    }

    /// Keeps the last `maxBytes` of a file that nothing writes any more, in place and compact (its holes gone).
    public static func keepTail(_ path: String, size: off_t) {
        let fd = Glibc.open(path, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { return }
        defer { close(fd) }
        copyTail(fd, size: size)
    }

    /// The last `maxBytes` copied to the front, then the file truncated after them: what is appended
    /// between the two is lost, hence only for a file nobody writes, or where `fallocate` cannot cut.
    static func copyTail(_ fd: Int32, size: off_t) {
        var buf = [UInt8](repeating: 0, count: maxBytes)
        let n = pread(fd, &buf, maxBytes, max(0, size - off_t(maxBytes)))
        guard n > 0 else { return }
        _ = pwrite(fd, buf, n, 0)
        _ = ftruncate(fd, off_t(n))
    }
}
