// Generates the BgtaskProtocol module's Swift from the one D-Bus interface file, at build time (the
// BgtaskProtocolPlugin runs it): the XML constant bgtaskd exports, the method, signal and error enums, and a typed
// value for every a{sv} the XML describes with annotations. A change to the XML that the daemon, the CLI or the
// library do not follow fails their build.
//
// gdbus-codegen (UPower's and power-profiles-daemon's anchor) emits C for GObject; wrapping it would bring GObject
// classes into Swift for nine methods and still leave the a{sv} keys untyped, as the XML alone does not name them.
// So this small generator, reading the same XML plus our annotations:
//   interface:  io.github.bgtask.BusName, io.github.bgtask.ObjectPath, io.github.bgtask.Error.CASE = D-Bus error name
//   arg a{sv} or aa{sv}:  io.github.bgtask.Struct = "SwiftName" (or "SwiftName strict": unknown keys refused)
//                         io.github.bgtask.Field.KEY = "SIGNATURE[!][: what it is]"  (! = always present)
//
//   bgtask-protocol-gen INPUT.xml OUTPUT.swift
//   bgtask-protocol-gen --names INPUT.xml OUTPUT.swift   (only names and typed keys: for `bgtask`'s Embedded Swift front)
import Foundation

struct Fail: Error, CustomStringConvertible { let description: String }

// MARK: A small reader for D-Bus introspection XML (elements, attributes, comments; no entities but the five).

struct Element {
    var name: String
    var attributes: [String: String]
    var children: [Element] = []
    /// The comment just before this element, as its documentation.
    var doc: String?
    subscript(_ key: String) -> String? { attributes[key] }
    var annotations: [(String, String)] {
        children.filter { $0.name == "annotation" }.compactMap { a in a["name"].flatMap { n in a["value"].map { (n, $0) } } }
    }
}

func parse(_ text: String) throws -> Element {
    let s = Array(text.unicodeScalars)
    var i = 0
    var stack: [Element] = [Element(name: "#document", attributes: [:])]
    var comment: String?
    func unescape(_ v: String) -> String {
        v.replacingOccurrences(of: "&lt;", with: "<").replacingOccurrences(of: "&gt;", with: ">")
            .replacingOccurrences(of: "&quot;", with: "\"").replacingOccurrences(of: "&apos;", with: "'")
            .replacingOccurrences(of: "&amp;", with: "&")
    }
    func line() -> Int { s[0..<min(i, s.count)].filter { $0 == "\n" }.count + 1 }
    func skip(past end: String) throws -> String {
        let e = Array(end.unicodeScalars)
        let start = i
        while i + e.count <= s.count {
            if Array(s[i..<i + e.count]) == e { i += e.count; return String(String.UnicodeScalarView(s[start..<i - e.count])) }
            i += 1
        }
        throw Fail(description: "line \(line()): no closing \(end)")
    }
    while i < s.count {
        guard s[i] == "<" else { i += 1; continue }
        let rest = String(String.UnicodeScalarView(s[i..<min(i + 9, s.count)]))
        if rest.hasPrefix("<!--") {
            i += 4
            comment = try skip(past: "-->").split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.joined(separator: " ")
                .trimmingCharacters(in: .whitespaces)
        } else if rest.hasPrefix("<?") || rest.hasPrefix("<!") {
            _ = try skip(past: ">")
        } else if rest.hasPrefix("</") {
            i += 2
            let name = try skip(past: ">").trimmingCharacters(in: .whitespaces)
            guard stack.count > 1, stack.last!.name == name else { throw Fail(description: "line \(line()): unexpected </\(name)>") }
            let done = stack.removeLast()
            stack[stack.count - 1].children.append(done)
        } else {
            i += 1
            let body = try skip(past: ">")
            let selfClosing = body.hasSuffix("/")
            let inner = selfClosing ? String(body.dropLast()) : body
            let scalars = Array(inner.unicodeScalars)
            var j = 0
            func word() -> String {
                let start = j
                while j < scalars.count, !" \t\n\r=".unicodeScalars.contains(scalars[j]) { j += 1 }
                return String(String.UnicodeScalarView(scalars[start..<j]))
            }
            func spaces() { while j < scalars.count, " \t\n\r".unicodeScalars.contains(scalars[j]) { j += 1 } }
            let name = word()
            var attributes: [String: String] = [:]
            spaces()
            while j < scalars.count {
                let key = word()
                spaces()
                guard j < scalars.count, scalars[j] == "=" else { throw Fail(description: "line \(line()): attribute \(key) of <\(name)> has no value") }
                j += 1
                spaces()
                guard j < scalars.count, scalars[j] == "\"" || scalars[j] == "'" else { throw Fail(description: "line \(line()): \(key)'s value is not quoted") }
                let quote = scalars[j]
                j += 1
                let start = j
                while j < scalars.count, scalars[j] != quote { j += 1 }
                attributes[key] = unescape(String(String.UnicodeScalarView(scalars[start..<j])))
                j += 1
                spaces()
            }
            var e = Element(name: name, attributes: attributes)
            if name == "method" || name == "signal" { e.doc = comment }
            comment = nil
            if selfClosing { stack[stack.count - 1].children.append(e) } else { stack.append(e) }
        }
    }
    guard stack.count == 1, let node = stack[0].children.first(where: { $0.name == "node" }) else { throw Fail(description: "no <node> element, or one left open") }
    return node
}

// MARK: Swift spelling

func camel(_ key: String, upper: Bool = false) -> String {
    let parts = key.split(whereSeparator: { $0 == "_" || $0 == "-" || $0 == "." })
    var out = parts.enumerated().map { n, p in n == 0 && !upper ? p.prefix(1).lowercased() + p.dropFirst() : p.prefix(1).uppercased() + p.dropFirst() }.joined()
    if ["default", "switch", "case", "return", "in", "is", "as", "self", "protocol", "enum", "struct"].contains(out) { out = "`\(out)`" }
    return out
}

func literal(_ s: String) -> String {
    "\"" + s.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\""
}

/// A signature's Swift type, how a BusValue becomes it (`v` is the value), how it becomes a BusValue (`x`),
/// and the words for a wrong type.
struct SwiftType {
    let name: String
    let decode: String
    let encode: String
    let words: String
}

func swiftType(_ sig: String) throws -> SwiftType {
    switch sig {
    case "s": return SwiftType(name: "String", decode: "v.string", encode: ".string(x)", words: "a string")
    case "b": return SwiftType(name: "Bool", decode: "v.bool", encode: ".bool(x)", words: "a boolean")
    case "d": return SwiftType(name: "Double", decode: "v.number.flatMap { $0.isFinite ? $0 : nil }", encode: ".double(x)", words: "a number")
    case "u": return SwiftType(name: "UInt32", decode: "v.wholeUInt32", encode: ".uint32(x)", words: "a whole number from 0 to 4294967295")
    case "t": return SwiftType(name: "UInt64", decode: "v.wholeUInt64", encode: ".uint64(x)", words: "a whole number from 0")
    case "x": return SwiftType(name: "Int64", decode: "v.wholeInt64", encode: ".int64(x)", words: "a whole number")
    case "as": return SwiftType(name: "[String]", decode: "v.strings", encode: ".strings(x)", words: "a list of strings")
    case "a{sv}": return SwiftType(name: "[String: BusValue]", decode: "{ if case .dict(let d) = v { return d }; return nil }()", encode: ".dict(x)", words: "a dictionary (a{sv})")
    case "aa{sv}": return SwiftType(name: "[[String: BusValue]]", decode: "{ if case .dicts(let d) = v { return d }; return nil }()", encode: ".dicts(x)", words: "a list of dictionaries (aa{sv})")
    default: throw Fail(description: "signature \(sig) has no Swift type here (s b d u t x as a{sv} aa{sv})")
    }
}

struct Field {
    let key: String
    let type: SwiftType
    let signature: String
    let required: Bool
    let doc: String?
}

func fields(of arg: Element, where context: String) throws -> [Field] {
    try arg.annotations.filter { $0.0.hasPrefix("io.github.bgtask.Field.") }.map { name, value in
        let key = String(name.dropFirst("io.github.bgtask.Field.".count))
        guard !key.isEmpty, key.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "_" }) else { throw Fail(description: "\(context): field name '\(key)'") }
        var spec = value
        var doc: String?
        if let colon = value.firstIndex(of: ":") {
            spec = String(value[..<colon])
            doc = value[value.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        spec = spec.trimmingCharacters(in: .whitespaces)
        let required = spec.hasSuffix("!")
        if required { spec.removeLast() }
        return Field(key: key, type: try swiftType(spec), signature: spec, required: required, doc: doc)
    }
}

// MARK: Output

/// The one interface, its name, and the bus name and object path its annotations give.
func interface(of node: Element) throws -> (Element, String, String, String) {
    guard let iface = node.children.first(where: { $0.name == "interface" }), let ifaceName = iface["name"] else { throw Fail(description: "no <interface name=…>") }
    let annotations = Dictionary(iface.annotations, uniquingKeysWith: { a, _ in a })
    guard let busName = annotations["io.github.bgtask.BusName"], let path = annotations["io.github.bgtask.ObjectPath"] else {
        throw Fail(description: "the interface needs the annotations io.github.bgtask.BusName and io.github.bgtask.ObjectPath")
    }
    return (iface, ifaceName, busName, path)
}

/// Keys that hold seconds since the epoch, wherever they are (`--json` gives each an `_iso` twin): the interface's
/// and the audit trail's. Emitted as `BusValue.timeKeys`.
let timeKeys: Set<String> = ["submitted", "earliest", "next_check", "next_run", "started", "time", "last_run", "likely_start"]

func generate(_ node: Element, source: String, xml: String) throws -> String {
    let (iface, ifaceName, busName, path) = try interface(of: node)
    var o = "// Generated by bgtask-protocol-gen from \(source) at build time: edit the XML, not this.\n"
    o += "import BgtaskBus\nimport BgtaskJSON\n\n"
    o += "/// The scheduler's name on the session bus, its object and interface, and the interface as bgtaskd exports it.\n"
    o += "public enum SchedulerBus {\n"
    o += "    public static let name = \(literal(busName))\n    public static let path = \(literal(path))\n    public static let interface = \(literal(ifaceName))\n"
    o += "    public static let xml = #\"\"\"\n\(xml.hasSuffix("\n") ? String(xml.dropLast()) : xml)\n\"\"\"#\n}\n\n"
    o += "extension BusValue {\n"
    o += "    /// Keys that hold seconds since the epoch: each gets an ISO-8601 twin (`submitted_iso`) in local time.\n"
    o += "    public static let timeKeys: Set<String> = [\(timeKeys.sorted().map(literal).joined(separator: ", "))]\n}\n\n"

    // Errors
    let errors = iface.annotations.filter { $0.0.hasPrefix("io.github.bgtask.Error.") }
    guard !errors.isEmpty else { throw Fail(description: "no io.github.bgtask.Error.* annotations") }
    o += "/// Every error a caller can get from bgtaskd, by its D-Bus name.\npublic enum SchedulerError: String, CaseIterable, Sendable {\n"
    for (n, v) in errors { o += "    case \(camel(String(n.dropFirst("io.github.bgtask.Error.".count)))) = \(literal(v))\n" }
    o += "    /// This error with a message, as a method handler returns it.\n"
    o += "    public func callAsFunction(_ message: String) -> BusError { BusError(rawValue, message) }\n"
    o += "}\n\n"

    // Methods and signals
    func members(_ kind: String, _ typeName: String, _ what: String) throws -> String {
        let list = iface.children.filter { $0.name == kind }
        var s = "/// The interface's \(what), with their argument signatures.\npublic enum \(typeName): String, CaseIterable, Sendable {\n"
        for m in list {
            guard let name = m["name"] else { throw Fail(description: "a <\(kind)> without a name") }
            if let d = m.doc { s += "    /// \(d)\n" }
            s += "    case \(camel(name)) = \(literal(name))\n"
        }
        func sig(_ m: Element, _ direction: String) -> String {
            "(" + m.children.filter { $0.name == "arg" && ($0["direction"] ?? (kind == "signal" ? "out" : "in")) == direction }.compactMap { $0["type"] }.joined() + ")"
        }
        s += "    /// The arguments' signature\(kind == "method" ? " a caller sends" : ""), such as `(a{sv}as)`.\n"
        s += "    public var signature: String {\n        switch self {\n"
        for m in list { s += "        case .\(camel(m["name"]!)): return \(literal(sig(m, kind == "signal" ? "out" : "in")))\n" }
        s += "        }\n    }\n"
        if kind == "method" {
            s += "    /// The reply's signature.\n    public var replySignature: String {\n        switch self {\n"
            for m in list { s += "        case .\(camel(m["name"]!)): return \(literal(sig(m, "out")))\n" }
            s += "        }\n    }\n"
        }
        return s + "}\n\n"
    }
    o += try members("method", "SchedulerMethod", "methods")
    o += try members("signal", "SchedulerSignal", "signals")

    // Typed dictionaries
    var seen: Set<String> = []
    for m in iface.children where m.name == "method" || m.name == "signal" {
        for arg in m.children where arg.name == "arg" {
            let context = "\(m["name"] ?? "?")(\(arg["name"] ?? "?"))"
            guard let spec = arg.annotations.first(where: { $0.0 == "io.github.bgtask.Struct" })?.1 else {
                if arg["type"] == "a{sv}" || arg["type"] == "aa{sv}" { throw Fail(description: "\(context) is \(arg["type"]!) without io.github.bgtask.Struct: name its keys") }
                continue
            }
            guard arg["type"] == "a{sv}" || arg["type"] == "aa{sv}" else { throw Fail(description: "\(context): io.github.bgtask.Struct is for a{sv} and aa{sv}") }
            let words = spec.split(separator: " ").map(String.init)
            let name = words[0], strict = words.contains("strict")
            let fs = try fields(of: arg, where: context)
            // A name already described, given again without fields, is the same value (ConditionsChanged's).
            if seen.contains(name) && fs.isEmpty { continue }
            guard seen.insert(name).inserted, !fs.isEmpty else { throw Fail(description: "\(context): \(name) is described twice, or has no fields") }
            guard Set(fs.map(\.key)).count == fs.count else { throw Fail(description: "\(context): a key is described twice") }
            o += "/// \(arg["type"] == "aa{sv}" ? "Each item of" : "The") `\(arg["name"] ?? "")` of \(m["name"]!)\(strict ? "; other keys are refused" : "").\n"
            o += "public struct \(name): Sendable, Equatable {\n"
            o += "    /// Its keys, as on the bus.\n    public static let keys: [String] = [\(fs.map { literal($0.key) }.joined(separator: ", "))]\n"
            for f in fs {
                o += "    /// `\(f.key)` (\(f.signature))\(f.doc.map { ": \($0)" } ?? "")\n"
                o += "    public var \(camel(f.key)): \(f.type.name)\(f.required ? "" : "?")\n"
            }
            let params = fs.filter(\.required).map { "\(camel($0.key)): \($0.type.name)" } + fs.filter { !$0.required }.map { "\(camel($0.key)): \($0.type.name)? = nil" }
            o += "\n    public init(\(params.joined(separator: ", "))) {\n"
            for f in fs { o += "        self.\(camel(f.key)) = \(camel(f.key))\n" }
            o += "    }\n\n"
            o += "    /// Reads it from the bus: a key of the wrong type\(strict ? " or an unknown one" : "") is an error naming it; a missing required key too.\n"
            o += "    public init(variant d: [String: BusValue]) throws(ProtocolError) {\n"
            if strict {
                o += "        if let k = d.keys.sorted().first(where: { !Self.keys.contains($0) }) {\n"
                o += "            throw ProtocolError(key: k, \"unknown key '\\(k)' in \(m["name"]!)'s \(arg["name"] ?? "argument") (known: \\(Self.keys.joined(separator: \", \")))\")\n        }\n"
            }
            for f in fs {
                let doc = f.doc.map { ": " + $0 } ?? ""
                o += "        if let v = d[\(literal(f.key))] {\n"
                o += "            guard let x = (\(f.type.decode)) else { throw ProtocolError(key: \(literal(f.key)), \(literal("\(f.key) must be \(f.type.words)\(doc)"))) }\n"
                o += "            self.\(camel(f.key)) = x\n"
                if f.required {
                    o += "        } else {\n            throw ProtocolError(key: \(literal(f.key)), \(literal("\(f.key) (\(f.signature)) is required"))) \n        }\n"
                } else {
                    o += "        } else {\n            self.\(camel(f.key)) = nil\n        }\n"
                }
            }
            o += "    }\n\n"
            o += "    /// As it goes on the bus (absent keys left out).\n    public var variant: [String: BusValue] {\n        var d: [String: BusValue] = [:]\n"
            for f in fs {
                if f.required { o += "        do { let x = \(camel(f.key)); d[\(literal(f.key))] = \(f.type.encode) }\n" }
                else { o += "        if let x = \(camel(f.key)) { d[\(literal(f.key))] = \(f.type.encode) }\n" }
            }
            o += "        return d\n    }\n\n"
            // The same keys in sorted order, with no dictionary between: what `--json` writes, at listing speed.
            o += "    /// Its keys and values in sorted key order (absent keys left out), as `--json` writes them, one call each.\n"
            o += "    public func forEachEntry(_ body: (String, BusValue) -> Void) {\n"
            for f in fs.sorted(by: { $0.key < $1.key }) {
                if f.required { o += "        do { let x = \(camel(f.key)); body(\(literal(f.key)), \(f.type.encode)) }\n" }
                else { o += "        if let x = \(camel(f.key)) { body(\(literal(f.key)), \(f.type.encode)) }\n" }
            }
            o += "    }\n\n"
            // The same, written straight as JSON by each field's type: a listing of 100,000 writes this per task.
            o += "    /// Written as `--json` writes it (what `BusValue.dict(variant).json.rendered` is), each field by its type, with\n"
            o += "    /// no `BusValue` made for a string, a flag or a number; a list already written copied (`lists`).\n"
            o += "    public func writeJSON(into out: inout JSONBytes, iso: inout (second: Double, text: String), lists: inout BusValue.SharedLists) {\n"
            o += "        out.byte(0x7B)\n        var first = true\n"
            for f in fs.sorted(by: { $0.key < $1.key }) {
                // The key as JSON with its colon, a literal written as it is: `fields(of:)` let through only letters,
                // digits and _, so there is nothing to escape if they are ASCII.
                guard f.key.allSatisfy(\.isASCII) else { throw Fail(description: "\(context): key '\(f.key)' is not ASCII") }
                let name = "out.rawKey(\(literal("\"\(f.key)\":")), first: &first); "
                let write: String
                switch f.type.name {
                case "String": write = name + "out.string(x)"
                case "Bool": write = name + "if x { out.raw(\"true\") } else { out.raw(\"false\") }"
                // A time and its ISO twin, the twin's key written as a literal too (no set asked per task).
                case "Double" where timeKeys.contains(f.key):
                    write = name + "BusValue.writeJSON(time: x, isoKey: \(literal(",\"\(f.key)_iso\":")), into: &out, iso: &iso)"
                case "Double": write = name + "out.number(x)"
                case "UInt32", "UInt64", "Int64":
                    guard !timeKeys.contains(f.key) else { throw Fail(description: "\(context): key '\(f.key)' holds a time but is not a double") }
                    write = name + "out.number(Double(x))"
                case "[[String: BusValue]]": write = name + "BusValue.writeJSON(list: x, into: &out, iso: &iso, lists: &lists)"
                default: write = name + "BusValue\(f.type.encode).writeJSON(into: &out, iso: &iso)"
                }
                if f.required { o += "        do { let x = \(camel(f.key)); \(write) }\n" }
                else { o += "        if let x = \(camel(f.key)) { \(write) }\n" }
            }
            o += "        out.byte(0x7D)\n    }\n\n"
            o += "    /// The same as a list.\n"
            o += "    public var entries: [(key: String, value: BusValue)] {\n"
            o += "        var e: [(key: String, value: BusValue)] = []\n        forEachEntry { e.append(($0, $1)) }\n        return e\n    }\n}\n\n"
        }
    }
    return o
}

/// The names only, for code built as Embedded Swift (no `BusValue`, no existentials): the bus name, object path and
/// interface, each method's name and signatures, each error's name, and every a{sv} key typed by its signature
/// (`Key<Bool>`), so a key whose type the XML changes no longer compiles where it is appended.
func generateNames(_ node: Element, source: String) throws -> String {
    let (iface, ifaceName, busName, path) = try interface(of: node)
    var o = "// Generated by bgtask-protocol-gen --names from \(source) at build time: edit the XML, not this.\n\n"
    o += "/// An a{sv} key and the Swift type of its value.\nstruct Key<Value> {\n    let name: StaticString\n    let signature: StaticString\n}\n\n"
    o += "/// The scheduler's names on the session bus.\nenum SchedulerNames {\n"
    o += "    static let bus: StaticString = \(literal(busName))\n    static let path: StaticString = \(literal(path))\n    static let interface: StaticString = \(literal(ifaceName))\n"
    o += "}\n\n"
    let errors = iface.annotations.filter { $0.0.hasPrefix("io.github.bgtask.Error.") }
    o += "/// Every error's D-Bus name.\nenum SchedulerErrorNames {\n"
    for (n, v) in errors { o += "    static let \(camel(String(n.dropFirst("io.github.bgtask.Error.".count)))): StaticString = \(literal(v))\n" }
    o += "}\n\n"
    o += "/// Each method: its name, the signature a caller sends and the reply's.\nenum SchedulerMethods {\n"
    for m in iface.children where m.name == "method" {
        guard let name = m["name"] else { throw Fail(description: "a <method> without a name") }
        func sig(_ direction: String) -> String {
            m.children.filter { $0.name == "arg" && ($0["direction"] ?? "in") == direction }.compactMap { $0["type"] }.joined()
        }
        o += "    enum \(camel(name, upper: true)) {\n        static let name: StaticString = \(literal(name))\n"
        o += "        static let signature: StaticString = \(literal(sig("in")))\n        static let replySignature: StaticString = \(literal(sig("out")))\n    }\n"
    }
    o += "}\n\n"
    var seen: Set<String> = []
    for m in iface.children where m.name == "method" {
        for arg in m.children where arg.name == "arg" && (arg["direction"] ?? "in") == "in" {
            guard let spec = arg.annotations.first(where: { $0.0 == "io.github.bgtask.Struct" })?.1 else { continue }
            let name = String(spec.split(separator: " ")[0])
            guard seen.insert(name).inserted else { continue }
            o += "/// The keys of \(m["name"]!)'s `\(arg["name"] ?? "")`.\nenum \(name)Keys {\n"
            for f in try fields(of: arg, where: name) {
                let t = f.type.name.contains("BusValue") ? "Never" : f.type.name
                o += "    static let \(camel(f.key)) = Key<\(t)>(name: \(literal(f.key)), signature: \(literal(f.signature)))\n"
            }
            o += "}\n\n"
        }
    }
    return o
}

var args = CommandLine.arguments
let namesOnly = args.count > 1 && args[1] == "--names"
if namesOnly { args.remove(at: 1) }
guard args.count == 3 else {
    FileHandle.standardError.write("usage: bgtask-protocol-gen [--names] INPUT.xml OUTPUT.swift\n".data(using: .utf8)!)
    exit(2)
}
do {
    let xml = try String(contentsOfFile: args[1], encoding: .utf8)
    let source = "data/" + (args[1] as NSString).lastPathComponent
    let out = namesOnly ? try generateNames(try parse(xml), source: source) : try generate(try parse(xml), source: source, xml: xml)
    // Written only when it changed: an unchanged file keeps its dependents built.
    if (try? String(contentsOfFile: args[2], encoding: .utf8)) != out { try out.write(toFile: args[2], atomically: true, encoding: .utf8) }
} catch {
    FileHandle.standardError.write("\(args[1]): error: \(error)\n".data(using: .utf8)!)
    exit(1)
}
