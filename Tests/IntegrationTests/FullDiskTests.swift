import BgtaskTestSupport
import Foundation
import Testing

/// A small tmpfs mounted at a directory (root only; CI runs as root, and must run what needs one): nil where it
/// cannot be mounted, recorded as an issue under CI.
struct Tmpfs {
    let path: String
    static let plain = Child.environment(["LD_PRELOAD": nil, "UMOCKDEV_DIR": nil])

    init?(at dir: URL, size: String, mode: String = "0755") throws {
        path = dir.path
        let mount = try Child.run("/bin/mount", ["-t", "tmpfs", "-o", "size=\(size),mode=\(mode)", "tmpfs", path], environment: Tmpfs.plain, deadline: 30)
        guard mount.0 == 0 else {
            if ProcessInfo.processInfo.environment["CI"] == "true" { Issue.record("cannot mount a tmpfs (root is needed): \(mount)") }
            return nil
        }
    }

    func unmount() {
        if (try? Child.run("/bin/umount", [path], environment: Tmpfs.plain, deadline: 30))?.0 != 0 {
            _ = try? Child.run("/bin/umount", ["-l", path], environment: Tmpfs.plain, deadline: 30)
        }
    }

    /// Writes `mebibytes` MiB into `name` on it.
    func fill(_ name: String, mebibytes: Int) throws -> (Int32, String, String) {
        try Child.run("/bin/dd", ["if=/dev/zero", "of=\(path)/\(name)", "bs=1M", "count=\(mebibytes)"], environment: Tmpfs.plain, deadline: 30)
    }
}

@Suite("a full disk is said as one, by bgtaskd and by the CLI's readers")
struct FullDiskTests {
    @Test("a full disk says so: bgtaskd, why, log and report say 'no space left on tmpfs (0 bytes free …)' naming the file, not a disk I/O error")
    func fullDiskSaysSo() throws {
        let p = try PolicyEnv()
        let state = p.dir.appendingPathComponent("state")
        try FileManager.default.createDirectory(at: state, withIntermediateDirectories: true)
        let plain = Child.environment(["LD_PRELOAD": nil, "UMOCKDEV_DIR": nil])
        // A filesystem that fills: a small tmpfs as the state directory.
        guard let tmpfs = try Tmpfs(at: state, size: "2m", mode: "0700") else { return }
        defer { tmpfs.unmount() }
        let bus = try PrivateBus()
        let env = p.environment(preload: false, ["DBUS_SESSION_BUS_ADDRESS": bus.address])
        func bgtask(_ args: [String]) throws -> (Int32, String, String) { try Child.run(Child.bgtaskPath, args, environment: env, deadline: 30) }
        #expect(try bgtask(["run", "--no-wait", "--kind", "regular", "--id", "filled", "--", "true"]).0 == 0)

        // Filled to the last block (dd ends at ENOSPC) before a reader came: it has a WAL index to make, and no room.
        let dd = try Child.run("/bin/dd", ["if=/dev/zero", "of=\(state.path)/fill", "bs=64k"], environment: plain, deadline: 30)
        #expect(dd.0 != 0 && dd.2.contains("No space left on device"), "\(dd)")
        let said = "no space left on tmpfs (0 bytes free on \(state.path)): \(state.path)/"
        for args in [["why", "filled"], ["log", "-n", "5", "--no-follow"]] {
            let r = try bgtask(args)
            #expect(r.0 != 0 && r.2.contains(said + "audit.sqlite cannot be written") && !r.2.contains("disk I/O error"), "\(args): \(r)")
        }
        let report = p.dir.appendingPathComponent("report.html")
        let r = try bgtask(["report", "--html", report.path])
        #expect(r.2.contains(said + "audit.sqlite cannot be written") && !r.2.contains("disk I/O error"), "\(r)")
        let daemon = try Child.run(Child.bgtaskdPath, ["--no-dbus"], environment: env, deadline: 30)
        #expect(daemon.0 == 73 && daemon.2.contains(said) && !daemon.2.contains("disk I/O error"), "\(daemon)")

        // Room again: it reads.
        try FileManager.default.removeItem(at: state.appendingPathComponent("fill"))
        #expect(try bgtask(["why", "filled"]).0 == 0)
    }

    @Test("bgtaskd judges storage on each task's working directory, as bgtask run there does: a nearly full tmpfs holds back the task in it, not one in the home directory")
    func daemonAndRunAgreeOnATasksFilesystem() throws {
        let p = try PolicyEnv()
        // Low under 4 MiB: the test's home (a temporary directory) has more; the tmpfs, 8 MiB with 6 written, has less.
        try p.userPolicy("50-storage.toml", "[storage]\nlow_mb = 4\n")
        let home = p.dir.appendingPathComponent("home"), full = p.dir.appendingPathComponent("full")
        for d in [home, full] { try FileManager.default.createDirectory(at: d, withIntermediateDirectories: true) }
        guard let tmpfs = try Tmpfs(at: full, size: "8m") else { return }
        defer { tmpfs.unmount() }
        let dd = try tmpfs.fill("fill", mebibytes: 6)
        #expect(dd.0 == 0, "\(dd)")
        let said = "storage low on \(full.path) ("

        let d = try SessionDaemon(policy: p, preload: false, daemonEnv: ["HOME": home.path])
        // bgtask run in the tmpfs: held back by its storage.
        let run = try d.bgtask(in: full, ["run", "--no-wait", "--id", "local", "--", "true"])
        #expect(run.0 == 75 && run.2.contains(said), "\(run)")
        let explain = try d.bgtask(in: full, ["policy", "explain", "--json"])
        #expect(explain.1.contains(full.path), "\(explain)")

        // bgtaskd: the same verdict for a task submitted from there, while one from the home directory runs.
        #expect(try d.bgtask(in: full, ["submit", "--id", "in-tmpfs", "--", "true"]).0 == 0)
        #expect(try d.bgtask(in: home, ["submit", "--id", "at-home", "--", "true"]).0 == 0)
        _ = try #require(d.said("at-home: finished"), "\(d.daemon?.stderr ?? "")")
        let t = try #require(try d.pending().first { $0["id"] as? String == "in-tmpfs" }, "\(d.daemon?.stderr ?? "")")
        #expect(t["rule"] as? String == "processing.storage-low" && (t["reason"] as? String)?.contains(said) == true, "\(t)")
    }
}
