#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskJSON

/// Free space on the filesystem work would write to (Android's `setRequiresStorageNotLow`): read with statvfs
/// whenever the conditions are read, never on a timer.
public struct StorageReading: Sendable, Equatable {
    public var path: String?
    /// Bytes an unprivileged writer may still use (f_bavail × f_frsize).
    public var freeBytes: Double?
    public var low: Bool?
    public var reason: String
    /// The filesystem's size (f_blocks × f_frsize): what a change of `freeBytes` is measured against (`ConditionDiffer`).
    public var sizeBytes: Double?

    public static func read(path: String?, lowBytes: Double) -> StorageReading {
        guard let p = path ?? currentDirectory() else {
            return StorageReading(path: nil, freeBytes: nil, low: nil, reason: "no working directory to look at (getcwd failed)")
        }
        var st = statvfs()
        guard statvfs(p, &st) == 0 else {
            return StorageReading(path: p, freeBytes: nil, low: nil, reason: "statvfs \(p): \(String(cString: strerror(errno)))")
        }
        let free = Double(st.f_bavail) * Double(st.f_frsize)
        let low = free < lowBytes
        let mb = { (b: Double) in b >= 10 * 1_073_741_824 ? "\(Int(b / 1_073_741_824)) GiB" : "\(Int(b / 1_048_576)) MiB" }
        return StorageReading(path: p, freeBytes: free, low: low,
                              reason: "\(mb(free)) free on the filesystem of \(p) (statvfs); low under \(mb(lowBytes))",
                              sizeBytes: Double(st.f_blocks) * Double(st.f_frsize))
    }

    /// Its policy names (`storage.*`), as `Snapshot.conditions` lists them.
    public var conditions: [(String, JSONValue)] {
        [("storage.free_bytes", JSONValue(freeBytes)), ("storage.low", JSONValue(low)), ("storage.path", JSONValue(path))]
    }

    /// The filesystem `path` is on (`st_dev`), or nil when it cannot be stat'ed: readings of one device are one.
    public static func device(of path: String) -> UInt64? {
        var st = stat()
        guard stat(path, &st) == 0 else { return nil }
        return UInt64(st.st_dev)
    }

    static func currentDirectory() -> String? {
        var buf = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        guard getcwd(&buf, buf.count) != nil else { return nil }
        return String(decoding: buf.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
