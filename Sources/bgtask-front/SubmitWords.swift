import CSdBus

/// `bgtask submit [OPTIONS] [--] COMMAND [ARGS...]` when every option is one whose meaning is exact here: the flags,
/// `--kind` with a kind's name, `--id` with an identifier of plain characters, `--json`. Anything else (a time,
/// a window, a budget, a retry, help, a word it does not know, an option twice) is nil: the full CLI takes it.
struct SubmitWords {
    var id: UnsafePointer<CChar>?
    var kind: UnsafePointer<CChar>?
    var ignoreIdle = false, power = false, network = false, unmetered = false, cpuHeavy = false, userInitiated = false
    var json = false
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
    mutating func send() {
        guard let sd = SdBus() else { return }
        var bus: OpaquePointer?
        guard sd.openUser(&bus) >= 0 else { return }
        var m: OpaquePointer?
        guard sd.newMethodCall(bus, &m, Self.c(SchedulerNames.bus), Self.c(SchedulerNames.path),
                                             Self.c(SchedulerNames.interface), Self.c(SchedulerMethods.Submit.name)) >= 0,
              let message = m, build(message, sd) else { return }
        var error = sd_bus_error()
        var reply: OpaquePointer?
        let r = sd.call(bus, message, 0, &error, &reply)
        if r < 0 {
            // Sent, and then no answer: it may be queued, so it is not sent again. The CLI's words and status.
            if let name = error.name, strcmp(name, "org.freedesktop.DBus.Error.NoReply") == 0 || strcmp(name, "org.freedesktop.DBus.Error.Timeout") == 0
                || -r == ETIMEDOUT || -r == ECONNRESET || -r == ENOTCONN {
                let why = error.message ?? UnsafePointer(strerror(-r))!
                Output.error("bgtaskd is not reachable on the session bus (", why,
                             "); start it with `systemctl --user start bgtaskd` or run `bgtaskd`", status: 69, json: json)
            }
            return
        }
        var id: UnsafePointer<CChar>?
        guard sd.readBasic(reply, CChar(UInt8(ascii: "s")), &id) >= 0, let given = id else { return }
        Output.id(given, json: json)
        exit(0)
    }

    /// Submit's (a{sv} options, as command), as the CLI sends it: every flag, the kind, the directory.
    func build(_ m: OpaquePointer, _ sd: SdBus) -> Bool {
        var ok = sd.openContainer(m, CChar(UInt8(ascii: "a")), "{sv}") >= 0
        if let id { ok = ok && Self.append(m, sd, SubmitOptionsKeys.id, id) }
        ok = ok && Self.append(m, sd, SubmitOptionsKeys.kind, kindName)
        ok = ok && Self.append(m, sd, SubmitOptionsKeys.requiresExternalPower, power)
        ok = ok && Self.append(m, sd, SubmitOptionsKeys.requiresNetwork, network)
        ok = ok && Self.append(m, sd, SubmitOptionsKeys.requiresUnmetered, unmetered)
        ok = ok && Self.append(m, sd, SubmitOptionsKeys.cpuHeavy, cpuHeavy)
        ok = ok && Self.append(m, sd, SubmitOptionsKeys.userInitiated, userInitiated || strcmp(kindName, "continued") == 0)
        if let cwd = getcwd(nil, 0) {
            ok = ok && Self.append(m, sd, SubmitOptionsKeys.directory, UnsafePointer(cwd))
            free(cwd)
        }
        ok = ok && sd.closeContainer(m) >= 0
        ok = ok && sd.openContainer(m, CChar(UInt8(ascii: "a")), "s") >= 0
        for i in commandStart..<argc { ok = ok && sd.appendBasic(m, CChar(UInt8(ascii: "s")), argv[i]) >= 0 }
        return ok && sd.closeContainer(m) >= 0
    }

    static func append(_ m: OpaquePointer, _ sd: SdBus, _ key: Key<String>, _ value: UnsafePointer<CChar>) -> Bool {
        entry(m, sd, key.name, key.signature) { sd.appendBasic(m, CChar(UInt8(ascii: "s")), value) }
    }

    static func append(_ m: OpaquePointer, _ sd: SdBus, _ key: Key<Bool>, _ value: Bool) -> Bool {
        var b: Int32 = value ? 1 : 0
        return entry(m, sd, key.name, key.signature) { sd.appendBasic(m, CChar(UInt8(ascii: "b")), &b) }
    }

    static func entry(_ m: OpaquePointer, _ sd: SdBus, _ name: StaticString, _ signature: StaticString, _ value: () -> Int32) -> Bool {
        sd.openContainer(m, CChar(UInt8(ascii: "e")), "sv") >= 0
            && sd.appendBasic(m, CChar(UInt8(ascii: "s")), c(name)) >= 0
            && sd.openContainer(m, CChar(UInt8(ascii: "v")), c(signature)) >= 0
            && value() >= 0
            && sd.closeContainer(m) >= 0
            && sd.closeContainer(m) >= 0
    }
}
