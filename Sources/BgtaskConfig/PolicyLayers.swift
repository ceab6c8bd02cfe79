#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskPolicy
import BgtaskProbes
import BgtaskFiles

/// One layer of the policy: the built-in default, or a file.
public enum PolicySource: Sendable, Equatable {
    case builtIn
    case file(String)

    /// As `policy show` and error messages name it.
    public var name: String {
        switch self {
        case .builtIn: return BuiltinPolicy.path
        case .file(let p): return PolicyLayers.display(p)
        }
    }
}

/// Finds and reads the policy layers. The policy module does no I/O; this is where files are read.
public enum PolicyLayers {
    /// The shipped files: BGTASK_POLICY_DIR, else `<prefix>/share/bgtask/policies` beside the binary (in
    /// `<prefix>/bin`, or `<prefix>/libexec/bgtask` for the full CLI behind `bgtask`'s front),
    /// else the `Policies/` of the source tree a development build runs from; nil when none is found
    /// (a binary installed alone), and then the built-in default is all there is of that layer.
    public static var shippedDirectory: String? {
        if let d = Environment.get("BGTASK_POLICY_DIR") { return d }
        var exe = [CChar](repeating: 0, count: 4096)
        let n = readlink("/proc/self/exe", &exe, exe.count - 1)
        guard n > 0 else { return nil }
        var dir = String(decoding: exe[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        dir = String(dir[..<(dir.lastIndex(of: "/") ?? dir.endIndex)])
        for up in ["/..", "/../.."] where isFile(dir + up + "/share/bgtask/policies/default.toml") {
            return canonical(dir + up + "/share/bgtask/policies")
        }
        var up = dir
        for _ in 0..<5 {
            if isFile(up + "/Policies/default.toml") { return canonical(up + "/Policies") }
            up += "/.."
        }
        return nil
    }

    static func canonical(_ p: String) -> String {
        guard let r = realpath(p, nil) else { return p }
        defer { free(r) }
        return String(cString: r)
    }

    public static var systemDirectory: String { Environment.get("BGTASK_SYSTEM_POLICY_DIR") ?? "/etc/bgtask/policy.d" }
    public static var userDirectory: String {
        if let x = Environment.get("XDG_CONFIG_HOME"), x.hasPrefix("/") { return x + "/bgtask/policy.d" }
        return ((try? Environment.home()) ?? "/nonexistent") + "/.config/bgtask/policy.d"
    }

    /// Every layer, lowest first: the built-in default, the shipped files, /etc, $XDG_CONFIG_HOME, then
    /// files named on the command line. A file called `default.toml` in a layer directory takes the
    /// built-in's place (so an installed or edited copy of the default wins over the one compiled in).
    public static func sources(extra: [String] = []) -> [PolicySource] {
        var files: [String] = []
        for dir in [shippedDirectory, systemDirectory, userDirectory].compactMap({ $0 }) {
            files += listTOML(dir)
        }
        let replaced = files.contains { $0.hasSuffix("/" + BuiltinPolicy.name) }
        return (replaced ? [] : [.builtIn]) + (files + extra.map(absolute)).map(PolicySource.file)
    }

    /// `path` from the working directory, made absolute: a rule's file:line must mean the same to whoever reads
    /// it (`bgtask why` in another directory than the daemon's).
    public static func absolute(_ path: String) -> String {
        guard !path.hasPrefix("/"), let cwd = getcwd(nil, 0) else { return path }
        defer { free(cwd) }
        var p = Substring(path)
        while p.hasPrefix("./") { p = p.dropFirst(2) }
        let base = String(cString: cwd)
        return (base == "/" ? "" : base) + "/" + p
    }

    /// The directories whose files make up the layers (those of `extra` files too): what a reloading
    /// daemon watches. Missing ones are included; the caller watches what exists.
    public static func directories(extra: [String] = []) -> [String] {
        var dirs = [shippedDirectory, systemDirectory, userDirectory].compactMap { $0 }
        for f in extra.map(absolute) {
            let d = f.split(separator: "/", omittingEmptySubsequences: false).dropLast().joined(separator: "/")
            dirs.append(d.isEmpty ? (f.hasPrefix("/") ? "/" : ".") : d)
        }
        var seen: Set<String> = []
        return dirs.filter { seen.insert($0).inserted }
    }

    /// The layer directories as `policy check` reports them: each with how many files it gave, nil when missing.
    public static func layerDirectories() -> [(path: String, files: Int?)] {
        [shippedDirectory, systemDirectory, userDirectory].compactMap { $0 }.map { d in
            (d, opendir(d).map { closedir($0); return listTOML(d).count })
        }
    }

    /// Files a person may have meant as layers that are not read, and why (as `systemd-analyze cat-config`
    /// shows what it skipped): a name that does not end in `.toml` in a layer directory, a hidden one, and a
    /// `.toml` beside a `policy.d` rather than in it.
    public static func skipped() -> [(path: String, why: String)] {
        var out: [(String, String)] = []
        for dir in [shippedDirectory, systemDirectory, userDirectory].compactMap({ $0 }) {
            // The README that packages put there (data/policy.d-README) is not a policy someone meant.
            for name in entries(dir) where isFile(dir + "/" + name) && !(name.hasSuffix(".toml") && !name.hasPrefix("."))
                && name != "README" && name != "README.md" {
                out.append((dir + "/" + name, name.hasPrefix(".") ? "a hidden file" : "not *.toml"))
            }
            guard dir.hasSuffix("/policy.d") else { continue }
            let parent = String(dir.dropLast("/policy.d".count))
            for name in entries(parent) where name.hasSuffix(".toml") && isFile(parent + "/" + name) {
                out.append((parent + "/" + name, "layers are read from \(dir)/*.toml"))
            }
        }
        return out
    }

    static func entries(_ dir: String) -> [String] { FileIO.names(dir) ?? [] }

    static func listTOML(_ dir: String) -> [String] {
        entries(dir).filter { $0.hasSuffix(".toml") && !$0.hasPrefix(".") }.map { dir + "/" + $0 }
    }

    static func isFile(_ p: String) -> Bool { var st = stat(); return stat(p, &st) == 0 && (st.st_mode & S_IFMT) == S_IFREG }

    /// A file as rule locations name it, the same for whoever reads it wherever they are (bgtaskd's working
    /// directory is not the reader's): absolute, with the home directory as `~`
    /// (`~/.config/bgtask/policy.d/50-night.toml:2`).
    public static func display(_ path: String) -> String {
        let p = absolute(path)
        if let home = try? Environment.home(), home.count > 1, p.hasPrefix(home + "/") { return "~" + p.dropFirst(home.count) }
        return p
    }

    /// What is said of a layer found in a policy directory that does not load, by bgtaskd and every command alike.
    public static let leftOutWarning = "a policy layer does not load and is left out (the other layers are in force until it is fixed)"

    /// Whether an error is in a file named on the command line (`--policy FILE`): the one case that stops a command
    /// or bgtaskd (78); a broken layer found in a policy directory is left out with `leftOutWarning`.
    public static func inNamedFile(_ errors: [PolicyError], named files: [String]) -> Bool {
        let names = Set(files.flatMap { [$0, display($0)] })
        return errors.contains { names.contains($0.location.file) }
    }

    /// Reads and checks every layer. A layer that fails is left out (those below it stay in force) and its
    /// errors are returned; a missing, unreadable or non-regular file is an error naming the path.
    public static func load(_ sources: [PolicySource]) -> (Policy, [PolicyError]) {
        var good: [PolicyFile] = []
        var errors: [PolicyError] = []
        for source in sources {
            let text: String
            switch source {
            case .builtIn: text = BuiltinPolicy.text
            case .file(let path):
                switch readText(path) {
                case .failure(let e): errors += e.errors; continue
                case .success(let t): text = t
                }
            }
            switch PolicyFile.parse(text, path: source.name) {
            case .success(let f): good.append(f)
            case .failure(let es): errors += es.errors
            }
        }
        return (Policy.merge(good), errors)
    }

    public static func load(paths: [String]) -> (Policy, [PolicyError]) { load(paths.map(PolicySource.file)) }

    public static let maxPolicyBytes = 4 << 20

    /// A policy (or conditions) file's text: a regular file (never a FIFO, which would block), at most
    /// 4 MiB, valid UTF-8 without NUL or control characters; errors carry file:line:col.
    public static func readText(_ path: String) -> Result<String, PolicyErrors> {
        let shown = display(path)
        func fail(_ m: String) -> Result<String, PolicyErrors> {
            .failure(PolicyErrors([PolicyError(location: SourceLocation(file: shown, line: 1, column: 1), message: m)]))
        }
        switch FileIO.readBytes(path, limit: maxPolicyBytes + 1) {
        case .failure(let e): return fail("cannot read: \(e.detail ?? String(cString: strerror(e.errno)))")
        case .success(let bytes):
            if bytes.count > maxPolicyBytes { return fail("larger than 4 MiB, not a policy file") }
            return PolicyFile.text(bytes, path: shown)
        }
    }
}

extension ProbeOptions {
    /// The thresholds a policy's [battery] and [thermal] sections share with the probes.
    public func applying(_ s: PolicySettings) -> ProbeOptions {
        var o = self
        o.battery.lowPercent = s.number("battery.low_percent")
        o.battery.criticalPercent = s.number("battery.critical_percent")
        o.thermal.fairCelsius = s.number("thermal.fair_celsius")
        o.thermal.seriousCelsius = s.number("thermal.serious_celsius")
        o.thermal.criticalCelsius = s.number("thermal.critical_celsius")
        o.idleAfter = s.number("idle.after")
        o.storageLowBytes = s.number("storage.low_mb") * 1_048_576
        return o
    }
}
