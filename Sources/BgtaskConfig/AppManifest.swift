#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskPolicy
import BgtaskProtocol
import BgtaskProbes
import TOMLKit
import BgtaskFiles

/// An app's manifest — the Linux form of Info.plist's `BGTaskSchedulerPermittedIdentifiers` and background
/// modes: `$XDG_DATA_HOME/bgtask/apps/APP-ID.toml`, then each of `$XDG_DATA_DIRS/bgtask/apps/`.
///
/// ```toml
/// id = "com.example.ColorFeed"                       # the file's name without .toml
/// command = ["/usr/bin/colorfeed", "--background"]   # how bgtaskd launches it for background work
/// permitted_identifiers = ["com.example.colorfeed.refresh", "com.example.export.*"]
/// kinds = ["refresh", "processing", "continued"]     # optional: all three
/// resources = ["gpu"]                                # optional
/// name = "Color Feed"                                # optional: shown in notifications
/// ```
public struct AppManifest: Sendable, Equatable {
    public var id: String
    public var path: String
    public var command: [String]
    /// Exact identifiers, or `prefix.*` (any identifier that starts with `prefix.`), for continued tasks.
    public var identifiers: [String]
    public var kinds: Set<TaskKind>
    public var resources: Set<String>
    /// What a person calls the app (notifications, `bgtask apps`); the id when absent.
    public var name: String?

    public static let allKinds: Set<TaskKind> = [.refresh, .processing, .continued]
    public static let knownResources: Set<String> = ["gpu"]
    static let keys = ["id", "name", "command", "permitted_identifiers", "kinds", "resources"]

    /// Whether the manifest lets the app use `identifier` (case-sensitive, as on iOS).
    public func permits(_ identifier: String) -> Bool {
        identifiers.contains { IdentifierPattern.permits($0, identifier) }
    }

    /// An app id: reverse-DNS letters, digits, '.', '_', '-', 1 to 255 bytes, not starting with '.'.
    public static func validID(_ s: String) -> Bool {
        !s.isEmpty && s.utf8.count <= 255 && !s.hasPrefix(".") &&
            s.unicodeScalars.allSatisfy { ($0 >= "a" && $0 <= "z") || ($0 >= "A" && $0 <= "Z") || ($0 >= "0" && $0 <= "9") || "._-".unicodeScalars.contains($0) }
    }

    /// Parses a manifest's text; every problem is reported at its file:line. A text parsed before for the same path
    /// gives the result it gave (`TOMLMemo`: TOMLKit frees nothing it parses, and manifests are read at every reload).
    public static func parse(_ text: String, path: String) -> Result<AppManifest, PolicyErrors> {
        memo.value(path: path, text: text) { parseText(text, path: path) }
    }
    static let memo = TOMLMemo<Result<AppManifest, PolicyErrors>>()

    static func parseText(_ text: String, path: String) -> Result<AppManifest, PolicyErrors> {
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        func lineOf(_ key: String) -> Int {
            (lines.firstIndex { $0.drop { $0 == " " || $0 == "\t" }.hasPrefix(key) && $0.contains("=") } ?? 0) + 1
        }
        func problem(_ m: String, key: String? = nil, line: Int? = nil) -> PolicyError {
            let l = line ?? key.map(lineOf) ?? 1
            return PolicyError(location: SourceLocation(file: path, line: l, column: 1), message: m,
                               sourceLine: lines.indices.contains(l - 1) ? String(lines[l - 1]) : nil)
        }
        if case .failure(let e) = PolicyFile.text(Array(text.utf8), path: path) { return .failure(e) }
        let table: TOMLTable
        do { table = try TOMLTable(string: text) } catch let e as TOMLParseError {
            return .failure(PolicyErrors([problem("TOML: \(e.description)", line: max(1, e.source.begin.line))]))
        } catch let e { return .failure(PolicyErrors([problem("TOML: \(e)")])) }

        var errors: [PolicyError] = []
        for k in table.keys.sorted() where !keys.contains(k) {
            errors.append(problem("unknown key '\(k)' (known: \(keys.joined(separator: ", ")))", key: k))
        }
        func strings(_ key: String, required: Bool) -> [String]? {
            guard let v = table[key] else {
                if required { errors.append(problem("'\(key)' is missing: a list of strings", line: 1)) }
                return nil
            }
            guard let a = v.array, case let items = a.map({ $0.string }), !items.contains(where: { $0 == nil }) else {
                errors.append(problem("'\(key)' must be a list of strings", key: key))
                return nil
            }
            return items.map { $0! }
        }
        let stem = String(path.split(separator: "/").last ?? "").replacingSuffix(".toml")
        let id = table["id"]?.string
        if id == nil { errors.append(problem("'id' is missing: the app id, which is also the file's name (\(stem))", key: "id")) }
        if let i = id {
            if !validID(i) { errors.append(problem("id '\(i)' is not an app id (letters, digits, '.', '_', '-'; at most 255 bytes)", key: "id")) }
            else if i != stem { errors.append(problem("id '\(i)' does not match the file's name (\(stem).toml)", key: "id")) }
            else if i == "cli" { errors.append(problem("id 'cli' is reserved for work submitted from the command line", key: "id")) }
        }
        let command = strings("command", required: true) ?? []
        if table["command"] != nil, command.isEmpty || !command[0].hasPrefix("/") || command.contains(where: { $0.utf8.contains(0) }) {
            errors.append(problem("'command' must start with an absolute path (the program bgtaskd launches)", key: "command"))
        }
        let identifiers = strings("permitted_identifiers", required: true) ?? []
        for p in identifiers {
            let body = p.hasSuffix(".*") ? String(p.dropLast(2)) : p
            if body.isEmpty || body.utf8.count > 255 || body.contains("*") || body.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) {
                errors.append(problem("permitted identifier '\(p)': an identifier, or a prefix ending in '.*'", key: "permitted_identifiers"))
            }
        }
        let named = strings("kinds", required: false).map(Set.init)
        let kinds = named.map { Set($0.compactMap(TaskKind.init(rawValue:))).intersection(allKinds) } ?? allKinds
        if let named, let unknown = Optional(named.subtracting(kinds.map(\.rawValue))), !unknown.isEmpty {
            errors.append(problem("kinds: \(unknown.sorted().joined(separator: ", ")) unknown (refresh, processing, continued)", key: "kinds"))
        }
        let resources = strings("resources", required: false).map(Set.init) ?? []
        if !resources.isSubset(of: knownResources) {
            errors.append(problem("resources: \(resources.subtracting(knownResources).sorted().joined(separator: ", ")) unknown (gpu)", key: "resources"))
        }
        var name: String?
        if let v = table["name"] {
            if let n = v.string, !n.isEmpty, n.utf8.count <= 128, !n.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) { name = n }
            else { errors.append(problem("'name' must be a string of 1 to 128 bytes without control characters", key: "name")) }
        }
        guard errors.isEmpty, let i = id else { return .failure(PolicyErrors(errors)) }
        var m = AppManifest(id: i, path: path, command: command, identifiers: identifiers, kinds: kinds, resources: resources)
        m.name = name
        return .success(m)
    }
}

/// Where manifests are found, and the user's switch for each app.
public enum AppManifests {
    public static let maxBytes = 64 * 1024

    /// `$XDG_DATA_HOME/bgtask/apps` (default `~/.local/share`), then `$XDG_DATA_DIRS` (default
    /// `/usr/local/share:/usr/share`) each `/bgtask/apps`: the first manifest of an app id wins.
    public static func directories() -> [String] {
        var dirs: [String] = []
        if let d = Environment.get("XDG_DATA_HOME"), d.hasPrefix("/") { dirs.append(d) }
        else if let h = try? Environment.home() { dirs.append(h + "/.local/share") }
        let system = Environment.get("XDG_DATA_DIRS").flatMap { $0.isEmpty ? nil : $0 } ?? "/usr/local/share:/usr/share"
        dirs += system.split(separator: ":").map(String.init).filter { $0.hasPrefix("/") }
        return dirs.map { $0 + "/bgtask/apps" }
    }

    /// Every manifest, by app id, and the problems of those that were skipped. A manifest names a command
    /// bgtaskd runs as its user: only one that user (or root) owns and nobody else may write is read — as
    /// root with another user's `XDG_DATA_HOME` (`sudo -E`), theirs are refused, as their state is.
    public static func load(directories dirs: [String] = directories()) -> (apps: [String: AppManifest], errors: [PolicyError]) {
        var apps: [String: AppManifest] = [:]
        var errors: [PolicyError] = []
        let owners: Set<uid_t> = [geteuid(), 0]
        for dir in dirs {
            for path in PolicyLayers.listTOML(dir) {
                let text: String
                switch FileIO.readBytes(path, limit: maxBytes + 1, owners: owners) {
                case .failure(let e):
                    errors.append(PolicyError(location: SourceLocation(file: path, line: 1, column: 1),
                                              message: "cannot read: \(e.detail ?? String(cString: strerror(e.errno)))"))
                    continue
                case .success(let bytes):
                    if bytes.count > maxBytes {
                        errors.append(PolicyError(location: SourceLocation(file: path, line: 1, column: 1), message: "larger than 64 KiB, not a manifest"))
                        continue
                    }
                    switch PolicyFile.text(bytes, path: path) {
                    case .failure(let e): errors += e.errors; continue
                    case .success(let t): text = t
                    }
                }
                switch AppManifest.parse(text, path: path) {
                case .failure(let e): errors += e.errors
                case .success(let m): if apps[m.id] == nil { apps[m.id] = m }
                }
            }
        }
        return (apps, errors)
    }

    /// The user's switch (Apple's Background App Refresh, per app): `$XDG_CONFIG_HOME/bgtask/disabled-apps`,
    /// one app id per line.
    public static var switchFile: String {
        if let x = Environment.get("XDG_CONFIG_HOME"), x.hasPrefix("/") { return x + "/bgtask/disabled-apps" }
        return ((try? Environment.home()) ?? "/nonexistent") + "/.config/bgtask/disabled-apps"
    }

    public static func disabled() -> Set<String> {
        guard case .success(let bytes) = FileIO.readBytes(switchFile, limit: 1 << 20) else { return [] }
        return Set(String(decoding: bytes, as: UTF8.self).split(separator: "\n").map { String($0.filter { $0 != " " && $0 != "\t" && $0 != "\r" }) }
            .filter { AppManifest.validID($0) })
    }

    /// Turns an app's background work on or off (written to a new file, then renamed over the old one).
    public static func setEnabled(_ id: String, _ enabled: Bool) throws(PathError) {
        var set = disabled()
        if enabled { set.remove(id) } else { set.insert(id) }
        let file = switchFile
        let dir = String(file[..<file.lastIndex(of: "/")!])
        _ = try SecureDirectory.prepare(dir)
        let tmp = file + ".tmp"
        unlink(tmp)
        let fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw PathError(path: tmp, message: String(cString: strerror(errno))) }
        let text = set.sorted().map { $0 + "\n" }.joined()
        let ok = text.withCString { write(fd, $0, strlen($0)) } == text.utf8.count && fsync(fd) == 0
        close(fd)
        guard ok, rename(tmp, file) == 0 else {
            unlink(tmp)
            throw PathError(path: file, message: "cannot be written: \(String(cString: strerror(errno)))")
        }
    }
}

extension String {
    func replacingSuffix(_ s: String) -> String { hasSuffix(s) ? String(dropLast(s.count)) : self }
}
