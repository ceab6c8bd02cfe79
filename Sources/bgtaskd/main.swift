import ArgumentParser
import BgtaskConfig
import BgtaskDaemon
import BgtaskProbes
#if canImport(Glibc)
@preconcurrency import Glibc
#endif

/// bgtaskd: thin on purpose; the daemon is `BgtaskDaemon`. Synchronous: a GLib main loop, no Swift
/// concurrency (which would wake the process every second on Linux).
struct Bgtaskd: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bgtaskd",
        abstract: "The per-user background task scheduler: a persistent queue on the session D-Bus.",
        discussion: """
        Serves io.github.bgtask.Scheduler1 on the session bus ($DBUS_SESSION_BUS_ADDRESS) and stays in the \
        foreground; under systemd it is started as bgtaskd.service (Type=dbus) or by D-Bus activation. Messages go \
        to stderr (the journal under systemd); every decision also goes to the audit trail `bgtask why` reads. \
        SIGHUP reloads the policy; SIGTERM ends running tasks and keeps them queued. Exit status: 0 after SIGTERM; \
        69 when there is no session bus; 73 when the state directory cannot be written; 75 when another bgtaskd \
        runs; 78 when a policy file named with --policy does not load (a broken file in a policy directory is left out \
        with a warning, the other layers in force). Where a systemd user manager runs, each command task is a transient \
        unit in background.slice (its output in the journal); --no-systemd-units or BGTASK_SYSTEMD_UNITS=0 runs \
        them as bgtaskd's own children instead.
        """,
        version: bgtaskVersion)

    @Option(name: .long, help: ArgumentHelp("A policy file on top of the layers (repeatable).", valueName: "file"))
    var policy: [String] = []

    @Option(name: .long, help: ArgumentHelp("The bus address to serve on (default: the session bus).", valueName: "address"))
    var address: String?

    @Flag(name: .long, help: "Do not ask UPower, NetworkManager or power-profiles-daemon on the system bus.")
    var noDbus = false

    @Flag(name: .long, help: "Run tasks as bgtaskd's children even where a systemd user manager runs (no transient units).")
    var noSystemdUnits = false

    @Flag(name: .shortAndLong, help: "No messages on stderr (decisions still go to the audit trail).")
    var quiet = false

    func run() throws {
        var options = DaemonOptions(probe: ProbeOptions(root: SysfsRoot.fromEnvironment(sysfs: nil, proc: nil), useDBus: noDbus ? false : nil))
        options.busAddress = address
        options.policyFiles = policy
        options.quiet = quiet
        options.watchSleep = !noDbus
        options.systemdUnits = !noSystemdUnits
        do {
            let daemon = try Daemon(options: options)
            throw ExitCode(try daemon.run())
        } catch let e as DaemonError {
            fputs(Terminal.safe("bgtaskd: \(e.message)", keepNewlines: true) + "\n", stderr)
            throw ExitCode(e.status)
        }
    }
}

// GLib 2.74 (Debian 12) keeps the GVariants of a large reply (ListPending of 10,000: +60 MB) in its slice
// allocator for the life of the process; with G_SLICE=always-malloc they go to malloc, which gives them back.
// GLib reads it before main runs (GObject's constructor allocates), so a start without it is re-executed once
// with it: the same pid, arguments and descriptors. The unit file sets it, so systemd starts need no exec.
if getenv("G_SLICE") == nil {
    setenv("G_SLICE", "always-malloc", 1)
    execv("/proc/self/exe", CommandLine.unsafeArgv)
    // No /proc: GLib's slices stay (more memory kept after large replies; nothing else changes).
}
// Executed through /proc/self/exe, the kernel names the process "exe": ps, top and pkill would not know it.
// (/proc/self/comm is the main thread's name, which is the process's; the kernel keeps 15 bytes of it.)
if let path = CommandLine.arguments.first, let name = path.split(separator: "/").last, case let fd = open("/proc/self/comm", O_WRONLY), fd >= 0 {
    _ = String(name).withCString { write(fd, $0, strlen($0)) }
    close(fd)
}
setvbuf(stderr, nil, _IOLBF, 0)
signal(SIGPIPE, SIG_IGN)
Bgtaskd.main()
