import Synchronization

/// The policy in force for a long-running process. A reload that finds any error changes nothing:
/// the last good policy stays in force and the errors are returned for reporting.
public final class PolicyStore: Sendable {
    private let current: Mutex<(policy: Policy, generation: Int)>

    public init(_ initial: Policy = .empty) {
        current = Mutex((initial, 0))
    }

    public var policy: Policy { current.withLock { $0.policy } }
    /// Counts successful loads, so a caller can tell whether a reload took.
    public var generation: Int { current.withLock { $0.generation } }

    /// Parses every layer (path, text), lowest first. All load, or none does.
    @discardableResult
    public func reload(_ layers: [(path: String, text: String)]) -> [PolicyError] {
        var files: [PolicyFile] = []
        var errors: [PolicyError] = []
        for (path, text) in layers {
            switch PolicyFile.parse(text, path: path) {
            case .success(let f): files.append(f)
            case .failure(let e): errors += e.errors
            }
        }
        guard errors.isEmpty else { return errors }
        let merged = Policy.merge(files)
        current.withLock { $0 = (merged, $0.generation + 1) }
        return []
    }
}
