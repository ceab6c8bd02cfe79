/// A JSON value with ordered object keys and explicit nulls: `bgtask status --json` must print
/// `null` for what is unknown, never drop the key.
public indirect enum JSONValue: Sendable, Equatable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([(String, JSONValue)])

    public static func == (a: JSONValue, b: JSONValue) -> Bool {
        switch (a, b) {
        case (.null, .null): return true
        case let (.bool(x), .bool(y)): return x == y
        case let (.number(x), .number(y)): return x == y
        case let (.string(x), .string(y)): return x == y
        case let (.array(x), .array(y)): return x == y
        case let (.object(x), .object(y)): return x.count == y.count && zip(x, y).allSatisfy { $0.0 == $1.0 && $0.1 == $1.1 }
        default: return false
        }
    }

    public subscript(key: String) -> JSONValue? {
        if case .object(let kv) = self { return kv.first { $0.0 == key }?.1 }
        return nil
    }

    /// `value["battery.percent"]`-style lookup through nested objects.
    public func at(path: String) -> JSONValue? {
        path.split(separator: ".").reduce(Optional(self)) { $0?[String($1)] }
    }

    public var rendered: String {
        var out = ""
        write(to: &out)
        return out
    }

    func write(to out: inout String) {
        switch self {
        case .null: out += "null"
        case .bool(let b): out += b ? "true" : "false"
        case .number(let n): JSONValue.number(n, into: &out)
        case .string(let s): JSONValue.quote(s, into: &out)
        case .array(let a):
            out += "["
            for (i, v) in a.enumerated() { if i > 0 { out += "," }; v.write(to: &out) }
            out += "]"
        case .object(let kv):
            out += "{"
            for (i, (k, v)) in kv.enumerated() {
                if i > 0 { out += "," }
                JSONValue.quote(k, into: &out); out += ":"; v.write(to: &out)
            }
            out += "}"
        }
    }

    /// A number as JSON writes it: whole numbers without a fraction, what is not finite as null.
    public static func number(_ n: Double, into out: inout String) {
        if n.isFinite && n == n.rounded() && abs(n) < 1e15 { out += String(Int64(n)) }
        else if n.isFinite { out += String(n) }
        else { out += "null" }
    }

    /// A string as a JSON literal (`JSONBytes.string`: one escaping rule for both writers).
    public static func quote(_ s: String, into out: inout String) {
        var b = JSONBytes(capacity: s.utf8.count + 2)
        b.string(s)
        out += b.text
    }
}

/// JSON text written as bytes: what a long listing is written into. An append to a `[UInt8]` is a copy; a String's
/// small appends each check its storage and count, and were most of writing a page of 10,000 tasks.
public struct JSONBytes {
    public var bytes: [UInt8] = []
    public init(capacity: Int = 0) { bytes.reserveCapacity(capacity) }
    /// The text so far.
    public var text: String { String(decoding: bytes, as: UTF8.self) }

    public mutating func raw(_ s: StaticString) {
        s.withUTF8Buffer { bytes.append(contentsOf: $0) }
    }
    public mutating func byte(_ b: UInt8) { bytes.append(b) }

    /// A string as a JSON literal, as `JSONValue.quote` writes it.
    public mutating func string(_ s: String) {
        bytes.append(0x22)
        var text = s
        text.withUTF8 { u in
            var run = 0
            for i in 0..<u.count {
                let b = u[i]
                guard b < 0x20 || b == 0x22 || b == 0x5C else { continue }
                if run < i { bytes.append(contentsOf: UnsafeBufferPointer(rebasing: u[run..<i])) }
                switch b {
                case 0x22: raw("\\\"")
                case 0x5C: raw("\\\\")
                case 0x0A: raw("\\n")
                case 0x0D: raw("\\r")
                case 0x09: raw("\\t")
                default:
                    raw("\\u00")
                    let hex: [UInt8] = Array("0123456789abcdef".utf8)
                    bytes.append(hex[Int(b >> 4)])
                    bytes.append(hex[Int(b & 0xF)])
                }
                run = i + 1
            }
            if run < u.count { bytes.append(contentsOf: UnsafeBufferPointer(rebasing: u[run...])) }
        }
        bytes.append(0x22)
    }

    /// An object's key and its colon, after a comma unless it is the `first`.
    public mutating func key(_ k: String, first: inout Bool) {
        if !first { byte(0x2C) }
        first = false
        string(k)
        byte(0x3A)
    }

    /// A key already written as JSON with its colon (`"app":`, a literal of generated code), after a comma unless it
    /// is the `first`.
    public mutating func rawKey(_ quotedWithColon: StaticString, first: inout Bool) {
        if !first { byte(0x2C) }
        first = false
        raw(quotedWithColon)
    }

    /// A number as `JSONValue.number` writes it.
    public mutating func number(_ n: Double) {
        guard n.isFinite && n == n.rounded() && abs(n) < 1e15 else {
            var text = ""
            JSONValue.number(n, into: &text)
            bytes.append(contentsOf: text.utf8)
            return
        }
        // A whole number's digits written straight in (no String made for a count or a flag).
        if n < 0 { bytes.append(0x2D) }
        var v = UInt64(abs(n))
        let start = bytes.count
        repeat {
            bytes.append(UInt8(48 + v % 10))
            v /= 10
        } while v > 0
        bytes[start...].reverse()
    }
}

extension JSONValue {
    public init(_ v: Bool?) { self = v.map(JSONValue.bool) ?? .null }
    public init(_ v: Double?) { self = v.map(JSONValue.number) ?? .null }
    public init(_ v: Int?) { self = v.map { .number(Double($0)) } ?? .null }
    public init(_ v: String?) { self = v.map(JSONValue.string) ?? .null }
}

public struct JSONParseError: Error, Sendable, CustomStringConvertible {
    public var offset: Int
    public var message: String
    public var description: String { "\(message) at byte \(offset)" }
}

extension JSONValue {
    /// Parses one JSON document (RFC 8259). Depth is bounded so hostile input cannot exhaust the stack.
    public static func parse(_ text: String) throws(JSONParseError) -> JSONValue {
        var p = JSONReader(bytes: Array(text.utf8))
        p.skipSpace()
        let v = try p.value(depth: 0)
        p.skipSpace()
        guard p.i == p.bytes.count else { throw JSONParseError(offset: p.i, message: "unexpected text after the value") }
        return v
    }

    /// The flat condition names: from a record line's `conditions`, or by path through `status --json`.
    public func conditionPairs(names: [String]) -> [(String, JSONValue)] {
        if case .object(let flat)? = self["conditions"] { return flat }
        return names.compactMap { n in at(path: n).map { (n, $0) } }
    }
}

struct JSONReader {
    let bytes: [UInt8]
    var i = 0

    mutating func skipSpace() { while i < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[i]) { i += 1 } }

    func fail(_ m: String) -> JSONParseError { JSONParseError(offset: i, message: m) }

    mutating func value(depth: Int) throws(JSONParseError) -> JSONValue {
        guard depth < 128 else { throw fail("nested too deeply") }
        guard i < bytes.count else { throw fail("unexpected end") }
        switch bytes[i] {
        case UInt8(ascii: "{"):
            i += 1
            var kv: [(String, JSONValue)] = []
            skipSpace()
            if i < bytes.count, bytes[i] == UInt8(ascii: "}") { i += 1; return .object(kv) }
            while true {
                skipSpace()
                guard i < bytes.count, bytes[i] == UInt8(ascii: "\"") else { throw fail("expected a key") }
                let k = try string()
                skipSpace()
                guard i < bytes.count, bytes[i] == UInt8(ascii: ":") else { throw fail("expected ':'") }
                i += 1
                skipSpace()
                kv.append((k, try value(depth: depth + 1)))
                skipSpace()
                guard i < bytes.count else { throw fail("unexpected end") }
                if bytes[i] == UInt8(ascii: ",") { i += 1; continue }
                if bytes[i] == UInt8(ascii: "}") { i += 1; return .object(kv) }
                throw fail("expected ',' or '}'")
            }
        case UInt8(ascii: "["):
            i += 1
            var a: [JSONValue] = []
            skipSpace()
            if i < bytes.count, bytes[i] == UInt8(ascii: "]") { i += 1; return .array(a) }
            while true {
                skipSpace()
                a.append(try value(depth: depth + 1))
                skipSpace()
                guard i < bytes.count else { throw fail("unexpected end") }
                if bytes[i] == UInt8(ascii: ",") { i += 1; continue }
                if bytes[i] == UInt8(ascii: "]") { i += 1; return .array(a) }
                throw fail("expected ',' or ']'")
            }
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "t"): try literal("true"); return .bool(true)
        case UInt8(ascii: "f"): try literal("false"); return .bool(false)
        case UInt8(ascii: "n"): try literal("null"); return .null
        default:
            let start = i
            while i < bytes.count, "+-0123456789.eE".utf8.contains(bytes[i]) { i += 1 }
            guard i > start, let n = Double(String(decoding: bytes[start..<i], as: UTF8.self)), n.isFinite else {
                i = start
                throw fail("unexpected character")
            }
            return .number(n)
        }
    }

    mutating func literal(_ word: String) throws(JSONParseError) {
        let w = Array(word.utf8)
        guard i + w.count <= bytes.count, Array(bytes[i..<i + w.count]) == w else { throw fail("expected \(word)") }
        i += w.count
    }

    mutating func string() throws(JSONParseError) -> String {
        i += 1
        // Most strings hold no escape: made from their bytes at once, not a byte at a time.
        var end = i
        while end < bytes.count, bytes[end] != UInt8(ascii: "\""), bytes[end] != UInt8(ascii: "\\") { end += 1 }
        if end < bytes.count, bytes[end] == UInt8(ascii: "\"") {
            defer { i = end + 1 }
            return String(decoding: bytes[i..<end], as: UTF8.self)
        }
        var out = Array(bytes[i..<end])
        i = end
        while i < bytes.count {
            let c = bytes[i]
            if c == UInt8(ascii: "\"") { i += 1; return String(decoding: out, as: UTF8.self) }
            if c == UInt8(ascii: "\\") {
                i += 1
                guard i < bytes.count else { break }
                switch bytes[i] {
                case UInt8(ascii: "n"): out.append(0x0A)
                case UInt8(ascii: "t"): out.append(0x09)
                case UInt8(ascii: "r"): out.append(0x0D)
                case UInt8(ascii: "b"): out.append(0x08)
                case UInt8(ascii: "f"): out.append(0x0C)
                case UInt8(ascii: "u"):
                    guard i + 4 < bytes.count, let code = UInt32(String(decoding: bytes[i + 1...i + 4], as: UTF8.self), radix: 16) else {
                        throw fail("bad \\u escape")
                    }
                    i += 4
                    out += Array(String(Unicode.Scalar(code).map(Character.init) ?? "\u{FFFD}").utf8)
                default: out.append(bytes[i])
                }
                i += 1
                continue
            }
            out.append(c)
            i += 1
        }
        throw fail("unterminated string")
    }
}
