import ArgumentParser
import BgtaskPolicy
import BgtaskProbes
import BgtaskRun
#if canImport(Glibc)
@preconcurrency import Glibc
#endif

/// Finds and reads the policy layers. The policy module does no I/O; this is where files are read.
enum PolicyLayers {
    static func env(_ n: String) -> String? { getenv(n).map { String(cString: $0) }.flatMap { $0.isEmpty ? nil : $0 } }

    /// The shipped defaults: BGTASK_POLICY_DIR, else `<prefix>/share/bgtask/policies` beside the binary,
    /// else the `Policies/` of the source tree a development build runs from.
    static var shippedDirectory: String? {
        if let d = env("BGTASK_POLICY_DIR") { return d }
        var exe = [CChar](repeating: 0, count: 4096)
        let n = readlink("/proc/self/exe", &exe, exe.count - 1)
        guard n > 0 else { return nil }
        var dir = String(decoding: exe[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        dir = String(dir[..<(dir.lastIndex(of: "/") ?? dir.endIndex)])
        if isFile(dir + "/../share/bgtask/policies/default.toml") { return canonical(dir + "/../share/bgtask/policies") }
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

    static var systemDirectory: String { env("BGTASK_SYSTEM_POLICY_DIR") ?? "/etc/bgtask/policy.d" }
    static var userDirectory: String {
        let base = env("XDG_CONFIG_HOME") ?? ((env("HOME") ?? "/root") + "/.config")
        return base + "/bgtask/policy.d"
    }

    /// Every layer's files, lowest first: shipped < /etc < $XDG_CONFIG_HOME; then files named on the command line.
    static func files(extra: [String] = []) -> [String] {
        var out: [String] = []
        for dir in [shippedDirectory, systemDirectory, userDirectory].compactMap({ $0 }) {
            out += listTOML(dir)
        }
        return out + extra
    }

    static func listTOML(_ dir: String) -> [String] {
        guard let d = opendir(dir) else { return [] }
        defer { closedir(d) }
        var names: [String] = []
        while let e = readdir(d) {
            let name = withUnsafePointer(to: e.pointee.d_name) { $0.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) } }
            if name.hasSuffix(".toml") && !name.hasPrefix(".") { names.append(name) }
        }
        return names.sorted().map { dir + "/" + $0 }
    }

    static func isFile(_ p: String) -> Bool { var st = stat(); return stat(p, &st) == 0 && (st.st_mode & S_IFMT) == S_IFREG }

    /// Reads and checks files. A file that fails is left out (the layers below it stay in force) and its
    /// errors are returned; a missing or unreadable file is an error naming the path and errno.
    /// Paths under the working directory are shown relative to it (`Policies/default.toml:22`).
    static func display(_ path: String) -> String {
        guard let raw = getcwd(nil, 0) else { return path }
        defer { free(raw) }
        let cwd = String(cString: raw)
        return path.hasPrefix(cwd + "/") ? String(path.dropFirst(cwd.count + 1)) : path
    }

    static func load(_ paths: [String]) -> (Policy, [PolicyError]) {
        var good: [PolicyFile] = []
        var errors: [PolicyError] = []
        for path in paths {
            switch readText(path) {
            case .failure(let e):
                errors.append(PolicyError(location: SourceLocation(file: path, line: 1, column: 1), message: e.message))
            case .success(let text):
                switch PolicyFile.parse(text, path: display(path)) {
                case .success(let f): good.append(f)
                case .failure(let es): errors += es.errors
                }
            }
        }
        return (Policy.merge(good), errors)
    }

    static func readText(_ path: String) -> Result<String, ReadError> {
        guard let f = fopen(path, "r") else { return .failure(ReadError("cannot read: \(String(cString: strerror(errno)))")) }
        defer { fclose(f) }
        var bytes: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = fread(&buf, 1, buf.count, f)
            if n > 0 { bytes += buf[0..<n] }
            if n < buf.count { break }
            if bytes.count > 4 << 20 { return .failure(ReadError("larger than 4 MiB, not a policy file")) }
        }
        if ferror(f) != 0 { return .failure(ReadError("read error: \(String(cString: strerror(errno)))")) }
        guard let s = String(validating: bytes, as: UTF8.self) else { return .failure(ReadError("not UTF-8 text")) }
        return .success(s)
    }

    static func printErrors(_ errors: [PolicyError]) {
        for e in errors { fputs(e.description + "\n", stderr) }
    }
}

/// `--task 'kind=processing,requires_external_power=true,cpu_heavy'`.
enum TaskSpec {
    nonisolated(unsafe) static let flags: [String: WritableKeyPath<TaskFields, Bool>] = [
        "requires_external_power": \.requiresExternalPower, "requires_network": \.requiresNetwork,
        "requires_unmetered": \.requiresUnmetered, "cpu_heavy": \.cpuHeavy, "user_initiated": \.userInitiated,
    ]

    static func parse(_ spec: String) throws -> TaskFields {
        var t = TaskFields(id: "task", kind: "processing")
        for part in spec.split(separator: ",").map({ String($0).trimmingCharacters(in: " ") }) where !part.isEmpty {
            let kv = part.split(separator: "=", maxSplits: 1).map(String.init)
            let key = kv[0], value = kv.count > 1 ? kv[1] : "true"
            if let path = flags[key] {
                guard let b = Bool(value) else { throw ValidationError("--task \(key)=\(value): expected true or false") }
                t[keyPath: path] = b
            } else if key == "id" {
                guard !value.isEmpty, value.count <= 128 else { throw ValidationError("--task id: 1 to 128 characters") }
                t.id = value
            } else if key == "kind" {
                guard ["processing", "refresh", "continued"].contains(value) else {
                    throw ValidationError("--task kind=\(value): one of processing, refresh, continued")
                }
                t.kind = value
            } else if key == "waited" || key == "running" {
                guard let d = parseDuration(value) else { throw ValidationError("--task \(key)=\(value): a duration such as 2h or 90s") }
                if key == "waited" { t.waited = d } else { t.running = d }
            } else {
                let known = ["id", "kind", "waited", "running"] + flags.keys.sorted()
                throw ValidationError("--task: unknown field '\(key)' (known: \(known.joined(separator: ", ")))")
            }
        }
        return t
    }
}


enum ConditionValues {
    static func from(_ pairs: [(String, JSONValue)]) -> [String: PolicyValue] { ConditionConversion.values(pairs) }

    static func localTime(_ epoch: Double) -> TimeFields { BgtaskRun.localTime(epoch) }

    static func now() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }
}

struct ReadError: Error, CustomStringConvertible {
    var message: String
    init(_ m: String) { message = m }
    var description: String { message }
}
