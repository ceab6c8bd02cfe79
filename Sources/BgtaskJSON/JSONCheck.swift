/// JSON text checked strictly (RFC 8259: no raw control character in a string, UTF-8, numbers as the grammar
/// has them) without building a value: what a peer sent as JSON (bgtaskd's `ListPendingJSON` lines) is copied
/// to a script's input only once it is known to be JSON, and at the speed of copying it.
public enum JSONCheck {
    /// The index (from 0) of the first line of `u` that is not one JSON object, or nil when each is. Lines end at
    /// `\n`; a last line left empty by a final newline is no line.
    public static func firstBadLine(_ u: UnsafeBufferPointer<UInt8>) -> Int? {
        var c = Cursor(u: u)
        var line = 0
        while c.i < u.count {
            c.space()
            guard c.peek == UInt8(ascii: "{"), c.value(depth: 0) else { return line }
            c.space()
            if c.i < u.count {
                guard c.peek == 0x0A else { return line }
                c.i += 1
            }
            line += 1
        }
        return nil
    }

    struct Cursor {
        let u: UnsafeBufferPointer<UInt8>
        var i = 0

        var peek: UInt8 { i < u.count ? u[i] : 0 }

        /// Space within a line (a newline ends one, so it is not space here).
        mutating func space() { while i < u.count, u[i] == 0x20 || u[i] == 0x09 || u[i] == 0x0D { i += 1 } }

        mutating func eat(_ b: UInt8) -> Bool {
            guard peek == b else { return false }
            i += 1
            return true
        }

        mutating func value(depth: Int) -> Bool {
            guard depth < 128 else { return false }   // bounded, as JSONValue.parse: no stack for hostile nesting
            space()
            switch peek {
            case UInt8(ascii: "{"):
                i += 1
                space()
                if eat(UInt8(ascii: "}")) { return true }
                repeat {
                    space()
                    guard peek == UInt8(ascii: "\""), string() else { return false }
                    space()
                    guard eat(UInt8(ascii: ":")), value(depth: depth + 1) else { return false }
                    space()
                } while eat(UInt8(ascii: ","))
                return eat(UInt8(ascii: "}"))
            case UInt8(ascii: "["):
                i += 1
                space()
                if eat(UInt8(ascii: "]")) { return true }
                repeat {
                    guard value(depth: depth + 1) else { return false }
                    space()
                } while eat(UInt8(ascii: ","))
                return eat(UInt8(ascii: "]"))
            case UInt8(ascii: "\""): return string()
            case UInt8(ascii: "t"): return word("true")
            case UInt8(ascii: "f"): return word("false")
            case UInt8(ascii: "n"): return word("null")
            default: return number()
            }
        }

        mutating func word(_ w: StaticString) -> Bool {
            let n = w.utf8CodeUnitCount
            guard i + n <= u.count else { return false }
            for k in 0..<n where u[i + k] != w.utf8Start[k] { return false }
            i += n
            return true
        }

        mutating func digits() -> Bool {
            let start = i
            while i < u.count, u[i] >= 0x30, u[i] <= 0x39 { i += 1 }
            return i > start
        }

        mutating func number() -> Bool {
            _ = eat(UInt8(ascii: "-"))
            if !eat(UInt8(ascii: "0")) {
                guard peek >= 0x31, peek <= 0x39, digits() else { return false }
            }
            if eat(UInt8(ascii: ".")) { guard digits() else { return false } }
            if eat(UInt8(ascii: "e")) || eat(UInt8(ascii: "E")) {
                if !eat(UInt8(ascii: "+")) { _ = eat(UInt8(ascii: "-")) }
                guard digits() else { return false }
            }
            return true
        }

        func hex(_ b: UInt8) -> Bool { (b >= 0x30 && b <= 0x39) || (b | 0x20 >= 0x61 && b | 0x20 <= 0x66) }

        mutating func string() -> Bool {
            i += 1
            while i < u.count {
                let b = u[i]
                switch b {
                case UInt8(ascii: "\""):
                    i += 1
                    return true
                case 0..<0x20:
                    return false
                case UInt8(ascii: "\\"):
                    guard i + 1 < u.count else { return false }
                    let e = u[i + 1]
                    if e == UInt8(ascii: "u") {
                        guard i + 5 < u.count, hex(u[i + 2]), hex(u[i + 3]), hex(u[i + 4]), hex(u[i + 5]) else { return false }
                        i += 6
                    } else {
                        guard "\"\\/bfnrt".utf8.contains(e) else { return false }
                        i += 2
                    }
                case 0x80...:
                    guard utf8() else { return false }
                default:
                    i += 1
                }
            }
            return false
        }

        /// One UTF-8 sequence of two to four bytes: no overlong form, no surrogate, nothing past U+10FFFF.
        mutating func utf8() -> Bool {
            let b0 = u[i]
            let n: Int, low: UInt32
            switch b0 {
            case 0xC2...0xDF: n = 1; low = 0x80
            case 0xE0...0xEF: n = 2; low = 0x800
            case 0xF0...0xF4: n = 3; low = 0x10000
            default: return false
            }
            guard i + n < u.count else { return false }
            var v = UInt32(b0) & (0x3F >> UInt32(n))
            for k in 1...n {
                guard u[i + k] & 0xC0 == 0x80 else { return false }
                v = v << 6 | UInt32(u[i + k] & 0x3F)
            }
            guard v >= low, v <= 0x10FFFF, !(0xD800...0xDFFF).contains(v) else { return false }
            i += n + 1
            return true
        }
    }
}
