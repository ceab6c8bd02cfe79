import Testing
@testable import BgtaskProbes

/// `user.*` from what logind and the desktop said, at an instant of CLOCK_MONOTONIC (virtual here).
struct PresenceTests {
    let now: UInt64 = 10_000 * 1_000_000_000   // 10,000 s after boot, in ns
    func ago(_ s: Double) -> UInt64 { UInt64((10_000 - s) * 1_000_000) }   // a logind µs timestamp `s` seconds before now

    func analyze(_ sessions: [LoginSession]?, desktop: DesktopIdle? = nil, after: Double = 300) -> PresenceReading {
        PresenceAnalysis.analyze(PresenceInputs(sessions: sessions, logindReason: "logind not on the system bus (test)",
                                                desktop: desktop, readAt: now), after: after, now: now)
    }

    @Test("no logind and no desktop: every user.* is unknown and the reason says why")
    func noSourceIsUnknown() {
        let r = analyze(nil)
        #expect(r.idle == nil && r.idleSeconds == nil && r.sessions == nil && r.locked == nil)
        #expect(r.reason.contains("logind not on the system bus"))
    }

    @Test("nobody logged in (a server, a board): away, 0 sessions; greeters, background and manager sessions, and a command over ssh (no terminal, no display), are nobody")
    func noPersonsSessionIsAway() {
        let others = [LoginSession(id: "c1", sessionClass: "greeter"), LoginSession(id: "2", sessionClass: "background"),
                      LoginSession(id: "3", sessionClass: "manager"), LoginSession(id: "4", state: "closing"),
                      LoginSession(id: "5", type: "unspecified", remote: true), LoginSession(id: "6", type: "tty", remote: true)]
        for s in [[], others] {
            let r = analyze(s)
            #expect(r.idle == true && r.sessions == 0, "\(s)")
            #expect(r.reason.contains("nobody at a screen or a terminal"))
        }
    }

    @Test("a session in use: not idle, idle_s 0, and no timer (only logind's signal can end it)")
    func activeSession() {
        let r = analyze([LoginSession(id: "2", type: "wayland"), LoginSession(id: "3", type: "tty", tty: "pts/0", remote: true, idle: true, idleSinceUs: ago(900))])
        #expect(r.idle == false && r.idleSeconds == 0 && r.sessions == 2 && r.locked == false)
        #expect(r.crossingIn == nil)
        #expect(r.reason == "active now (logind)")
    }

    @Test("every session idle: idle_s counts from the latest idle hint; away only past [idle] after, with the crossing instant")
    func idleAgainstThreshold() {
        let early = analyze([LoginSession(id: "2", idle: true, idleSinceUs: ago(120)), LoginSession(id: "3", idle: true, idleSinceUs: ago(900))])
        #expect(early.idle == false && early.idleSeconds == 120)
        #expect(early.crossingIn == 180)
        #expect(early.reason == "idle 2 min of 5 min (logind)")
        let late = analyze([LoginSession(id: "2", idle: true, idleSinceUs: ago(301))])
        #expect(late.idle == true && late.crossingIn == nil)
        #expect(late.reason == "away 5 min (logind)")
        // The same inputs read later: the time since the read counts.
        let inputs = PresenceInputs(sessions: [LoginSession(id: "2", idle: true, idleSinceUs: ago(120))], logindReason: "", readAt: now)
        #expect(PresenceAnalysis.analyze(inputs, after: 300, now: now + 200_000_000_000).idle == true)
    }

    @Test("logind's own aggregate (the Manager's IdleHint) counts too: idle since its time, or away when it gives none")
    func managerIdleHint() {
        var inputs = PresenceInputs(sessions: [LoginSession(id: "2")], logindReason: "", readAt: now)
        inputs.managerIdle = ManagerIdle(idle: true, sinceUs: ago(400))
        let r = PresenceAnalysis.analyze(inputs, after: 300, now: now)
        #expect(r.idle == true && r.idleSeconds == 400, "\(r)")
        inputs.managerIdle = ManagerIdle(idle: true, sinceUs: 0)
        #expect(PresenceAnalysis.analyze(inputs, after: 300, now: now).idle == true)
        inputs.managerIdle = ManagerIdle(idle: false, sinceUs: 0)
        #expect(PresenceAnalysis.analyze(inputs, after: 300, now: now).idle == false)
    }

    @Test("an idle hint without a time (some desktops): the desktop's own delay has passed, so away")
    func idleHintWithoutTime() {
        let r = analyze([LoginSession(id: "2", idle: true, idleSinceUs: 0)])
        #expect(r.idle == true && r.idleSeconds == nil)
    }

    @Test("every session locked: away at once, whatever the idle time; one unlocked session in use is not")
    func lockedIsAway() {
        let r = analyze([LoginSession(id: "2", locked: true), LoginSession(id: "3", idle: true, idleSinceUs: ago(5), locked: true)])
        #expect(r.idle == true && r.locked == true)
        #expect(r.reason.contains("screen locked (logind LockedHint)"))
        let mixed = analyze([LoginSession(id: "2", locked: true), LoginSession(id: "3")])
        #expect(mixed.idle == false && mixed.locked == false)
    }

    @Test("a desktop's exact idle time wins over logind's hints; Mutter's watches need no timer, KDE's idle time does")
    func desktopIdleTime() {
        let sessions = [LoginSession(id: "2")]
        let gnome = analyze(sessions, desktop: DesktopIdle(source: "GNOME idle monitor", idleMs: 200_000, locked: false, watched: true))
        #expect(gnome.idle == false && gnome.idleSeconds == 200 && gnome.crossingIn == nil)
        #expect(gnome.reason == "idle 3 min of 5 min (logind, GNOME idle monitor)")
        let kde = analyze(sessions, desktop: DesktopIdle(source: "KDE screen saver", idleMs: 200_000, locked: false, watched: false))
        #expect(kde.crossingIn == 100)
        let away = analyze(sessions, desktop: DesktopIdle(source: "GNOME idle monitor", idleMs: 400_000, locked: nil, watched: true))
        #expect(away.idle == true)
        let locked = analyze(nil, desktop: DesktopIdle(source: "KDE screen saver", idleMs: 1000, locked: true, watched: false))
        #expect(locked.idle == true && locked.reason == "away: screen locked (KDE screen saver)")
    }

    @Test("the conditions carry user.idle, user.idle_s, user.locked, user.sessions and the reason")
    func conditionNames() {
        var dbus = DBusReadings.notConsulted("test")
        dbus.presence = PresenceInputs(sessions: [LoginSession(id: "2")], logindReason: "", readAt: monotonicNanos())
        let snap = ConditionSnapshot.assemble(supplies: [], zones: [], links: [], routesReadable: true, cpuPressure: nil,
                                              dbus: dbus, options: ProbeOptions(root: SysfsRoot(sysfs: "/nonexistent", proc: "/nonexistent")))
        let c = Dictionary(uniqueKeysWithValues: snap.conditions.map { ($0.0, $0.1) })
        #expect(c["user.idle"] == .bool(false))
        #expect(c["user.idle_s"] == .number(0))
        #expect(c["user.sessions"] == .number(1))
        #expect(c["user.reason"] == .string("active now (logind)"))
    }
}

/// `storage.*`: statvfs of the working directory's filesystem, read with the other conditions.
struct StorageTests {
    @Test("free bytes from statvfs; low under the threshold; a missing directory is unknown, with the path and the errno's text")
    func statvfsReading() {
        let ok = StorageReading.read(path: "/dev/shm", lowBytes: 0)
        #expect(ok.freeBytes != nil && ok.low == false && ok.path == "/dev/shm")
        #expect(StorageReading.read(path: "/dev/shm", lowBytes: 1e18).low == true)
        let missing = StorageReading.read(path: "/nonexistent/bgtask", lowBytes: 0)
        #expect(missing.freeBytes == nil && missing.low == nil)
        #expect(missing.reason == "statvfs /nonexistent/bgtask: No such file or directory")
        #expect(StorageReading.read(path: nil, lowBytes: 0).path != nil, "the current directory")
    }
}
