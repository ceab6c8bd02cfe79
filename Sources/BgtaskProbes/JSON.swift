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
        case .number(let n):
            if n.isFinite && n == n.rounded() && abs(n) < 1e15 { out += String(Int64(n)) }
            else if n.isFinite { out += String(n) }
            else { out += "null" }
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

    static func quote(_ s: String, into out: inout String) {
        out += "\""
        for u in s.unicodeScalars {
            switch u {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case let c where c.value < 0x20:
                let h = String(c.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - h.count) + h
            default: out.unicodeScalars.append(u)
            }
        }
        out += "\""
    }
}

extension JSONValue {
    public init(_ v: Bool?) { self = v.map(JSONValue.bool) ?? .null }
    public init(_ v: Double?) { self = v.map(JSONValue.number) ?? .null }
    public init(_ v: Int?) { self = v.map { .number(Double($0)) } ?? .null }
    public init(_ v: String?) { self = v.map(JSONValue.string) ?? .null }
}
