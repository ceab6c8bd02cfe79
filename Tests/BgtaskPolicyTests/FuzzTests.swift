import BgtaskPolicy
import Foundation
import Testing

/// SplitMix64: small, seedable, so a failure prints a seed that reproduces it.
struct SeededRandom: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// Property: whatever the text, parsing returns a policy or errors, each error with a position inside
/// the text; a policy that loads evaluates without trapping on any conditions.
@Suite("Fuzzing the policy parser and checker (bounded, seeded)")
struct FuzzTests {
    static let seed: UInt64 = ProcessInfo.processInfo.environment["BGTASK_FUZZ_SEED"].flatMap(UInt64.init) ?? 0xB67A5C
    static let budgetSeconds = ProcessInfo.processInfo.environment["BGTASK_FUZZ_SECONDS"].flatMap(Double.init) ?? 4

    static let tokens = ["&&", "||", "!", "==", "!=", "<", "<=", ">", ">=", "in", "(", ")", "[", "]", ",", "-",
                         "true", "false", "null", "\"fair\"", "'x'", "\"", "'", "30s", "1h30m", "5w", "2.5", "-1", "1e309",
                         "power.external", "battery.percent", "battery.state", "thermal.state", "task.waited", "task.cpu_heavy",
                         "time.hour", "known(", "duration(\"3s\")", "battery.", "..", "=", "&", "|", "{", "}", "é", "\u{0}", "\n", " "]

    func check(_ text: String, _ what: String) {
        if let p = ProcessInfo.processInfo.environment["BGTASK_FUZZ_TRACE"] { try? (what + "\n" + text).write(toFile: p + "-" + String(what.prefix(12)).replacingOccurrences(of: " ", with: "_"), atomically: false, encoding: .utf8) }
        switch PolicyFile.parse(text, path: "fuzz.toml") {
        case .failure(let e):
            let lines = text.split(separator: "\n", omittingEmptySubsequences: false).count
            for err in e.errors {
                #expect(err.location.line >= 1 && err.location.line <= lines + 1, "\(what): \(err)")
                #expect(err.location.column >= 1, "\(what): \(err)")
                #expect(!err.message.isEmpty)
            }
        case .success(let f):
            let p = Policy.merge([f])
            var rng = SeededRandom(state: UInt64(text.utf8.count))
            let values: [PolicyValue] = [.null, .bool(true), .bool(false), .number(-1), .number(50), .number(.infinity),
                                         .string("fair"), .string("serious"), .string(""), .duration(30)]
            var conditions: [String: PolicyValue] = [:]
            for n in ["power.external", "battery.percent", "battery.state", "thermal.state", "network.metered"] {
                conditions[n] = values.randomElement(using: &rng)
            }
            var hold: HoldState = [:]
            _ = Policy.Evaluator(policy: p, conditions: conditions, time: .midnightMonday)
                .decide(TaskFields(id: "f"), now: 1, hold: &hold)
        }
    }

    @Test("random expressions inside a rule")
    func randomExpressions() {
        var rng = SeededRandom(state: Self.seed)
        let deadline = Date().addingTimeInterval(Self.budgetSeconds)
        var n = 0
        while Date() < deadline && n < 20_000 {
            let count = Int.random(in: 1...12, using: &rng)
            let expr = (0..<count).map { _ in Self.tokens.randomElement(using: &rng)! }.joined(separator: Bool.random(using: &rng) ? " " : "")
            let quoted = expr.contains("'") ? "\"\(expr.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\""))\"" : "'\(expr)'"
            check("[[rule]]\nid = \"f\"\nwhen = \(quoted)\nverdict = \"defer\"\n", "seed \(Self.seed) #\(n): \(expr)")
            n += 1
        }
        #expect(n > 100)
    }

    @Test("mutations of the shipped policy")
    func mutatedDefaultPolicy() throws {
        let original = Array(try String(contentsOfFile: defaultPolicyPath, encoding: .utf8))
        var rng = SeededRandom(state: Self.seed ^ 0xFF)
        let deadline = Date().addingTimeInterval(Self.budgetSeconds)
        var n = 0
        let alphabet = Array("[]{}=\"'#.,_-+0123456789abcdefghijklmnopqrstuvwxyz \n\t!<>&|()")
        while Date() < deadline && n < 5_000 {
            var text = original
            for _ in 0..<Int.random(in: 1...6, using: &rng) {
                let i = Int.random(in: 0..<max(1, text.count), using: &rng)
                switch Int.random(in: 0..<4, using: &rng) {
                case 0: if !text.isEmpty { text.remove(at: i) }
                case 1: text.insert(alphabet.randomElement(using: &rng)!, at: i)
                case 2: if !text.isEmpty { text[i] = alphabet.randomElement(using: &rng)! }
                default:
                    let j = Int.random(in: 0..<max(1, text.count), using: &rng)
                    let (a, b) = (min(i, j), max(i, j))
                    text.insert(contentsOf: text[a..<min(b, a + 40)], at: b)
                }
            }
            check(String(text), "seed \(Self.seed) mutation #\(n)")
            n += 1
        }
        #expect(n > 100)
    }

    @Test("random bytes")
    func randomBytes() {
        var rng = SeededRandom(state: Self.seed ^ 0xABCD)
        for n in 0..<2_000 {
            let bytes = (0..<Int.random(in: 0...200, using: &rng)).map { _ in UInt8.random(in: 0...127, using: &rng) }
            check(String(decoding: bytes, as: UTF8.self), "seed \(Self.seed) bytes #\(n)")
        }
    }
}

@Suite("The queue re-check agrees with full decisions")
struct FastPathTests {
    @Test("verdict(_:) equals decideNow(_:).verdict for random tasks and conditions")
    func fastPathAgrees() throws {
        let extra = """

        [[rule]]
        id = "long-wait"
        when = 'task.waited > 2h && power.external == false && !task.user_initiated'
        verdict = "pause"
        [[rule]]
        id = "named"
        when = 'task.id == "t-3" || battery.percent < 10'
        verdict = "expire"
        [[rule]]
        id = "long-run"
        when = 'task.running_s > 600 && thermal.state >= "fair" && task.cpu_heavy'
        verdict = "throttle"
        cpu_percent = 10
        """
        let p = try policy(try String(contentsOfFile: defaultPolicyPath, encoding: .utf8) + extra, path: "p.toml")
        var rng = SeededRandom(state: FuzzTests.seed)
        let bools: [PolicyValue] = [.null, .bool(true), .bool(false)]
        for round in 0..<300 {
            let c: [String: PolicyValue] = [
                "power.external": bools.randomElement(using: &rng)!, "network.online": bools.randomElement(using: &rng)!,
                "network.metered": bools.randomElement(using: &rng)!, "system.power_saver": bools.randomElement(using: &rng)!,
                "battery.percent": [.null, .number(5), .number(15), .number(80)].randomElement(using: &rng)!,
                "thermal.state": [.null, .string("nominal"), .string("fair"), .string("serious"), .string("critical")].randomElement(using: &rng)!,
            ]
            let e = Policy.Evaluator(policy: p, conditions: c, time: .midnightMonday)
            for i in 0..<50 {
                var t = TaskFields(id: "t-\(i % 5)", kind: [TaskKind.processing, .refresh, .continued].randomElement(using: &rng)!)
                t.requiresExternalPower = .random(using: &rng)
                t.requiresNetwork = .random(using: &rng)
                t.requiresUnmetered = .random(using: &rng)
                t.cpuHeavy = .random(using: &rng)
                t.userInitiated = .random(using: &rng)
                t.waited = [0, 3600, 9000].randomElement(using: &rng)!
                t.running = [0, 700].randomElement(using: &rng)!
                #expect(e.verdict(t) == e.decideNow(t).verdict, "round \(round) task \(t) conditions \(c)")
            }
        }
    }
}
