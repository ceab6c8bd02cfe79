import Synchronization

/// The last parse of each file's text, by path.
///
/// TOMLKit 0.6 frees nothing it allocates: a parsed `TOMLTable` has no deinit (the whole toml++ tree stays), and
/// each `.string` and `.keys` is a `strdup` never freed — about 23 kB for the shipped policy. bgtaskd reads its
/// policy layers and app manifests again at every SIGHUP, `bgtask policy reload` and file change, so each of
/// those kept that much for the life of the daemon. A text parsed before for its path is not given to TOMLKit
/// again: a reload costs what changed (an edited file is parsed, and leaks, once per edit), not what is read.
/// Parsing is a pure function of (path, text), so the earlier result is the result.
public final class TOMLMemo<Value: Sendable>: Sendable {
    private let entries = Mutex<[String: (text: String, value: Value)]>([:])
    /// Paths kept at most (a process parses few files; a test process, many): past it, the memo starts over.
    static var limit: Int { 512 }

    public init() {}

    public func value(path: String, text: String, parse: () -> Value) -> Value {
        if let e = entries.withLock({ $0[path] }), e.text == text { return e.value }
        let v = parse()
        entries.withLock { m in
            if m.count >= Self.limit { m.removeAll(keepingCapacity: true) }
            m[path] = (text, v)
        }
        return v
    }
}
