import ArgumentParser
import BgtaskBus
import BgtaskProtocol
import BgtaskConfig
import BgtaskCore
import BgtaskJSON
import BgtaskPolicy
#if canImport(Glibc)
@preconcurrency import Glibc
#endif

/// The CLI's side of the bus: one connection, one call, errors as exit statuses.
enum DaemonClient {
    /// Calls a method of bgtaskd; with no session bus or no daemon, says so and exits 69.
    static func call(_ method: SchedulerMethod, _ args: [BusValue] = []) throws -> [BusValue] {
        asking { bus throws(BusError) in try bus.call(method, args) }
    }

    /// `method`'s one list of dictionaries, each item read as the interface describes it (`parse`, a generated
    /// type's `init(variant:)`): an item that is not, as a reply of the wrong type, ends the CLI (nothing of a
    /// reply it cannot trust is shown, in a table or as JSON).
    static func items<T>(_ method: SchedulerMethod, _ args: [BusValue],
                         _ parse: ([String: BusValue]) throws(ProtocolError) -> T) throws -> (items: [T], dicts: [[String: BusValue]]) {
        guard case .dicts(let dicts)? = try call(method, args).first else { wrongReply(method, "a reply of another type") }
        return (typed(method, dicts, parse), dicts)
    }

    static func typed<T>(_ method: SchedulerMethod, _ dicts: [[String: BusValue]], _ parse: ([String: BusValue]) throws(ProtocolError) -> T) -> [T] {
        do { return try dicts.map { d throws(ProtocolError) in try parse(d) } } catch { wrongReply(method, "an item whose \(error)") }
    }

    /// `method`'s one string (an id, what was done); an empty one is no answer, and ends the CLI as a wrong reply.
    static func string(_ method: SchedulerMethod, _ args: [BusValue] = []) throws -> String {
        guard let s = try call(method, args).first?.string, !s.isEmpty else { wrongReply(method, "an empty string") }
        return s
    }

    /// A reply the interface does not allow (a bgtaskd of another version, or another program on its name): said,
    /// with EX_SOFTWARE, and nothing of it used.
    static func wrongReply(_ method: SchedulerMethod, _ what: String) -> Never {
        fail("bgtaskd answered \(method.rawValue) with \(what): \(wrongReplyTail)", ExitStatus.software)
    }

    static let wrongReplyTail = "a bgtaskd of another version, or not bgtaskd? (nothing of its reply was used)"

    /// The waiting task `id` as `ListPending` tells it (nil: it does not wait).
    static func pendingTask(_ id: String) -> [String: BusValue]? {
        asking { bus throws(BusError) in try bus.pendingTask(id) }
    }

    /// Every waiting task, a page at a time (`body` is given each page as it comes: a queue of 100,000 is never
    /// held whole); or, with `limit`, one page of at most that many after `after`. Returns the next page's cursor.
    @discardableResult
    static func pendingPages(limit: UInt32? = nil, after: String? = nil, _ body: ([[String: BusValue]]) -> Void) -> String? {
        asking { bus throws(BusError) in
            var range = PageRange(after: after, limit: min(limit ?? RequestBounds.pageDefault, RequestBounds.pageMost))
            while true {
                let page = try bus.pendingPage(range)
                body(page.tasks)
                guard let next = page.next else { return nil }
                if limit != nil { return next }
                range.after = next
            }
        }
    }

    /// A whole listing's page in `ListPendingJSON`: 1.6 MB of JSON, which bgtaskd makes while the CLI writes the
    /// last (pages of 10,000 cost bgtaskd a fifth more CPU over 100,000 tasks: 6.5 MB a page outgrew the caches, and
    /// each page's buffers were new pages to fault in; pages of 1,000 spent in round trips what they saved).
    static let jsonPage: UInt32 = 2_500

    /// `pendingPages` as JSON text (`ListPendingJSON`: one task a line, the bytes of a page). `supported` is false,
    /// and nothing was given to `body`, when the bgtaskd that answers predates the method.
    static func pendingJSONPages(limit: UInt32? = nil, after: String? = nil, _ body: ([UInt8]) -> Void) -> (next: String?, supported: Bool) {
        asking { bus throws(BusError) in
            let range = PageRange(after: after, limit: min(limit ?? jsonPage, RequestBounds.pageMost))
            var given = false
            do throws(BusError) {
                if limit != nil {
                    let page = try bus.pendingJSON(range)
                    body(page.lines)
                    return (page.next, true)
                }
                try bus.pendingJSONPages(range) { lines in
                    given = true
                    body(lines)
                }
                return (nil, true)
            } catch {
                if !given, error.shortName == "UnknownMethod" { return (nil, false) }
                throw error
            }
        }
    }

    /// Asks bgtaskd on the session bus; what it refuses and a daemon that is not there end the CLI with the
    /// matching exit status.
    static func asking<T>(_ body: (BusConnection) throws(BusError) -> T) -> T {
        switch askingIfThere(body) {
        case .success(let value): return value
        case .failure(let gone): fail(gone.sentence, ExitStatus.unavailable)
        }
    }

    /// Why bgtaskd could not be asked: no session bus, or nobody answering on its name (the sentence every command says).
    struct Unreachable: Error { var sentence: String }

    /// As `asking`, but a daemon that is not there is not the end: why is returned, for a command that has something
    /// to say without it (`tasks`: the foreground `bgtask run`s). What bgtaskd refuses still ends the CLI.
    static func askingIfThere<T>(_ body: (BusConnection) throws(BusError) -> T) -> Result<T, Unreachable> {
        connect().flatMap { asking($0, body) }
    }

    /// The session bus, or why there is none.
    static func connect() -> Result<BusConnection, Unreachable> {
        do { return .success(try BusConnection()) } catch {
            return .failure(Unreachable(sentence: "no session bus (\(error.message)); bgtaskd runs on the user's session bus"))
        }
    }

    /// `body` on a connection the caller keeps (the live view's).
    static func asking<T>(_ bus: BusConnection, _ body: (BusConnection) throws(BusError) -> T) -> Result<T, Unreachable> {
        do { return .success(try body(bus)) } catch {
            if let why = unreachable(error) { return .failure(Unreachable(sentence: why)) }
            if error.name == BusError.wrongReply { fail("\(error.message): \(wrongReplyTail)", ExitStatus.software) }
            switch SchedulerError(rawValue: error.name) {
            case .unavailable?:
                fail(error.message, ExitStatus.unavailable)   // bgtaskd's own: it answered, but cannot do it now
            case .invalidArgs?:
                fail(error.message, ExitStatus.usage)
            case .tooManyPending?:
                fail(error.message, ExitStatus.tempFail)
            case .noSuchTask?:
                fail(error.message, ExitStatus.failure)
            default:
                fail("\(error.shortName): \(error.message)", ExitStatus.failure)
            }
        }
    }

    /// The bus's own errors, as a sentence a person can act on: no daemon to start, none answering, the
    /// connection lost, or a bgtaskd the bus started (D-Bus activation) that could not start or exited at once
    /// (`org.freedesktop.DBus.Error.Spawn.*`, whose message gives only its exit status). Nil for any other error.
    static func unreachable(_ error: BusError) -> String? {
        let start = "start it with `systemctl --user start bgtaskd` or run `bgtaskd`"
        let spawn = "org.freedesktop.DBus.Error.Spawn."
        if error.name.hasPrefix(spawn) {
            let status = error.name == spawn + "ChildExited" ? error.message.split(separator: " ").last.flatMap { Int32($0) } : nil
            let why = status.map { "it exited with status \($0)" + (activationExit[$0].map { ": \($0)" } ?? "") }
                ?? Terminal.safe(error.message)
            return "the session bus started bgtaskd, but \(why); `journalctl --user -u bgtaskd` or running `bgtaskd` in a terminal shows why"
        }
        let lost = ["ServiceUnknown", "NameHasNoOwner", "NoReply", "Disconnected", "TimedOut"]
        guard error.name.hasPrefix("org.freedesktop.DBus.Error."), lost.contains(error.shortName) else { return nil }
        return "bgtaskd is not reachable on the session bus (\(Terminal.safe(error.message))); \(start)"
    }

    /// bgtaskd's exit statuses at start-up (bgtaskd(1), docs/protocol.md), for the sentence above.
    static let activationExit: [Int32: String] = [
        ExitStatus.unavailable: "it found no session bus",
        ExitStatus.cantCreate: "its state directory cannot be written",
        ExitStatus.tempFail: "another bgtaskd holds the state directory",
        ExitStatus.config: "a policy file it was given does not load",
    ]

    static func fail(_ message: String, _ status: Int32) -> Never {
        err(message, status: status)
        exit(status)
    }
}

/// `2h`, `90s` from now, or an ISO-8601 time: `2026-11-22T21:00`, with `:SS`, a `Z` or `±HH:MM` zone (local time without one).
func parseWhen(_ s: String, now: Double) -> Double? {
    if let d = parseDuration(s) { return now + d }
    if let t = parseClockWords(s, now: now) { return t }
    let u = Array(s.utf8)
    func num(_ a: Int, _ n: Int) -> Int? {
        guard a + n <= u.count else { return nil }
        var v = 0
        for c in u[a..<(a + n)] { guard c >= 48, c <= 57 else { return nil }; v = v * 10 + Int(c - 48) }
        return v
    }
    guard u.count >= 16, let y = num(0, 4), u[4] == 45, let mo = num(5, 2), u[7] == 45, let d = num(8, 2),
          u[10] == 84 || u[10] == 32, let h = num(11, 2), u[13] == 58, let mi = num(14, 2) else { return nil }
    var i = 16
    var sec = 0
    if i < u.count, u[i] == 58 { guard let x = num(i + 1, 2) else { return nil }; sec = x; i += 3 }
    guard (1...12).contains(mo), (1...31).contains(d), h < 24, mi < 60, sec < 61 else { return nil }
    var t = tm()
    t.tm_year = Int32(y - 1900); t.tm_mon = Int32(mo - 1); t.tm_mday = Int32(d)
    t.tm_hour = Int32(h); t.tm_min = Int32(mi); t.tm_sec = Int32(sec)
    if i == u.count {
        t.tm_isdst = -1
        let r = mktime(&t)
        return r == -1 ? nil : Double(r)
    }
    var offset = 0
    if u[i] == 90, i + 1 == u.count { offset = 0 }
    else if u[i] == 43 || u[i] == 45, i + 6 == u.count, let oh = num(i + 1, 2), u[i + 3] == 58, let om = num(i + 4, 2), oh < 24, om < 60 {
        offset = (oh * 3600 + om * 60) * (u[i] == 45 ? -1 : 1)
    } else { return nil }
    return Double(timegm(&t)) - Double(offset)
}

/// The words people use for a time, in local time: `01:00` or `01:00:30` (the next one to come: today if still
/// ahead, else tomorrow), `today 18:00`, `tomorrow 01:00`, a weekday (`sat 09:00`, `saturday 09:00`: the next
/// one, today only if still ahead), and a bare date `2026-12-24` (its midnight).
func parseClockWords(_ text: String, now: Double) -> Double? {
    let words = text.lowercased().split(separator: " ").map(String.init)
    guard (1...2).contains(words.count) else { return nil }
    var nowT = time_t(now)
    var base = tm()
    localtime_r(&nowT, &base)
    func clock(_ w: String) -> (Int32, Int32, Int32)? {
        let parts = w.split(separator: ":", omittingEmptySubsequences: false)
        guard (2...3).contains(parts.count), parts.allSatisfy({ (1...2).contains($0.count) && $0.allSatisfy(\.isNumber) }),
              let h = Int32(parts[0]), let m = Int32(parts[1]), h < 24, m < 60 else { return nil }
        let sec = parts.count == 3 ? Int32(parts[2]) ?? 99 : 0
        return sec < 60 ? (h, m, sec) : nil
    }
    func at(dayOffset: Int32, _ c: (Int32, Int32, Int32)) -> Double? {
        var t = base
        t.tm_mday += dayOffset; t.tm_hour = c.0; t.tm_min = c.1; t.tm_sec = c.2; t.tm_isdst = -1
        let r = mktime(&t)
        return r == -1 ? nil : Double(r)
    }
    // A bare date.
    if words.count == 1, words[0].count == 10, let day = parseWhen(words[0] + "T00:00", now: now) { return day }
    guard let c = clock(words.last!) else { return nil }
    if words.count == 1 {
        guard let today = at(dayOffset: 0, c) else { return nil }
        return today > now ? today : at(dayOffset: 1, c)
    }
    switch words[0] {
    case "today": return at(dayOffset: 0, c)
    case "tomorrow": return at(dayOffset: 1, c)
    default:
        let days = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]
        let full = ["sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday"]
        guard let wd = days.firstIndex(of: words[0]) ?? full.firstIndex(of: words[0]) else { return nil }
        var ahead = (Int32(wd) - base.tm_wday + 7) % 7
        if ahead == 0, let today = at(dayOffset: 0, c), today <= now { ahead = 7 }
        return at(dayOffset: ahead, c)
    }
}
