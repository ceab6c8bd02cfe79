import CFront

/// One method call on the user's session bus, spoken on the socket (D-Bus specification: "Message Protocol",
/// "Authentication Protocol"): connect, SASL EXTERNAL, Hello, the call, its reply. No library: every D-Bus library
/// on Debian 12 links libsystemd, whose loading (six more libraries) was a quarter of a submit (docs/benchmarks.md).
/// It knows only what the front needs — `unix:` addresses, strings, booleans, `a{sv}`, `as`, a string reply — and
/// anything else is a nil the front answers by handing over to the full CLI, which speaks GDBus.
struct SessionBus {
    let fd: Int32

    /// `DBUS_SESSION_BUS_ADDRESS`'s first `unix:path=` or `unix:abstract=` that connects, else
    /// `$XDG_RUNTIME_DIR/bus` when the variable is unset (as libdbus and sd-bus do).
    static func connect() -> SessionBus? {
        if let address = getenv("DBUS_SESSION_BUS_ADDRESS") {
            var entry = [UInt8]()
            var i = 0
            while true {
                let b = UInt8(bitPattern: address[i])
                if b == 0 || b == UInt8(ascii: ";") {
                    if let bus = connect(entry: entry) { return bus }
                    entry.removeAll()
                    if b == 0 { return nil }
                } else {
                    entry.append(b)
                }
                i += 1
            }
        }
        guard let run = getenv("XDG_RUNTIME_DIR") else { return nil }
        var path = [UInt8]()
        var i = 0
        while run[i] != 0 { path.append(UInt8(bitPattern: run[i])); i += 1 }
        path.append(contentsOf: Array("/bus".utf8))
        return connect(path: path, abstract: false)
    }

    /// One `transport:key=value,…` entry of an address; nil for another transport or one that does not connect.
    static func connect(entry: [UInt8]) -> SessionBus? {
        let prefix = Array("unix:".utf8)
        guard entry.count > prefix.count, Array(entry[0..<prefix.count]) == prefix else { return nil }
        for pair in entry[prefix.count...].split(separator: UInt8(ascii: ",")) {
            guard let eq = pair.firstIndex(of: UInt8(ascii: "=")) else { continue }
            let key = Array(pair[pair.startIndex..<eq])
            guard let value = unescaped(Array(pair[(eq + 1)...])) else { return nil }
            if key == Array("path".utf8) { return connect(path: value, abstract: false) }
            if key == Array("abstract".utf8) { return connect(path: value, abstract: true) }
        }
        return nil
    }

    /// An address value's `%XX` escapes undone.
    static func unescaped(_ v: [UInt8]) -> [UInt8]? {
        var out = [UInt8]()
        var i = 0
        func hex(_ c: UInt8) -> UInt8? {
            switch c {
            case 0x30...0x39: return c - 0x30
            case 0x41...0x46: return c - 0x41 + 10
            case 0x61...0x66: return c - 0x61 + 10
            default: return nil
            }
        }
        while i < v.count {
            if v[i] == UInt8(ascii: "%") {
                guard i + 2 < v.count, let h = hex(v[i + 1]), let l = hex(v[i + 2]) else { return nil }
                out.append(h << 4 | l)
                i += 3
            } else {
                out.append(v[i])
                i += 1
            }
        }
        return out
    }

    static func connect(path: [UInt8], abstract: Bool) -> SessionBus? {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return nil }
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        let room = MemoryLayout.size(ofValue: addr.sun_path)
        let offset = abstract ? 1 : 0   // an abstract name: a NUL first, then its bytes (no NUL after)
        guard !path.isEmpty, path.count + offset < room, !path.contains(0) else { close(fd); return nil }
        withUnsafeMutableBytes(of: &addr.sun_path) { p in
            for (k, b) in path.enumerated() { p[k + offset] = b }
        }
        let length = MemoryLayout<sa_family_t>.size + offset + path.count + (abstract ? 0 : 1)
        let r = withUnsafePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { CFront.connect(fd, $0, socklen_t(length)) }
        }
        guard r == 0 else { close(fd); return nil }
        return SessionBus(fd: fd)
    }

    /// SASL EXTERNAL as this uid; true once the bus said OK (and BEGIN is sent with the first message).
    func authenticate() -> Bool {
        var line: [UInt8] = [0]
        line.append(contentsOf: Array("AUTH EXTERNAL ".utf8))
        let hex: [UInt8] = Array("0123456789abcdef".utf8)
        var uid = [UInt8]()
        var n = getuid()
        repeat { uid.insert(UInt8(48 + n % 10), at: 0); n /= 10 } while n > 0
        for d in uid { line.append(hex[Int(d >> 4)]); line.append(hex[Int(d & 0xF)]) }
        line.append(contentsOf: Array("\r\n".utf8))
        guard send(line) else { return false }
        // One line back: "OK <guid>" or a rejection.
        var reply = [UInt8]()
        while reply.count < 512 {
            var b: UInt8 = 0
            let r = read(fd, &b, 1)
            if r < 0 && bgt_front_errno() == EINTR { continue }
            guard r == 1 else { return false }
            reply.append(b)
            if reply.count >= 2 && reply[reply.count - 2] == 0x0D && b == 0x0A { break }
        }
        return reply.count >= 4 && reply[0] == UInt8(ascii: "O") && reply[1] == UInt8(ascii: "K") && reply[2] == UInt8(ascii: " ")
    }

    func send(_ bytes: [UInt8]) -> Bool {
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeBufferPointer { CFront.send(fd, $0.baseAddress! + done, bytes.count - done, Int32(MSG_NOSIGNAL)) }
            if n < 0 && bgt_front_errno() == EINTR { continue }
            guard n > 0 else { return false }
            done += n
        }
        return true
    }
}
