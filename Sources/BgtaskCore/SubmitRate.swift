/// How fast each caller may submit: a token bucket per sender — `burst` at once, then `perSecond` — so a flood of
/// submits cannot grow the queue faster than the disk can keep it. Pure: `now` is any monotonic clock.
public struct SubmitRate: Sendable {
    public let perSecond: Double
    public let burst: Double
    /// Callers remembered at most; past it, those quiet for a minute (whose buckets are full again) are forgotten.
    public static let remembered = 1024
    private var buckets: [String: (tokens: Double, at: Double)] = [:]

    public init(perSecond: Double, burst: Double) {
        self.perSecond = perSecond
        self.burst = burst
    }

    /// Whether `sender` may submit one more now; takes its token if so.
    public mutating func allow(_ sender: String, now: Double) -> Bool {
        var b = buckets[sender] ?? (burst, now)
        b.tokens = min(burst, b.tokens + max(0, now - b.at) * perSecond)
        b.at = max(b.at, now)
        guard b.tokens >= 1 else { buckets[sender] = b; return false }
        b.tokens -= 1
        buckets[sender] = b
        if buckets.count > SubmitRate.remembered { buckets = buckets.filter { now - $0.value.at < 60 } }
        return true
    }

    /// A sender that left the bus: a new one never has its name.
    public mutating func forget(_ sender: String) { buckets[sender] = nil }

    public var count: Int { buckets.count }
}
