import BgtaskProbes
import BgtaskTestSupport
import Foundation
import Testing

/// One testbed at a time: umockdev keeps the testbed in this process's environment.
@Suite("System integration: umockdev testbeds, a private D-Bus, the real upowerd, mocked NM and PPD", .serialized, .enabled(if: umockdevReady))
struct UmockdevIntegrationTests {
    @Test("libudev enumeration of a testbed gives the same readings as the recorded tree")
    func libudevEnumerationReadsTestbed() throws {
        try requirePreload()
        let tb = Testbed()
        tb.addLaptop(acOnline: false)
        let s = Prober(options: ProbeOptions(root: SysfsRoot(), useDBus: false)).snapshot()
        #expect(s.power.external == false)
        #expect(s.power.reason.contains("BAT0 is discharging"))
        #expect(s.battery.percent == 42)
        #expect(s.battery.state == .discharging)
        #expect(s.thermal.state == .nominal)
        #expect(s.thermal.celsius == 54)
        #expect(s.zones.first?.path.hasPrefix("/sys/devices/") == true)
    }

    @Test("unplugging and plugging the charger shows in `bgtask watch --json` within two seconds")
    func chargerUeventsReachWatch() throws {
        try requirePreload()
        let tb = Testbed()
        let laptop = tb.addLaptop(acOnline: true, batteryStatus: "Charging")
        let watch = try Child(Child.bgtaskPath, ["watch", "--json", "--no-dbus", "--thermal-interval", "0"])
        defer { watch.stop() }
        let first = try parseJSON(try #require(watch.line(within: 10), "no first line: \(watch.stderr)"))
        #expect(first["initial"] as? Bool == true)
        #expect(newValue(first, "power.external") as? Bool == true)

        for round in 0..<3 {
            let t0 = Date()
            tb.plug(laptop, false)
            let off = try #require(watch.line(within: 2) { $0.contains("\"power.external\"") },
                                   "round \(round): no unplug line in 2 s")
            #expect(newValue(try parseJSON(off), "power.external") as? Bool == false)
            #expect(Date().timeIntervalSince(t0) < 2)

            tb.plug(laptop, true)
            let on = try #require(watch.line(within: 2) { $0.contains("\"power.external\"") },
                                  "round \(round): no plug line in 2 s")
            #expect(newValue(try parseJSON(on), "power.external") as? Bool == true)
        }
    }

    @Test("a temperature crossing the passive trip changes thermal.state while watching")
    func temperatureCrossingTripChangesState() throws {
        try requirePreload()
        let tb = Testbed()
        let laptop = tb.addLaptop(acOnline: true, batteryStatus: "Full", energyNow: 60_000_000)
        let watch = try Child(Child.bgtaskPath, ["watch", "--json", "--no-dbus", "--thermal-interval", "0.05"])
        defer { watch.stop() }
        _ = try #require(watch.line(within: 10), "no first line: \(watch.stderr)")

        tb.set(laptop.zone, "temp", "86000")
        let hot = try #require(watch.line(within: 3) { $0.contains("\"thermal.state\"") })
        #expect(newValue(try parseJSON(hot), "thermal.state") as? String == "serious")

        // 84 °C is inside the hysteresis band under the 85 °C trip: no change. The zone's uevent makes the
        // watcher read it at once, and the charger's uevent after it is a line that must come without a
        // thermal.state change (events on one monitor arrive in order).
        tb.set(laptop.zone, "temp", "84000")
        tb.uevent(laptop.zone)
        tb.plug(laptop, false)
        let unplugged = try parseJSON(try #require(watch.line(within: 3) { $0.contains("\"power.external\"") }))
        #expect(newValue(unplugged, "thermal.state") == nil, "84 °C left serious: \(unplugged)")
        tb.set(laptop.zone, "temp", "70000")
        let cool = try #require(watch.line(within: 3) { $0.contains("\"thermal.state\"") })
        #expect(newValue(try parseJSON(cool), "thermal.state") as? String == "nominal")
    }

    @Test("watch is quiet while a file in its storage directory grows by small amounts; it says storage.free_bytes once it moves 1 % of the filesystem, and as [storage] low_mb is crossed")
    func storageIsQuietOnABusyDisk() throws {
        try requirePreload()
        let p = try PolicyEnv()
        try p.userPolicy("50-storage.toml", "[storage]\nlow_mb = 4\n")
        let dir = p.dir.appendingPathComponent("disk")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        guard let tmpfs = try Tmpfs(at: dir, size: "8m") else { return }   // 1 % is 83,886 bytes
        defer { tmpfs.unmount() }
        let tb = Testbed()
        let laptop = tb.addLaptop(acOnline: true, batteryStatus: "Full", energyNow: 60_000_000)
        // Zones read every 50 ms: each read is a statvfs too, the reads that printed a line every 2 s.
        let watch = try Child("/bin/sh", ["-c", "cd \"$1\" && shift && exec \"$@\"", "sh", dir.path,
                                          Child.bgtaskPath, "watch", "--json", "--no-dbus", "--thermal-interval", "0.05"],
                              environment: p.environment(preload: true))
        defer { watch.stop() }
        let first = try parseJSON(try #require(watch.line(within: 10), "no first line: \(watch.stderr)"))
        #expect(newValue(first, "storage.low") as? Bool == false, "\(first)")
        let file = try #require(FileHandle(forWritingAtPath: { FileManager.default.createFile(atPath: dir.path + "/log", contents: nil); return dir.path + "/log" }()))
        defer { try? file.close() }
        var online = true
        /// The lines after a charger change, up to its own (the battery's uevent may come with a line of its own).
        func afterPlug() throws -> [[String: Any]] {
            online.toggle()
            tb.plug(laptop, online)
            var lines: [[String: Any]] = []
            while lines.last.map({ newValue($0, "power.external") as? Bool != online }) ?? true {
                lines.append(try parseJSON(try #require(watch.line(within: 3), "no line for the charger: \(lines) \(watch.stderr)")))
            }
            return lines
        }
        // Ten writes of 4 KiB (40 KiB in all, under 1 %), each followed by a charger change: no line up to the
        // charger's has storage.free_bytes in it.
        for round in 0..<10 {
            file.write(Data(count: 4096))
            try file.synchronize()
            let lines = try afterPlug()
            #expect(lines.allSatisfy { newValue($0, "storage.free_bytes") == nil }, "round \(round): \(lines)")
        }
        /// Writes `bytes` more, then changes the charger (a read at the latest): the first line whose change matches.
        /// (A zone read in the middle of a large write may see part of it: such a line comes first, and is passed.)
        func write(_ bytes: Int, until match: ([String: Any]) -> Bool) throws -> [String: Any] {
            file.write(Data(count: bytes))
            try file.synchronize()
            online.toggle()
            tb.plug(laptop, online)
            let line = try #require(watch.line(within: 3) { (try? parseJSON($0)).map(match) ?? false }, "no such line: \(watch.stderr)")
            return try parseJSON(line)
        }
        func free(_ line: [String: Any]) -> Double? { newValue(line, "storage.free_bytes") as? Double }
        // 1 MiB more: said.
        let moved = try write(1 << 20) { free($0).map { $0 < 7 * 1_048_576 } == true }
        #expect(newValue(moved, "storage.low") == nil, "\(moved)")
        // To 4,148 KiB free, just over the 4 MiB threshold (a move of more than 1 %: said), then 64 KiB more, under
        // 1 % but across the threshold: low, with the bytes beside it.
        let near = try write(2980 << 10) { free($0).map { $0 < 4200 * 1024 } == true }
        #expect(free(near).map { $0 > 4 * 1_048_576 } == true && newValue(near, "storage.low") == nil, "\(near)")
        let low = try write(64 << 10) { newValue($0, "storage.low") != nil }
        #expect(newValue(low, "storage.low") as? Bool == true && free(low).map { $0 < 4 * 1_048_576 } == true, "\(low)")
        // The text form says the bytes in binary units, not a 7-digit count.
        let text = try Child("/bin/sh", ["-c", "cd \"$1\" && shift && exec \"$@\"", "sh", dir.path,
                                         Child.bgtaskPath, "watch", "--no-dbus", "--thermal-interval", "0"], environment: p.environment(preload: true))
        defer { text.stop() }
        _ = try #require(text.line(within: 10), "no first line: \(text.stderr)")
        try file.truncate(atOffset: 0)
        try file.synchronize()
        tb.plug(laptop, !online)   // a read: the file's space came back
        let freed = try #require(text.line(within: 3) { $0.contains("storage.free_bytes") }, "no storage line: \(text.stderr)")
        #expect(freed.range(of: #"storage\.free_bytes [0-9.]+ MiB → [0-9.]+ MiB"#, options: .regularExpression) != nil, "\(freed)")
    }

    @Test("recorded fixtures read the same through umockdev-run as through --sysfs-root",
          arguments: ["power/03-dell-xps15-discharging", "power/11-14-dual-battery-secondary-empty",
                      "power/checkbox-ipu7-not-charging-ucsi", "thermal/thermald-231-skylake-trips"])
    func umockdevRunMatchesSysfsRoot(fixture: String) throws {
        try requirePreload()
        let file = fixturesDir.appendingPathComponent(fixture + ".umockdev").path
        let clean = Child.environment(["LD_PRELOAD": nil, "UMOCKDEV_DIR": nil])
        let (rc, out, err) = try Child.run("/usr/bin/umockdev-run", ["-d", file, "--", Child.bgtaskPath, "status", "--json", "--no-dbus"],
                                           environment: clean)
        #expect(rc == 0, "\(err)")
        let viaUdev = try parseJSON(out)
        for path in ["power.external", "battery.percent", "battery.state", "battery.warning", "thermal.state", "thermal.celsius"] {
            let v = value(viaUdev, path)
            #expect(v != nil, "\(path) missing")
        }
        // Same values as the plain-directory reading, which the unit tests pin down.
        let tree = try Child.run(Child.bgtaskPath, ["status", "--json", "--sysfs-root", try materialize(file)], environment: clean)
        let viaTree = try parseJSON(tree.1)
        for path in ["power.external", "battery.percent", "battery.state", "battery.warning", "battery.time_to_empty_s",
                     "thermal.state", "thermal.celsius", "thermal.zone"] {
            #expect(String(describing: value(viaUdev, path)) == String(describing: value(viaTree, path)), "\(path)")
        }
    }
}

let fixturesDir = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
    .appendingPathComponent("../BgtaskProbesTests/Fixtures").standardized

/// umockdev's own tool writes the tree: `umockdev-run` keeps it in $UMOCKDEV_DIR, which a child can copy.
func materialize(_ umockdevFile: String) throws -> String {
    let dest = FileManager.default.temporaryDirectory.appendingPathComponent("bgtask-tree-\(UUID().uuidString)").path
    let clean = Child.environment(["LD_PRELOAD": nil, "UMOCKDEV_DIR": nil])
    let (rc, _, err) = try Child.run("/usr/bin/umockdev-run", ["-d", umockdevFile, "--", "/bin/sh", "-c", "cp -r \"$UMOCKDEV_DIR/sys\" \"\(dest)\""],
                                     environment: clean)
    try #require(rc == 0, "\(err)")
    return dest
}
