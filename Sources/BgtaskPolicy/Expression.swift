/// A span of an expression's text, in characters from its start.
public struct Span: Sendable, Equatable {
    public var start: Int
    public var end: Int
}

/// An error inside an expression; the loader turns the span into file:line:column.
public struct ExpressionError: Error, Sendable, Equatable {
    public var message: String
    public var span: Span
}

enum Token: Equatable {
    case name(String)
    case string(String)
    case number(Double)
    case duration(Double)
    case keyword(String)      // true false null in
    case op(String)           // ! && || == != < <= > >= ( ) [ ] , -
    case end
}

struct Lexer {
    let chars: [Character]
    var pos = 0

    init(_ text: String) { chars = Array(text) }

    static let units: [(String, Double)] = [("ms", 0.001), ("s", 1), ("m", 60), ("h", 3600), ("d", 86_400)]

    mutating func next() throws(ExpressionError) -> (Token, Span) {
        while pos < chars.count, chars[pos].isWhitespace { pos += 1 }
        let start = pos
        guard pos < chars.count else { return (.end, Span(start: pos, end: pos)) }
        let c = chars[pos]
        func span() -> Span { Span(start: start, end: pos) }
        if c.isLetter || c == "_" {
            while pos < chars.count, chars[pos].isLetter || chars[pos].isNumber || chars[pos] == "_" || chars[pos] == "." { pos += 1 }
            let word = String(chars[start..<pos])
            if word.hasSuffix(".") || word.contains("..") {
                throw ExpressionError(message: "'\(word)' is not a name", span: span())
            }
            if ["true", "false", "null", "in"].contains(word) { return (.keyword(word), span()) }
            return (.name(word), span())
        }
        if c.isNumber {
            // A number, or a duration such as 30s, 1h30m, 250ms.
            var total = 0.0
            var sawUnit = false
            while pos < chars.count, chars[pos].isNumber {
                let numStart = pos
                while pos < chars.count, chars[pos].isNumber || chars[pos] == "." { pos += 1 }
                guard let n = Double(String(chars[numStart..<pos])) else {
                    throw ExpressionError(message: "'\(String(chars[numStart..<pos]))' is not a number", span: span())
                }
                var unitEnd = pos
                while unitEnd < chars.count, chars[unitEnd].isLetter { unitEnd += 1 }
                let unit = String(chars[pos..<unitEnd])
                if unit.isEmpty {
                    if sawUnit { throw ExpressionError(message: "a duration needs a unit after every number (s, m, h, d, ms)", span: span()) }
                    return (.number(n), span())
                }
                guard let scale = Lexer.units.first(where: { $0.0 == unit })?.1 else {
                    pos = unitEnd
                    throw ExpressionError(message: "'\(unit)' is not a duration unit (ms, s, m, h, d)", span: span())
                }
                pos = unitEnd
                total += n * scale
                sawUnit = true
            }
            guard total.isFinite, total <= maxDuration else {
                throw ExpressionError(message: "duration too long: at most 3650d", span: span())
            }
            return (.duration(total), span())
        }
        if c == "\"" || c == "'" {
            pos += 1
            var s = ""
            while pos < chars.count, chars[pos] != c {
                if chars[pos] == "\\", pos + 1 < chars.count {
                    pos += 1
                    switch chars[pos] { case "n": s.append("\n"); case "t": s.append("\t"); default: s.append(chars[pos]) }
                } else { s.append(chars[pos]) }
                pos += 1
            }
            guard pos < chars.count else { throw ExpressionError(message: "unterminated string", span: span()) }
            pos += 1
            return (.string(s), span())
        }
        let two = pos + 1 < chars.count ? String(chars[pos...pos + 1]) : ""
        if ["&&", "||", "==", "!=", "<=", ">="].contains(two) {
            pos += 2
            return (.op(two), span())
        }
        if "!<>()[],-".contains(c) {
            pos += 1
            return (.op(String(c)), span())
        }
        if c == "=" {
            pos += 1
            throw ExpressionError(message: "'=' is not an operator; compare with '=='", span: span())
        }
        if c == "&" || c == "|" {
            pos += 1
            throw ExpressionError(message: "'\(c)' is not an operator; use '\(c)\(c)'", span: span())
        }
        pos += 1
        throw ExpressionError(message: "unexpected character '\(c)'", span: span())
    }
}

public indirect enum Expr: Sendable {
    case literal(PolicyValue, Span)
    case name(String, Span)
    case not(Expr, Span)
    case negate(Expr, Span)
    case binary(String, Expr, Expr, Span)
    case list([Expr], Span)
    case call(String, [Expr], Span)

    public var span: Span {
        switch self {
        case .literal(_, let s), .name(_, let s), .not(_, let s), .negate(_, let s), .binary(_, _, _, let s),
             .list(_, let s), .call(_, _, let s): return s
        }
    }

    /// Names read anywhere in this expression, in order of appearance.
    public var names: [String] {
        switch self {
        case .literal: return []
        case .name(let n, _): return [n]
        case .not(let e, _), .negate(let e, _): return e.names
        case .binary(_, let a, let b, _): return a.names + b.names
        case .list(let es, _), .call(_, let es, _): return es.flatMap(\.names)
        }
    }

    /// `a && b && c` as [a, b, c]: explain reports which of them failed.
    public var conjuncts: [Expr] {
        if case .binary("&&", let a, let b, _) = self { return a.conjuncts + b.conjuncts }
        return [self]
    }
}

/// Recursive descent, CEL's precedence: `||` < `&&` < comparisons and `in` < unary `!` `-` < primary.
/// Bounded, so no expression can exhaust the stack of the parser, the type checker or the evaluator
/// (all recursive): at most `maxOperators` operators and `maxDepth` levels of nesting.
struct Parser {
    var lexer: Lexer
    var token: Token = .end
    var span = Span(start: 0, end: 0)
    var depth = 0
    var operators = 0

    static let maxOperators = 256
    static let maxDepth = 64
    static let maxLength = 8192

    static func parse(_ text: String) throws(ExpressionError) -> Expr {
        if text.count > maxLength {
            throw ExpressionError(message: "expression too long: \(text.count) characters, at most \(maxLength)", span: Span(start: 0, end: 1))
        }
        var p = Parser(lexer: Lexer(text))
        try p.advance()
        if p.token == .end { throw ExpressionError(message: "empty expression", span: p.span) }
        let e = try p.or()
        guard p.token == .end else { throw ExpressionError(message: "unexpected \(p.describe(p.token)) after a complete expression", span: p.span) }
        return e
    }

    mutating func advance() throws(ExpressionError) { (token, span) = try lexer.next() }

    /// Counts an operator; past the bound, a clear error instead of a stack overflow later.
    mutating func countOperator() throws(ExpressionError) {
        operators += 1
        if operators > Parser.maxOperators {
            throw ExpressionError(message: "expression too complex: more than \(Parser.maxOperators) operators; split it into several rules", span: span)
        }
    }

    mutating func enter() throws(ExpressionError) {
        depth += 1
        if depth > Parser.maxDepth { throw ExpressionError(message: "expression nested too deeply (more than \(Parser.maxDepth) levels)", span: span) }
    }

    func describe(_ t: Token) -> String {
        switch t {
        case .name(let n): return "'\(n)'"
        case .string(let s): return "\"\(s)\""
        case .number(let n): return formatNumber(n)
        case .duration(let d): return formatDuration(d)
        case .keyword(let k): return "'\(k)'"
        case .op(let o): return "'\(o)'"
        case .end: return "end of expression"
        }
    }

    mutating func expect(_ op: String) throws(ExpressionError) {
        guard token == .op(op) else { throw ExpressionError(message: "expected '\(op)', found \(describe(token))", span: span) }
        try advance()
    }

    mutating func or() throws(ExpressionError) -> Expr {
        var left = try and()
        while token == .op("||") {
            try countOperator()
            try advance()
            let right = try and()
            left = .binary("||", left, right, Span(start: left.span.start, end: right.span.end))
        }
        return left
    }

    mutating func and() throws(ExpressionError) -> Expr {
        var left = try comparison()
        while token == .op("&&") {
            try countOperator()
            try advance()
            let right = try comparison()
            left = .binary("&&", left, right, Span(start: left.span.start, end: right.span.end))
        }
        return left
    }

    static let comparisons: Set<String> = ["==", "!=", "<", "<=", ">", ">="]

    mutating func comparison() throws(ExpressionError) -> Expr {
        let left = try unary()
        var op: String?
        if case .op(let o) = token, Parser.comparisons.contains(o) { op = o }
        if token == .keyword("in") { op = "in" }
        guard let o = op else { return left }
        try countOperator()
        try advance()
        let right = try unary()
        if case .op(let o2) = token, Parser.comparisons.contains(o2) {
            throw ExpressionError(message: "comparisons do not chain; join them with '&&'", span: span)
        }
        return .binary(o, left, right, Span(start: left.span.start, end: right.span.end))
    }

    mutating func unary() throws(ExpressionError) -> Expr {
        let start = span.start
        if token == .op("!") || token == .op("-") {
            try countOperator()
            try enter()
        }
        if token == .op("!") {
            defer { depth -= 1 }
            try advance()
            let e = try unary()
            return .not(e, Span(start: start, end: e.span.end))
        }
        if token == .op("-") {
            defer { depth -= 1 }
            try advance()
            let e = try unary()
            return .negate(e, Span(start: start, end: e.span.end))
        }
        return try primary()
    }

    mutating func primary() throws(ExpressionError) -> Expr {
        try enter()
        defer { depth -= 1 }
        let s = span
        switch token {
        case .string(let v): try advance(); return .literal(.string(v), s)
        case .number(let v): try advance(); return .literal(.number(v), s)
        case .duration(let v): try advance(); return .literal(.duration(v), s)
        case .keyword("true"): try advance(); return .literal(.bool(true), s)
        case .keyword("false"): try advance(); return .literal(.bool(false), s)
        case .keyword("null"): try advance(); return .literal(.null, s)
        case .name(let n):
            try advance()
            if token == .op("(") {
                try advance()
                var args: [Expr] = []
                if token != .op(")") {
                    args.append(try or())
                    while token == .op(",") { try advance(); args.append(try or()) }
                }
                let end = span.end
                try expect(")")
                return .call(n, args, Span(start: s.start, end: end))
            }
            return .name(n, s)
        case .op("("):
            try advance()
            let e = try or()
            try expect(")")
            return e
        case .op("["):
            try advance()
            var items: [Expr] = []
            if token != .op("]") {
                items.append(try or())
                while token == .op(",") { try advance(); items.append(try or()) }
            }
            let end = span.end
            try expect("]")
            return .list(items, Span(start: s.start, end: end))
        default:
            throw ExpressionError(message: "expected a value, a name or '(', found \(describe(token))", span: s)
        }
    }
}
