import BgtaskConfig
import BgtaskTestSupport
import Foundation
import Testing

/// One call to bgtaskd from whatever process runs it (a sandbox, another user namespace): GVariant text in,
/// "OK <reply>" or "ERR <error name> <message>" out. With --send-and-exit the call is sent by a process that
/// is gone before it is handled, while a child it forked keeps the connection open (that child's pid and its
/// own on stdout).
let busCallScript = #"""
import os, sys
from gi.repository import Gio, GLib
address, method = sys.argv[1], sys.argv[2]
text = sys.argv[3] if len(sys.argv) > 3 and not sys.argv[3].startswith("--") else "()"
if text.startswith("@/"):
    text = open(text[1:]).read()
flags = Gio.DBusConnectionFlags.AUTHENTICATION_CLIENT | Gio.DBusConnectionFlags.MESSAGE_BUS_CONNECTION
bus = Gio.DBusConnection.new_for_address_sync(address, flags, None, None)
params = GLib.Variant.parse(None, text, None, None)
name, path = "io.github.bgtask.Scheduler1", "/io/github/bgtask/Scheduler1"
if "--send-and-exit" in sys.argv:
    child = os.fork()
    if child == 0:
        os.setsid()
        for fd in (0, 1, 2): os.close(fd)
        import time
        time.sleep(30)
        os._exit(0)
    msg = Gio.DBusMessage.new_method_call(name, path, name, method)
    msg.set_body(params)
    bus.send_message(msg, Gio.DBusSendMessageFlags.NONE)
    bus.flush_sync(None)
    print(child, os.getpid(), flush=True)
    os._exit(0)
try:
    reply = bus.call_sync(name, path, name, method, params, None, Gio.DBusCallFlags.NONE, 10000, None)
    print("OK " + reply.print_(True))
except GLib.Error as e:
    print("ERR " + (Gio.DBusError.get_remote_error(e) or "?") + " " + e.message)
"""#

/// Where a test's call to bgtaskd comes from.
enum Confinement {
    case session
    /// bubblewrap with a `/.flatpak-info` naming this app, as Flatpak lays out a sandbox.
    case flatpak(String)
    /// Another user namespace, nothing else (a rootless container, bwrap without Flatpak's info).
    case userNamespace
}

extension SessionDaemon {
    /// The GVariant text's call of `method`, made from `place`; the script's output line(s).
    func call(_ method: String, _ args: String = "()", from place: Confinement = .session, dir: URL) throws -> String {
        let argv = try callCommand(method, args, from: place, dir: dir)
        let (status, out, err) = try Child.run(argv[0], Array(argv.dropFirst()), environment: Child.environment(["LD_PRELOAD": nil]), deadline: 30)
        guard status == 0 else { throw DaemonTestError(message: "\(method) from \(place): status \(status): \(out) \(err)") }
        return out.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// The call sent by a process that exits at once, its connection kept open by a child it forked (whose
    /// pid is returned); the sandbox may outlive the call's sender, so it is returned to be stopped.
    func sendAndExit(_ method: String, _ args: String, from place: Confinement, dir: URL) throws -> (sandbox: Child, holder: Int32, sender: Int32) {
        let argv = try callCommand(method, args, from: place, sendAndExit: true, dir: dir)
        let c = try Child(argv[0], Array(argv.dropFirst()), environment: Child.environment(["LD_PRELOAD": nil]))
        let pids = (c.line(within: 20) ?? "").split(separator: " ").compactMap { Int32($0) }
        guard pids.count == 2 else {
            c.stop()
            throw DaemonTestError(message: "\(method) from \(place): \(c.stderr)")
        }
        return (c, pids[0], pids[1])
    }

    func callCommand(_ method: String, _ args: String, from place: Confinement, sendAndExit: Bool = false, dir: URL) throws -> [String] {
        let script = dir.appendingPathComponent("buscall.py")
        if !FileManager.default.fileExists(atPath: script.path) { try busCallScript.write(to: script, atomically: true, encoding: .utf8) }
        let address = env["DBUS_SESSION_BUS_ADDRESS"]!
        var argv = ["/usr/bin/python3", script.path, address, method, args] + (sendAndExit ? ["--send-and-exit"] : [])
        switch place {
        case .session:
            break
        case .flatpak(let app):
            let info = dir.appendingPathComponent("flatpak-info-\(app)")
            try "[Application]\nname=\(app)\nruntime=runtime/org.freedesktop.Platform/x86_64/23.08\n\n[Instance]\ninstance-id=1\n"
                .write(to: info, atomically: true, encoding: .utf8)
            argv = ["/usr/bin/bwrap", "--ro-bind", "/usr", "/usr", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
                    "--symlink", "usr/bin", "/bin", "--ro-bind", "/etc", "/etc", "--proc", "/proc", "--dev", "/dev",
                    "--bind", "/tmp", "/tmp", "--bind", dir.path, dir.path, "--ro-bind", info.path, "/.flatpak-info",
                    "--unshare-user", "--setenv", "FLATPAK_ID", app] + argv
        case .userNamespace:
            argv = ["/usr/bin/unshare", "--user", "--map-root-user"] + argv
        }
        return argv
    }

    func pendingIDs() throws -> Set<String> { Set(try pending().compactMap { $0["id"] as? String }) }
}

/// Two hours from now, as GVariant text for a double (an `earliest` that keeps a request pending).
var later: String { String(format: "%.1f", Date().timeIntervalSince1970 + 7200) }

/// Two app manifests in the test's own XDG_DATA_HOME: the sandboxed app's and another app's.
func writeManifests(_ p: PolicyEnv) throws -> [String: String] {
    let data = p.dir.appendingPathComponent("data")
    let apps = data.appendingPathComponent("bgtask/apps")
    try FileManager.default.createDirectory(at: apps, withIntermediateDirectories: true)
    for (id, ident) in [("org.example.Sandboxed", "org.example.sandboxed.refresh"), ("com.example.Other", "com.example.other.refresh")] {
        try "id = \"\(id)\"\ncommand = [\"/bin/true\"]\npermitted_identifiers = [\"\(ident)\"]\n"
            .write(to: apps.appendingPathComponent("\(id).toml"), atomically: true, encoding: .utf8)
    }
    return ["XDG_DATA_HOME": data.path, "XDG_DATA_DIRS": "/nonexistent"]
}

@Suite("bgtaskd as a boundary: sandboxed callers, one run per id, bounded input, its own files")
struct BoundaryTests {
    @Test("a Flatpak app (bwrap with a .flatpak-info) may use only the App* methods for its own id; another user namespace gets nothing")
    func sandboxedCallersStayInside() throws {
        let p = try PolicyEnv()
        let d = try SessionDaemon(policy: p, preload: false, extraEnv: try writeManifests(p))
        #expect(try d.bgtask(["submit", "--id", "mine", "--earliest", "2h", "--", "true"]).0 == 0)
        #expect(try d.call("AppRegister", "('com.example.Other', 'com.example.other.refresh')", dir: p.dir).hasPrefix("OK"))
        #expect(try d.call("AppSubmit", "('com.example.Other', {'identifier': <'com.example.other.refresh'>, 'kind': <'refresh'>, 'earliest': <\(later)>})", dir: p.dir).hasPrefix("OK"))
        let before = try d.pendingIDs()
        #expect(before == ["mine", "com.example.Other/com.example.other.refresh"], "\(before)")

        let app = Confinement.flatpak("org.example.Sandboxed")
        let denied = "ERR org.freedesktop.DBus.Error.AccessDenied"
        let calls: [(String, String)] = [("Submit", "(@a{sv} {}, ['touch', '\(p.dir.path)/escaped'])"), ("Cancel", "('mine',)"), ("CancelAll", "()"),
                                         ("ListPending", "()"), ("ListPendingPage", "(@a{sv} {},)"), ("ListPendingJSON", "(@a{sv} {},)"), ("ListRunning", "()"), ("DebugLaunch", "('mine',)"), ("DebugExpire", "('mine',)"),
                                         ("SetAppEnabled", "('com.example.Other', false)"), ("GetStatus", "()")]
        for (method, args) in calls {
            let r = try d.call(method, args, from: app, dir: p.dir)
            #expect(r.hasPrefix(denied) && r.contains("sandboxed caller (the Flatpak app org.example.Sandboxed)"), "\(method): \(r)")
        }
        // Another app's id: the sandbox says who it is.
        let other = try d.call("AppCancelAll", "('com.example.Other',)", from: app, dir: p.dir)
        #expect(other.hasPrefix("ERR io.github.bgtask.Scheduler1.Error.NotPermitted"), "\(other)")
        // Its own: allowed, and it sees only its own manifest.
        #expect(try d.call("AppRegister", "('org.example.Sandboxed', 'org.example.sandboxed.refresh')", from: app, dir: p.dir).hasPrefix("OK"))
        let list = try d.call("ListApps", from: app, dir: p.dir)
        #expect(list.contains("org.example.Sandboxed") && !list.contains("com.example.Other"), "\(list)")

        let ns = try d.call("Submit", "(@a{sv} {}, ['touch', '\(p.dir.path)/escaped'])", from: .userNamespace, dir: p.dir)
        #expect(ns.hasPrefix(denied) && ns.contains("another user namespace"), "\(ns)")
        let nsApp = try d.call("AppRegister", "('org.example.Sandboxed', 'org.example.sandboxed.refresh')", from: .userNamespace, dir: p.dir)
        #expect(nsApp.hasPrefix(denied), "\(nsApp)")

        #expect(try d.pendingIDs() == before)
        #expect(!FileManager.default.fileExists(atPath: p.dir.appendingPathComponent("escaped").path))
        #expect(!FileManager.default.fileExists(atPath: p.dir.appendingPathComponent("config/bgtask/disabled-apps").path))
    }

    @Test("a sandboxed caller that is gone when its call is handled (its connection kept open by a child) is refused, never taken for unsandboxed")
    func vanishedCallerIsRefused() throws {
        let p = try PolicyEnv()
        let d = try SessionDaemon(policy: p, preload: false, extraEnv: try writeManifests(p))
        let daemon = try #require(d.daemon).process.processIdentifier
        // The daemon handles the call only after the caller has exited.
        kill(daemon, SIGSTOP)
        let (sandbox, holder, sender) = try d.sendAndExit("Submit", "({'id': <'escaped'>, 'earliest': <\(later)>}, ['true'])",
                                                  from: .flatpak("org.example.Sandboxed"), dir: p.dir)
        defer { kill(holder, SIGKILL); sandbox.stop() }
        // The sender is gone before the daemon goes on; its connection lives on in the holder.
        #expect(gone(sender, within: 10))
        #expect(liveState(holder) != nil)
        kill(daemon, SIGCONT)
        // Calls are handled in the order they came: this one's reply comes after the Submit was handled.
        #expect(try !d.pendingIDs().contains("escaped"), "\(d.daemon?.stderr ?? "")")
    }

    @Test("command-line ids cannot name an app's request; CancelAll leaves apps' requests; SetAppEnabled needs a manifest")
    func separateNamespaces() throws {
        let p = try PolicyEnv()
        let d = try SessionDaemon(policy: p, preload: false, extraEnv: try writeManifests(p))
        #expect(try d.call("AppRegister", "('com.example.Other', 'com.example.other.refresh')", dir: p.dir).hasPrefix("OK"))
        #expect(try d.call("AppSubmit", "('com.example.Other', {'identifier': <'com.example.other.refresh'>, 'kind': <'refresh'>, 'earliest': <\(later)>})", dir: p.dir).hasPrefix("OK"))
        let key = "com.example.Other/com.example.other.refresh"
        let shaped = try d.call("Submit", "({'id': <'\(key)'>}, ['touch', '\(p.dir.path)/replaced'])", dir: p.dir)
        #expect(shaped.hasPrefix("ERR org.freedesktop.DBus.Error.InvalidArgs") && shaped.contains("'/'"), "\(shaped)")
        let cli = try d.bgtask(["submit", "--id", key, "--", "true"])
        #expect(cli.0 != 0 && cli.2.contains("'/'"), "\(cli)")
        #expect(try d.bgtask(["submit", "--id", "mine", "--earliest", "2h", "--", "true"]).0 == 0)
        let all = try d.bgtask(["cancel", "--all"])
        #expect(all.1.contains("cancelled 1 pending"), "\(all)")
        #expect(try d.pendingIDs() == [key])
        let unknown = try d.call("SetAppEnabled", "('com.example.Nobody', false)", dir: p.dir)
        #expect(unknown.hasPrefix("ERR org.freedesktop.DBus.Error.InvalidArgs") && unknown.contains("no manifest"), "\(unknown)")
    }

    @Test("resubmitting an id whose task runs queues the next run behind it; cancel ends both; never two at once")
    func resubmitWhileRunning() throws {
        let p = try PolicyEnv()
        let d = try SessionDaemon(policy: p, preload: false)
        let marker = p.dir.appendingPathComponent("runs")
        let cmd = ["sh", "-c", "echo $$ >> '\(marker.path)'; exec sleep 60"]
        #expect(try d.bgtask(["submit", "--id", "once", "--"] + cmd).0 == 0)
        func runs() -> [Int32] { ((try? String(contentsOf: marker, encoding: .utf8)) ?? "").split(separator: "\n").compactMap { Int32($0) } }
        #expect(polled(within: 10) { runs().count == 1 }, "\(d.daemon?.stderr ?? "")")
        let first = try #require(runs().first)
        #expect(try d.bgtask(["submit", "--id", "once", "--"] + cmd).0 == 0)
        let waiting = try #require(try d.pending().first { $0["id"] as? String == "once" }, "the resubmitted request is not pending")
        #expect((waiting["reason"] as? String)?.contains("its previous run is still running") == true, "\(waiting)")
        let (_, tasks, _) = try d.bgtask(["tasks", "--json"])
        let running = try #require(try JSONSerialization.jsonObject(with: Data(tasks.utf8)) as? [[String: Any]])
        #expect(running.filter { $0["id"] as? String == "once" }.count == 1, "\(tasks)")
        let debug = try d.bgtask(["debug", "launch", "once"])
        #expect(debug.0 != 0 && debug.2.contains("previous run is still running"), "\(debug)")
        #expect(try d.bgtask(["cancel", "once"]).0 == 0)
        #expect(gone(first, within: 10), "the running copy survived cancel")
        #expect(try d.pendingIDs().isEmpty)
        _ = try #require(d.said("once: finished"), "\(d.daemon?.stderr ?? "")")
        #expect(runs().count == 1)
    }

    @Test("a call in the first instant after start sees the whole stored queue (CancelAll counts every stored request)")
    func answersOnlyWithTheWholeQueue() throws {
        let p = try PolicyEnv()
        let d = try SessionDaemon(policy: p, preload: false)
        #expect(try d.bgtask(["submit", "--id", "seed", "--earliest", "2h", "--", "true"]).0 == 0)
        d.daemon?.process.terminate()
        _ = d.daemon?.waitExit(within: 15)
        // 3,000 stored requests, written as the daemon writes them (copies of the seed's row).
        let db = p.dir.appendingPathComponent("state/queue.sqlite").path
        let fill = try Child.run("/usr/bin/python3", ["-c", #"""
            import sqlite3, sys
            c = sqlite3.connect(sys.argv[1])
            cols = [r[1] for r in c.execute("PRAGMA table_info(request)")]
            row = c.execute("SELECT * FROM request WHERE id = 'seed'").fetchone()
            i = cols.index("id")
            for n in range(2999):
                r = list(row); r[i] = f"stored-{n}"
                c.execute(f"INSERT INTO request VALUES ({','.join('?' * len(r))})", r)
            c.commit()
            """#, db], deadline: 30)
        #expect(fill.0 == 0, "\(fill.2)")
        // The client waits for the name and calls at once, while the daemon is still taking the queue up.
        let script = p.dir.appendingPathComponent("buscall.py")
        try busCallScript.write(to: script, atomically: true, encoding: .utf8)
        let address = d.env["DBUS_SESSION_BUS_ADDRESS"]!
        let client = try Child("/bin/sh", ["-c", "gdbus wait --address \"$1\" --timeout 20 io.github.bgtask.Scheduler1 && exec /usr/bin/python3 \"$0\" \"$1\" CancelAll",
                                           script.path, address], environment: Child.environment(["LD_PRELOAD": nil, "DBUS_SESSION_BUS_ADDRESS": address]))
        defer { client.stop() }
        try d.start()
        let reply = try #require(client.line(within: 20), "\(client.stderr)")
        #expect(reply == "OK (uint32 3000,)", "\(reply)")
    }

    @Test("output is cut back to its last 1 MiB while the task still writes; a FIFO at the output path is refused without blocking the daemon")
    func outputIsBounded() throws {
        let p = try PolicyEnv()
        let d = try SessionDaemon(policy: p, preload: false)
        let state = p.dir.appendingPathComponent("state").path
        let out = URL(fileURLWithPath: StatePaths.outputFile(stateDirectory: state, id: "chatty"))
        #expect(try d.bgtask(["submit", "--id", "chatty", "--", "sh", "-c", "head -c 6000000 /dev/zero | tr '\\0' x; echo; echo END; exec sleep 60"]).0 == 0)
        // Bounded on disk (a filesystem without COLLAPSE_RANGE keeps the length, its front a hole), nothing lost at the end.
        var st = stat()
        let cut = polled(within: 15) {
            guard let data = try? Data(contentsOf: out), stat(out.path, &st) == 0 else { return false }
            return Int(st.st_blocks) * 512 <= (2 << 20) + 65536 && String(decoding: data.suffix(4), as: UTF8.self) == "END\n"
        }
        #expect(cut, "output not bounded: \(st.st_size) bytes long, \(Int(st.st_blocks) * 512) allocated")
        let shown = try Child.run(Child.bgtaskPath, ["output", "chatty"], environment: d.env, deadline: 30)
        #expect(shown.0 == 0 && shown.1.utf8.count <= 1 << 20 && shown.1.hasSuffix("END\n"), "\(shown.1.utf8.count) bytes")
        #expect(try d.bgtask(["cancel", "chatty"]).0 == 0)

        #expect(mkfifo(StatePaths.outputFile(stateDirectory: state, id: "fifo"), 0o600) == 0)
        #expect(try d.bgtask(["submit", "--id", "fifo", "--", "true"]).0 == 0)
        let said = try #require(d.saidOf("fifo"), "\(d.daemon?.stderr ?? "")")
        #expect(said.contains("not a regular file") || said.contains("FIFO"), "\(said)")
        // The loop was not blocked: the daemon still answers.
        #expect(try d.bgtask(["pending"]).0 == 0)
    }

    @Test("ListPendingPage pages through the queue in submission order (ListPending still answers whole): a cursor survives tasks cancelled between pages; a bad range is InvalidArgs naming it")
    func listPendingPages() throws {
        let p = try PolicyEnv()
        let d = try SessionDaemon(policy: p, preload: false)
        let ids = (0..<25).map { String(format: "page-%02d", $0) }
        for id in ids {
            let (s, _, e) = try d.bgtask(["submit", "--id", id, "--earliest", "2h", "--", "true"])
            #expect(s == 0, "\(id): \(e)")
        }
        func page(_ extra: [String]) throws -> (ids: [String], next: String?) {
            let (s, o, e) = try d.bgtask(["pending", "--json"] + extra)
            #expect(s == 0, "\(extra): \(e)")
            let list = try #require(try JSONSerialization.jsonObject(with: Data(o.utf8)) as? [[String: Any]], "\(o)")
            let next = e.range(of: "--after '").map { r in String(e[r.upperBound...].prefix { $0 != "'" }) }
            return (list.compactMap { $0["id"] as? String }, next)
        }
        let whole = try page([])
        #expect(whole.ids == ids && whole.next == nil, "every page in one listing, in submission order: \(whole)")
        let first = try page(["--limit", "10"])
        #expect(first.ids == Array(ids[0..<10]))
        let cursor = try #require(first.next, "no cursor for the next page")
        // The last task of the page is cancelled before the next page is asked: the cursor still finds its place.
        #expect(try d.bgtask(["cancel", "page-09"]).0 == 0)
        let second = try page(["--limit", "10", "--after", cursor])
        #expect(second.ids == Array(ids[10..<20]), "\(second)")
        let third = try page(["--limit", "10", "--after", try #require(second.next)])
        #expect(third.ids == Array(ids[20..<25]) && third.next == nil, "\(third)")
        // One task by id; the table pages too.
        #expect(try d.call("ListPendingPage", "({'id': <'page-03'>},)", dir: p.dir).contains("'page-03'"))
        // The whole list in one reply, as ListPending has always given it.
        let all = try d.call("ListPending", "()", dir: p.dir)
        #expect(ids.filter { $0 != "page-09" }.allSatisfy { all.contains("'\($0)'") } && !all.contains("'page-09'"), "\(all.prefix(300))")
        let table = try d.bgtask(["pending"])
        #expect(table.0 == 0 && table.1.split(separator: "\n").count == 25, "a header and 24 tasks: \(table.1)")
        for (range, key) in [("({'limit': <uint32 0>},)", "limit"), ("({'limit': <uint32 10001>},)", "limit"), ("({'after': <'nonsense'>},)", "after"),
                             ("({'limit': <'ten'>},)", "limit"), ("({'page': <1>},)", "page")] {
            let r = try d.call("ListPendingPage", range, dir: p.dir)
            #expect(r.hasPrefix("ERR org.freedesktop.DBus.Error.InvalidArgs") && r.contains(key), "\(range): \(r)")
        }
        let bad = try d.bgtask(["pending", "--limit", "0"])
        #expect(bad.0 == 2 && bad.2.contains("--limit"), "a usage error: \(bad)")
    }

    @Test("calls with too many option keys or too many bytes are refused before they are read")
    func oversizedCallsAreRefused() throws {
        let p = try PolicyEnv()
        let d = try SessionDaemon(policy: p, preload: false)
        let keys = (0..<5000).map { "'k\($0)': <1>" }.joined(separator: ", ")
        let many = try d.call("Submit", "({\(keys)}, ['true'])", dir: p.dir)
        #expect(many.hasPrefix("ERR org.freedesktop.DBus.Error.LimitsExceeded") && many.contains("5000 keys"), "\(many)")
        let big = String(repeating: "a", count: 300_000)
        let args = p.dir.appendingPathComponent("huge-args")
        try "(@a{sv} {}, ['\(big)', '\(big)', '\(big)', '\(big)'])".write(to: args, atomically: true, encoding: .utf8)
        let huge = try d.call("Submit", "@" + args.path, dir: p.dir)
        #expect(huge.hasPrefix("ERR org.freedesktop.DBus.Error.LimitsExceeded"), "\(huge.prefix(200))")
        #expect(try d.bgtask(["pending"]).0 == 0)
    }

    @Test("Submit's on_calendar and window: a wrong type, a bad expression, an absurd length or a never-again date is InvalidArgs naming it, and nothing is queued")
    func calendarAndWindowInputs() throws {
        let p = try PolicyEnv()
        let d = try SessionDaemon(policy: p, preload: false)
        let long = String(repeating: "1,", count: 400) + "1:00"
        for (opts, says) in [("'on_calendar': <42>", "on_calendar must be a string"), ("'on_calendar': <'Fri 13'>", "is not a calendar event"),
                             ("'on_calendar': <'\(long)'>", "longer than 256"), ("'on_calendar': <'2001-01-01'>", "never elapses again"),
                             ("'on_calendar': <'daily'>, 'every': <3600.0>", "exclude each other"),
                             ("'window': <'25:00-01:00'>", "window must be HH:MM-HH:MM"), ("'window': <7>", "window must be a string: HH:MM-HH:MM")] {
            let r = try d.call("Submit", "({'id': <'cal'>, \(opts)}, ['true'])", dir: p.dir)
            #expect(r.hasPrefix("ERR org.freedesktop.DBus.Error.InvalidArgs") && r.contains(says), "\(opts): \(r.prefix(300))")
        }
        #expect(try d.pending().isEmpty)
        let ok = try d.call("Submit", "({'id': <'cal'>, 'on_calendar': <'Mon..Fri 01:00'>, 'window': <'01:00-06:00'>}, ['true'])", dir: p.dir)
        #expect(ok.contains("'cal'"), "\(ok)")
        let cal = try #require(try d.pending().first)
        #expect(cal["calendar"] as? String == "Mon..Fri 01:00" && cal["window"] as? String == "01:00-06:00", "\(cal)")
    }

    @Test("a foreign SQLite file that borrows bgtask's table names is refused untouched (queue and audit trail); why on a state path that is a file says so")
    func foreignDatabasesAreNotTouched() throws {
        let p = try PolicyEnv()
        let state = p.dir.appendingPathComponent("state")
        try FileManager.default.createDirectory(at: state, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        for (file, table) in [("queue.sqlite", "request"), ("audit.sqlite", "decision")] {
            let made = try Child.run("/usr/bin/python3", ["-c", "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('CREATE TABLE \(table) (x)'); c.execute(\"INSERT INTO \(table) VALUES ('theirs')\"); c.commit()",
                                                          state.appendingPathComponent(file).path], deadline: 30)
            #expect(made.0 == 0, "\(made.2)")
        }
        let before = try [Data(contentsOf: state.appendingPathComponent("queue.sqlite")), Data(contentsOf: state.appendingPathComponent("audit.sqlite"))]
        let daemon = try Child.run(Child.bgtaskdPath, ["--no-dbus"], environment: p.env, deadline: 30)
        #expect(daemon.0 != 0 && daemon.2.contains("something else"), "\(daemon)")
        let run = try Child.run(Child.bgtaskPath, ["run", "--no-wait", "--", "true"], environment: p.env, deadline: 30)
        #expect(run.0 != 0 && run.2.contains("something else"), "\(run)")
        let after = try [Data(contentsOf: state.appendingPathComponent("queue.sqlite")), Data(contentsOf: state.appendingPathComponent("audit.sqlite"))]
        #expect(before == after, "a foreign file was modified")
        #expect(!FileManager.default.fileExists(atPath: state.appendingPathComponent("queue.sqlite-wal").path))

        let file = p.dir.appendingPathComponent("statefile")
        try "not a directory".write(to: file, atomically: true, encoding: .utf8)
        let why = try Child.run(Child.bgtaskPath, ["why"], environment: p.environment(preload: false, ["BGTASK_STATE_DIR": file.path]), deadline: 30)
        #expect(why.0 != 0 && why.2.contains("is not a directory"), "\(why)")
    }

    @Test("a task whose working directory is gone is said to have no working directory, not to be a missing command")
    func missingWorkingDirectory() throws {
        let p = try PolicyEnv()
        let d = try SessionDaemon(policy: p, preload: false)
        let r = try d.call("Submit", "({'id': <'nodir'>, 'directory': <'/nonexistent/dir'>}, ['true'])", dir: p.dir)
        #expect(r.hasPrefix("OK"), "\(r)")
        let said = try #require(d.saidOf("nodir"), "\(d.daemon?.stderr ?? "")")
        #expect(said.contains("working directory /nonexistent/dir does not exist"), "\(said)")
    }

    @Test("validation limits are the kernel's: one argument over MAX_ARG_STRLEN, and a command that is not there or not executable, are refused at Submit, named")
    func validationLimitsAreTheKernels() throws {
        let p = try PolicyEnv()
        let d = try SessionDaemon(policy: p, preload: false)
        // The call's text in a file: an argument this long cannot be any process's argument, the caller's included.
        func submit(_ id: String, argumentBytes n: Int) throws -> String {
            let text = p.dir.appendingPathComponent("args-\(id)")
            try "({'id': <'\(id)'>, 'earliest': <\(Int(Date().timeIntervalSince1970) + 7200).0>}, ['echo', '\(String(repeating: "x", count: n))'])"
                .write(to: text, atomically: true, encoding: .utf8)
            return try d.call("Submit", "@" + text.path, dir: p.dir)
        }
        let limit = 32 * Int(sysconf(Int32(_SC_PAGESIZE)))
        let over = try submit("over", argumentBytes: limit)
        #expect(over.hasPrefix("ERR") && over.contains("InvalidArgs") && over.contains("argument 1 of the command is \(limit) bytes")
                && over.contains("MAX_ARG_STRLEN"), "\(over)")
        #expect(try submit("at", argumentBytes: limit - 1).hasPrefix("OK"), "with its NUL, exactly the kernel's limit")

        // Not there: the front's Submit is refused, and the CLI it hands over to says why (2: bad input, nothing queued).
        let missing = try d.bgtask(["submit", "--id", "gone", "--", "bgtask-test-no-such-command"])
        #expect(missing.0 == 2 && missing.2.contains("command bgtask-test-no-such-command is not found in PATH (PATH="), "\(missing)")
        let data = p.dir.appendingPathComponent("not-executable")
        try "#!/bin/sh\n".write(to: data, atomically: true, encoding: .utf8)
        let plain = try d.bgtask(["submit", "--id", "plain", "--", data.path])
        #expect(plain.0 == 2 && plain.2.contains("command \(data.path) is not an executable file this user may run"), "\(plain)")
        // The bus refuses what the CLI refuses, relative paths against the request's directory.
        let bus = try d.call("Submit", "({'id': <'rel'>, 'directory': <'\(p.dir.path)'>}, ['./not-executable'])", dir: p.dir)
        #expect(bus.hasPrefix("ERR") && bus.contains("InvalidArgs") && bus.contains("command ./not-executable (relative to \(p.dir.path))"), "\(bus)")
        let busMissing = try d.call("Submit", "({'id': <'gone'>}, ['bgtask-test-no-such-command'])", dir: p.dir)
        #expect(busMissing.hasPrefix("ERR") && busMissing.contains("is not found in PATH"), "\(busMissing)")
        let (_, listed, _) = try d.bgtask(["pending", "--json"])
        #expect(listed.contains("\"at\"") && !["\"over\"", "\"gone\"", "\"plain\"", "\"rel\""].contains { listed.contains($0) }, "\(listed)")
    }

    @Test("a task is all its processes: a daemon it started (setsid, double fork) ends with cancel, and with the task's own exit")
    func daemonizedChildrenEndWithTheTask() throws {
        let p = try PolicyEnv()
        let d = try SessionDaemon(policy: p, preload: false)
        let pids = p.dir.appendingPathComponent("pids")
        func child() -> Int32? { ((try? String(contentsOf: pids, encoding: .utf8)) ?? "").split(separator: "\n").compactMap { Int32($0) }.last }
        // Escapes the process group and its parent: a new session, reparented to init.
        let daemonize = "( setsid sh -c 'echo $$ >> \(pids.path); trap \"\" TERM; exec sleep 300' & ) ; "
        #expect(try d.bgtask(["submit", "--id", "escaper", "--", "sh", "-c", daemonize + "exec sleep 300"]).0 == 0)
        #expect(polled(within: 10) { child() != nil }, "\(d.daemon?.stderr ?? "")")
        let first = try #require(child())
        #expect(try d.bgtask(["cancel", "escaper"]).0 == 0)
        _ = try #require(d.said("escaper: finished"), "\(d.daemon?.stderr ?? "")")
        #expect(gone(first, within: 15), "the daemonized child survived cancel")

        try FileManager.default.removeItem(at: pids)
        // The command exits once its escaped child has said who it is (else bgtaskd may end it before it writes).
        #expect(try d.bgtask(["submit", "--id", "leaver", "--", "sh", "-c", daemonize + "until [ -s \(pids.path) ]; do sleep 0.05; done; exit 0"]).0 == 0)
        let ended = try #require(d.said("leaver: ended 1 process(es) its command left running"), "\(d.daemon?.stderr ?? "")")
        let second = try #require(child())
        #expect(ended.contains("\(second)"), "\(ended)")
        #expect(gone(second, within: 15), "the daemonized child outlived its task")
    }

    @Test("a run whose start was written but not its pid (bgtaskd killed right after the spawn) is found by its run token and ended before it runs again")
    func crashBetweenSpawnAndRecordRunsOnce() throws {
        let p = try PolicyEnv()
        let d = try SessionDaemon(policy: p, preload: false)
        #expect(try d.bgtask(["submit", "--id", "seed", "--earliest", "2h", "--", "true"]).0 == 0)
        d.daemon?.process.terminate()
        _ = d.daemon?.waitExit(within: 15)
        // What the queue holds when bgtaskd dies after writing its intent, before it learnt the pid.
        let runs = p.dir.appendingPathComponent("runs")
        let cmd = "echo $$ >> '\(runs.path)'; exec sleep 300"
        let db = p.dir.appendingPathComponent("state/queue.sqlite").path
        let token = "4242-1-1700000000-test"
        let set = try Child.run("/usr/bin/python3", ["-c", #"""
            import json, sqlite3, sys, time
            c = sqlite3.connect(sys.argv[1])
            c.execute("UPDATE request SET id = 'twice', state = 'running', argv = ?, earliest = NULL, token = ?, started = ?, pgid = NULL WHERE id = 'seed'",
                      (json.dumps(["sh", "-c", sys.argv[2]]), sys.argv[3], time.time()))
            c.commit()
            """#, db, cmd, token], deadline: 30)
        #expect(set.0 == 0, "\(set.2)")
        // The first copy, started by the daemon that died: it carries the token, and nothing else knows its pid.
        let orphan = try Child("/bin/sh", ["-c", "( setsid sh -c \"\(cmd)\" & )"],
                               environment: Child.environment(["BGTASK_RUN": token, "LD_PRELOAD": nil]))
        defer { orphan.stop() }
        #expect(polled(within: 10) { ((try? String(contentsOf: runs, encoding: .utf8)) ?? "").split(separator: "\n").count == 1 })
        let first = try #require(Int32(((try? String(contentsOf: runs, encoding: .utf8)) ?? "").split(separator: "\n").first ?? ""))
        try d.start()
        // Recovery is said before the daemon serves (start() has read up to that line).
        let recovered = try #require(d.daemon?.stderr.split(separator: "\n").first { $0.contains("twice: interrupted") }, "\(d.daemon?.stderr ?? "")")
        #expect(recovered.contains("found by their run token") && recovered.contains("queued again"), "\(recovered)")
        #expect(gone(first, within: 15), "the first copy runs on")
        _ = try #require(d.said("twice: started"), "\(d.daemon?.stderr ?? "")")
        #expect(polled(within: 10) { ((try? String(contentsOf: runs, encoding: .utf8)) ?? "").split(separator: "\n").count == 2 })
        #expect(try d.bgtask(["cancel", "twice"]).0 == 0)
    }

    @Test("bgtaskd killed at random instants around a start: never two copies of a task at once, never a copy left unsupervised", .timeLimit(.minutes(3)))
    func randomKillsAroundAStart() throws {
        let p = try PolicyEnv()
        let d = try SessionDaemon(policy: p, preload: false)
        let runs = p.dir.appendingPathComponent("runs")
        func live() -> [Int32] {
            ((try? String(contentsOf: runs, encoding: .utf8)) ?? "").split(separator: "\n").compactMap { Int32($0) }.filter { liveState($0) != nil }
        }
        var generator = SystemRandomNumberGenerator()
        for i in 0..<12 {
            #expect(try d.bgtask(["submit", "--id", "once", "--", "sh", "-c", "echo $$ >> '\(runs.path)'; exec sleep 300"]).0 == 0)
            usleep(UInt32.random(in: 0...40_000, using: &generator))
            d.crash()
            try d.start()
            // Recovery is over once the daemon serves: at most one copy lives, and it is the daemon's.
            #expect(live().count <= 1, "iteration \(i): \(live())")
            _ = try d.bgtask(["cancel", "once"])
            #expect(polled(within: 15) { live().isEmpty }, "iteration \(i): a copy outlived cancel: \(live()) \(d.daemon?.stderr ?? "")")
        }
    }

    @Test("SIGTERM with four tasks that ignore SIGTERM: they are ended together within one grace, not one after another")
    func shutdownEndsTasksTogether() throws {
        let p = try PolicyEnv()
        try p.userPolicy("50-grace.toml", "[run]\nexpire_grace = \"4s\"\n")
        let d = try SessionDaemon(policy: p, preload: false)
        let pids = p.dir.appendingPathComponent("pids")
        for n in 0..<4 {
            #expect(try d.bgtask(["submit", "--id", "stubborn\(n)", "--", "sh", "-c", "trap '' TERM; echo $$ >> '\(pids.path)'; while :; do sleep 1; done"]).0 == 0)
        }
        #expect(polled(within: 15) { ((try? String(contentsOf: pids, encoding: .utf8)) ?? "").split(separator: "\n").count == 4 })
        let t0 = Date()
        d.daemon?.process.terminate()
        let status = d.daemon?.waitExit(within: 30)
        let took = Date().timeIntervalSince(t0)
        #expect(status == 0)
        // One 4 s grace for all four (sequentially it was 16 s), well inside the unit's TimeoutStopSec=30.
        #expect(took < 9, "stopping took \(took) s")
        for pid in ((try? String(contentsOf: pids, encoding: .utf8)) ?? "").split(separator: "\n").compactMap({ Int32($0) }) {
            #expect(liveState(pid) == nil, "\(pid) outlived bgtaskd")
        }
    }

    @Test("a request that cannot be stored (the queue locked past its 5 s timeout, as a full disk fails a write) is Unavailable, within the error table, and nothing is queued")
    func unstorableRequestIsUnavailable() throws {
        let p = try PolicyEnv()
        let d = try SessionDaemon(policy: p, preload: false)
        let db = p.dir.appendingPathComponent("state/queue.sqlite").path
        let holder = try Child("/usr/bin/python3", ["-c", """
            import sqlite3, sys, time
            c = sqlite3.connect(sys.argv[1], isolation_level=None)
            c.execute("BEGIN EXCLUSIVE")
            print("locked", flush=True)
            time.sleep(20)
            """, db], environment: Child.environment(["LD_PRELOAD": nil]))
        defer { holder.stop() }
        _ = try #require(holder.line(within: 10) { $0 == "locked" }, "\(holder.stderr)")
        let r = try d.call("Submit", "({'id': <'unstored'>}, ['true'])", dir: p.dir)
        #expect(r.hasPrefix("ERR io.github.bgtask.Scheduler1.Error.Unavailable") && r.contains("nothing was queued"), "\(r)")
        holder.stop()
        #expect(try !d.pendingIDs().contains("unstored"))
    }

    @Test("why while the very first run creates the audit trail: an empty story or the run's, never 'no such table'")
    func readerDuringTheFirstRun() throws {
        for i in 0..<15 {
            let p = try PolicyEnv()
            let run = try Child(Child.bgtaskPath, ["run", "--id", "first", "--", "true"], environment: p.env)
            defer { run.stop() }
            let why = try Child.run(Child.bgtaskPath, ["why"], environment: p.env, deadline: 30)
            #expect(!why.2.contains("no such table") && !why.2.contains("SQLite error"), "iteration \(i): \(why)")
            #expect(run.waitExit(within: 20) == 0)
        }
    }
}

@Suite("bgtaskd follows its configuration as it is created")
struct ConfigurationWatchTests {
    @Test("on an account with no ~/.config/bgtask, a policy layer and a manifest created while bgtaskd runs are in force without SIGHUP")
    func layersCreatedLaterAreSeen() throws {
        let p = try PolicyEnv()
        let config = p.dir.appendingPathComponent("fresh-config")
        let data = p.dir.appendingPathComponent("fresh-data")
        let d = try SessionDaemon(policy: p, preload: false, extraEnv: ["XDG_CONFIG_HOME": config.path, "XDG_DATA_HOME": data.path,
                                                                       "XDG_DATA_DIRS": "/nonexistent"])
        let layer = config.appendingPathComponent("bgtask/policy.d")
        try FileManager.default.createDirectory(at: layer, withIntermediateDirectories: true)
        try "[[rule]]\nid = \"late.gate\"\nwhen = 'task.id == \"gated\"'\nverdict = \"defer\"\nreason = \"held by the new layer\"\n"
            .write(to: layer.appendingPathComponent("50-gate.toml"), atomically: true, encoding: .utf8)
        // A reload may come before the file does (the directories were made first): wait for the one that reads it.
        _ = try #require(d.daemon?.errorLine(within: 10) { $0.contains("policy reloaded") && $0.contains("50-gate.toml") },
                         "\(d.daemon?.stderr ?? "")")
        #expect(try d.bgtask(["submit", "--id", "gated", "--", "true"]).0 == 0)
        let entry = try #require(try d.pending().first { $0["id"] as? String == "gated" }, "not held")
        #expect(entry["rule"] as? String == "late.gate", "\(entry)")

        let apps = data.appendingPathComponent("bgtask/apps")
        try FileManager.default.createDirectory(at: apps, withIntermediateDirectories: true)
        try "id = \"org.example.Late\"\ncommand = [\"/bin/true\"]\npermitted_identifiers = [\"org.example.late.refresh\"]\n"
            .write(to: apps.appendingPathComponent("org.example.Late.toml"), atomically: true, encoding: .utf8)
        // As above, a reload may come between the directory and the file: wait for the manifest to be in force.
        #expect(polled(within: 10) { (try? d.call("ListApps", dir: p.dir))?.contains("org.example.Late") == true }, "\(d.daemon?.stderr ?? "")")
    }
}
