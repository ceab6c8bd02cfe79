import BgtaskTestSupport
import Foundation
import Testing

@Suite("a full disk is said as one, by bgtaskd and by the CLI's readers")
struct FullDiskTests {
    @Test("a full disk says so: bgtaskd, why, log and report say 'no space left on tmpfs (0 bytes free …)' naming the file, not a disk I/O error")
    func fullDiskSaysSo() throws {
        let p = try PolicyEnv()
        let state = p.dir.appendingPathComponent("state")
        try FileManager.default.createDirectory(at: state, withIntermediateDirectories: true)
        let plain = Child.environment(["LD_PRELOAD": nil, "UMOCKDEV_DIR": nil])
        // A filesystem that fills: a small tmpfs as the state directory (root only; CI runs as root, and must run this).
        let mount = try Child.run("/bin/mount", ["-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", state.path], environment: plain, deadline: 30)
        guard mount.0 == 0 else {
            if ProcessInfo.processInfo.environment["CI"] == "true" { Issue.record("cannot mount a tmpfs for the full disk (root is needed): \(mount)") }
            return
        }
        defer {
            if (try? Child.run("/bin/umount", [state.path], environment: plain, deadline: 30))?.0 != 0 {
                _ = try? Child.run("/bin/umount", ["-l", state.path], environment: plain, deadline: 30)
            }
        }
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
}
