#if canImport(Glibc)
@preconcurrency import Glibc
#endif

/// An OS error with the file it happened on, in the manner of swift-system's `Errno`.
public struct SystemError: Error, Sendable, Equatable, CustomStringConvertible {
    public let path: String
    public let errno: Int32
    public let operation: String
    /// Set when the problem is not an errno: e.g. "a FIFO, not a regular file".
    public let detail: String?

    public init(_ operation: String, path: String, errno: Int32, detail: String? = nil) {
        self.operation = operation
        self.path = path
        self.errno = errno
        self.detail = detail
    }

    public var errnoName: String { Errno.name(errno) }
    public var description: String {
        if let d = detail { return "\(operation) \(path): \(d)" }
        return "\(operation) \(path): \(String(cString: strerror(errno))) (\(errnoName))"
    }
}

public enum Errno {
    /// The errno's symbolic name where it is one the project meets, else its number.
    public static func name(_ e: Int32) -> String {
        switch e {
        case ENOENT: return "ENOENT"
        case EIO: return "EIO"
        case ENODATA: return "ENODATA"
        case EACCES: return "EACCES"
        case EPERM: return "EPERM"
        case EINVAL: return "EINVAL"
        case EAGAIN: return "EAGAIN"
        case ENODEV: return "ENODEV"
        case ENXIO: return "ENXIO"
        case EISDIR: return "EISDIR"
        case ENOTDIR: return "ENOTDIR"
        default: return "errno \(e)"
        }
    }
}

/// Reading files and directories, every error with its path and errno: the project's one way to do it (sysfs
/// attributes, /proc, policies, manifests, state files).
public enum FileIO {
    /// What kind of file a mode says, for messages about files that are not regular.
    public static func kindName(_ mode: mode_t) -> String {
        switch mode & S_IFMT {
        case S_IFIFO: return "a FIFO"
        case S_IFSOCK: return "a socket"
        case S_IFCHR: return "a character device"
        case S_IFBLK: return "a block device"
        case S_IFDIR: return "a directory"
        case S_IFLNK: return "a symbolic link"
        default: return "not a regular file"
        }
    }

    /// Opens a file for reading without blocking on a FIFO or a device, and refuses anything that is
    /// not a regular file (sysfs attributes, /proc files and policies all are). fd or an error.
    /// `owners`: when given, the file (as opened, not as named) must belong to one of them and be writable by
    /// nobody else — a file that says what runs as this user must not be another user's.
    public static func openRegular(_ path: String, noFollow: Bool = false, owners: Set<uid_t>? = nil) -> Result<Int32, SystemError> {
        var fd: Int32
        let flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | (noFollow ? O_NOFOLLOW : 0)
        repeat { fd = open(path, flags) } while fd < 0 && errno == EINTR
        guard fd >= 0 else { return .failure(SystemError("open", path: path, errno: errno)) }
        var st = stat()
        guard fstat(fd, &st) == 0 else {
            let e = errno
            close(fd)
            return .failure(SystemError("stat", path: path, errno: e))
        }
        if (st.st_mode & S_IFMT) == S_IFDIR { close(fd); return .failure(SystemError("read", path: path, errno: EISDIR)) }
        guard (st.st_mode & S_IFMT) == S_IFREG else {
            close(fd)
            return .failure(SystemError("open", path: path, errno: EINVAL, detail: "\(kindName(st.st_mode)), not a regular file: refused"))
        }
        if let trusted = owners {
            if !trusted.contains(st.st_uid) {
                close(fd)
                let who = trusted.sorted().map { $0 == 0 ? "root" : "uid \($0)" }.joined(separator: " or ")
                return .failure(SystemError("open", path: path, errno: EPERM, detail: "belongs to uid \(st.st_uid), not to \(who): refused"))
            }
            if st.st_mode & (S_IWGRP | S_IWOTH) != 0 {
                close(fd)
                return .failure(SystemError("open", path: path, errno: EPERM,
                                            detail: "writable by group or others (mode \(String(st.st_mode & 0o7777, radix: 8))): refused"))
            }
        }
        return .success(fd)
    }

    /// Reads a small file whole; retries EINTR; nil-free: errors carry path and errno.
    public static func read(_ path: String, limit: Int = 64 * 1024) -> Result<String, SystemError> {
        readBytes(path, limit: limit).map { String(decoding: $0, as: UTF8.self) }
    }

    /// The bytes of a regular file, at most `limit` of them.
    public static func readBytes(_ path: String, limit: Int = 64 * 1024, noFollow: Bool = false,
                                 owners: Set<uid_t>? = nil) -> Result<[UInt8], SystemError> {
        let fd: Int32
        switch openRegular(path, noFollow: noFollow, owners: owners) {
        case .failure(let e): return .failure(e)
        case .success(let f): fd = f
        }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 4096)
        while bytes.count < limit {
            let n = buf.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, min($0.count, limit - bytes.count)) }
            if n < 0 {
                if errno == EINTR { continue }
                // Regular files never say EAGAIN; a sysfs attribute with nothing to say may.
                if errno == EAGAIN { break }
                return .failure(SystemError("read", path: path, errno: errno))
            }
            if n == 0 { break }
            bytes.append(contentsOf: buf[0..<n])
        }
        return .success(bytes)
    }

    /// Entry names of a directory (no "." or ".."), sorted; empty when it cannot be listed.
    public static func list(_ path: String) -> [String] { names(path) ?? [] }

    /// Entry names of a directory (no "." or ".."), sorted; nil when it cannot be opened. `directoriesOnly`: the
    /// entries the directory says are directories (d_type). The one readdir loop of the project.
    public static func names(_ path: String, directoriesOnly: Bool = false) -> [String]? {
        guard let dir = opendir(path) else { return nil }
        defer { closedir(dir) }
        var names: [String] = []
        while let ent = readdir(dir) {
            if directoriesOnly, ent.pointee.d_type != UInt8(DT_DIR) { continue }
            let name = withUnsafeBytes(of: ent.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            if name != "." && name != ".." { names.append(name) }
        }
        return names.sorted()
    }

    public static func exists(_ path: String) -> Bool { access(path, F_OK) == 0 }
}
