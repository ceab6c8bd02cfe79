import CFront

/// `bgtask submit [OPTIONS] [--] COMMAND [ARGS...]` when every option is one whose meaning is exact here: the flags,
/// `--kind` with a kind's name, `--id` with an identifier of plain characters, `--json`. Anything else (a time,
/// a window, a budget, a retry, help, a word it does not know, an option twice) is nil: the full CLI takes it.
struct SubmitWords {
    var id: UnsafePointer<CChar>?
    var kind: UnsafePointer<CChar>?
    var ignoreIdle = false, power = false, network = false, unmetered = false, cpuHeavy = false, userInitiated = false
    var json = false
    /// The working directory (getcwd's, freed at exit).
    var directory: UnsafeMutablePointer<CChar>
    /// The command: argv[commandStart..<argc].
    let argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>
    var commandStart = 0, argc = 0

    /// The kinds `--kind` takes (TaskKind's names). A kind added there and not here is handed over.
    static let kinds: [StaticString] = ["processing", "refresh", "continued", "regular"]

    init?(argc: Int, argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) {
        var seen: [Int] = []
        var i = 2
        var start = -1
        while i < argc {
            guard let word = argv[i] else { return nil }
            if strcmp(word, "--") == 0 { start = i + 1; break }
            // The command begins at the first word that is not an option (as the CLI's parser takes it).
            if word[0] != CChar(UInt8(ascii: "-")) { start = i; break }
            var value: UnsafePointer<CChar>?
            let option: Int
            if let v = Self.valued(word, "--id", argv, argc, &i) { option = 0; value = v }
            else if let v = Self.valued(word, "--kind", argv, argc, &i) { option = 1; value = v }
            else if strcmp(word, "--ignore-idle") == 0 { option = 2; ignoreIdle = true }
            else if strcmp(word, "--requires-external-power") == 0 { option = 3; power = true }
            else if strcmp(word, "--requires-network") == 0 { option = 4; network = true }
            else if strcmp(word, "--unmetered") == 0 { option = 5; unmetered = true }
            else if strcmp(word, "--cpu-heavy") == 0 { option = 6; cpuHeavy = true }
            else if strcmp(word, "--user-initiated") == 0 { option = 7; userInitiated = true }
            else if strcmp(word, "--json") == 0 { option = 8; json = true }
            else { return nil }
            if seen.contains(option) { return nil }
            seen.append(option)
            if option == 0 { guard let v = value, Self.plainIdentifier(v) else { return nil }; id = v }
            if option == 1 { guard let v = value, Self.kinds.contains(where: { strcmp(v, Self.c($0)) == 0 }) else { return nil }; kind = v }
            i += 1
        }
        // No command, an empty one, or --unmetered alone: the CLI's usage errors.
        guard start >= 0, start < argc, let first = argv[start], first[0] != 0 else { return nil }
        if unmetered && !network { return nil }
        // Words the bus would refuse as strings (not UTF-8), and a working directory that is one, are the CLI's.
        for k in start..<argc where !Self.validUTF8(argv[k]!) { return nil }
        guard let cwd = getcwd(nil, 0) else { return nil }
        guard Self.validUTF8(cwd) else { free(cwd); return nil }
        directory = cwd
        self.argv = argv
        self.argc = argc
        commandStart = start
    }

    /// `--name VALUE` or `--name=VALUE`; nil when `word` is not that option (or it lacks a value, which the CLI words).
    static func valued(_ word: UnsafeMutablePointer<CChar>, _ name: StaticString, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>,
                       _ argc: Int, _ i: inout Int) -> UnsafePointer<CChar>? {
        let n = name.utf8CodeUnitCount
        guard strncmp(word, c(name), n) == 0 else { return nil }
        if word[n] == 0 {
            guard i + 1 < argc, let v = argv[i + 1], v[0] != CChar(UInt8(ascii: "-")) else { return nil }
            i += 1
            return UnsafePointer(v)
        }
        return word[n] == CChar(UInt8(ascii: "=")) ? UnsafePointer(word + n + 1) : nil
    }

    /// 1 to 255 of `A-Z a-z 0-9 . _ - : @ +`: an identifier every rule of TaskID's accepts as it is. Any other is
    /// handed over, so its refusal (or acceptance) is worded by the one place that decides it.
    static func plainIdentifier(_ s: UnsafePointer<CChar>) -> Bool {
        let n = strlen(s)
        guard n >= 1, n <= 255 else { return false }
        for k in 0..<n {
            let b = UInt8(bitPattern: s[k])
            let ok = (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A)
                || b == 0x2E || b == 0x5F || b == 0x2D || b == 0x3A || b == 0x40 || b == 0x2B
            if !ok { return false }
        }
        return true
    }

    /// Whether `s` is UTF-8 as D-Bus requires of a string (no overlong forms, no surrogates, nothing past U+10FFFF).
    /// A word that is not — a file name in another encoding — is handed over: the bus would drop the connection.
    static func validUTF8(_ s: UnsafePointer<CChar>) -> Bool {
        var i = 0
        while true {
            let b0 = UInt8(bitPattern: s[i])
            if b0 == 0 { return true }
            if b0 < 0x80 { i += 1; continue }
            let n: Int, low: UInt32
            switch b0 {
            case 0xC2...0xDF: n = 1; low = 0x80
            case 0xE0...0xEF: n = 2; low = 0x800
            case 0xF0...0xF4: n = 3; low = 0x10000
            default: return false
            }
            var v = UInt32(b0) & (0x3F >> UInt32(n))
            for k in 1...n {
                let b = UInt8(bitPattern: s[i + k])
                guard b & 0xC0 == 0x80 else { return false }   // the NUL at the end stops here too
                v = v << 6 | UInt32(b & 0x3F)
            }
            guard v >= low, v <= 0x10FFFF, !(0xD800...0xDFFF).contains(v) else { return false }
            i += n + 1
        }
    }

    static func c(_ s: StaticString) -> UnsafePointer<CChar> {
        UnsafeRawPointer(s.utf8Start).assumingMemoryBound(to: CChar.self)
    }

    /// The kind as the CLI sends it: `--ignore-idle` makes processing work regular.
    var kindName: UnsafePointer<CChar> {
        let k = kind ?? Self.c("processing")
        return ignoreIdle && strcmp(k, "processing") == 0 ? Self.c("regular") : k
    }

    /// Sends the request and, on success, prints the id and exits 0. Returns when it did not reach bgtaskd or bgtaskd
    /// refused it (nothing was queued either way): the caller hands over, and the CLI does it again and words it.
    func send() {
        guard let bus = SessionBus.connect() else { return }
        defer { close(bus.fd) }
        guard bus.authenticate() else { return }
        // BEGIN, Hello and the call in one write: the bus answers Hello, then (after a NameAcquired signal) the call.
        var out = Array("BEGIN\r\n".utf8)
        out.append(contentsOf: Message.call(serial: 1, destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                                            interface: "org.freedesktop.DBus", member: "Hello", signature: nil) { _ in })
        out.append(contentsOf: Message.call(serial: 2, destination: SchedulerNames.bus, path: SchedulerNames.path,
                                            interface: SchedulerNames.interface, member: SchedulerMethods.Submit.name,
                                            signature: SchedulerMethods.Submit.signature) { build(&$0) })
        // A write cut short leaves the bus a message it never completes, so never delivers: nothing was queued.
        guard bus.send(out) else { return }
        while true {
            guard let m = Received.read(from: bus.fd) else {
                // Sent, and then no answer: it may be queued, so it is not sent again. The CLI's words and status.
                Output.error("bgtaskd is not reachable on the session bus (", "no reply, or the connection was lost",
                             "); start it with `systemctl --user start bgtaskd` or run `bgtaskd`", status: 69, json: json)
            }
            // Hello refused: the bus closes the connection without delivering the call.
            if m.replySerial == 1, m.type == Received.error { return }
            guard m.replySerial == 2 else { continue }
            // The bus gave up waiting for bgtaskd's answer: it may be queued, so it is not sent again.
            if m.type == Received.error, let name = m.errorName, Self.noAnswer.contains(where: { $0 == name }) {
                Output.error("bgtaskd is not reachable on the session bus (", "it did not answer in time",
                             "); start it with `systemctl --user start bgtaskd` or run `bgtaskd`", status: 69, json: json)
            }
            // Refused by bgtaskd or the bus (no daemon to start, …): nothing was queued.
            if m.type == Received.error { return }
            // The interface's (s), a non-empty id of UTF-8: anything else is not trusted (it may be queued, so it
            // is not sent again; the CLI's words and status for a wrong reply, EX_SOFTWARE).
            guard m.type == Received.methodReturn, m.signature == [UInt8(ascii: "s")], var id = m.firstString, Self.wellFormed(id, in: m) else {
                Output.error("bgtaskd answered Submit with ", "a reply of another type, an empty id or one not UTF-8",
                             ": a bgtaskd of another version, or not bgtaskd? (nothing of its reply was used)", status: 70, json: json)
            }
            id.append(0)
            id.withUnsafeBufferPointer { p in
                p.baseAddress!.withMemoryRebound(to: CChar.self, capacity: p.count) { Output.id($0, json: json) }
            }
            exit(0)
        }
    }

    /// A string value as D-Bus requires it (its NUL after it, none inside, UTF-8), and not empty: an id.
    static func wellFormed(_ id: [UInt8], in m: Received) -> Bool {
        guard !id.isEmpty, !id.contains(0), m.body.count > 4 + id.count, m.body[4 + id.count] == 0 else { return false }
        return (id + [0]).withUnsafeBufferPointer { p in p.baseAddress!.withMemoryRebound(to: CChar.self, capacity: p.count) { validUTF8($0) } }
    }

    /// The bus's errors for a call it delivered and saw no answer to.
    static let noAnswer: [[UInt8]] = [Array("org.freedesktop.DBus.Error.NoReply".utf8), Array("org.freedesktop.DBus.Error.TimedOut".utf8),
                                      Array("org.freedesktop.DBus.Error.Timeout".utf8)]

    /// Submit's (a{sv} options, as command), as the CLI sends it: every flag, the kind, the directory.
    func build(_ m: inout Message) {
        m.array(alignment: 8) { d in
            if let id { Self.entry(&d, SubmitOptionsKeys.id, id) }
            Self.entry(&d, SubmitOptionsKeys.kind, kindName)
            Self.entry(&d, SubmitOptionsKeys.requiresExternalPower, power)
            Self.entry(&d, SubmitOptionsKeys.requiresNetwork, network)
            Self.entry(&d, SubmitOptionsKeys.requiresUnmetered, unmetered)
            Self.entry(&d, SubmitOptionsKeys.cpuHeavy, cpuHeavy)
            Self.entry(&d, SubmitOptionsKeys.userInitiated, userInitiated || strcmp(kindName, "continued") == 0)
            Self.entry(&d, SubmitOptionsKeys.directory, UnsafePointer(directory))
        }
        m.array(alignment: 4) { a in
            for i in commandStart..<argc { a.string(UnsafePointer(argv[i]!)) }
        }
    }

    /// A dictionary entry {sv}: at a multiple of 8, the key, the value's signature, the value.
    static func entry(_ d: inout Message, _ key: Key<String>, _ value: UnsafePointer<CChar>) {
        d.pad(8); d.string(key.name); d.signature(key.signature); d.string(value)
    }

    static func entry(_ d: inout Message, _ key: Key<Bool>, _ value: Bool) {
        d.pad(8); d.string(key.name); d.signature(key.signature); d.bool(value)
    }
}
