#if canImport(Glibc)
@preconcurrency import Glibc
#endif

/// Where bgtask keeps what must survive (the audit trail) and what must not survive a reboot (the
/// records of running supervisors), by the XDG base directory rules.
public enum StatePaths {
    /// `BGTASK_STATE_DIR`, else `/var/lib/bgtask` for root without `XDG_STATE_HOME`, else
    /// `$XDG_STATE_HOME/bgtask`, else `~/.local/state/bgtask` (home from HOME or the password database).
    public static func stateDirectory() throws(PathError) -> String {
        if let d = Environment.get("BGTASK_STATE_DIR") { return d }
        if let x = Environment.get("XDG_STATE_HOME"), x.hasPrefix("/") { return x + "/bgtask" }
        if geteuid() == 0 { return "/var/lib/bgtask" }
        return try Environment.home() + "/.local/state/bgtask"
    }

    /// `BGTASK_RUNTIME_DIR`, else `/run/bgtask` for root, else `$XDG_RUNTIME_DIR/bgtask`, else
    /// `/run/user/UID/bgtask` when that exists, else `/tmp/bgtask-UID` (private, checked like the rest).
    public static func runtimeDirectory() throws(PathError) -> String {
        if let d = Environment.get("BGTASK_RUNTIME_DIR") { return d }
        if geteuid() == 0 && Environment.get("XDG_RUNTIME_DIR") == nil { return "/run/bgtask" }
        if let x = Environment.get("XDG_RUNTIME_DIR"), x.hasPrefix("/") { return x + "/bgtask" }
        let run = "/run/user/\(geteuid())"
        var st = stat()
        if stat(run, &st) == 0, st.st_uid == geteuid() { return run + "/bgtask" }
        return "/tmp/bgtask-\(geteuid())"
    }

    /// The state directory, created (0700) and checked.
    public static func preparedStateDirectory() throws(PathError) -> String {
        try SecureDirectory.prepare(stateDirectory())
    }

    public static func preparedRuntimeDirectory() throws(PathError) -> String {
        try SecureDirectory.prepare(runtimeDirectory())
    }

    public static let auditFile = "audit.sqlite"
}

extension StatePaths {
    /// A file or cgroup name for any task identifier (which may hold '/', spaces or non-ASCII): the
    /// identifier's letters, digits, '.', '_' and '-' (at most 64), then a hash of the whole identifier,
    /// so two identifiers never share a name.
    public static func safeName(_ id: String) -> String {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        for b in id.utf8 { h = (h ^ UInt64(b)) &* 0x100_0000_01b3 }
        let kept = id.unicodeScalars.filter { u in
            (u >= "a" && u <= "z") || (u >= "A" && u <= "Z") || (u >= "0" && u <= "9") || u == "." || u == "_" || u == "-"
        }
        var prefix = String(String.UnicodeScalarView(kept.prefix(64)))
        while prefix.hasPrefix(".") { prefix.removeFirst() }
        return (prefix.isEmpty ? "task" : prefix) + "-" + String(h, radix: 16)
    }

    /// Where bgtaskd keeps the last run's stdout and stderr of a task (the previous run's in `.1`).
    public static func outputFile(stateDirectory: String, id: String) -> String {
        stateDirectory + "/output/" + safeName(id) + ".log"
    }
}

/// What a task may be called, for the CLI and the daemon alike.
public enum TaskID {
    public static let maxBytes = 255

    /// nil if `id` is a usable identifier, else why not: 1 to 255 bytes of UTF-8, no control characters,
    /// no '/' (bgtaskd keys an app's request as APP-ID/IDENTIFIER: a command's id must never name one).
    public static func problem(_ id: String) -> String? {
        if id.isEmpty { return "the identifier is empty" }
        if id.utf8.count > maxBytes { return "the identifier is \(id.utf8.count) bytes, over \(maxBytes)" }
        if id.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F || ($0.value >= 0x80 && $0.value < 0xA0) }) {
            return "the identifier contains control characters"
        }
        if id.contains("/") { return "the identifier contains '/', which separates an app's id from its task identifiers" }
        return nil
    }

    /// The default name of a command's task: its program's base name, letters, digits, '.', '_', '-' (at most 64).
    public static func fromCommand(_ path: String) -> String {
        let base = path.split(separator: "/").last.map(String.init) ?? path
        let cleaned = base.filter { $0.isASCII && ($0.isLetter || $0.isNumber || "._-".contains($0)) }
        return cleaned.isEmpty ? "task" : String(cleaned.prefix(64))
    }
}
