import BgtaskTestSupport
import Foundation
import Testing

let repoRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../..").standardized

/// The shipped layer from the repository, and empty /etc and user layers unless a test adds to them.
final class PolicyEnv {
    let dir = FileManager.default.temporaryDirectory.appendingPathComponent("bgtask-policy-\(UUID().uuidString)")
    var userDir: URL { dir.appendingPathComponent("config/bgtask/policy.d") }

    /// Outside umockdev, children read a recorded laptop on its charger (full, no thermal zones) and an
    /// empty /proc, never this machine's own /sys, /proc or buses: a test machine on battery at 15 % or
    /// in power-saver must not change a verdict.
    let machine: FixtureTree

    init(fixture: String = "power/05-asus-c300-full.umockdev") throws {
        machine = try FixtureTree.load(fixture)
        try FileManager.default.createDirectory(at: userDir, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(at: dir.appendingPathComponent("etc"), withIntermediateDirectories: true)
        try FileManager.default.createDirectory(at: dir.appendingPathComponent("proc"), withIntermediateDirectories: true)
    }
    deinit {
        machine.remove()
        try? FileManager.default.removeItem(at: dir)
    }

    var env: [String: String] { environment(preload: false) }

    /// With `preload`, the umockdev testbed of this process is kept visible to the child.
    func environment(preload: Bool, _ extra: [String: String?] = [:]) -> [String: String] {
        var o: [String: String?] = ["BGTASK_POLICY_DIR": repoRoot.appendingPathComponent("Policies").path,
                                    "BGTASK_SYSTEM_POLICY_DIR": dir.appendingPathComponent("etc").path,
                                    "XDG_CONFIG_HOME": dir.appendingPathComponent("config").path,
                                    "BGTASK_STATE_DIR": dir.appendingPathComponent("state").path,
                                    "BGTASK_RUNTIME_DIR": dir.appendingPathComponent("run").path,
                                    // Never this machine's own systemd user manager (a test that wants one starts its own).
                                    "BGTASK_SYSTEMD_UNITS": "0",
                                    // Nor the user's own data (app manifests, ~/.local/share) or state: a test's own.
                                    "XDG_DATA_HOME": dir.appendingPathComponent("data").path,
                                    "XDG_DATA_DIRS": dir.appendingPathComponent("data-dirs").path,
                                    "XDG_STATE_HOME": dir.appendingPathComponent("xdg-state").path,
                                    "XDG_CACHE_HOME": dir.appendingPathComponent("cache").path]
        if !preload {
            o["LD_PRELOAD"] = .some(nil); o["UMOCKDEV_DIR"] = .some(nil)
            o["BGTASK_SYSFS_ROOT"] = machine.root.path
            o["BGTASK_PROC_ROOT"] = dir.appendingPathComponent("proc").path
        }
        for (k, v) in extra { o.updateValue(v, forKey: k) }   // a nil value unsets the variable
        return Child.environment(o)
    }

    func userPolicy(_ name: String, _ text: String) throws {
        try text.write(to: userDir.appendingPathComponent(name), atomically: true, encoding: .utf8)
    }

    func run(_ args: [String]) throws -> (Int32, String, String) {
        try Child.run(Child.bgtaskPath, args, environment: env)
    }
}

@Suite("bgtask policy, end to end")
struct PolicyCommandTests {
    @Test("policy check --json: ok, the files, the rule count; a broken file's errors at file, line and column, exit 1")
    func checkJSON() throws {
        let p = try PolicyEnv()
        let ok = try p.run(["policy", "check", "--json", repoRoot.appendingPathComponent("Policies/default.toml").path])
        #expect(ok.0 == 0)
        let good = try #require(try JSONSerialization.jsonObject(with: Data(ok.1.utf8)) as? [String: Any])
        #expect(good["ok"] as? Bool == true)
        #expect((good["rules"] as? Int ?? 0) >= 9)
        #expect((good["errors"] as? [Any])?.isEmpty == true)
        try p.userPolicy("bad.toml", "[[rule]]\nid = \"x\"\nwhen = 'thermal.state > \"warm\"'\nverdict = \"defer\"\n")
        let r = try p.run(["policy", "check", "--json", p.userDir.appendingPathComponent("bad.toml").path])
        #expect(r.0 == 1)
        let badJSON = try #require(try JSONSerialization.jsonObject(with: Data(r.1.utf8)) as? [String: Any])
        #expect(badJSON["ok"] as? Bool == false)
        let first = try #require((badJSON["errors"] as? [[String: Any]])?.first)
        #expect(first["line"] as? Int == 3)
        #expect((first["file"] as? String)?.hasSuffix("bad.toml") == true)
        #expect((first["message"] as? String)?.contains("warm") == true)
    }

    @Test("check passes the shipped policy and exits 1 on every broken file, naming file:line:col")
    func checkExitCodes() throws {
        let p = try PolicyEnv()
        let ok = try p.run(["policy", "check", repoRoot.appendingPathComponent("Policies/default.toml").path])
        #expect(ok.0 == 0)
        #expect(ok.1.hasPrefix("ok: 1 file, "))
        let badDir = repoRoot.appendingPathComponent("Tests/BgtaskPolicyTests/BadPolicies")
        let bad = try FileManager.default.contentsOfDirectory(atPath: badDir.path).filter { $0.hasSuffix(".toml") }.sorted()
        let r = try p.run(["policy", "check"] + bad.map { badDir.appendingPathComponent($0).path })
        #expect(r.0 == 1)
        for f in bad {
            let header = try String(contentsOf: badDir.appendingPathComponent(f), encoding: .utf8).split(separator: "\n")[0]
            let position = header.dropFirst("# expect: ".count).prefix { $0 != " " }
            #expect(r.2.contains("\(f):\(position): "), "\(f) at \(position)")
        }
        #expect(r.2.contains("\(bad.count) files"))
    }

    @Test("check with no arguments checks every layer; a broken user file fails it")
    func checkLayers() throws {
        let p = try PolicyEnv()
        #expect(try p.run(["policy", "check"]).0 == 0)
        try "[[rule]]\nid = \"x\"\nwhen = 'thermal.state > \"warm\"'\nverdict = \"pause\"\n"
            .write(to: p.userDir.appendingPathComponent("mine.toml"), atomically: true, encoding: .utf8)
        let r = try p.run(["policy", "check"])
        #expect(r.0 == 1)
        #expect(r.2.contains("mine.toml:3:25: in 'when' of rule 'x': \"warm\" is not a thermal state"))
    }

    @Test("one rule for a broken layer in every command: found in policy.d, left out with a warning naming file:line:col and the others decide; named with --policy, exit 78; policy check exits 1")
    func brokenLayerOneStory() throws {
        let p = try PolicyEnv()
        let text = "[[rule]]\nid = \"x\"\nwhen = 'thermal.temp > 5'\nverdict = \"pause\"\n"
        try p.userPolicy("60-typo.toml", text)
        let named = p.dir.appendingPathComponent("named.toml")
        try Data(text.utf8).write(to: named)
        let at = "60-typo.toml:3:9: in 'when' of rule 'x': unknown name 'thermal.temp'"
        for args in [["run", "--no-wait", "--", "true"], ["policy", "explain", "--id", "t"], ["policy", "show"], ["doctor"]] {
            let r = try p.run(args)
            let said = r.1 + r.2
            #expect(said.contains("a policy layer does not load and is left out") && said.contains(at), "\(args): \(r)")
            if args[0] != "doctor" { #expect(r.0 == 0, "\(args): \(r)") }
        }
        let watch = try Child(Child.bgtaskPath, ["watch", "--json", "--thermal-interval", "0"], environment: p.env)
        defer { watch.stop() }
        #expect(watch.errorLine(within: 10) { $0.contains("a policy layer does not load and is left out") } != nil, "\(watch.stderr)")
        #expect(watch.line(within: 10) != nil, "watch goes on: \(watch.stderr)")
        for args in [["run", "--policy", named.path, "--no-wait", "--", "true"], ["policy", "explain", "--policy", named.path, "--id", "t"],
                     ["policy", "show", "--policy", named.path]] {
            let r = try p.run(args)
            #expect(r.0 == 78 && r.2.contains("named.toml:3:9") && r.2.contains("the policy does not load"), "\(args): \(r)")
        }
        #expect(try p.run(["policy", "check"]).0 == 1)
        #expect(try p.run(["policy", "check", named.path]).0 == 1)
    }

    @Test("a user layer replaces a shipped rule by id; show says so")
    func showLayers() throws {
        let p = try PolicyEnv()
        try "[[rule]]\nid = \"heavy.on-battery\"\nwhen = 'task.cpu_heavy && power.external == false'\nverdict = \"throttle\"\ncpu_percent = 10\n[[rule]]\nid = \"discretionary.power-saver\"\nenabled = false\n"
            .write(to: p.userDir.appendingPathComponent("50-mine.toml"), atomically: true, encoding: .utf8)
        let r = try p.run(["policy", "show", "--json"])
        #expect(r.0 == 0, "\(r.2)")
        let json = try #require(try JSONSerialization.jsonObject(with: Data(r.1.utf8)) as? [String: Any])
        let rules = try #require(json["rules"] as? [[String: Any]])
        let heavy = try #require(rules.first { $0["id"] as? String == "heavy.on-battery" })
        #expect(heavy["cpu_percent"] as? Int == 10)
        #expect((heavy["origin"] as? String)?.hasSuffix("50-mine.toml:2") == true)
        #expect(((heavy["history"] as? [String])?.first)?.contains("default.toml") == true)
        #expect(!rules.contains { $0["id"] as? String == "discretionary.power-saver" })
    }

    @Test("explain and simulate take the task options run and submit take (typed --kind, durations), and say the same as the older --task form; the two forms do not mix")
    func sharedTaskOptions() throws {
        let p = try PolicyEnv()
        let tree = try FixtureTree.load("laptop-node-exporter.umockdev")
        defer { tree.remove() }
        let old = try p.run(["policy", "explain", "--sysfs-root", tree.root.path, "--task", "id=backup,requires_external_power,cpu_heavy,waited=2h"])
        let new = try p.run(["policy", "explain", "--sysfs-root", tree.root.path, "--id", "backup", "--requires-external-power", "--cpu-heavy", "--waited", "2h"])
        #expect(new.0 == 0, "\(new.2)")
        #expect(new.1 == old.1, "\(new.1)\n---\n\(old.1)")
        #expect(new.1.hasPrefix("backup (processing): defer"), "\(new.1)")
        let kind = try p.run(["policy", "explain", "--sysfs-root", tree.root.path, "--kind", "nightly"])
        #expect(kind.0 == 2 && kind.2.contains("nightly") && kind.2.contains("processing"), "\(kind.2)")
        let duration = try p.run(["policy", "explain", "--sysfs-root", tree.root.path, "--waited", "soon"])
        #expect(duration.0 == 2 && duration.2.contains("soon"), "\(duration.2)")
        let mixed = try p.run(["policy", "explain", "--sysfs-root", tree.root.path, "--task", "cpu_heavy", "--cpu-heavy"])
        #expect(mixed.0 == 2 && mixed.2.contains("exclude each other"), "\(mixed.2)")
        let trace = repoRoot.appendingPathComponent("Tests/BgtaskPolicyTests/Traces/charger-heat-charger.jsonl").path
        let a = try p.run(["policy", "simulate", "--trace", trace, "--task", "id=build,requires_external_power,cpu_heavy", "--budget", "20s"])
        let b = try p.run(["policy", "simulate", "--trace", trace, "--id", "build", "--requires-external-power", "--cpu-heavy", "--budget", "20s"])
        #expect(b.0 == 0 && a.1 == b.1, "\(b.1) \(b.2)\n---\n\(a.1)")
    }

    @Test("explain against a recorded laptop gives the documented verdict, with reasons and readings")
    func explainOnRecording() throws {
        let p = try PolicyEnv()
        let tree = try FixtureTree.load("laptop-node-exporter.umockdev")
        defer { tree.remove() }
        let r = try p.run(["policy", "explain", "--sysfs-root", tree.root.path, "--task", "id=backup,requires_external_power,cpu_heavy"])
        #expect(r.0 == 0, "\(r.2)")
        #expect(r.1.hasPrefix("backup (processing): defer — waiting for external power (BAT0 is discharging"))
        #expect(r.1.contains("decided by processing.needs-power (") && r.1.contains("default.toml:"))
        #expect(r.1.contains("throttle heavy.on-battery"))
        let j = try p.run(["policy", "explain", "--sysfs-root", tree.root.path, "--task", "cpu_heavy", "--json"])
        let json = try #require(try JSONSerialization.jsonObject(with: Data(j.1.utf8)) as? [String: Any])
        #expect(json["verdict"] as? String == "throttle")
        #expect(json["cpu_percent"] as? Int == 25)
    }

    @Test("explain reads conditions from a status --json file too; bad input is a clear error")
    func explainFromFileAndBadInput() throws {
        let p = try PolicyEnv()
        let f = p.dir.appendingPathComponent("status.json")
        try #"{"power":{"external":true},"thermal":{"state":"critical","celsius":101}}"#.write(to: f, atomically: true, encoding: .utf8)
        let r = try p.run(["policy", "explain", "--conditions", f.path, "--task", "user_initiated"])
        #expect(r.1.contains("expire") && r.1.contains("all.critical-heat"))
        let bad = try p.run(["policy", "explain", "--conditions", f.path, "--task", "kind=nightly"])
        #expect(bad.0 == 2)
        #expect(bad.2.contains("kind=nightly: one of processing, refresh, continued"))
        try "{nope".write(to: f, atomically: true, encoding: .utf8)
        let notJSON = try p.run(["policy", "explain", "--conditions", f.path, "--task", "cpu_heavy"])
        #expect(notJSON.0 == 2)
        #expect(notJSON.2.contains("not JSON"))
    }

    @Test("simulate replays budgets and expiry through the same core as run: budget used up, the grace, SIGKILL")
    func simulateShowsBudgetExpiry() throws {
        let p = try PolicyEnv()
        let trace = repoRoot.appendingPathComponent("Tests/BgtaskPolicyTests/Traces/charger-heat-charger.jsonl").path
        let r = try p.run(["policy", "simulate", "--trace", trace, "--task", "id=build", "--budget", "20s"])
        #expect(r.0 == 0, "\(r.2)")
        let lines = r.1.split(separator: "\n").map(String.init)
        let expiry = try #require(lines.firstIndex { $0.contains("budget 20s used up (grace 10s)") }, "\(r.1)")
        let kill = try #require(lines.firstIndex { $0.contains("killed (SIGKILL)") }, "\(r.1)")
        #expect(kill > expiry)
        #expect(lines[expiry].contains("+20s") || lines[expiry].contains("+2"), "\(lines[expiry])")
        try p.userPolicy("50-never.toml", "[[rule]]\nid = \"never\"\nwhen = 'task.id == \"b\"'\nverdict = \"defer\"\n")
        let gaveUp = try p.run(["policy", "simulate", "--trace", trace, "--task", "id=b", "--max-wait", "5s"])
        #expect(gaveUp.1.contains("gave up (--max-wait 5s)"), "\(gaveUp.1)")
    }

    @Test("simulate on the recorded umockdev trace prints the timeline with its holds")
    func simulateRecordedTrace() throws {
        let p = try PolicyEnv()
        let trace = repoRoot.appendingPathComponent("Tests/BgtaskPolicyTests/Traces/charger-heat-charger.jsonl").path
        let r = try p.run(["policy", "simulate", "--trace", trace, "--task", "id=build,requires_external_power,cpu_heavy"])
        #expect(r.0 == 0, "\(r.2)")
        let lines = r.1.split(separator: "\n").map(String.init)
        #expect(lines.first?.contains("started") == true)
        #expect(lines.contains { $0.contains("paused") && $0.contains("processing.needs-power") })
        #expect(lines.contains { $0.contains("hold: processing.needs-power lets go at") })
        #expect(lines.contains { $0.contains("hold: heavy.hot lets go at") })
        #expect(lines.last?.contains("resumed") == true)
        let bad = try p.run(["policy", "simulate", "--trace", "/nonexistent", "--task", "cpu_heavy"])
        #expect(bad.0 == 2)
        #expect(bad.2.contains("/nonexistent:1:1: cannot read"))
    }
}

extension UmockdevIntegrationTests {
    @Test("a trace recorded live under umockdev replays: paused when unplugged and hot, resumed after the holds")
    func recordThenSimulate() throws {
        try requirePreload()
        let p = try PolicyEnv()
        let tb = Testbed()
        let laptop = tb.addLaptop(acOnline: true, batteryStatus: "Charging")
        let trace = p.dir.appendingPathComponent("trace.jsonl").path
        let watch = try Child(Child.bgtaskPath, ["watch", "--json", "--no-dbus", "--thermal-interval", "0.05", "--record", trace])
        _ = try #require(watch.line(within: 10), "no first line: \(watch.stderr)")
        tb.plug(laptop, false)
        _ = try #require(watch.line(within: 3) { $0.contains("\"power.external\"") })
        tb.set(laptop.zone, "temp", "90000")
        _ = try #require(watch.line(within: 3) { $0.contains("\"thermal.state\"") })
        tb.set(laptop.zone, "temp", "60000")
        _ = try #require(watch.line(within: 3) { $0.contains("\"thermal.state\"") })
        tb.plug(laptop, true)
        _ = try #require(watch.line(within: 3) { $0.contains("\"power.external\"") })
        // Ended between two lines: the trace never ends in half of one.
        watch.process.terminate()
        #expect(watch.waitExit(within: 10) == 128 + SIGTERM)
        watch.stop()

        let r = try Child.run(Child.bgtaskPath, ["policy", "simulate", "--trace", trace, "--task", "requires_external_power,cpu_heavy", "--json"],
                              environment: p.env)
        #expect(r.0 == 0, "\(r.2)")
        let events = try r.1.split(separator: "\n").map { try #require(try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]) }
        let actions = events.flatMap { ($0["actions"] as? [String]) ?? [] }
        #expect(actions == ["started", "paused", "resumed"])
        // The trace took about a second; the holds (1 min after cooling, 30 s after the charger) set when it resumes.
        let resumed = try #require(events.last)
        #expect((resumed["offset_s"] as? Double ?? 0) >= 60)
    }
}

extension PolicyCommandTests {
    @Test("bgtask policy reload: bgtaskd reads the layers now and says what changed; a broken file is named with its line, the last good policy stays, exit 1")
    func reloadAsksTheDaemon() throws {
        let p = try PolicyEnv()
        let d = try SessionDaemon(policy: p, preload: false)
        let (s0, o0, e0) = try d.bgtask(["policy", "reload"])
        #expect(s0 == 0 && o0.contains("policy reloaded: ") && o0.contains("nothing changed"), "\(o0) \(e0)")
        try p.userPolicy("60-broken.toml", "[[rule]]\nid = \"x\"\nwhen = 'battery.prcent < 5'\nverdict = \"defer\"\n")
        let (s1, o1, _) = try d.bgtask(["policy", "reload", "--json"])
        let j = try parseJSON(o1)
        #expect(s1 == 1 && j["loaded"] as? Bool == false, "\(o1)")
        #expect((j["said"] as? String)?.contains("60-broken.toml:3") == true && (j["said"] as? String)?.contains("last good policy stays in force") == true, "\(o1)")
    }

    @Test("a mistyped subcommand or option is named with the closest one, exit 2")
    func didYouMean() throws {
        let p = try PolicyEnv()
        let (s, _, e) = try p.run(["stauts"])
        #expect(s == 2 && e.contains("'stauts' is not a command; did you mean 'bgtask status'?"), "\(e)")
        let (s2, _, e2) = try p.run(["policy", "chek"])
        #expect(s2 == 2 && e2.contains("did you mean 'bgtask policy check'?"), "\(e2)")
        // An option of run or submit, whose own words end at the command, as the parser says it for the others.
        for cmd in ["run", "submit"] {
            let (st, _, er) = try p.run([cmd, "--requires-externl-power", "--", "true"])
            #expect(st == 2 && er.contains("Unknown option '--requires-externl-power'; did you mean '--requires-external-power'?"), "\(cmd): \(er)")
        }
        let (sp, _, ep) = try p.run(["pending", "--jsno"])
        #expect(sp == 2 && ep.contains("Did you mean '--json'?"), "\(ep)")
        let (s3, _, e3) = try p.run(["run", "--budget", "5", "true"])
        #expect(s3 == 2 && e3.contains("a duration is written 30s, 10m, 2h or 1h30m"), "\(e3)")
    }
}

extension PolicyCommandTests {
    @Test("bgtask doctor: one line per check with where it looked; bgtaskd running is ok, absent is a note; a broken policy layer is a problem named at file:line, exit 1")
    func doctorChecksEverything() throws {
        let p = try PolicyEnv()
        let d = try SessionDaemon(policy: p, preload: false)
        let (s, o, e) = try d.bgtask(["doctor", "--json"])
        #expect(s == 0, "\(o) \(e)")
        let checks = try #require(try JSONSerialization.jsonObject(with: Data(o.utf8)) as? [[String: String]], "\(o)")
        let byName = Dictionary(uniqueKeysWithValues: checks.map { ($0["check"] ?? "", $0) })
        for name in ["policy", "state directory", "bgtaskd", "CPU cap", "power", "thermal", "UPower", "presence", "storage"] {
            #expect(byName[name] != nil, "no \(name) line: \(o)")
        }
        #expect(byName["bgtaskd"]?["status"] == "ok" && byName["bgtaskd"]?["detail"]?.contains("running (pid") == true, "\(o)")
        #expect(byName["presence"]?["status"] == "note", "a recorded machine has no logind: \(o)")

        let (s2, o2, _) = try p.run(["doctor"])
        #expect(s2 == 0 && o2.contains("note    bgtaskd") && o2.contains("not reachable"), "\(o2)")
        // No session bus, no user manager, no system bus (a container): notes, not failures, and advice that can be
        // followed here — no X11 autolaunch, no systemctl --user where no user manager runs.
        let bare = p.environment(preload: false, ["DBUS_SESSION_BUS_ADDRESS": nil, "XDG_RUNTIME_DIR": nil,
                                                  "DBUS_SYSTEM_BUS_ADDRESS": "unix:path=\(p.dir.path)/no-system-bus"])
        let (s4, o4, e4) = try Child.run(Child.bgtaskPath, ["doctor"], environment: bare, deadline: 30)
        #expect(s4 == 0 && !o4.contains("PROBLEM"), "\(o4) \(e4)")
        #expect(o4.contains("not reachable (DBUS_SESSION_BUS_ADDRESS is not set, nor XDG_RUNTIME_DIR)") && o4.contains("start it with `bgtaskd &`")
                && !o4.contains("autolaunch") && !o4.contains("systemctl --user"), "\(o4)")
        for peer in ["UPower", "presence", "power-profiles-daemon"] { #expect(o4.contains("note    \(peer)"), "\(peer): \(o4)") }
        try p.userPolicy("70-bad.toml", "[idle]\nafter = 5\n")
        let (s3, o3, _) = try p.run(["doctor"])
        #expect(s3 == 1 && o3.contains("PROBLEM policy") && o3.contains("70-bad.toml:2"), "\(o3)")
    }
}

extension PolicyCommandTests {
    @Test("bgtask policy explain ID explains a queued task with the fields it was submitted with, without retyping them; an unknown id says so")
    func explainQueuedTask() throws {
        let p = try PolicyEnv()
        let d = try SessionDaemon(policy: p, preload: false)
        #expect(try d.bgtask(["submit", "--id", "nightly", "--kind", "refresh", "--requires-network", "--earliest", "2h", "--", "true"]).0 == 0)
        let (s, o, e) = try d.bgtask(["policy", "explain", "nightly"])
        #expect(s == 0, "\(e)")
        // The recorded machine's routing table is unreadable: network.online is unknown, so the network requirement is unmet.
        #expect(o.contains("nightly (refresh): defer — waiting for the network"), "\(o)")
        let (s2, _, e2) = try d.bgtask(["policy", "explain", "nosuch"])
        #expect(s2 == 1 && e2.contains("no task nosuch waits in bgtaskd's queue"), "\(e2)")
        let (s3, _, e3) = try d.bgtask(["policy", "explain", "nightly", "--cpu-heavy"])
        #expect(s3 == 2 && e3.contains("no task options with it"), "\(e3)")
    }
}

extension PolicyCommandTests {
    /// Local time `h:m` on the day `days` from today, as an epoch.
    static func local(_ h: Int32, _ m: Int32, days: Int32) -> Double {
        var now = time_t(Date().timeIntervalSince1970)
        var t = tm()
        localtime_r(&now, &t)
        t.tm_mday += days; t.tm_hour = h; t.tm_min = m; t.tm_sec = 0; t.tm_isdst = -1
        return Double(mktime(&t))
    }

    @Test("submit --earliest and --at take the words people use: 'tomorrow 01:00', a weekday, HH:MM (the next one to come); a wrong one is refused, exit 2")
    func clockWordsForTheEarliestTime() throws {
        let p = try PolicyEnv()
        let d = try SessionDaemon(policy: p, preload: false)
        func earliest(_ id: String) throws -> Double? {
            try d.pending().first { $0["id"] as? String == id }?["earliest"] as? Double
        }
        #expect(try d.bgtask(["submit", "--id", "a", "--earliest", "tomorrow 01:00", "--", "true"]).0 == 0)
        #expect(try earliest("a") == PolicyCommandTests.local(1, 0, days: 1))
        // Two hours ahead, so that the test does not straddle the minute it names.
        let soon = Date().addingTimeInterval(7200)
        var st = time_t(soon.timeIntervalSince1970)
        var t = tm()
        localtime_r(&st, &t)
        let hhmm = String(format: "%02d:%02d", t.tm_hour, t.tm_min)
        #expect(try d.bgtask(["submit", "--id", "b", "--at", hhmm, "--every", "1d", "--", "true"]).0 == 0)
        let b = try #require(try earliest("b"))
        #expect(abs(b - (soon.timeIntervalSince1970 - Double(t.tm_sec))) < 1, "\(b) for \(hhmm)")
        let (_, pending, _) = try d.bgtask(["pending", "--long"])
        #expect(pending.contains("b: ") && pending.contains("(every 1d)"), "\(pending)")
        for bad in [["--at", "25:00"], ["--earliest", "someday 01:00"], ["--at", "01:00", "--earliest", "2h"]] {
            let (s, _, e) = try d.bgtask(["submit", "--id", "c"] + bad + ["--", "true"])
            #expect(s == 2, "\(bad): \(e)")
        }
    }
}

extension PolicyCommandTests {
    @Test("bgtask log into a pipe prints the recent decisions and exits, as journalctl does; -f and --no-follow together are refused")
    func logIntoAPipeExits() throws {
        let p = try PolicyEnv()
        #expect(try p.run(["run", "--id", "logged", "--", "true"]).0 == 0)
        let (s, o, e) = try Child.run(Child.bgtaskPath, ["log", "-n", "5"], environment: p.env, deadline: 20)
        #expect(s == 0 && o.contains("logged"), "\(o) \(e)")
        let (s2, _, e2) = try p.run(["log", "-f", "--no-follow"])
        #expect(s2 == 2 && e2.contains("exclude each other"), "\(e2)")
    }
}

extension PolicyCommandTests {
    @Test("why tells the next run of a retrying or repeating task, asked of a running bgtaskd: retry 1 of 3 and when; every 1d and when")
    func whyTellsTheNextRun() throws {
        let p = try PolicyEnv()
        let d = try SessionDaemon(policy: p, preload: false)
        #expect(try d.bgtask(["submit", "--id", "flaky", "--retry", "3", "--", "sh", "-c", "exit 3"]).0 == 0)
        #expect(try d.bgtask(["submit", "--id", "daily", "--every", "1d", "--", "true"]).0 == 0)
        _ = try #require(d.said("flaky: failed (status 3); retry 1 of 3"), "\(d.daemon?.stderr ?? "")")
        _ = try #require(d.said("daily: finished"), "\(d.daemon?.stderr ?? "")")
        let (_, flaky, flakyErr) = try d.bgtask(["why", "flaky"])
        let pendingJSON = try d.bgtask(["pending", "--json"]).1
        #expect(flaky.contains("exit 3") && flaky.contains("Next: retry 1 of 3, not before "), "\(flaky) \(flakyErr) \(pendingJSON)")
        let daily = try d.bgtask(["why", "daily"]).1
        #expect(daily.contains("Next: every 1d, not before tomorrow ") || daily.contains("Next: every 1d, not before "), "\(daily)")
        #expect(daily.contains(", in 23h") || daily.contains(", in 1d"), "\(daily)")
    }
}

extension PolicyCommandTests {
    @Test("pending lists everything that holds a task back (each rule with file:line, its earliest date), as a table with the last run and as prose with --long")
    func pendingListsEveryUnmetCondition() throws {
        let p = try PolicyEnv()
        try p.userPolicy("50-night.toml", "[[rule]]\nid = \"night.only\"\nwhen = 'task.id == \"sync\"'\nverdict = \"defer\"\nreason = \"only at night\"\n")
        let d = try SessionDaemon(policy: p, preload: false)
        #expect(try d.bgtask(["submit", "--id", "ran", "--", "true"]).0 == 0)
        _ = try #require(d.said("ran: finished"), "\(d.daemon?.stderr ?? "")")
        #expect(try d.bgtask(["submit", "--id", "ran", "--earliest", "2h", "--", "true"]).0 == 0)
        #expect(try d.bgtask(["submit", "--id", "sync", "--requires-network", "--earliest", "3h", "--", "true"]).0 == 0)

        let sync = try #require(try d.pending().first { $0["id"] as? String == "sync" })
        let unmet = try #require(sync["unmet"] as? [[String: Any]], "\(sync)")
        let reasons = unmet.compactMap { $0["reason"] as? String }
        #expect(unmet.contains { $0["rule"] as? String == "night.only" && ($0["location"] as? String)?.hasSuffix("50-night.toml:2") == true }, "\(unmet)")
        #expect(reasons.contains { $0.contains("network") }, "the recorded machine is not online: \(reasons)")
        // A command's date is its start time (--earliest here), not Apple's "earliest begin date" of an app's request.
        #expect(reasons.contains { $0.hasPrefix("not before ") && $0.contains("its start time, --at or --earliest") }, "\(reasons)")

        let (s, table, e) = try d.bgtask(["pending"])
        #expect(s == 0, "\(e)")
        let lines = table.split(separator: "\n").map(String.init)
        #expect(lines.first?.hasPrefix("ID") == true && lines.first?.contains("RESULT") == true, "\(table)")
        let ran = try #require(lines.first { $0.hasPrefix("ran ") }, "\(table)")
        #expect(ran.contains(" ok ") && ran.contains("waiting"), "its last run, from the audit trail: \(ran)")
        #expect(lines.contains { $0.hasPrefix("sync ") && $0.contains("more: --long") }, "\(table)")
        let long = try d.bgtask(["pending", "--long"]).1
        #expect(long.contains("unmet: only at night — rule night.only (") && long.contains("50-night.toml:2)"), "\(long)")
    }
}

extension PolicyCommandTests {
    @Test("policy check says where it looked for layers and what it skipped and why: a file that is not *.toml, a policy.toml beside policy.d")
    func checkSaysWhatItSkipped() throws {
        let p = try PolicyEnv()
        try "[[rule]]\n".write(to: p.userDir.appendingPathComponent("rules.tml"), atomically: true, encoding: .utf8)
        let beside = p.userDir.deletingLastPathComponent().appendingPathComponent("policy.toml")
        try "[battery]\nlow_percent = 30\n".write(to: beside, atomically: true, encoding: .utf8)
        let (s, o, e) = try p.run(["policy", "check"])
        #expect(s == 0, "\(e)")
        #expect(o.contains("read: \(p.userDir.path) (0 files)") && o.contains("read: \(p.dir.path)/etc (0 files)"), "\(o)")
        #expect(o.contains("skipped: \(p.userDir.path)/rules.tml (not *.toml)"), "\(o)")
        #expect(o.contains("skipped: \(beside.path) (layers are read from \(p.userDir.path)/*.toml)"), "\(o)")
        let j = try parseJSON(try p.run(["policy", "check", "--json"]).1)
        #expect((j["skipped"] as? [[String: Any]])?.count == 2, "\(j)")
    }
}

extension PolicyCommandTests {
    @Test("submit --on-calendar: waits for the next elapse, runs, and is queued again for the elapse after its start; --between is kept with the request and holds it outside the window")
    func calendarAndWindowThroughTheDaemon() throws {
        let p = try PolicyEnv()
        let d = try SessionDaemon(policy: p, preload: false)
        // Every two seconds: the first run comes within the test, and so does the re-queue.
        #expect(try d.bgtask(["submit", "--id", "tick", "--ignore-idle", "--on-calendar", "*:*:0/2", "--", "true"]).0 == 0)
        _ = try #require(d.said("tick: finished"), "\(d.daemon?.stderr ?? "")")
        let started = Date().timeIntervalSince1970
        let tick = try #require(try d.pending().first { $0["id"] as? String == "tick" }, "queued again after its run")
        #expect(tick["calendar"] as? String == "*:*:0/2")
        let next = try #require(tick["earliest"] as? Double)
        #expect(next > started - 2 && next <= started + 2 && Int(next) % 2 == 0, "\(next)")
        // --json keeps ISO-8601 with the zone beside each time.
        let iso = try #require(tick["earliest_iso"] as? String, "\(tick)")
        #expect(iso.count >= 20 && iso.contains("T") && (iso.hasSuffix("Z") || iso.dropLast(6).count == 19), "\(iso)")

        // A window that closed a minute ago and opens again in 23 hours: the request waits, saying so.
        var now = time_t(Date().timeIntervalSince1970 - 120), t = tm()
        localtime_r(&now, &t)
        let from = String(format: "%02d:%02d", t.tm_hour, t.tm_min)
        now += 60; localtime_r(&now, &t)
        let to = String(format: "%02d:%02d", t.tm_hour, t.tm_min)
        #expect(try d.bgtask(["submit", "--id", "night", "--ignore-idle", "--between", "\(from)-\(to)", "--", "true"]).0 == 0)
        let night = try #require(try d.pending().first { $0["id"] as? String == "night" })
        #expect(night["window"] as? String == "\(from)-\(to)")
        #expect((night["reason"] as? String)?.contains("outside its window \(from)-\(to); it opens in 23h") == true, "\(night)")
        let (_, long, _) = try d.bgtask(["pending", "--long"])
        #expect(long.contains("night: outside its window") && long.contains("(between \(from)-\(to))"), "\(long)")

        for bad in [["--on-calendar", "Fri 13"], ["--on-calendar", "daily", "--every", "1d"], ["--on-calendar", "2020-01-01"],
                    ["--between", "01:00-01:00"]] {
            let (s, _, e) = try d.bgtask(["submit", "--id", "c"] + bad + ["--", "true"])
            #expect(s == 2, "\(bad): \(e)")
        }
    }
}

extension PolicyCommandTests {
    @Test("messages: one style on stderr (bgtask: …, never ArgumentParser's Error:), JSON with --json, and rule files named absolutely or from ~ whatever the reader's directory")
    func oneMessageStyle() throws {
        let p = try PolicyEnv()
        let (s1, o1, e1) = try p.run(["run", "--between", "25:00-01:00", "--", "true"])
        #expect(s1 == 2 && o1.isEmpty && e1.hasPrefix("bgtask: ") && !e1.contains("Error:"), "\(e1)")
        let (s2, o2, e2) = try p.run(["status", "--json", "--bogus"])
        #expect(s2 == 2 && o2.isEmpty, "\(o2)")
        let err = try #require(try JSONSerialization.jsonObject(with: Data(e2.utf8)) as? [String: Any], "\(e2)")
        #expect((err["error"] as? String)?.contains("--bogus") == true && err["exit_status"] as? Int == 2, "\(err)")
        let (s3, _, e3) = try p.run(["pending", "--json"])    // the recorded machine's env has no session bus
        #expect(s3 == 69 && (try? JSONSerialization.jsonObject(with: Data(e3.utf8))) != nil, "\(e3)")

        // A --policy file given relative to the working directory is named absolutely.
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("bgtask-rel-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        try "[[rule]]\nid = \"here\"\nwhen = 'task.id == \"t\"'\nverdict = \"defer\"\n".write(to: dir.appendingPathComponent("rel.toml"), atomically: true, encoding: .utf8)
        let (_, out, e4) = try Child.run("/bin/sh", ["-c", "cd '\(dir.path)' && exec '\(Child.bgtaskPath)' policy explain --policy ./rel.toml --id t"], environment: p.env, deadline: 30)
        #expect(out.contains("(\(dir.path)/rel.toml:2)") || out.contains("rel.toml:2)") && !out.contains("(rel.toml:2)"), "\(out) \(e4)")
    }
}

extension PolicyCommandTests {
    @Test("a reloaded policy's thresholds reach bgtaskd's readings without a restart: [storage] low_mb raised, processing work waits for space at once")
    func reloadedThresholdsReachTheReadings() throws {
        let p = try PolicyEnv()
        let d = try SessionDaemon(policy: p, preload: false)
        #expect(try d.bgtask(["submit", "--id", "index", "--earliest", "1h", "--", "true"]).0 == 0)
        func storageRule() throws -> Bool {
            let t = try d.pending().first { $0["id"] as? String == "index" }
            return (t?["unmet"] as? [[String: Any]])?.contains { $0["rule"] as? String == "processing.storage-low" } == true
        }
        #expect(try !storageRule(), "the test's home has more than 1 GiB free")
        try p.userPolicy("60-space.toml", "[storage]\nlow_mb = 100000000\n")    // 100 TB, the most it takes: always low
        let (rs, ro, re) = try d.bgtask(["policy", "reload"])
        #expect(rs == 0 && ro.contains("storage.low_mb"), "\(ro) \(re)")
        let end = Date().addingTimeInterval(10)
        var low = try storageRule()
        while !low && Date() < end {    // the readings are made again on the watcher's thread, after the reload
            usleep(50_000)
            low = try storageRule()
        }
        #expect(low, "processing.storage-low in effect after the reload: \((try? d.pending()) ?? [])")
    }
}
