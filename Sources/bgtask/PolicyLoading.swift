import BgtaskCore
import BgtaskJSON
import ArgumentParser
import BgtaskPolicy
import BgtaskProbes
import BgtaskConfig
#if canImport(Glibc)
@preconcurrency import Glibc
#endif

extension PolicyLayers {
    static func printErrors(_ errors: [PolicyError]) {
        for e in errors { fputs(Terminal.safe(e.description, keepNewlines: true) + "\n", stderr) }
    }

    /// What bgtaskd says of a broken layer in a policy directory, said the same by every command: left out, the
    /// others in force. Nothing when every layer loaded.
    static func warnLeftOut(_ errors: [PolicyError]) {
        guard !errors.isEmpty else { return }
        fputs("bgtask: warning: \(leftOutWarning) (bgtask policy check)\n", stderr)
        printErrors(errors)
    }
}

/// `--task 'kind=processing,requires_external_power=true,cpu_heavy'`.
enum TaskSpec {
    /// A constant table (unsafe only because a WritableKeyPath is not Sendable): never written.
    nonisolated(unsafe) static let flags: [String: WritableKeyPath<TaskFields, Bool>] = [
        "requires_external_power": \.requiresExternalPower, "requires_network": \.requiresNetwork,
        "requires_unmetered": \.requiresUnmetered, "cpu_heavy": \.cpuHeavy, "user_initiated": \.userInitiated,
    ]

    static func parse(_ spec: String) throws -> TaskFields {
        var t = TaskFields(id: "task")
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
                guard let kind = TaskKind(rawValue: value) else { throw ValidationError("--task kind=\(value): one of \(TaskKind.names)") }
                t.kind = kind
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




