#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskBus
import BgtaskConfig
@testable import BgtaskDaemon
import BgtaskProbes
import Testing
import BgtaskFiles

@Suite("who calls bgtaskd: a caller's sandbox from what cannot race, never from its claims")
struct CallerTests {
    let info = Array("[Application]\nname=org.example.App\nruntime=runtime/org.freedesktop.Platform/x86_64/23.08\n".utf8)
    let missing: Result<[UInt8], SystemError> = .failure(SystemError("open", path: "/proc/1/root/.flatpak-info", errno: ENOENT))

    @Test("a .flatpak-info names the app; none, in our own user namespace, is the user's session")
    func flatpakOrSession() throws {
        #expect(try Sandbox.classify(flatpakInfo: .success(info), securityLabel: nil, userNamespace: "user:[1]", ownUserNamespace: "user:[2]").get()
                == .flatpak(appID: "org.example.App"))
        #expect(try Sandbox.classify(flatpakInfo: missing, securityLabel: "unconfined", userNamespace: "user:[1]", ownUserNamespace: "user:[1]").get() == .none)
    }

    @Test("a snap's AppArmor label or another user namespace is a sandbox that names no app id")
    func otherSandboxes() throws {
        let snap = try Sandbox.classify(flatpakInfo: missing, securityLabel: "snap.firefox.firefox (enforce)", userNamespace: "user:[1]", ownUserNamespace: "user:[1]").get()
        #expect(snap == .snap(label: "snap.firefox.firefox"))
        #expect(snap.appID == nil)
        let ns = try Sandbox.classify(flatpakInfo: missing, securityLabel: nil, userNamespace: "user:[7]", ownUserNamespace: "user:[1]").get()
        #expect(ns == .userNamespace)
    }

    @Test("what cannot be read is a refusal: an unreadable .flatpak-info, one without a name, an unknown namespace")
    func failsClosed() {
        let denied: Result<[UInt8], SystemError> = .failure(SystemError("open", path: "/proc/1/root/.flatpak-info", errno: EACCES))
        #expect(throws: Unidentified.self) { try Sandbox.classify(flatpakInfo: denied, securityLabel: nil, userNamespace: "u", ownUserNamespace: "u").get() }
        #expect(throws: Unidentified.self) {
            try Sandbox.classify(flatpakInfo: .success(Array("[Application]\nruntime=x\n".utf8)), securityLabel: nil, userNamespace: "u", ownUserNamespace: "u").get()
        }
        #expect(throws: Unidentified.self) { try Sandbox.classify(flatpakInfo: missing, securityLabel: nil, userNamespace: nil, ownUserNamespace: "u").get() }
    }

    @Test("a caller whose process is gone is refused: no pidfd can be had for it")
    func goneProcessIsRefused() {
        var child: pid_t = 0
        var argv: [UnsafeMutablePointer<CChar>?] = [strdup("/bin/true"), nil]
        defer { free(argv[0]) }
        #expect(posix_spawn(&child, "/bin/true", nil, nil, &argv, nil) == 0)
        var status: Int32 = 0
        _ = waitpid(child, &status, 0)
        let r = CallerCheck().identify(PeerCredentials(uid: getuid(), pid: child, pidfd: -1, securityLabel: nil), receivedAt: CallerCheck.ticksSinceBoot())
        guard case .failure(let e) = r else { Issue.record("identified a process that is gone"); return }
        #expect(e.description.contains("exited before its call was handled"))
        let me = CallerCheck().identify(PeerCredentials(uid: getuid(), pid: getpid(), pidfd: -1, securityLabel: nil), receivedAt: CallerCheck.ticksSinceBoot())
        #expect((try? me.get())?.sandbox == Sandbox.none)
    }
}

@Suite("text from outside reaches a terminal escaped")
struct TerminalTextTests {
    @Test("bidi overrides and isolates, line and paragraph separators and zero-width characters are escaped like control characters")
    func invisibleCharactersAreEscaped() {
        #expect(Terminal.safe("evil\u{202E}txt.exe") == "evil\\u{202e}txt.exe")
        #expect(Terminal.safe("a\u{2028}b\u{2029}c") == "a\\u{2028}b\\u{2029}c")
        #expect(Terminal.safe("zero\u{200B}width\u{200D}join\u{FEFF}") == "zero\\u{200b}width\\u{200d}join\\u{feff}")
        #expect(Terminal.safe("iso\u{2066}late\u{2069}") == "iso\\u{2066}late\\u{2069}")
        #expect(Terminal.safe("bell\u{07}") == "bell\\x07")
        #expect(Terminal.safe("line\nnext", keepNewlines: true) == "line\nnext")
        #expect(Terminal.safe("café ☃ 東京") == "café ☃ 東京")
        #expect(Printable.text("acpitz\nfake: line") == "acpitz\\x0afake: line")
    }
}

@Suite("the policy and manifest directories are watched from their nearest existing ancestor")
struct ConfigWatchTests {
    @Test("an existing directory is watched itself; a missing one from its nearest existing ancestor, for the next name on the way")
    func anchors() {
        let existing: Set<String> = ["/", "/home", "/home/u", "/home/u/.config"]
        let exists = { existing.contains($0) }
        #expect(ConfigWatch.anchor("/home/u/.config", exists: exists)! == ("/home/u/.config", nil))
        #expect(ConfigWatch.anchor("/home/u/.config/bgtask/policy.d", exists: exists)! == ("/home/u/.config", "bgtask"))
        #expect(ConfigWatch.anchor("/home/u/.local/share/bgtask/apps", exists: exists)! == ("/home/u", ".local"))
        #expect(ConfigWatch.anchor("/nonexistent", exists: exists)! == ("/", "nonexistent"))
        #expect(ConfigWatch.anchor("/x", exists: { _ in false }) == nil)
    }
}
