#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskBus
import BgtaskProbes
import BgtaskRun
import CLinux
import BgtaskFiles

/// Where a caller runs, as far as bgtaskd can tell from outside it (never from what it claims).
enum Sandbox: Equatable, CustomStringConvertible {
    /// The user's own session: may use every method.
    case none
    /// A Flatpak app: its id is `[Application] name=` of its `/.flatpak-info`.
    case flatpak(appID: String)
    /// A snap: its AppArmor label (`snap.NAME.APP`) says so; it names no app id bgtaskd could check.
    case snap(label: String)
    /// Another user namespace (bubblewrap, a rootless container, a toolbox) without a Flatpak's info.
    case userNamespace

    var description: String {
        switch self {
        case .none: return "unsandboxed"
        case .flatpak(let id): return "the Flatpak app \(id)"
        case .snap(let label): return "the snap \(label)"
        case .userNamespace: return "another user namespace"
        }
    }

    /// The app id a sandboxed caller may act for (only a Flatpak names one).
    var appID: String? { if case .flatpak(let id) = self { return id }; return nil }

    /// What the sandbox reveals, read from `/proc/PID` while the process is known to be alive.
    /// `flatpakInfo`: the bytes of `/proc/PID/root/.flatpak-info`, or why it could not be read.
    static func classify(flatpakInfo: Result<[UInt8], SystemError>, securityLabel: String?, userNamespace: String?,
                         ownUserNamespace: String?) -> Result<Sandbox, Unidentified> {
        switch flatpakInfo {
        case .success(let bytes):
            guard let id = flatpakAppID(bytes) else { return .failure(Unidentified("its /.flatpak-info names no application")) }
            return .success(.flatpak(appID: id))
        case .failure(let e) where e.errno == ENOENT:
            break
        case .failure(let e):
            return .failure(Unidentified("its /.flatpak-info cannot be read (\(e))"))
        }
        if let l = securityLabel, l.hasPrefix("snap.") {
            return .success(.snap(label: String(l.prefix { $0 != " " })))
        }
        guard let theirs = userNamespace, let ours = ownUserNamespace else { return .failure(Unidentified("its user namespace cannot be read")) }
        return .success(theirs == ours ? .none : .userNamespace)
    }

    /// `[Application] name=` of a `.flatpak-info` (a keyfile), nil when absent.
    static func flatpakAppID(_ bytes: [UInt8]) -> String? {
        var inApplication = false
        for raw in String(decoding: bytes, as: UTF8.self).split(separator: "\n") {
            let line = raw.filter { $0 != "\r" }
            if line.hasPrefix("[") { inApplication = line == "[Application]"; continue }
            if inApplication, line.hasPrefix("name=") {
                let id = String(line.dropFirst(5))
                return id.isEmpty ? nil : id
            }
        }
        return nil
    }
}

/// Why a caller's identity could not be established.
struct Unidentified: Error, CustomStringConvertible {
    let description: String
    init(_ why: String) { description = why }
}

/// A caller whose identity was established: the uid and pid the bus gave, and its sandbox.
struct Caller {
    let uid: uid_t
    let pid: pid_t
    let sandbox: Sandbox
}

/// Establishes who sent a call from what cannot race: the bus's credentials of the connection, a pidfd on
/// the process (the bus's own where it hands one, else opened at once and checked against the process's
/// start time), and `/proc/PID` read only while that pidfd shows the process alive. When any of it cannot
/// be had — the caller exited before its call was handled, `/proc` is hidden — the answer is a refusal,
/// never "unsandboxed".
struct CallerCheck {
    let proc = "/proc"

    /// bgtaskd's own user namespace, read once: a process changes it only by setns(2) or unshare(2), which bgtaskd
    /// never calls.
    static let ownUserNamespace = CallerCheck().namespace("/proc/self/ns/user")

    /// Whether the kernel runs AppArmor, read once. Without it no process carries an AppArmor label (a snap's
    /// included), and the two reads of `/proc/PID/attr` per new caller are skipped.
    static let apparmor: Bool = {
        if case .success(let s) = FileIO.read("/sys/module/apparmor/parameters/enabled", limit: 16) { return s.hasPrefix("Y") }
        return false
    }()

    func identify(_ creds: PeerCredentials?, receivedAt: UInt64?) -> Result<Caller, Unidentified> {
        guard let c = creds else { return .failure(Unidentified("the bus did not say who the caller is")) }
        guard let uid = c.uid else { return .failure(Unidentified("the bus did not give the caller's uid")) }
        guard let pid = c.pid else { return .failure(Unidentified("the bus did not give the caller's process id")) }
        var ownFD: Int32 = -1
        defer { if ownFD >= 0 { close(ownFD) } }
        var pidfd = c.pidfd
        if pidfd < 0 {
            ownFD = bgt_pidfd_open(pid)
            guard ownFD >= 0 else { return .failure(Unidentified("the caller (pid \(pid)) exited before its call was handled")) }
            pidfd = ownFD
            // Opened by pid, after the fact: a process that started after the call arrived cannot have sent it
            // (the caller exited and its pid was reused).
            if let start = Recovery.startTime(of: pid), let at = receivedAt, start > at {
                return .failure(Unidentified("the caller (pid \(pid)) exited before its call was handled"))
            }
        }
        let info = FileIO.readBytes("\(proc)/\(pid)/root/.flatpak-info", limit: 64 * 1024)
        let theirs = namespace("\(proc)/\(pid)/ns/user")
        let label = c.securityLabel ?? (CallerCheck.apparmor ? apparmorLabel(pid) : nil)
        // Read while alive: with the pidfd not yet readable, /proc/PID was the caller's all along.
        guard !exited(pidfd) else { return .failure(Unidentified("the caller (pid \(pid)) exited before its call was handled")) }
        return Sandbox.classify(flatpakInfo: info, securityLabel: label, userNamespace: theirs,
                                ownUserNamespace: CallerCheck.ownUserNamespace)
            .map { Caller(uid: uid, pid: pid, sandbox: $0) }
    }

    func namespace(_ path: String) -> String? {
        var buf = [CChar](repeating: 0, count: 128)
        let n = readlink(path, &buf, buf.count - 1)
        guard n > 0 else { return nil }
        return String(decoding: buf[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// AppArmor's label of a process, where the bus gave none (dbus-daemon gives it only when built with AppArmor).
    func apparmorLabel(_ pid: pid_t) -> String? {
        for p in ["\(proc)/\(pid)/attr/apparmor/current", "\(proc)/\(pid)/attr/current"] {
            if case .success(let s) = FileIO.read(p, limit: 4096) {
                let t = s.prefix { $0 != "\n" && $0 != "\0" }
                if !t.isEmpty { return String(t) }
            }
        }
        return nil
    }

    func exited(_ pidfd: Int32) -> Bool {
        var p = pollfd(fd: pidfd, events: Int16(POLLIN), revents: 0)
        return poll(&p, 1, 0) != 0
    }

    /// Now, in the clock `/proc/PID/stat` counts start times in (ticks since boot).
    static func ticksSinceBoot() -> UInt64 {
        var t = timespec()
        clock_gettime(CLOCK_BOOTTIME, &t)
        let hz = UInt64(max(1, sysconf(Int32(_SC_CLK_TCK))))
        return UInt64(t.tv_sec) * hz + UInt64(t.tv_nsec) * hz / 1_000_000_000
    }
}
