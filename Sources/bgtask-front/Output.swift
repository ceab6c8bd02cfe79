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

    /// Outside text for a terminal: a control character shown as `?` (the only such text here is a bus library's
    /// message; the CLI's `Terminal.safe` would escape it).
    mutating func printable(_ s: UnsafePointer<CChar>) {
        var i = 0
        while s[i] != 0 {
            let b = UInt8(bitPattern: s[i])
            bytes.append(b < 0x20 || b == 0x7F ? 0x3F : b)
            i += 1
        }
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
        if json { o.add("{\"id\":\""); o.escaped(id); o.add("\"}\n") } else { o.add(id); o.add("\n") }
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
