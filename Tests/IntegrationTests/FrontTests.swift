import BgtaskTestSupport
import Foundation
import Testing

/// `bgtask`'s front (Sources/bgtask-front): a plain submit is its own sd-bus call, everything else the full CLI's.
extension UmockdevIntegrationTests {
    /// A pending entry without what differs between two submissions of the same request.
    static func request(_ entry: [String: Any]) -> NSDictionary {
        var e = entry
        // Times of submission, and what is said of them (an estimate from "now").
        for k in e.keys where k.hasPrefix("submitted") || k.hasPrefix("next") || k == "likely" { e[k] = nil }
        return e as NSDictionary
    }

    @Test("the front queues exactly what the full CLI queues for every option it takes itself (kind, flags, id or none, --json)")
    func frontQueuesWhatTheCLIQueues() throws {
        try requirePreload()
        let p = try PolicyEnv()
        let tb = Testbed()
        _ = tb.addLaptop(acOnline: false)
        // A command whose name starts with `-` that exists (Submit refuses one that is not found), on PATH for all.
        let bin = p.dir.appendingPathComponent("bin")
        try FileManager.default.createDirectory(at: bin, withIntermediateDirectories: true)
        let dash = bin.appendingPathComponent("-dash-command")
        try "#!/bin/sh\n".write(to: dash, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: dash.path)
        let path = bin.path + ":" + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin")
        let d = try SessionDaemon(policy: p, preload: true, extraEnv: ["PATH": path])
        let cases: [[String]] = [
            ["--requires-external-power", "--", "echo", "one", "two"],
            ["--id", "backup.home", "--kind", "refresh", "--requires-external-power", "--", "true"],
            ["--id=x_1:2@3+4", "--kind=continued", "--requires-external-power", "--cpu-heavy", "echo"],
            ["--ignore-idle", "--requires-network", "--unmetered", "--requires-external-power", "/bin/echo", "--not-an-option-of-ours"],
            ["--user-initiated", "--kind", "regular", "--requires-external-power", "--json", "--", "-dash-command"],
            // A `--` of the command's own, after its first word: the command's, as `nice` or `timeout` take it.
            ["--requires-external-power", "git", "log", "--", "README.md"],
            ["--requires-external-power", "--", "git", "log", "--", "README.md"],
        ]
        for args in cases {
            let (s1, o1, e1) = try d.bgtask(["submit"] + args)
            #expect(s1 == 0, "front \(args): \(e1)")
            let front = try d.pending()
            #expect(try d.bgtask(["cancel", "--all"]).0 == 0)
            let (s2, o2, e2) = try Child.run(Child.bgtaskCLIPath, ["submit"] + args, environment: d.env, deadline: 30)
            #expect(s2 == 0, "cli \(args): \(e2)")
            let cli = try d.pending()
            #expect(try d.bgtask(["cancel", "--all"]).0 == 0)
            #expect(o1 == o2, "\(args): the front printed \(o1), the CLI \(o2)")
            #expect(front.count == 1 && cli.count == 1)
            if let f = front.first, let c = cli.first {
                #expect(Self.request(f) == Self.request(c), "\(args): the front queued \(f), the CLI \(c)")
            }
        }
    }

    @Test("a `--` after the command's first word is the command's own, for run as for submit: `run echo -- hi` prints `-- hi`")
    func terminatorInsideTheCommand() throws {
        let p = try PolicyEnv()
        let env = p.environment(preload: false)
        let r = try Child.run(Child.bgtaskPath, ["run", "--no-wait", "--kind", "regular", "echo", "--", "hi", "there"], environment: env, deadline: 30)
        #expect(r.0 == 0 && r.1 == "-- hi there\n", "\(r)")
        let t = try Child.run(Child.bgtaskPath, ["run", "--no-wait", "--kind", "regular", "--", "echo", "--", "hi"], environment: env, deadline: 30)
        #expect(t.0 == 0 && t.1 == "-- hi\n", "\(t)")
    }

    @Test("the front hands the rest to the full CLI unchanged: other commands, submit options it does not take, identifiers it does not vouch for, refusals")
    func frontHandsTheRestOver() throws {
        try requirePreload()
        let p = try PolicyEnv()
        try p.userPolicy("60-limit.toml", "[daemon]\nmax_pending_per_app = 2\n")
        let tb = Testbed()
        _ = tb.addLaptop(acOnline: false)
        let d = try SessionDaemon(policy: p, preload: true)
        let version = try d.bgtask(["--version"])
        let cliVersion = try Child.run(Child.bgtaskCLIPath, ["--version"], environment: d.env, deadline: 30)
        #expect(version.0 == 0 && version.1 == cliVersion.1)
        // A word that is not UTF-8 (a file name in another encoding): the bus would refuse it as a string, so the CLI
        // sends it, as it always has.
        let latin1 = try Child.run("/bin/sh", ["-c", "exec \"$0\" submit --id latin1 --requires-external-power -- echo \"$(printf 'caf\\351')\"",
                                               Child.bgtaskPath], environment: d.env, deadline: 30)
        #expect(latin1.0 == 0 && latin1.1 == "latin1\n", "\(latin1)")
        #expect(try d.pending().first { $0["id"] as? String == "latin1" }?["command"] as? [String] == ["echo", "caf\u{FFFD}"])
        #expect(try d.bgtask(["cancel", "latin1"]).0 == 0)
        // Options only the CLI takes, and an identifier outside the front's plain characters: queued by the CLI.
        #expect(try d.bgtask(["submit", "--id", "nightly", "--earliest", "2h", "--retry", "2", "--", "true"]).0 == 0)
        #expect(try d.bgtask(["submit", "--id", "café report", "--requires-external-power", "--", "true"]).0 == 0)
        let ids = Set(try d.pending().compactMap { $0["id"] as? String })
        #expect(ids == ["nightly", "café report"])
        // A word given twice and a misplaced value are the CLI's to word.
        for (args, words) in [(["submit", "--json", "--json", "--", "true"], ""), (["submit", "--id", "--json", "--", "true"], "--id")] {
            let front = try d.bgtask(args)
            let cli = try Child.run(Child.bgtaskCLIPath, args, environment: d.env, deadline: 30)
            #expect(front.0 == cli.0 && front.2 == cli.2, "\(args): \(front) vs \(cli)")
            #expect(words.isEmpty || front.2.contains(words))
        }
        // bgtaskd refuses a third request (max_pending_per_app = 2): nothing was queued, and the CLI's own attempt
        // says why, with its exit status, as the CLI alone does.
        let args = ["submit", "--id", "third", "--requires-external-power", "--json", "--", "true"]
        let refused = try d.bgtask(args)
        let direct = try Child.run(Child.bgtaskCLIPath, args, environment: d.env, deadline: 30)
        #expect(refused.0 == 75 && refused.2.contains("max_pending_per_app"), "\(refused)")
        #expect(refused.0 == direct.0 && refused.1 == direct.1 && refused.2 == direct.2)
        #expect(Set(try d.pending().compactMap { $0["id"] as? String }) == ids)
    }

    @Test("the front speaks the bus itself at every address form it takes: unix:abstract, unix:path with %-escapes, an unusable entry first, $XDG_RUNTIME_DIR/bus when no address is set")
    func frontFindsTheBus() throws {
        try requirePreload()
        let p = try PolicyEnv()
        let tb = Testbed()
        _ = tb.addLaptop(acOnline: false)
        // A front alone: handing over would fail (127), so a queued request is the front's own.
        let alone = p.dir.appendingPathComponent("front-alone")
        try FileManager.default.createDirectory(at: alone, withIntermediateDirectories: true)
        let front = alone.appendingPathComponent("bgtask").path
        try FileManager.default.copyItem(atPath: Child.bgtaskPath, toPath: front)
        func submit(_ id: String, _ env: [String: String]) throws {
            let r = try Child.run(front, ["submit", "--id", id, "--requires-external-power", "--", "true"], environment: env, deadline: 30)
            #expect(r.0 == 0 && r.1 == id + "\n", "\(id): \(r)")
        }
        func escaped(_ s: String) -> String { s.replacingOccurrences(of: "/", with: "%2f") }

        let abstractName = "/tmp/bgtask-front-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let abstractBus = try PrivateBus(listen: "unix:abstract=\(abstractName)")
        let a = try SessionDaemon(policy: p, preload: true, session: abstractBus)
        try submit("abstract", a.env)
        try submit("escaped", a.env.merging(["DBUS_SESSION_BUS_ADDRESS": "unix:abstract=\(escaped(abstractName))"]) { $1 })
        try submit("second", a.env.merging(["DBUS_SESSION_BUS_ADDRESS": "tcp:host=127.0.0.1,port=1;unix:abstract=\(abstractName)"]) { $1 })
        #expect(Set(try a.pending().compactMap { $0["id"] as? String }) == ["abstract", "escaped", "second"])
        a.daemon?.stop()

        // A socket in the file system, found as $XDG_RUNTIME_DIR/bus (a second daemon on the same state: the queue
        // it takes up holds the first one's requests too).
        let b = try SessionDaemon(policy: p, preload: true)
        let path = try #require(b.bus.address.split(separator: ",").first.flatMap { $0.hasPrefix("unix:path=") ? String($0.dropFirst(10)) : nil },
                                "dbus-daemon's session default here is a path: \(b.bus.address)")
        let run = p.dir.appendingPathComponent("run-\(getpid())")
        try FileManager.default.createDirectory(at: run, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: run.appendingPathComponent("bus").path, withDestinationPath: path)
        var env = b.env
        env["DBUS_SESSION_BUS_ADDRESS"] = nil
        env["XDG_RUNTIME_DIR"] = run.path
        try submit("runtime", env)
        try submit("path", b.env.merging(["DBUS_SESSION_BUS_ADDRESS": "unix:path=\(escaped(path))"]) { $1 })
        #expect(Set(try b.pending().compactMap { $0["id"] as? String }) == ["abstract", "escaped", "second", "runtime", "path"])
    }
}
