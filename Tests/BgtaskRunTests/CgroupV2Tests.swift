import BgtaskConfig
@testable import BgtaskRun
import Foundation
import Testing

/// A cgroup2 tree as kernfs would show it: the interface files exist before anything is written.
/// (The kernel's own behaviour — that cpu.max caps and cgroup.freeze freezes — is not ours to test;
/// which files bgtask writes, with what, and when it declines, is.)
struct FakeCgroupFS {
    let root = FileManager.default.temporaryDirectory.appendingPathComponent("cgroup2-\(UUID().uuidString)").path

    func make(_ dir: String, controllers: String = "", files: [String: String] = [:]) throws {
        try FileManager.default.createDirectory(atPath: root + dir, withIntermediateDirectories: true)
        var all = ["cgroup.procs": "", "cgroup.subtree_control": "", "cgroup.controllers": controllers,
                   "cgroup.freeze": "0", "cpu.max": "max 100000"]
        for (k, v) in files { all[k] = v }
        for (name, value) in all { try value.write(toFile: root + dir + "/" + name, atomically: false, encoding: .utf8) }
    }

    func read(_ path: String) -> String { (try? String(contentsOfFile: root + path, encoding: .utf8)) ?? "<missing>" }
    func remove() { try? FileManager.default.removeItem(atPath: root) }
}

@Suite("cgroup v2 in a delegated subtree")
struct CgroupV2Tests {
    @Test("a delegated cgroup with the cpu controller: bgtask moves itself to a leaf and enables +cpu")
    func delegatedSubtree() throws {
        let fs = FakeCgroupFS()
        defer { fs.remove() }
        try fs.make("/user.slice/app.scope", controllers: "cpu memory pids")
        try fs.make("/user.slice/app.scope/bgtask-4242")
        let base = CgroupV2.delegated(root: fs.root, own: "/user.slice/app.scope", pid: 4242)
        #expect(base == fs.root + "/user.slice/app.scope")
        #expect(fs.read("/user.slice/app.scope/bgtask-4242/cgroup.procs") == "4242")
        #expect(fs.read("/user.slice/app.scope/cgroup.subtree_control") == "+cpu")
    }

    @Test("no cpu controller on offer: v2 is declined, so v1 or signals are used")
    func noCPUController() throws {
        let fs = FakeCgroupFS()
        defer { fs.remove() }
        try fs.make("/", controllers: "memory pids")
        #expect(CgroupV2.delegated(root: fs.root, own: "/", pid: 1) == nil)
        #expect(fs.read("/cgroup.subtree_control") == "")
    }

    @Test("cpu already enabled for children: nothing is moved")
    func alreadyEnabled() throws {
        let fs = FakeCgroupFS()
        defer { fs.remove() }
        try fs.make("/svc", controllers: "cpu", files: ["cgroup.subtree_control": "cpu"])
        #expect(CgroupV2.delegated(root: fs.root, own: "/svc", pid: 7) == fs.root + "/svc")
        #expect(!FileManager.default.fileExists(atPath: fs.root + "/svc/bgtask-7"))
    }

    @Test("a task cgroup: the pid goes in, cpu.max carries the cap, cgroup.freeze pauses, cpu.stat gives usage")
    func taskCgroup() throws {
        let fs = FakeCgroupFS()
        defer { fs.remove() }
        try fs.make("/svc/backup-1", files: ["cpu.stat": "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n"])
        let c = try #require(CgroupV2.create(under: fs.root + "/svc", name: "backup-1", pid: 99))
        #expect(fs.read("/svc/backup-1/cgroup.procs") == "99")
        c.quota(25)
        #expect(fs.read("/svc/backup-1/cpu.max") == "25000 100000")
        c.quota(nil)
        #expect(fs.read("/svc/backup-1/cpu.max") == "max 100000")
        c.freeze(true)
        #expect(fs.read("/svc/backup-1/cgroup.freeze") == "1")
        c.freeze(false)
        #expect(fs.read("/svc/backup-1/cgroup.freeze") == "0")
        #expect(c.usageNanoseconds() == 1_500_000)
    }

    @Test("this machine's cgroup2 mount and own cgroup are found in /proc")
    func locatesMount() throws {
        let mounts = (try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8)) ?? ""
        let hasV2 = mounts.contains(" - cgroup2 ")
        let found = CgroupV2.locate()
        #expect((found != nil) == hasV2)
        if let f = found { #expect(f.own.hasPrefix("/")) }
    }
}

@Suite("Leftover cgroups and recorded cgroup paths")
struct CgroupCleanupTests {
    @Test("the sweep removes empty bgtask cgroups of runs that are gone, and nothing else")
    func sweepRemovesOnlyDeadBgtaskCgroups() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("sweep-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: root) }
        let dead: pid_t = 2_000_000_000   // above pid_max: no such process
        let dirs = ["/v1/cpu/bgtask/backup-\(dead)", "/v1/freezer/bgtask/backup-\(dead)", "/v1/cpu/bgtask/live-\(getpid())",
                    "/v2/bgtask-\(dead)", "/v2/bgtask-sync-\(dead)", "/v2/other-\(dead)", "/v2/bgtask-busy-\(dead)/child"]
        for d in dirs { try FileManager.default.createDirectory(atPath: root + d, withIntermediateDirectories: true) }
        let removed = Set(Recovery.sweepCgroups(v1Root: root + "/v1", v2Base: root + "/v2"))
        #expect(removed == Set([root + "/v1/cpu/bgtask/backup-\(dead)", root + "/v1/freezer/bgtask/backup-\(dead)",
                                root + "/v2/bgtask-\(dead)", root + "/v2/bgtask-sync-\(dead)"]))
        #expect(FileManager.default.fileExists(atPath: root + "/v1/cpu/bgtask/live-\(getpid())"))   // its run is alive
        #expect(FileManager.default.fileExists(atPath: root + "/v2/other-\(dead)"))                 // not bgtask's
        #expect(FileManager.default.fileExists(atPath: root + "/v2/bgtask-busy-\(dead)"))           // not empty
    }

    @Test("a recorded cgroup is used only if it is bgtask's own", arguments: [
        ("v1 backup-123", true), ("v1 ../../../etc-1", false), ("v1 a/b-1", false), ("v2 /etc", false),
        ("v2 /sys/fs/cgroup/../../etc/bgtask-x-1", false), ("v2 /sys/fs/cgroup/user.slice/bgtask-x-notapid", false), ("-", false),
        ("unit bgtask-x-1-2.service", false), ("v3 /x", false), ("v1", false), ("", false),
    ])
    func recordedCgroupsAreValidated(_ record: String, _ accepted: Bool) {
        let parsed = Containment(record)
        #expect((parsed.flatMap { Recovery.cgroup($0, cgroup2Root: "/sys/fs/cgroup") } != nil) == accepted)
        // What reads is written back the same: rows of one version are read by the next.
        if let p = parsed { #expect(p.description == record) }
    }
}
