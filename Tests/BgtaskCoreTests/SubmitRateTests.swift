import BgtaskCore
import Testing

/// Admission by rate, in virtual time: the clock is a number.
@Suite("how fast a caller may submit: a token bucket per sender")
struct SubmitRateTests {
    @Test("a burst is taken at once, then one more per 1/rate seconds; another sender has its own bucket")
    func burstThenRate() {
        var r = SubmitRate(perSecond: 200, burst: 1000)
        let allowed = (0..<1500).filter { _ in r.allow(":1.5", now: 10) }.count
        #expect(allowed == 1000, "the burst at one instant")
        let at4ms = r.allow(":1.5", now: 10.004), at6ms = r.allow(":1.5", now: 10.006), other = r.allow(":1.6", now: 10)
        #expect(!at4ms, "0.8 of a token after 4 ms")
        #expect(at6ms, "1.2 tokens after 6 ms")
        #expect(other, "another caller is not slowed by the first")
        // One second later: 200 more, not 1,000.
        let later = (0..<500).filter { _ in r.allow(":1.5", now: 11.006) }.count
        #expect(later == 200, "\(later)")
    }

    @Test("a bucket refills to its burst and no further, whatever the wait; a clock that went back gives nothing")
    func refillIsCapped() {
        var r = SubmitRate(perSecond: 200, burst: 1000)
        for _ in 0..<1000 { _ = r.allow("a", now: 0) }
        let after = (0..<5000).filter { _ in r.allow("a", now: 3600) }.count
        #expect(after == 1000)
        let back = r.allow("a", now: 1000)
        #expect(!back, "no tokens for time that went backwards")
    }

    @Test("the senders remembered stay bounded: past the bound, the quiet ones are forgotten; one that left is forgotten at once")
    func bounded() {
        var r = SubmitRate(perSecond: 200, burst: 1000)
        for i in 0..<(SubmitRate.remembered + 1) { _ = r.allow(":1.\(i)", now: 0) }
        _ = r.allow(":2.0", now: 120)
        #expect(r.count == 1, "\(r.count) remembered")
        r.forget(":2.0")
        #expect(r.count == 0)
    }
}
