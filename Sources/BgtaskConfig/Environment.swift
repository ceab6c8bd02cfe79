#if canImport(Glibc)
@preconcurrency import Glibc
#endif

/// The process environment and the user's account, read the same way everywhere.
public enum Environment {
    /// A variable's value; unset and empty are the same (as XDG says).
    public static func get(_ name: String) -> String? {
        getenv(name).map { String(cString: $0) }.flatMap { $0.isEmpty ? nil : $0 }
    }

    /// `$HOME`, else the account's home from the password database. Never a shared fallback such as
    /// `/tmp`, which another user could prepare.
    public static func home() throws(PathError) -> String {
        if let h = get("HOME"), h.hasPrefix("/") { return h }
        if let pw = getpwuid(geteuid()), let dir = pw.pointee.pw_dir {
            let h = String(cString: dir)
            if h.hasPrefix("/") { return h }
        }
        throw PathError(path: "$HOME", message: "HOME is not set and user \(geteuid()) has no home directory in the password database; set HOME or XDG_STATE_HOME")
    }
}

/// A problem with a directory or file bgtask keeps its state in, naming the path.
public struct PathError: Error, Sendable, CustomStringConvertible {
    public var path: String
    public var message: String
    public init(path: String, message: String) {
        self.path = path
        self.message = message
    }
    public var description: String { "\(path): \(message)" }

    static func errno(_ path: String, _ what: String, _ e: Int32) -> PathError {
        PathError(path: path, message: "\(what): \(String(cString: strerror(e)))")
    }
}
