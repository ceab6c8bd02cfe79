#if canImport(Glibc)
@preconcurrency import Glibc
#endif

/// The rules for a directory bgtask writes state into: it must be the effective user's own, not a
/// symbolic link, and writable by nobody else; each directory above it must belong to that user or to
/// root and be writable by nobody else unless sticky (as /tmp is). So another user can neither plant a
/// symbolic link in it nor swap it for one, and files opened in it cannot lead elsewhere (as root with
/// another user's `XDG_STATE_HOME`, this refuses instead of writing through their links).
public enum SecureDirectory {
    /// Creates `path` and missing parents (0700), then checks it and its ancestors. Returns the path.
    @discardableResult
    public static func prepare(_ path: String) throws(PathError) -> String {
        guard path.hasPrefix("/") else { throw PathError(path: path, message: "not an absolute path") }
        let parts = path.split(separator: "/").map(String.init)
        guard !parts.contains(".."), !parts.contains(".") else {
            throw PathError(path: path, message: "'.' and '..' are not allowed in a state directory path")
        }
        var current = ""
        for part in parts {
            current += "/" + part
            var st = stat()
            if lstat(current, &st) != 0 {
                guard errno == ENOENT else { throw PathError.errno(current, "cannot inspect", errno) }
                if mkdir(current, 0o700) != 0 && errno != EEXIST { throw PathError.errno(current, "cannot create", errno) }
                guard lstat(current, &st) == 0 else { throw PathError.errno(current, "cannot inspect", errno) }
            }
            try check(current, st, final: current.count == path.trimmingTrailingSlashes.count)
        }
        return path
    }

    /// Checks an existing directory and its ancestors without creating anything.
    public static func verify(_ path: String) throws(PathError) {
        var current = ""
        let parts = path.split(separator: "/").map(String.init)
        for (i, part) in parts.enumerated() {
            current += "/" + part
            var st = stat()
            guard lstat(current, &st) == 0 else { throw PathError.errno(current, "cannot inspect", errno) }
            try check(current, st, final: i == parts.count - 1)
        }
    }

    static func check(_ path: String, _ st: stat, final: Bool) throws(PathError) {
        let me = geteuid()
        let type = st.st_mode & S_IFMT
        if type == S_IFLNK {
            // A link above the state directory is fine when root or we own it (e.g. /home -> /usr/home).
            guard !final, st.st_uid == me || st.st_uid == 0 else {
                throw PathError(path: path, message: "is a symbolic link; refusing to keep state through it")
            }
            var target = stat()
            guard stat(path, &target) == 0, (target.st_mode & S_IFMT) == S_IFDIR else {
                throw PathError(path: path, message: "is a symbolic link to something that is not a directory")
            }
            try check(path, target, final: false)
            return
        }
        guard type == S_IFDIR else { throw PathError(path: path, message: "is not a directory") }
        let othersWrite = (st.st_mode & (S_IWGRP | S_IWOTH)) != 0
        if final {
            guard st.st_uid == me else {
                throw PathError(path: path, message: "belongs to uid \(st.st_uid), not to uid \(me) who runs bgtask; refusing to use it")
            }
            guard !othersWrite else {
                throw PathError(path: path, message: "is writable by group or others (mode \(String(st.st_mode & 0o7777, radix: 8))); chmod 700 it")
            }
        } else {
            guard st.st_uid == me || st.st_uid == 0 else {
                throw PathError(path: path, message: "belongs to uid \(st.st_uid), neither uid \(me) nor root; refusing to keep state under it")
            }
            guard !othersWrite || (st.st_mode & S_ISVTX) != 0 else {
                throw PathError(path: path, message: "is writable by group or others and not sticky; refusing to keep state under it")
            }
        }
    }

    /// A file inside a checked directory: absent, or a regular file of ours (not a link, not a FIFO).
    public static func checkFile(_ path: String) throws(PathError) {
        var st = stat()
        if lstat(path, &st) != 0 {
            if errno == ENOENT { return }
            throw PathError.errno(path, "cannot inspect", errno)
        }
        guard (st.st_mode & S_IFMT) == S_IFREG else {
            throw PathError(path: path, message: (st.st_mode & S_IFMT) == S_IFLNK ? "is a symbolic link; refusing to open it" : "is not a regular file")
        }
        guard st.st_uid == geteuid() else {
            throw PathError(path: path, message: "belongs to uid \(st.st_uid), not to uid \(geteuid())")
        }
    }
}

extension String {
    var trimmingTrailingSlashes: String {
        var s = self
        while s.count > 1 && s.hasSuffix("/") { s.removeLast() }
        return s
    }
}
