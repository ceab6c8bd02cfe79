import Foundation

/// A real systemd user manager (`systemd --user`) of the test's own, with its runtime directory (its private
/// socket `systemd/private` there) in a temporary directory: bgtaskd finds it through `XDG_RUNTIME_DIR`.
/// systemd refuses to run as a user instance unless the machine booted with systemd (it checks
/// `/run/systemd/system/`), so it runs in a mount namespace of its own where a tmpfs on `/run/systemd` has that
/// directory; nothing outside the namespace changes. Needs root (as CI is) for the namespace.
public final class UserManager {
    public let runtimeDirectory: URL
    let launcher: Child
    public private(set) var managerPID: Int32 = 0

    // Readiness is systemd's own READY=1 on a notify socket (an event, not a sleep); the launcher then waits for
    // SIGTERM (blocked, so one that comes early is not lost) and stops the manager, which stops its units.
    static let script = """
    import ctypes, os, signal, socket, subprocess, sys
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    rt = sys.argv[1]
    path = os.path.join(rt, "ready.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(path)
    s.settimeout(30)
    def child():
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)   # PR_SET_PDEATHSIG: never outlives the test
    env = dict(os.environ, XDG_RUNTIME_DIR=rt, NOTIFY_SOCKET=path)
    for k in ("LD_PRELOAD", "UMOCKDEV_DIR", "DBUS_SESSION_BUS_ADDRESS"):
        env.pop(k, None)
    p = subprocess.Popen(["unshare", "-m", "sh", "-c",
        "mount --make-rprivate / && mkdir -p /run/systemd && mount -t tmpfs tmpfs /run/systemd && "
        "mkdir /run/systemd/system && exec /lib/systemd/systemd --user"],
        env=env, stdin=subprocess.DEVNULL, preexec_fn=child)
    try:
        while "READY=1" not in s.recv(4096).decode(errors="replace").split("\\n"):
            pass
    except socket.timeout:
        print("not ready", flush=True)
        p.kill()
        sys.exit(1)
    print("ready", p.pid, flush=True)
    signal.sigwait({signal.SIGTERM})
    p.terminate()
    try:
        p.wait(15)
    except subprocess.TimeoutExpired:
        p.kill()
    """

    /// `runtimeDirectory`: a directory of the test's (a manager stopped and started again in the same place, as the
    /// user's is); by default one of its own.
    public init(runtimeDirectory: URL? = nil) throws {
        self.runtimeDirectory = runtimeDirectory ?? FileManager.default.temporaryDirectory.appendingPathComponent("bgtask-user-manager-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: self.runtimeDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        launcher = try Child("/usr/bin/python3", ["-c", UserManager.script, self.runtimeDirectory.path],
                             environment: Child.environment(["LD_PRELOAD": nil]))
        guard let line = launcher.line(within: 40), line.hasPrefix("ready"), let pid = Int32(line.split(separator: " ").last ?? "") else {
            launcher.stop()
            throw TestbedError(message: "systemd --user did not come up: \(launcher.stdout) \(launcher.stderr)")
        }
        managerPID = pid
        // READY=1 comes before start-up is over, and a connection made then may wait until it is: systemctl waits
        // for the end of start-up (inside the manager's namespace, where systemd counts as booted).
        let (status, out, err) = try systemctl(["is-system-running", "--wait"])
        guard status == 0 || out.contains("degraded") else {
            throw TestbedError(message: "systemd --user is not running: \(out) \(err)")
        }
    }

    deinit {
        launcher.stop(grace: 20)
        try? FileManager.default.removeItem(at: runtimeDirectory)
    }

    /// `systemctl --user ARGS` against this manager (bounded).
    public func systemctl(_ args: [String]) throws -> (Int32, String, String) {
        try Child.run("/usr/bin/nsenter", ["-t", String(managerPID), "-m", "/bin/systemctl", "--user"] + args,
                      environment: Child.environment(["XDG_RUNTIME_DIR": runtimeDirectory.path, "LD_PRELOAD": nil, "UMOCKDEV_DIR": nil,
                                                      "DBUS_SESSION_BUS_ADDRESS": nil]), deadline: 20)
    }
}
