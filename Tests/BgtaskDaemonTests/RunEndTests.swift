#if canImport(Glibc)
@preconcurrency import Glibc
#endif
@testable import BgtaskDaemon
import BgtaskBus
import BgtaskCore
import BgtaskPolicy
import BgtaskProtocol
import BgtaskQueue
import BgtaskRun
@preconcurrency import CLinux
import Foundation
import GRDB
import Testing

/// Another process's hold on the queue (a backup tool, an `sqlite3` left open): a write transaction on the file that
/// the daemon's writes wait for, up to their busy timeout, and then fail.
final class QueueHold {
    let db: DatabaseQueue
    init(_ path: String) throws {
        var config = Configuration()
        config.allowsUnsafeTransactions = true   // the hold outlasts each access: that is the point
        db = try DatabaseQueue(path: path, configuration: config)
        try db.inDatabase { try $0.execute(sql: "BEGIN IMMEDIATE") }
    }
    func release() throws { try db.inDatabase { try $0.execute(sql: "ROLLBACK") } }
}

/// Whether process `pid` has exited within `seconds`, left unreaped (its pidfd is readable once it has: the kernel
/// holds its status for whoever waits).
func exitedUnreaped(_ pid: pid_t, within seconds: Int32) -> Bool {
    let fd = bgt_pidfd_open(pid)
    guard fd >= 0 else { return false }
    defer { close(fd) }
    var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
    return poll(&p, 1, seconds * 1000) == 1
}

extension DefaultContextTests {
@Suite("a run's end: a cancel ends the request for good; the end is in the queue before anything else")
struct RunEndTests {
    /// A one-shot task `backup` submitted that waits for the charger (its reply's follow-up run).
    static func waitsForTheCharger(_ a: DriverAlone) throws {
        _ = try a.submit("backup", requiresPower: true).get()
        a.host.replies.forEach { $0() }
    }

    /// `backup` started by the charger, and its command exiting 0 while another process holds the queue (its writes
    /// wait 0.2 s for it, then fail); the round after the exit has run.
    static func endedWhileHeld() throws -> (DriverAlone, QueueHold) {
        let a = try DriverAlone(policy: ServiceTests.fastPower, readings: ServiceTests.onBattery, busyTimeout: 0.2)
        try waitsForTheCharger(a)
        a.driver.readingsChanged(ServiceTests.charger)
        #expect(a.host.fakeLauncher.started["backup"] != nil)
        let hold = try QueueHold(a.driver.store.path)
        a.driver.running["backup"]?.supervisor.childExited(waitStatus: 0)
        a.driver.settle(now: monotonic())
        return (a, hold)
    }

    /// The queue's rows of `id` as stored ("pending", "running").
    static func states(_ store: QueueStore, _ id: String) throws -> [String] {
        try ["pending", "running"].filter { try store.get(id, state: $0) != nil }
    }

    @Test("cancellationIsTerminal: a running task with --every, --on-calendar or --retry that is cancelled (Cancel, or CancelAll with its next request pending) ends, its SIGTERM no failure to retry, and nothing of it is queued again")
    func cancellationIsTerminalForPeriodicCalendarAndRetryingTasks() throws {
        let d = try InProcessDaemon(readings: ServiceTests.charger)
        var every = SubmitOptions()
        every.every = 1   // its run outlasts its period: the next one is due at once when it ends
        var calendar = SubmitOptions()
        calendar.onCalendar = "*-*-* *:*:00"
        var retry = SubmitOptions()
        retry.retry = 3
        for (id, o) in [("every", every), ("calendar", calendar), ("retry", retry)] {
            _ = try d.submit(id, o, argv: ["sleep", "600"]).get()
            if d.launcher.started[id] == nil { _ = try d.call(.debugLaunch, [.string(id)]).get() }   // its elapse is to come
            let unit = try #require(d.launcher.started[id], "\(id) did not start")
            let done = try d.call(.cancel, [.string(id)]).get()
            #expect(done.first?.string?.contains("expired the running task") == true, "\(id): \(done)")
            #expect(unit.signals.contains(SIGTERM), "\(id): \(unit.signals)")
            // The command dies of the cancel's SIGTERM.
            d.daemon.driver.running[id]?.supervisor.childExited(waitStatus: SIGTERM)
            d.settle()
            #expect(d.daemon.driver.running[id] == nil && !d.daemon.driver.queue.isWaiting(id), "\(id) is queued again")
            #expect(try Self.states(d.daemon.driver.store, id).isEmpty, "\(id) is in the queue again")
        }

        // A periodic task that submitted its next request while it ran: CancelAll takes that request and ends the run.
        _ = try d.submit("self", every, argv: ["sleep", "600"]).get()
        #expect(d.launcher.started["self"] != nil)
        _ = try d.submit("self", every, argv: ["sleep", "600"]).get()
        #expect(d.daemon.driver.queue.isWaiting("self"), "its next request waits for the run")
        #expect(try d.call(.cancelAll).get().first?.number == 1)
        d.daemon.driver.running["self"]?.supervisor.childExited(waitStatus: SIGTERM)
        d.settle()
        #expect(d.daemon.driver.running["self"] == nil && !d.daemon.driver.queue.isWaiting("self"))
        #expect(try Self.states(d.daemon.driver.store, "self").isEmpty)
    }

    @Test("cancellationIsTerminal across a crash and a stop: a cancelled periodic run that a dead daemon left, or that a stop interrupts, is not queued again")
    func cancellationIsTerminalAcrossACrashAndAStop() throws {
        var every = SubmitOptions()
        every.every = 60
        // Killed between the cancel and the command's exit: the next daemon's recovery finds the running row.
        let crashed = try DriverAlone(policy: "", readings: ServiceTests.charger)
        every.id = "sync"
        _ = try crashed.driver.submit(every, ["sleep", "600"]).get()
        crashed.host.replies.forEach { $0() }
        #expect(crashed.host.fakeLauncher.started["sync"] != nil)
        _ = try crashed.driver.cancel("sync", by: "bgtask cancel").get()
        crashed.driver.recoverInterrupted()
        #expect(try Self.states(crashed.driver.store, "sync").isEmpty, "a cancelled run came back after a crash")

        // A stop before the command has exited.
        let stopped = try DriverAlone(policy: "", readings: ServiceTests.charger)
        _ = try stopped.driver.submit(every, ["sleep", "600"]).get()
        stopped.host.replies.forEach { $0() }
        _ = try stopped.driver.cancel("sync", by: "bgtask cancel").get()
        #expect(stopped.driver.stop(signal: SIGTERM))
        #expect(try Self.states(stopped.driver.store, "sync").isEmpty, "a cancelled run is queued again by a stop")
    }

    @Test("runOutcomeIsDurable with the queue held past its busy timeout: a one-shot task that exited 0 then is not run again by the next daemon")
    func runOutcomeIsDurableWhenTheQueueIsBusy() throws {
        let (a, hold) = try Self.endedWhileHeld()
        #expect(a.driver.running.isEmpty)
        try hold.release()
        // The daemon dies before anything else is written; the next one recovers from what it left.
        a.driver.recoverInterrupted()
        #expect(try Self.states(a.driver.store, "backup").isEmpty, "a run that exited 0 is queued again")
    }

    @Test("runOutcomeIsDurable: an end the held queue could not take is written by a retry once it is free, and `ended` is emptied")
    func runOutcomeIsDurableAfterARetry() throws {
        let (a, hold) = try Self.endedWhileHeld()
        #expect(a.driver.files.ends.left().map(\.id) == ["backup"], "the end waits in `ended`")
        #expect(a.driver.rounds.unwritten.due != nil, "a retry is due (the daemon's timer follows it)")
        a.driver.writeUnwritten(now: monotonic(), force: true)
        #expect(!a.driver.rounds.unwritten.isEmpty, "still held: not written")
        try hold.release()
        a.driver.writeUnwritten(now: monotonic(), force: true)
        #expect(a.driver.rounds.unwritten.isEmpty && a.driver.rounds.unwritten.due == nil)
        #expect(try Self.states(a.driver.store, "backup").isEmpty)
        #expect(a.driver.files.ends.left().isEmpty)
    }

    @Test("runOutcomeIsDurable when a stop comes first: an exit reaped but not yet settled, or not yet reaped (the kernel holds it), is the run's end, not an interruption to queue again")
    func runOutcomeIsDurableWhenAStopComesFirst() throws {
        // Reaped (a unit's end, as its manager said it), the round that settles it not yet run.
        let a = try DriverAlone(policy: ServiceTests.fastPower, readings: ServiceTests.onBattery)
        try Self.waitsForTheCharger(a)
        a.driver.readingsChanged(ServiceTests.charger)
        a.driver.running["backup"]?.supervisor.childExited(waitStatus: 0)
        #expect(a.driver.stop(signal: SIGTERM))
        #expect(try Self.states(a.driver.store, "backup").isEmpty, "a run that exited 0 is queued again by the stop")

        // A real child that has exited, its SIGCHLD not read: the stop has its status to read.
        let b = try DriverAlone(policy: ServiceTests.fastPower, readings: ServiceTests.onBattery)
        b.host.realProcesses = true
        try Self.waitsForTheCharger(b)
        b.driver.readingsChanged(ServiceTests.charger)
        let pid = try #require(b.driver.running["backup"]?.supervisor.pid, "not spawned")
        #expect(exitedUnreaped(pid, within: 10))
        #expect(b.driver.stop(signal: SIGTERM))
        #expect(try Self.states(b.driver.store, "backup").isEmpty, "a run that exited 0 is queued again by the stop")
    }

    @Test("runOutcomeIsDurable when its start could not be written: the request its run left pending goes with the run's end")
    func runOutcomeIsDurableWhenItsStartCannotBeWritten() throws {
        let a = try DriverAlone(policy: ServiceTests.fastPower, readings: ServiceTests.onBattery, busyTimeout: 0.2)
        try Self.waitsForTheCharger(a)
        let hold = try QueueHold(a.driver.store.path)
        a.driver.readingsChanged(ServiceTests.charger)
        #expect(a.host.fakeLauncher.started["backup"] != nil, "started: its start is in `starting`")
        a.driver.settle(now: monotonic())
        #expect(try a.driver.store.get("backup", state: "pending") != nil, "its running row was not written")
        #expect(!a.driver.files.intents.left().isEmpty, "its line in `starting` stays while its row is missing")
        try hold.release()
        a.driver.running["backup"]?.supervisor.childExited(waitStatus: 0)
        a.driver.settle(now: monotonic())
        a.driver.recoverInterrupted()
        #expect(try Self.states(a.driver.store, "backup").isEmpty, "a run that exited 0 is queued again")
    }
}
}
