/// What an evaluation reads: the shared values (conditions, time, settings) and one task's fields,
/// each in the slot the compiler resolved its name to.
public final class Frame {
    public var shared: [PolicyValue]
    public var task: [PolicyValue]
    init(shared: [PolicyValue], task: [PolicyValue]) {
        self.shared = shared
        self.task = task
    }
}

typealias Eval = @Sendable (Frame) -> PolicyValue

/// Where a name's value lives in a Frame.
public struct Slots: Sendable {
    public let shared: [String: Int]
    public let task: [String: Int]
    public let sharedNames: [String]
    public let taskNames: [String]

    struct TaskIndex: Sendable {
        var id = 0, kind = 0, power = 0, network = 0, unmetered = 0, heavy = 0, user = 0
        var waited = 0, waitedS = 0, running = 0, runningS = 0, window = 0, inWindow = 0
    }
    let taskIndex: TaskIndex
    /// Shared slots the built-in requirement checks read, resolved once.
    struct RequirementIndex: Sendable { var external = 0, reason = 0, online = 0, metered = 0, interface = 0, ofDay = 0 }
    let requirementIndex: RequirementIndex

    init(schema: Schema) {
        let s = schema.order.filter { schema.entries[$0]!.scope != .task }
        let t = schema.order.filter { schema.entries[$0]!.scope == .task }
        sharedNames = s
        taskNames = t
        shared = Dictionary(uniqueKeysWithValues: s.enumerated().map { ($1, $0) })
        task = Dictionary(uniqueKeysWithValues: t.enumerated().map { ($1, $0) })
        let at = task
        taskIndex = TaskIndex(id: at["task.id"]!, kind: at["task.kind"]!, power: at["task.requires_external_power"]!,
                              network: at["task.requires_network"]!, unmetered: at["task.requires_unmetered"]!,
                              heavy: at["task.cpu_heavy"]!, user: at["task.user_initiated"]!, waited: at["task.waited"]!,
                              waitedS: at["task.waited_s"]!, running: at["task.running"]!, runningS: at["task.running_s"]!,
                              window: at["task.window"]!, inWindow: at["task.in_window"]!)
        let sh = shared
        requirementIndex = RequirementIndex(external: sh["power.external"]!, reason: sh["power.reason"]!, online: sh["network.online"]!,
                                            metered: sh["network.metered"]!, interface: sh["network.interface"]!, ofDay: sh["time.of_day"]!)
    }
}

struct Typed {
    var type: PolicyType
    var nullable: Bool
    var eval: Eval
    /// Set for literals, so enum members can be checked against a name's type.
    var literal: PolicyValue?
}

struct Compiler {
    let schema: Schema
    let slots: Slots

    func compile(_ e: Expr) throws(ExpressionError) -> Typed {
        switch e {
        case .literal(let v, _):
            let type: PolicyType
            switch v {
            case .bool: type = .bool
            case .number: type = .number
            case .string: type = .string
            case .duration: type = .duration
            case .null: type = .null
            case .list: type = .list(.null)
            }
            return Typed(type: type, nullable: v == .null, eval: { _ in v }, literal: v)

        case .name(let n, let span):
            guard let entry = schema.entries[n] else {
                let s = schema.suggestions(for: n)
                let hint = s.isEmpty ? "" : "; did you mean \(s.map { "'\($0)'" }.joined(separator: " or "))?"
                throw ExpressionError(message: "unknown name '\(n)'\(hint)", span: span)
            }
            if let i = slots.task[n] {
                return Typed(type: entry.type, nullable: entry.nullable, eval: { $0.task[i] })
            }
            let i = slots.shared[n]!
            return Typed(type: entry.type, nullable: entry.nullable, eval: { $0.shared[i] })

        case .not(let inner, _):
            let t = try compile(inner)
            try requireBool(t, inner, "'!'")
            let f = t.eval
            return Typed(type: .bool, nullable: t.nullable, eval: { fr in
                if case .bool(let b) = f(fr) { return .bool(!b) }
                return .null
            })

        case .negate(let inner, _):
            let t = try compile(inner)
            let f = t.eval
            switch t.type {
            case .number: return Typed(type: .number, nullable: t.nullable, eval: { fr in
                if case .number(let n) = f(fr) { return .number(-n) }; return .null
            }, literal: t.literal.flatMap { if case .number(let n) = $0 { return .number(-n) }; return nil })
            case .duration: return Typed(type: .duration, nullable: t.nullable, eval: { fr in
                if case .duration(let n) = f(fr) { return .duration(-n) }; return .null
            })
            default: throw ExpressionError(message: "'-' needs a number or a duration, not \(t.type.shortName)", span: inner.span)
            }

        case .binary(let op, let l, let r, let span):
            return try binary(op, l, r, span)

        case .list(let items, let span):
            let typed = try items.map { (i: Expr) throws(ExpressionError) -> Typed in try compile(i) }
            guard typed.allSatisfy({ $0.literal != nil }) else {
                throw ExpressionError(message: "a list may hold only literal values", span: span)
            }
            let values = typed.map { $0.literal! }
            let first = typed.first?.type ?? .null
            for (t, item) in zip(typed, items) where t.type != first {
                throw ExpressionError(message: "a list must hold values of one type: \(first.shortName) and \(t.type.shortName)", span: item.span)
            }
            return Typed(type: .list(first), nullable: false, eval: { _ in .list(values) }, literal: .list(values))

        case .call(let name, let args, let span):
            switch name {
            case "known", "has":
                guard args.count == 1, case .name = args[0] else {
                    throw ExpressionError(message: "\(name)() takes one name, e.g. \(name)(battery.percent)", span: span)
                }
                let f = try compile(args[0]).eval
                return Typed(type: .bool, nullable: false, eval: { .bool(f($0) != .null) })
            case "duration":
                guard args.count == 1, case .literal(.string(let s), _) = args[0] else {
                    throw ExpressionError(message: "duration() takes a string such as \"30s\"", span: span)
                }
                guard let d = parseDuration(s) else {
                    throw ExpressionError(message: "'\(s)' is not a duration (e.g. 30s, 5m, 1h30m)", span: args[0].span)
                }
                return Typed(type: .duration, nullable: false, eval: { _ in .duration(d) }, literal: .duration(d))
            default:
                throw ExpressionError(message: "unknown function '\(name)' (known: known(), duration())", span: span)
            }
        }
    }

    func requireBool(_ t: Typed, _ e: Expr, _ what: String) throws(ExpressionError) {
        guard t.type == .bool || t.type == .null else {
            throw ExpressionError(message: "\(what) needs a bool, but \(describe(e)) is \(t.type.shortName)", span: e.span)
        }
    }

    func describe(_ e: Expr) -> String {
        if case .name(let n, _) = e { return n }
        if case .literal(let v, _) = e { return v.literal }
        return "this"
    }

    /// Checks that a literal string is a member of an enumeration.
    func checkMember(_ enumType: PolicyType, _ lit: Typed, _ litExpr: Expr, _ nameExpr: Expr) throws(ExpressionError) {
        guard case .enumeration(let en, let cases, _) = enumType else { return }
        if case .string(let s)? = lit.literal, !cases.contains(s) {
            let close = cases.filter { editDistance($0, s) <= 2 }
            let hint = close.isEmpty ? "" : "; did you mean \"\(close[0])\"?"
            throw ExpressionError(message: "\"\(s)\" is not a \(en) (\(cases.joined(separator: ", ")))\(hint)", span: litExpr.span)
        }
        if lit.literal == nil && lit.type != enumType && lit.type != .null {
            throw ExpressionError(message: "\(describe(nameExpr)) is a \(en); it cannot be compared with \(lit.type.shortName)", span: litExpr.span)
        }
    }

    func compatible(_ a: Typed, _ b: Typed, _ l: Expr, _ r: Expr, _ op: String) throws(ExpressionError) {
        if a.type == .null || b.type == .null { return }
        switch (a.type, b.type) {
        case (.enumeration, .string): try checkMember(a.type, b, r, l)
        case (.string, .enumeration): try checkMember(b.type, a, l, r)
        case let (x, y) where x == y: return
        default:
            var hint = ""
            if (a.type == .duration && b.type == .number) || (a.type == .number && b.type == .duration) {
                hint = "; write durations with a unit (30s, 5m) or compare the _s name with a number"
            }
            throw ExpressionError(message: "'\(op)' compares \(describe(l)) (\(a.type.shortName)) with \(describe(r)) (\(b.type.shortName))\(hint)",
                                  span: Span(start: l.span.start, end: r.span.end))
        }
    }

    func binary(_ op: String, _ l: Expr, _ r: Expr, _ span: Span) throws(ExpressionError) -> Typed {
        let a = try compile(l), b = try compile(r)
        let fa = a.eval, fb = b.eval
        switch op {
        case "&&", "||":
            try requireBool(a, l, "'\(op)'")
            try requireBool(b, r, "'\(op)'")
            let isAnd = op == "&&"
            // Kleene logic: a known deciding side wins over an unknown one.
            return Typed(type: .bool, nullable: a.nullable || b.nullable, eval: { fr in
                let x = fa(fr)
                if case .bool(let bx) = x, bx != isAnd { return x }
                let y = fb(fr)
                if case .bool(let by) = y, by != isAnd { return y }
                if x == .null || y == .null { return .null }
                return .bool(isAnd)
            })
        case "==", "!=":
            try compatible(a, b, l, r, op)
            let eq = op == "=="
            // Equality is total: `power.external != true` holds when it is false or unknown.
            return Typed(type: .bool, nullable: false, eval: { fr in .bool((fa(fr) == fb(fr)) == eq) })
        case "<", "<=", ">", ">=":
            try compatible(a, b, l, r, op)
            var rank: [String: Int]?
            for (t, e) in [(a.type, l), (b.type, r)] {
                switch t {
                case .number, .duration, .null: continue
                case .enumeration(let en, let cases, let ordered):
                    guard ordered else {
                        throw ExpressionError(message: "\(describe(e)) is a \(en), which has no order; use == or in", span: e.span)
                    }
                    rank = Dictionary(uniqueKeysWithValues: cases.enumerated().map { ($1, $0) })
                case .string:
                    // A literal beside an ordered state was checked for membership by compatible().
                    if case .enumeration = (e.span == l.span ? b.type : a.type) { continue }
                    throw ExpressionError(message: "strings have no order; use == or in", span: e.span)
                default:
                    throw ExpressionError(message: "'\(op)' needs numbers, durations or an ordered state, not \(t.shortName)", span: e.span)
                }
            }
            let cmp: @Sendable (Double, Double) -> Bool
            switch op {
            case "<": cmp = { $0 < $1 }
            case "<=": cmp = { $0 <= $1 }
            case ">": cmp = { $0 > $1 }
            default: cmp = { $0 >= $1 }
            }
            let ranks = rank
            return Typed(type: .bool, nullable: true, eval: { fr in
                func num(_ v: PolicyValue) -> Double? {
                    switch v {
                    case .number(let n), .duration(let n): return n
                    case .string(let s): return ranks?[s].map(Double.init)
                    default: return nil
                    }
                }
                guard let x = num(fa(fr)), let y = num(fb(fr)) else { return .null }
                return .bool(cmp(x, y))
            })
        case "in":
            guard case .list(let elem) = b.type, case .list(let items)? = b.literal else {
                throw ExpressionError(message: "'in' needs a list on its right, e.g. [\"wifi\", \"ethernet\"]", span: r.span)
            }
            if case .list(let es, _) = r {
                for (item, expr) in zip(items, es) {
                    try compatible(a, Typed(type: elem, nullable: false, eval: { _ in item }, literal: item), l, expr, "in")
                }
            }
            let set = items
            return Typed(type: .bool, nullable: a.nullable, eval: { fr in
                let x = fa(fr)
                if x == .null { return .null }
                return .bool(set.contains(x))
            })
        default:
            throw ExpressionError(message: "unknown operator '\(op)'", span: span)
        }
    }
}

public func parseDuration(_ s: String) -> Double? {
    var lexer = Lexer(s.trimmingCharacters(in: " "))
    guard let (tok, _) = try? lexer.next(), case .duration(let d) = tok,
          let (end, _) = try? lexer.next(), end == .end else { return nil }
    return d
}

extension String {
    /// Drops a character from both ends (Foundation's version takes a CharacterSet and Foundation).
    public func trimmingCharacters(in set: Character) -> String {
        var t = Substring(self)
        while t.first == set { t.removeFirst() }
        while t.last == set { t.removeLast() }
        return String(t)
    }
}
