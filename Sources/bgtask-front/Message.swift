import CFront

/// A D-Bus message as bytes, little-endian (D-Bus specification, "Message Format"): the values the front sends,
/// each aligned as its type requires, and the reply's header read back.
struct Message {
    var bytes: [UInt8] = []

    mutating func pad(_ n: Int) { while bytes.count % n != 0 { bytes.append(0) } }
    mutating func u32(_ v: UInt32) {
        pad(4)
        for k in 0..<4 { bytes.append(UInt8(truncatingIfNeeded: v >> (8 * UInt32(k)))) }
    }
    mutating func set32(_ v: UInt32, at i: Int) {
        for k in 0..<4 { bytes[i + k] = UInt8(truncatingIfNeeded: v >> (8 * UInt32(k))) }
    }
    /// A string or an object path: its length, its bytes, a NUL.
    mutating func string(_ s: UnsafePointer<CChar>) {
        var n = 0
        while s[n] != 0 { n += 1 }
        u32(UInt32(n))
        for k in 0..<n { bytes.append(UInt8(bitPattern: s[k])) }
        bytes.append(0)
    }
    mutating func string(_ s: StaticString) { string(SubmitWords.c(s)) }
    /// A signature: a byte of length, its characters, a NUL.
    mutating func signature(_ s: StaticString) {
        bytes.append(UInt8(s.utf8CodeUnitCount))
        s.withUTF8Buffer { bytes.append(contentsOf: $0) }
        bytes.append(0)
    }
    mutating func bool(_ b: Bool) { u32(b ? 1 : 0) }

    /// An array: its byte length (filled in after `body`), its elements aligned to `alignment` from the first.
    mutating func array(alignment: Int, _ body: (inout Message) -> Void) {
        u32(0)
        let lengthAt = bytes.count - 4
        pad(alignment)
        let start = bytes.count
        body(&self)
        set32(UInt32(bytes.count - start), at: lengthAt)
    }

    /// A method call: its header (path, interface, member, destination, the body's signature), then `body`.
    static func call(serial: UInt32, destination: StaticString, path: StaticString, interface: StaticString, member: StaticString,
                      signature: StaticString?, body: (inout Message) -> Void) -> [UInt8] {
        var m = Message()
        m.bytes = [UInt8(ascii: "l"), 1, 0, 1]   // little-endian, METHOD_CALL, no flags, version 1
        m.u32(0)                                  // the body's length, filled in below
        m.u32(serial)
        m.array(alignment: 8) { h in
            func field(_ code: UInt8, _ sig: StaticString, _ value: (inout Message) -> Void) {
                h.pad(8)
                h.bytes.append(code)
                h.signature(sig)
                value(&h)
            }
            field(1, "o") { $0.string(path) }
            field(2, "s") { $0.string(interface) }
            field(3, "s") { $0.string(member) }
            field(6, "s") { $0.string(destination) }
            if let s = signature { field(8, "g") { $0.signature(s) } }
        }
        m.pad(8)
        let start = m.bytes.count
        var b = Message()
        body(&b)
        m.bytes.append(contentsOf: b.bytes)   // the body's alignment counts from its own start, a multiple of 8
        m.set32(UInt32(m.bytes.count - start), at: 4)
        return m.bytes
    }
}

/// A message read from the bus: its type, the serial it replies to, the error's name, the body's bytes.
struct Received {
    var type: UInt8 = 0
    var replySerial: UInt32?
    var errorName: [UInt8]?
    /// The body's signature (header field 8; none for an empty body).
    var signature: [UInt8] = []
    var body: [UInt8] = []
    var bigEndian = false

    static let methodReturn: UInt8 = 2, error: UInt8 = 3

    func u32(_ b: [UInt8], _ i: Int) -> UInt32? {
        guard i >= 0, i + 4 <= b.count else { return nil }
        var v: UInt32 = 0
        for k in 0..<4 { v |= UInt32(b[i + k]) << (8 * UInt32(bigEndian ? 3 - k : k)) }
        return v
    }

    /// The body's first value as a string (a METHOD_RETURN of signature "s", or an ERROR's message).
    var firstString: [UInt8]? {
        guard let n = u32(body, 0), Int(n) + 4 < body.count + 1, 4 + Int(n) <= body.count else { return nil }
        return Array(body[4..<(4 + Int(n))])
    }

    /// Reads one message whole, with bounds: nil at the end of the stream, an error, or one that is malformed or
    /// larger than `limit`.
    static func read(from fd: Int32, limit: Int = 1 << 20) -> Received? {
        guard let head = readExactly(fd, 16) else { return nil }
        var m = Received()
        guard head[0] == UInt8(ascii: "l") || head[0] == UInt8(ascii: "B"), head[3] == 1 else { return nil }
        m.bigEndian = head[0] == UInt8(ascii: "B")
        m.type = head[1]
        guard let bodyLength = m.u32(head, 4), let fieldsLength = m.u32(head, 12),
              Int(bodyLength) <= limit, Int(fieldsLength) <= limit else { return nil }
        let fieldsPadded = (Int(fieldsLength) + 7) / 8 * 8
        guard let fields = readExactly(fd, fieldsPadded), let body = readExactly(fd, Int(bodyLength)) else { return nil }
        m.body = body
        // The header fields: structs (code, variant), each at a multiple of 8 from the message's start (16 here).
        var i = 0
        while i < Int(fieldsLength) {
            i = (i + 7) / 8 * 8
            guard i + 2 < fields.count else { return nil }
            let code = fields[i]
            let sigLength = Int(fields[i + 1])
            guard i + 2 + sigLength < fields.count else { return nil }
            let sig = Array(fields[(i + 2)..<(i + 2 + sigLength)])
            var v = i + 3 + sigLength
            // Offsets in the message count from its start: the fields begin at 16, a multiple of 8.
            switch sig {
            case [UInt8(ascii: "u")]:
                v = (v + 3) / 4 * 4
                guard let x = m.u32(fields, v) else { return nil }
                if code == 5 { m.replySerial = x }
                v += 4
            case [UInt8(ascii: "s")], [UInt8(ascii: "o")]:
                v = (v + 3) / 4 * 4
                guard let n = m.u32(fields, v), v + 4 + Int(n) < fields.count + 1 else { return nil }
                if code == 4 { m.errorName = Array(fields[(v + 4)..<(v + 4 + Int(n))]) }
                v += 4 + Int(n) + 1
            case [UInt8(ascii: "g")]:
                guard v < fields.count, v + 1 + Int(fields[v]) <= fields.count else { return nil }
                if code == 8 { m.signature = Array(fields[(v + 1)..<(v + 1 + Int(fields[v]))]) }
                v += 1 + Int(fields[v]) + 1
            default:
                return nil
            }
            i = v
        }
        return m
    }

    static func readExactly(_ fd: Int32, _ n: Int) -> [UInt8]? {
        var out = [UInt8](repeating: 0, count: n)
        var done = 0
        while done < n {
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            // The CLI's own wait for a reply (GDBus's default): 25 s.
            let ready = poll(&p, 1, 25_000)
            if ready < 0 && bgt_front_errno() == EINTR { continue }
            guard ready > 0 else { return nil }
            let r = out.withUnsafeMutableBufferPointer { CFront.read(fd, $0.baseAddress! + done, n - done) }
            if r < 0 && bgt_front_errno() == EINTR { continue }
            guard r > 0 else { return nil }
            done += r
        }
        return out
    }
}
