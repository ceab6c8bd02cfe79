import ArgumentParser
import BgtaskProbes

/// Where readings come from; shared by every command that reads conditions.
struct ProbeOptionsGroup: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("Read a recorded sysfs tree instead of /sys (also BGTASK_SYSFS_ROOT).", valueName: "dir"))
    var sysfsRoot: String?

    @Option(name: .long, help: ArgumentHelp("Read routes and pressure from this tree instead of /proc (also BGTASK_PROC_ROOT).", valueName: "dir"))
    var procRoot: String?

    @Flag(name: .long, help: "Do not ask UPower, NetworkManager or power-profiles-daemon over D-Bus.")
    var noDbus = false

    var probeOptions: ProbeOptions { Self.probeOptions(sysfsRoot: sysfsRoot, procRoot: procRoot, noDbus: noDbus) }

    /// The one place the options become `ProbeOptions` (also for `Status.plain`, which skips the parser).
    static func probeOptions(sysfsRoot: String?, procRoot: String?, noDbus: Bool) -> ProbeOptions {
        ProbeOptions(root: SysfsRoot.fromEnvironment(sysfs: sysfsRoot, proc: procRoot), useDBus: noDbus ? false : nil)
    }

    func validate() throws {
        for (flag, dir) in [("--sysfs-root", sysfsRoot), ("--proc-root", procRoot)] {
            guard let d = dir else { continue }
            var isDir = false
            if !directoryExists(d, &isDir) || !isDir {
                throw ValidationError("\(flag) \(d): no such directory")
            }
        }
    }
}

#if canImport(Glibc)
@preconcurrency import Glibc
#endif
func directoryExists(_ path: String, _ isDir: inout Bool) -> Bool {
    var st = stat()
    guard stat(path, &st) == 0 else { return false }
    isDir = (st.st_mode & S_IFMT) == S_IFDIR
    return true
}
