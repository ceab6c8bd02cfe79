import BgtaskBus
import BgtaskJSON

extension BusValue {
    /// The value as `--json` prints it: a dictionary's keys sorted, each time followed by its `_iso` twin.
    /// The CLI and bgtaskd (`ListPendingJSON`) both write with it, so a row reads the same whichever made it.
    public var json: JSONValue {
        switch self {
        case .string(let s): return .string(s)
        case .bool(let b): return .bool(b)
        case .int64, .uint64, .uint32, .int32, .byte, .double: return .number(number ?? 0)
        case .strings(let a): return .array(a.map { .string($0) })
        // The interface's bytes are text (a page of JSON lines).
        case .bytes(let b): return .string(String(decoding: b, as: UTF8.self))
        case .dict(let d):
            var fields: [(String, JSONValue)] = []
            fields.reserveCapacity(d.count + 2)
            for (k, v) in d.sorted(by: { $0.key < $1.key }) {
                fields.append((k, v.json))
                if BusValue.timeKeys.contains(k), let t = v.number { fields.append((k + "_iso", .string(isoText(t)))) }
            }
            return .object(fields)
        case .dicts(let ds): return .array(ds.map { BusValue.dict($0).json })
        case .tuple(let members), .array(_, let members): return .array(members.map(\.json))
        case .variant(let inner): return inner.json
        }
    }

    /// `json.rendered`, written straight from the value as bytes (no tree of JSON values in between): what bgtaskd
    /// writes for each task of a `ListPendingJSON` page. `iso` keeps the last time's text, as tasks listed together
    /// were mostly submitted in the same second.
    public func writeJSON(into out: inout JSONBytes, iso: inout (second: Double, text: String)) {
        switch self {
        case .string(let s): out.string(s)
        case .bool(let b): if b { out.raw("true") } else { out.raw("false") }
        case .int64, .uint64, .uint32, .int32, .byte, .double: out.number(number ?? 0)
        case .strings(let a):
            out.byte(0x5B)
            for (i, s) in a.enumerated() { if i > 0 { out.byte(0x2C) }; out.string(s) }
            out.byte(0x5D)
        case .bytes(let b): out.string(String(decoding: b, as: UTF8.self))
        case .dict(let d):
            BusValue.writeJSON(entries: d.sorted(by: { $0.key < $1.key }).map { (key: $0.key, value: $0.value) }, into: &out, iso: &iso)
        case .dicts(let ds):
            out.byte(0x5B)
            for (i, d) in ds.enumerated() { if i > 0 { out.byte(0x2C) }; BusValue.dict(d).writeJSON(into: &out, iso: &iso) }
            out.byte(0x5D)
        case .tuple(let members), .array(_, let members):
            out.byte(0x5B)
            for (i, m) in members.enumerated() { if i > 0 { out.byte(0x2C) }; m.writeJSON(into: &out, iso: &iso) }
            out.byte(0x5D)
        case .variant(let inner): inner.writeJSON(into: &out, iso: &iso)
        }
    }

    /// An object of `entries`, already in sorted key order (a dictionary's, sorted), as `json.rendered` writes it.
    public static func writeJSON(entries: [(key: String, value: BusValue)], into out: inout JSONBytes, iso: inout (second: Double, text: String)) {
        out.byte(0x7B)
        var first = true
        for (k, v) in entries {
            out.key(k, first: &first)
            switch v {
            case .int64, .uint64, .uint32, .int32, .byte, .double: writeJSON(number: v.number ?? 0, key: k, into: &out, iso: &iso)
            default: v.writeJSON(into: &out, iso: &iso)
            }
        }
        out.byte(0x7D)
    }

    /// The list of dictionaries written last, and its bytes. A page's resting tasks share their group's `unmet` list
    /// (one array storage), so it is rendered once and its bytes copied. The list is held: while it is, no other
    /// list can have its storage's address.
    public struct SharedLists {
        var last: (list: [[String: BusValue]], bytes: [UInt8])?
        public init() {}
    }

    /// A number under `key`, and its `_iso` twin after it when `key` holds a time (as `json` gives it one).
    public static func writeJSON(number t: Double, key: String, into out: inout JSONBytes, iso: inout (second: Double, text: String)) {
        out.number(t)
        guard timeKeys.contains(key) else { return }
        out.byte(0x2C)
        out.string(key + "_iso")
        out.byte(0x3A)
        out.string(isoTwin(t, cached: &iso))
    }

    /// A time, and its `_iso` twin after it under `isoKey` (`,"submitted_iso":`, as written).
    public static func writeJSON(time t: Double, isoKey: StaticString, into out: inout JSONBytes, iso: inout (second: Double, text: String)) {
        out.number(t)
        out.raw(isoKey)
        out.string(isoTwin(t, cached: &iso))
    }

    /// `isoText(t)`, made again only when the second differs from the last one's: a page's times are mostly close.
    static func isoTwin(_ t: Double, cached iso: inout (second: Double, text: String)) -> String {
        let second = t.rounded(.down)
        if iso.second != second { iso = (second, isoText(t)) }
        return iso.text
    }

    /// A list of dictionaries, copied from `lists` when the same list (its storage) was written last.
    public static func writeJSON(list ds: [[String: BusValue]], into out: inout JSONBytes, iso: inout (second: Double, text: String),
                                 lists: inout SharedLists) {
        func storage(_ a: [[String: BusValue]]) -> UnsafeRawPointer? { a.withUnsafeBufferPointer { $0.baseAddress.map(UnsafeRawPointer.init) } }
        guard let here = storage(ds) else {
            BusValue.dicts(ds).writeJSON(into: &out, iso: &iso)
            return
        }
        if let last = lists.last, storage(last.list) == here {
            out.bytes.append(contentsOf: last.bytes)
            return
        }
        var list = JSONBytes()
        BusValue.dicts(ds).writeJSON(into: &list, iso: &iso)
        out.bytes.append(contentsOf: list.bytes)
        lists.last = (ds, list.bytes)
    }
}
