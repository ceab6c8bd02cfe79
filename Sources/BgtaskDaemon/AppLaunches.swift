#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskConfig
import BgtaskCore
import BgtaskFiles
import BgtaskPolicy
import BgtaskProtocol
import BgtaskRun

/// The broker's launches: a started task handed to a process of its app, the app launched for it when none is
/// there (a launch that fails ends the task's run), its processes' leaving — per connection: exactly what was
/// handed to the process that left — and the relaunches that follow, bounded (`RelaunchBudget`).
extension AppBroker {
    /// Hands a started task to its app: at once if a process of the app is there and ready, else once one is
    /// (launching the app with its manifest's command if none runs). Several due tasks of one app arrive in one
    /// launch. Throws when the app cannot be launched: the task's run is over, not "started".
    func deliver(_ t: AppTask, kind: TaskKind) throws(AppStartError) -> String {
        if let c = roster.readyClient(of: t.app) {
            t.handedTo = c.connection
            t.handling = false
            bus.emit(.launch, [.string(t.app), .string(t.identifier), .string(kind.rawValue)], to: c.connection)
            let key = AppBroker.key(t.app, t.identifier)
            if kind == .continued, let e = queue.startingTask(key) {
                queue.presenter.show(key: key, appID: t.app, appName: roster.manifests[t.app]?.name ?? t.app,
                                     title: e.row.title ?? t.identifier, subtitle: e.row.subtitle ?? "")
            }
            return "delivered to \(t.app)" + (c.pid.map { " (pid \($0))" } ?? "")
        }
        if !roster.clients(of: t.app).isEmpty { return "waiting for \(t.app) to say it is ready" }
        if let p = roster.launched[t.app], isAlive(p.pid) { return "waiting for \(t.app) (pid \(p.pid)) to register" }
        if roster.relaunchDue.contains(t.app) { return "waiting for \(t.app) to be launched again" }
        return try launch(t.app)
    }

    /// Starts the app's manifest command for background work.
    func launch(_ app: String) throws(AppStartError) -> String {
        if let until = roster.relaunches.refused(app, now: monotonic()) { throw AppStartError(relaunchesSpent(app, until: until), status: 1) }
        guard let m = roster.manifests[app] else { throw AppStartError("\(app) could not be launched: it has no manifest any more", status: 1) }
        do {
            let p = try TaskProcess.spawn(m.command, background: true, cgroupName: "\(StatePaths.safeName(app))-\(getpid())",
                                          output: StatePaths.outputFile(stateDirectory: stateDirectory, id: "app:" + app),
                                          environment: ["BGTASK_APP_ID=\(app)", "BGTASK_LAUNCHED_FOR_BACKGROUND=1"])
            roster.launched[app] = p
            return "launched \(app) (pid \(p.pid)) to deliver it"
        } catch let e as SpawnError {
            let why = e.detail ?? "\(String(cString: strerror(e.errno))) (\(Errno.name(e.errno)))"
            throw AppStartError("\(app) could not be launched: cannot run \(e.command) (\(m.path)): \(why)", status: e.exitCode)
        } catch {
            throw AppStartError("\(app) could not be launched: \(error)", status: 1)
        }
    }

    func relaunchesSpent(_ app: String, until: Double) -> String {
        let at = wallClockNow() + max(0, until - monotonic())
        return "\(app) not launched again: it ended before taking its tasks after \(RelaunchBudget.limit) times it was launched again "
            + "within \(formatDuration(RelaunchBudget.window)) (relaunches are bounded); it may be launched again from \(untilText(at))"
    }

    /// Hands `e` to its app again, or ends it if the app cannot be launched for it.
    func handOver(_ e: Entry, _ t: AppTask, _ context: String) {
        do {
            let what = try deliver(t, kind: e.row.kind)
            say("\(e.id): \(context)\(what)")
        } catch { e.supervisor.appEnded(status: error.status, detail: error.description) }
    }

    /// Processes of the app ended: `connections` left the bus (a process bgtaskd launched exited: its own, if it
    /// had one). Exactly what was handed to them is over — failed if a process said its handler ran, else handed
    /// again — and tasks that waited for a process of the app, if none is left, get a launch of it. Another
    /// process of the app keeps what it runs. Once none is left, queued continued work is cancelled (the person
    /// who asked for it closed the app).
    func left(_ app: String, connections: [String], why: String, launchEnded: Bool = false) {
        for c in connections { roster.clients[AppClient.Key(connection: c, app: app)] = nil }
        // Handed to a process that left (to be handed again), and waiting for a process of the app.
        var handed: [Entry] = [], waiting: [Entry] = []
        for e in queue.runningTasks(app: app) where !e.supervisor.isDone {
            guard let t = e.supervisor.app as? AppTask else { continue }
            guard let to = t.handedTo else { waiting.append(e); continue }
            guard connections.contains(to) else { continue }
            // A process that said its handler runs and left has failed the task — unless it was the process that
            // submitted it, leaving as it was handed over (a command-line app exiting right after it scheduled the
            // work, its library having said "handled" on the way out): that one is handed again, as iOS launches a
            // suspended app.
            if t.handling, roster.submitters[e.id] != to {
                e.supervisor.appCompleted(success: false, detail: "\(app) \(why) before completing it")
                continue
            }
            t.handedTo = nil
            t.handling = false
            handed.append(e)
        }
        let others = roster.clients(of: app)
        if !others.isEmpty || roster.launched[app].map({ isAlive($0.pid) }) == true || roster.relaunchDue.contains(app) {
            // A process of the app is there, or on its way: what was handed to the one that left goes to it.
            for e in handed { if let t = e.supervisor.app as? AppTask { handOver(e, t, "\(app) \(why) before handling it; ") } }
        } else if !handed.isEmpty || launchEnded {
            // A process that was given its tasks, or was launched for them, ended before it took them.
            if !(handed + waiting).isEmpty { relaunch(app, handed + waiting, why: why) }
        } else {
            // Only a process that had not said it was ready left (it was not handed a task): the app's first launch.
            for e in waiting { if let t = e.supervisor.app as? AppTask { handOver(e, t, "\(app) \(why); ") } }
        }
        if others.isEmpty {
            for id in queue.waitingIDs(app: app) where queue.waitingKind(id) == .continued {
                _ = queue.cancel(id, by: "bgtaskd: \(app) \(why)")
            }
        }
        queue.actOnChanges()
    }

    /// No process of the app is left to take `entries`: it is launched again for them, within its budget
    /// (`RelaunchBudget`), after its backoff; beyond it they fail, saying so.
    func relaunch(_ app: String, _ entries: [Entry], why: String) {
        switch roster.relaunches.next(app, now: monotonic()) {
        case .spent(let until):
            let reason = relaunchesSpent(app, until: until)
            for e in entries { e.supervisor.appEnded(status: 1, detail: "\(app) \(why) before taking it; \(reason)") }
        case .after(let delay, let n) where delay == 0:
            for e in entries { if let t = e.supervisor.app as? AppTask { handOver(e, t, "\(app) \(why) before handling it (relaunch \(n) of \(RelaunchBudget.limit)); ") } }
        case .after(let delay, let n):
            roster.relaunchDue.insert(app)
            say("\(app) \(why) before taking its tasks; launched again in \(formatDuration(delay)) (relaunch \(n) of \(RelaunchBudget.limit))")
            loop.after(delay) { [weak self] in
                guard let self else { return }
                self.roster.relaunchDue.remove(app)
                for e in self.queue.runningTasks(app: app) where !e.supervisor.isDone {
                    if let t = e.supervisor.app as? AppTask, !t.delivered { self.handOver(e, t, "relaunch \(n) of \(RelaunchBudget.limit): ") }
                }
                self.queue.actOnChanges()
            }
        }
    }


    /// Reaps app processes bgtaskd launched.
    func reap() {
        for (app, p) in roster.launched {
            var status: Int32 = 0
            if waitpid(p.pid, &status, WNOHANG) == p.pid {
                roster.launched[app] = nil
                p.cleanUp()
                // Its connection too, if the bus has not said yet that it left.
                left(app, connections: roster.clients(of: app).filter { $0.pid == p.pid }.map(\.connection), why: "exited (status \(status >> 8 & 0xff))",
                     launchEnded: true)
            }
        }
    }

    /// Apps that leave the session bus.
    func watchConnections() {
        bus.subscribe(sender: "org.freedesktop.DBus", interface: "org.freedesktop.DBus", member: "NameOwnerChanged",
                      path: "/org/freedesktop/DBus") { [unowned self] _, args in
            guard args.count == 3, let name = args[0].string, let new = args[2].string, new.isEmpty else { return }
            self.queue.callerLeft(name)
            for app in Set(self.roster.clients.values.filter { $0.connection == name }.map(\.id)).sorted() {
                self.left(app, connections: [name], why: "left the bus")
            }
        }
    }
}
