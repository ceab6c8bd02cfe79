import CFront

/// What the front writes, byte for byte as the CLI writes it (`out`, `err` and BgtaskJSON's quoting), each
/// message in one write(2).
struct Output {
    var bytes: [UInt8] = []

    mutating func add(_ s: StaticString) { s.withUTF8Buffer { bytes.append(contentsOf: $0) } }
    mutating func add(_ s: UnsafePointer<CChar>) {
        var i = 0
        while s[i] != 0 { bytes.append(UInt8(bitPattern: s[i])); i += 1 }
    }

    /// A JSON string's inside: `"`, `\` and control characters escaped as BgtaskJSON does; other bytes as they are.
    mutating func escaped(_ s: UnsafePointer<CChar>) {
        let hex: StaticString = "0123456789abcdef"
        var i = 0
        while s[i] != 0 {
            let b = UInt8(bitPattern: s[i])
            switch b {
            case 0x22: add("\\\"")
            case 0x5C: add("\\\\")
            case 0x0A: add("\\n")
            case 0x0D: add("\\r")
            case 0x09: add("\\t")
            case 0..<0x20:
                add("\\u00")
                bytes.append(hex.utf8Start[Int(b >> 4)])
                bytes.append(hex.utf8Start[Int(b & 0xF)])
            default: bytes.append(b)
            }
            i += 1
        }
    }

    /// Outside text for a terminal (an id bgtaskd gave, a bus library's message), shown as the CLI's `Terminal.safe`
    /// shows it: a tab as a space; a control character (C0, DEL, C1) as `\xNN`; what reorders or hides text (bidi
    /// controls, line separators, zero-width characters: BgtaskProbes' `Printable.isHidden`) as `\u{NNNN}`; a byte
    /// that is not UTF-8 as `\xNN`. An escape sequence in it can then neither move the cursor nor retitle the window.
    mutating func printable(_ s: UnsafePointer<CChar>) {
        var i = 0
        while s[i] != 0 {
            let b0 = UInt8(bitPattern: s[i])
            var v = UInt32(b0), n = 1
            if b0 >= 0xC2 && b0 <= 0xF4 {
                let more = b0 >= 0xF0 ? 3 : b0 >= 0xE0 ? 2 : 1
                var x = UInt32(b0) & (0x3F >> UInt32(more)), ok = true
                // A continuation byte is never NUL: the string's end stops this before it is passed.
                for k in 1...more {
                    let b = UInt8(bitPattern: s[i + k])
                    if b & 0xC0 != 0x80 { ok = false; break }
                    x = x << 6 | UInt32(b & 0x3F)
                }
                if ok { v = x; n = more + 1 }
            }
            if v == 0x09 {
                bytes.append(0x20)
            } else if (n == 1 && v >= 0x80) || Self.hidden(v) {
                hexEscape(v, braces: v >= 0x100)
            } else {
                for k in 0..<n { bytes.append(UInt8(bitPattern: s[i + k])) }
            }
            i += n
        }
    }

    /// BgtaskProbes' `Printable.isHidden`, by value.
    static func hidden(_ v: UInt32) -> Bool {
        v < 0x20 || v == 0x7F || (v >= 0x80 && v < 0xA0) || v == 0x061C || v == 0x200E || v == 0x200F
            || (v >= 0x202A && v <= 0x202E) || (v >= 0x2066 && v <= 0x2069) || v == 0x2028 || v == 0x2029
            || (v >= 0x200B && v <= 0x200D) || v == 0x2060 || v == 0xFEFF
    }

    /// `\xNN`, or `\u{N…}` (hex digits without leading zeros), as `Printable.escaped` writes them.
    mutating func hexEscape(_ v: UInt32, braces: Bool) {
        let hex: StaticString = "0123456789abcdef"
        add(braces ? "\\u{" : "\\x")
        var digits: [UInt8] = []
        var x = v
        repeat { digits.insert(hex.utf8Start[Int(x & 0xF)], at: 0); x >>= 4 } while x > 0
        if !braces && digits.count < 2 { digits.insert(0x30, at: 0) }
        bytes.append(contentsOf: digits)
        if braces { add("}") }
    }

    func write(to fd: Int32) {
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeBufferPointer { CFront.write(fd, $0.baseAddress! + done, bytes.count - done) }
            if n < 0 && bgt_front_errno() == EINTR { continue }
            if n <= 0 { return }
            done += n
        }
    }

    /// The id bgtaskd gave: a line, or `{"id":"…"}` with `--json`.
    static func id(_ id: UnsafePointer<CChar>, json: Bool) {
        var o = Output()
        if json { o.add("{\"id\":\""); o.escaped(id); o.add("\"}\n") } else { o.printable(id); o.add("\n") }
        o.write(to: 1)
    }

    /// `bgtask: HEAD WHY TAIL` on stderr, or `{"error":"…","exit_status":N}` with `--json`; then exits with `status`.
    static func error(_ head: StaticString, _ why: UnsafePointer<CChar>, _ tail: StaticString, status: Int32, json: Bool) -> Never {
        var o = Output()
        if json {
            o.add("{\"error\":\"")
            o.escaped(SubmitWords.c(head)); o.escaped(why); o.escaped(SubmitWords.c(tail))
            o.add("\",\"exit_status\":")
            var digits: [UInt8] = []
            var n = status
            repeat { digits.insert(UInt8(48 + n % 10), at: 0); n /= 10 } while n > 0
            o.bytes.append(contentsOf: digits)
            o.add("}\n")
        } else {
            o.add("bgtask: "); o.add(head); o.printable(why); o.add(tail); o.add("\n")
        }
        o.write(to: 2)
        exit(status)
    }
}
