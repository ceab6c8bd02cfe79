#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import GRDB

/// A full filesystem said as one. SQLite reports a write that found no room as SQLITE_FULL, but as SQLITE_IOERR
/// ("disk I/O error") when it was the WAL index that could not grow, and a reader that cannot make its `-shm`
/// sees SQLITE_IOERR or SQLITE_CANTOPEN: words that read like a failing disk. Where SQLite says one of those,
/// the filesystem holding the file is asked (statvfs) before the error is worded.
public enum DiskSpace {
    /// Less than this free and SQLite's writes (a WAL frame, the `-shm`'s 32 KiB, a journal) fail for want of room.
    public static let lowWater: UInt64 = 1 << 20

    /// `error`, from SQLite on `file`, as "no space left on DEVICE (N bytes free …)" when it is SQLite's I/O,
    /// full or cannot-open error and the filesystem of `file` is (nearly) full; nil otherwise.
    public static func explain(_ error: any Error, file: String) -> String? {
        guard let e = error as? DatabaseError,
              [ResultCode.SQLITE_IOERR, .SQLITE_FULL, .SQLITE_CANTOPEN].contains(e.resultCode.primaryResultCode) else { return nil }
        return full(file)
    }

    /// The words for `file` on a filesystem with less than `lowWater` free, or nil.
    public static func full(_ file: String) -> String? {
        let dir = file.hasSuffix("/") || !file.contains("/") ? file : String(file[..<file.lastIndex(of: "/")!])
        var st = statvfs()
        guard statvfs(dir.isEmpty ? "/" : dir, &st) == 0 else { return nil }
        let free = UInt64(st.f_bavail) * UInt64(st.f_frsize)
        guard free < lowWater else { return nil }
        let (device, mount) = mountOf(dir.isEmpty ? "/" : dir) ?? ("the filesystem of \(dir)", dir)
        return "no space left on \(device) (\(free) bytes free on \(mount)): \(file) cannot be written; free some space there"
    }

    /// The mount holding `path`: its source (a device, `tmpfs`) and mount point, from /proc/self/mountinfo by the
    /// path's device number (the last entry for it: mounts over mounts).
    static func mountOf(_ path: String) -> (source: String, mountPoint: String)? {
        var st = stat()
        guard stat(path, &st) == 0, let f = fopen("/proc/self/mountinfo", "re") else { return nil }
        defer { fclose(f) }
        let want = "\(major(st.st_dev)):\(minor(st.st_dev))"
        var found: (String, String)?
        var line: UnsafeMutablePointer<CChar>?
        var cap = 0
        defer { free(line) }
        // "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw": id, parent, dev, root, mount point, …, "-", type, source.
        while getline(&line, &cap, f) > 0, let l = line {
            let words = String(cString: l).split(separator: " ")
            guard words.count > 4, words[2] == want, let dash = words.firstIndex(of: "-"), dash + 2 < words.count else { continue }
            found = (unescaped(words[dash + 2]), unescaped(words[4]))
        }
        return found
    }

    /// mountinfo's octal escapes (`\040` for a space) undone.
    static func unescaped(_ w: Substring) -> String {
        var out: [UInt8] = []
        let b = Array(w.utf8)
        var i = 0
        while i < b.count {
            if b[i] == 0x5C, i + 3 < b.count,
               let v = UInt8(String(decoding: b[(i + 1)...(i + 3)], as: UTF8.self), radix: 8) {
                out.append(v)
                i += 4
            } else {
                out.append(b[i])
                i += 1
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// glibc's gnu_dev_major and gnu_dev_minor (macros, which Swift does not import).
    static func major(_ dev: dev_t) -> UInt32 { UInt32(truncatingIfNeeded: dev >> 8) & 0xFFF | UInt32(truncatingIfNeeded: dev >> 32) & ~0xFFF }
    static func minor(_ dev: dev_t) -> UInt32 { UInt32(truncatingIfNeeded: dev) & 0xFF | UInt32(truncatingIfNeeded: dev >> 12) & ~0xFF }
}
