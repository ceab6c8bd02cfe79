#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskBus
import BgtaskConfig
import BgtaskProtocol
import BgtaskQueue
import BgtaskRun

/// The daemon's wiring: what the queue asks of the adapters (`QueueHost`), the bus service's start, the systemd
/// user manager's connection.
extension Daemon: QueueHost {
    func actOnChanges() { afterRound(conditionsChanged: false) }

    func reloadPolicy() -> (ok: Bool, said: String) {
        let r = reload()
        afterRound(conditionsChanged: false)
        return r
    }

    var launcher: TaskLauncher? {
        if let l = options.launcher { return l }
        // A manager that was not there at bgtaskd's start (bgtaskd started by hand, or before it) is looked for again
        // at each start of a command: its private socket appearing costs one lstat to see.
        if systemd == nil, options.systemdUnits, Environment.get("BGTASK_SYSTEMD_UNITS") != "0", SystemdUnits.privateSocket != nil {
            connectSystemd()
        }
        return systemd
    }

    func appTask(for row: QueuedTask) -> AppTask {
        AppTask(broker: apps, app: row.app, identifier: AppBroker.identifier(of: row.id, app: row.app))
    }

    func appTaskEnded(_ e: Entry, status: Int32) {
        let expired = apps.taskEnded(e.id, app: e.row.app)
        if e.row.kind == .continued { presenter.finish(key: e.id, success: status == 0, detail: expired ?? "not completed") }
    }

    func appTaskView(_ key: String) -> AppTaskView? { apps.roster.views[key] }

    var units: SystemdUnits? { systemd }

    func afterReply(_ f: @escaping () -> Void) { service.afterReply.append(f) }

    func callerLeft(_ name: String) { service.callers[name] = nil }

    /// How long after a large reply the heap is trimmed if no other came.
    static let listingTrimDelay = 2.0

    /// Exports the interface and takes the bus name; each call's reply is followed by a round.
    func serve() throws {
        do {
            let serving = try service.serve(on: bus) { [unowned self] large in
                // A long listing's memory (its GVariants, freed once a bus thread has written the reply) goes
                // back when the daemon has been quiet again for a while, not kept for good.
                if large {
                    self.driver.rounds.quiet.rearm(now: monotonic())
                    // The heap keeps what it frees until the daemon is quiet (`Memory.keepFreedHeapUntilQuiet`), and
                    // it is not quiet while a task runs — for hours, a backup's. So a listing's heap goes back 2 s
                    // after its last page (the rest of start-up's memory, code pages included, waits for quiet).
                    let at = monotonic()
                    self.driver.rounds.lastLargeReply = at
                    self.loop.after(Daemon.listingTrimDelay) { [unowned self] in
                        if self.driver.rounds.lastLargeReply == at {
                            self.service.ahead = nil
                            Memory.releaseFreedHeap()
                        }
                    }
                }
                // The reply goes first; what the call changed is acted on and written 2 ms after it, so that the
                // audit trail's write does not take a core from the bus threads carrying the reply (2 cores here).
                self.loop.after(0.002) { [unowned self] in self.afterRound(conditionsChanged: false) }
            }
            guard serving else {
                throw DaemonError(message: "\(SchedulerBus.name) is already owned on this bus: another bgtaskd runs", status: ExitStatus.tempFail)
            }
        } catch let e as BusError {
            throw DaemonError(message: "cannot serve on the bus: \(e.message)", status: ExitStatus.unavailable)
        }
    }

    /// The user's systemd manager, where one runs and the options ask for it: command tasks become its units.
    func connectSystemd() {
        systemd = options.systemdUnits ? SystemdUnits.connect(session: bus) : nil
        guard let m = systemd else { return }
        m.after = { [unowned self] seconds, f in self.loop.after(seconds, f) }
        m.onManagerSilent = { [unowned self] n in
            self.say("the systemd user manager closed its connection while \(n) unit(s) ran; asking it again (a re-execution?)")
        }
        m.onManagerBack = { [unowned self] n in
            self.say("the systemd user manager answers again: its \(n) unit(s) followed on")
            self.loop.after(0) { [unowned self] in self.afterRound(conditionsChanged: false) }
        }
        m.onManagerGone = { [unowned self] n in
            self.say("the systemd user manager went away while \(n) unit(s) ran: their tasks are over")
            self.loop.after(0) { [unowned self] in self.afterRound(conditionsChanged: false) }
        }
        m.onMainPID = { [unowned self] s, pid in self.driver.unitMainPID(s, pid) }
        m.onExit = { [unowned self] in self.afterRound(conditionsChanged: false) }
        m.say = { [unowned self] in self.say($0) }
        say("tasks run as transient units of the systemd user manager (\(m.how)) in background.slice")
    }
}
