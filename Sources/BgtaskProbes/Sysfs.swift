#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskFiles

/// One sysfs attribute as read: its text, absent, or a read error.
public enum SysfsValue: Sendable, Equatable {
    case text(String)
    case missing
    case unreadable(SystemError)

    public var text: String? {
        if case .text(let t) = self { return t }
        return nil
    }
}

/// Every path the probes read goes through this root, so a recorded tree (`--sysfs-root`) or
/// umockdev's redirected `/sys` is read by exactly the same code.
public struct SysfsRoot: Sendable, Equatable {
    public var sysfs: String
    public var proc: String

    public init(sysfs: String = "/sys", proc: String = "/proc") {
        self.sysfs = sysfs
        self.proc = proc
    }

    /// `/sys` itself: enumerate through libudev (which umockdev also redirects).
    public var isLiveSystem: Bool { sysfs == "/sys" }

    /// `BGTASK_SYSFS_ROOT` / `BGTASK_PROC_ROOT` override the defaults.
    public static func fromEnvironment(sysfs: String? = nil, proc: String? = nil) -> SysfsRoot {
        func env(_ n: String) -> String? { getenv(n).map { String(cString: $0) }.flatMap { $0.isEmpty ? nil : $0 } }
        return SysfsRoot(sysfs: sysfs ?? env("BGTASK_SYSFS_ROOT") ?? "/sys",
                         proc: proc ?? env("BGTASK_PROC_ROOT") ?? "/proc")
    }
}

extension FileIO {
    /// One sysfs attribute: its text trimmed, missing (no such file), or why it could not be read.
    static func attribute(_ path: String) -> SysfsValue {
        switch read(path) {
        case .success(let s): return .text(trimmed(s))
        case .failure(let e) where e.errno == ENOENT || e.errno == ENOTDIR: return .missing
        case .failure(let e): return .unreadable(e)
        }
    }
}

func trimmed(_ s: String) -> String {
    var t = Substring(s)
    while let c = t.first, c.isWhitespace || c == "\0" { t.removeFirst() }
    while let c = t.last, c.isWhitespace || c == "\0" { t.removeLast() }
    return String(t)
}

/// A device as read from sysfs: its uevent properties and the attributes asked for.
public struct SysfsDevice: Sendable {
    public var name: String
    public var path: String
    public var subsystem: String
    public var properties: [String: String]
    public var attributes: [String: SysfsValue]

    public func text(_ attr: String) -> String? { attributes[attr]?.text }
    public func attributePath(_ attr: String) -> String { path + "/" + attr }
}

/// Finds devices of a subsystem: through libudev on the live system (so umockdev and real udev
/// agree), by listing `<root>/class/<subsystem>` for a recorded tree.
public struct DeviceReader: Sendable {
    public let root: SysfsRoot

    public init(root: SysfsRoot) { self.root = root }

    public func devicePaths(subsystem: String) -> [String] {
        if root.isLiveSystem, let udev = Udev() {
            return udev.syspaths(subsystem: subsystem)
        }
        let dir = root.sysfs + "/class/" + subsystem
        return FileIO.list(dir).map { dir + "/" + $0 }
    }

    /// Reads the named attributes plus any whose name starts with one of `prefixes`.
    public func read(path: String, subsystem: String, attributes: [String], prefixes: [String] = []) -> SysfsDevice {
        var names = attributes
        if !prefixes.isEmpty {
            names += FileIO.list(path).filter { n in prefixes.contains { n.hasPrefix($0) } }
        }
        var attrs: [String: SysfsValue] = [:]
        for n in names { attrs[n] = FileIO.attribute(path + "/" + n) }
        var props: [String: String] = [:]
        if case .text(let uevent) = FileIO.attribute(path + "/uevent") {
            for line in uevent.split(separator: "\n") {
                guard let eq = line.firstIndex(of: "=") else { continue }
                props[String(line[..<eq])] = String(line[line.index(after: eq)...])
            }
        }
        let name = path.split(separator: "/").last.map(String.init) ?? path
        return SysfsDevice(name: name, path: path, subsystem: subsystem, properties: props, attributes: attrs)
    }

    public func devices(subsystem: String, attributes: [String], prefixes: [String] = []) -> [SysfsDevice] {
        devicePaths(subsystem: subsystem).map {
            read(path: $0, subsystem: subsystem, attributes: attributes, prefixes: prefixes)
        }
    }
}
