#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskAudit
import BgtaskBus
import BgtaskProtocol
import BgtaskConfig
import BgtaskCore
import BgtaskPolicy
import BgtaskProbes
import BgtaskQueue
import BgtaskRun
@preconcurrency import CLinux

/// What happens when runs end: the queue's next step for a run, leftovers ended, what a dead daemon left, and
/// the daemon's own stop.
extension QueueDriver {
    /// A task's run is over: retried, rescheduled (`--every`) or removed from the queue. Its end is in the queue
    /// first (written when the run ended, `persistEnd`); what is told of it follows.
    func finished(_ e: Entry) {
        let s = e.supervisor
        if let why = s.startRefused {
            _ = s.finish()
            // Nothing ran: the request is not spent. It waits out the retry backoff and tries again.
            var r = e.row
            guard case .tryAgain(let notBefore) = queue.next(.init(kind: r.kind, submitted: r.submitted), .notStarted(why: why), now: wallClockNow()) else { return }
            r.earliest = notBefore
            say("\(r.id): not started (\(why)); it tries again not before \(untilText(r.earliest!))")
            if !queue.isWaiting(r.id), !rounds.stopping { add(r) }
            return
        }
        let end = persistEnd(e)
        let status = s.finish()
        if e.row.isAppTask { try? store.saveUsage(day: queue.batteryUse.day, seconds: queue.batteryUse.seconds) }
        // Units included: a manager that crashed leaves its units' processes running.
        if let token = s.runOptions.runToken { endLeftovers(of: e.id, token: token) }
        if e.row.isAppTask { host.appTaskEnded(e, status: status) }
        if !e.row.isAppTask { outputWatch.unwatch(outputPath(e.id)) }
        if let said = end.said { say(said) }
        // A request submitted while it ran takes precedence over its own rescheduling (as in the queue's row).
        // A stopping daemon supervises nothing new: the row waits for the next one.
        if let n = end.next, !queue.isWaiting(n.id), !rounds.stopping { add(n) }
        announce.emit(.taskChanged, [.string(e.id), .string(end.next != nil && queue.isWaiting(e.id) ? "pending" : "finished")])
    }

    /// A run's end into the queue, the first thing done with it (before it is recorded, said or signalled, before
    /// a stop goes on): its running row goes, with the request waiting again if one follows. A queue that cannot
    /// take it now (held by another process past the busy timeout, a full disk) gets it from a retry, and until
    /// then `ended` has it for a daemon that dies first. Once per run: the end is kept in the entry.
    @discardableResult
    func persistEnd(_ e: Entry) -> EndOfRun {
        if let done = e.ended { return done }
        let s = e.supervisor
        let request = RunEnd.Request(kind: e.row.kind, retry: e.row.retry, failures: e.row.failures, calendar: e.row.calendar,
                                     every: e.row.every, anchor: e.row.anchor, submitted: e.row.submitted, started: e.row.started)
        let status = s.endStatus
        // A cancel ends the request whatever the run's status says: its SIGTERM is not a failure to retry.
        let outcome: RunEnd.Outcome = e.row.cancelled != nil ? .cancelled
            : .ended(status: status, expiredByRule: s.machine.expiredByRule, ownStatus: s.machine.ownStatus)
        var next: QueuedTask?, said: String?
        var r = e.row
        switch queue.next(request, outcome, now: wallClockNow()) {
        case .retry(let attempt, let notBefore):
            r.failures = attempt
            r.earliest = notBefore
            next = r
            said = "\(e.id): failed (status \(status)); retry \(attempt) of \(r.retry) not before \(untilText(notBefore))"
        case .waitAgain(let rule):
            next = r
            said = "\(e.id): ended by rule \(rule); queued again, to run when its conditions hold"
        case .calendar(let at), .period(let at):
            r.failures = 0
            r.earliest = at
            next = r
        case .calendarEnded(let reason):
            said = "\(e.id): \(reason); not queued again"
        case .done, .tryAgain:
            if let who = e.row.cancelled { said = "\(e.id): cancelled by \(who); not queued again" }
        }
        if var n = next {
            n = n.requeued(runID: QueueDriver.newRunID(n.id))
            n.submitted = wallClockNow()
            next = n
        }
        let end = EndOfRun(next: next, said: said)
        e.ended = end
        let (id, runID, state) = (e.id, e.row.runID ?? s.runOptions.runID, e.row.state)
        let write: (QueueStore) throws -> Void = { try $0.end(id, state: state, runID: runID, next: next) }
        rounds.unwritten.runEnded(id)
        do { try write(store) } catch {
            say("\(id): its end cannot be written to the queue now (\(error)); tried again in \(Int(UnwrittenWrites.retryInterval)) s")
            if let why = files.ends.record(.init(id: id, runID: runID, next: next.map { ($0.earliest, $0.failures) })) {
                say("\(id): nor to \(files.ends.lines.path) (\(why)): a daemon that dies before the retry runs it again")
            }
            rounds.unwritten.add(.init(id: id, isStart: false, write: write), now: monotonic())
        }
        return end
    }

    /// The queue's writes that failed, tried again once due (`force`: now, as a stop does): `ended` is emptied once
    /// every end is in the queue.
    func writeUnwritten(now: Double, force: Bool = false) {
        guard let due = rounds.unwritten.due, force || now >= due else { return }
        if rounds.unwritten.retry(store, now: now) { files.ends.forget() }
    }

    /// Ends a dead daemon could not write to the queue (`UnwrittenEnds`): applied before its runs are taken for
    /// interrupted ones. A line whose run is not in the queue (written since, or another run's) changes nothing.
    func replayEnds() {
        for end in files.ends.left() {
            let running = (try? store.get(end.id, state: "running")) ?? nil
            let pending = (try? store.get(end.id, state: "pending")) ?? nil
            guard let row = running?.runID == end.runID ? running : pending?.runID == end.runID ? pending : nil else { continue }
            var next: QueuedTask?
            if let n = end.next {
                var r = row.requeued(runID: QueueDriver.newRunID(row.id))
                r.earliest = n.earliest
                r.failures = n.failures
                r.submitted = wallClockNow()
                next = r
            }
            do { try store.end(end.id, state: row.state, runID: end.runID, next: next) } catch { say("\(end.id): cannot write its end to the queue: \(error)") }
        }
        files.ends.forget()
    }

    /// A task is all its processes: what its command started and left running when it exited (a daemon that
    /// left the process group) is ended with it, as systemd ends a service's control group.
    func endLeftovers(of id: String, token: String) {
        let left = RunProcesses.find(token)
        guard !left.isEmpty else { return }
        say("\(id): ended \(left.count) process(es) its command left running (pid \(left.map(String.init).joined(separator: ", ")))")
        end(grace: min(5, policy.settings.number("run.expire_grace"))) { RunProcesses.find(token) }
    }

    /// The one way bgtaskd ends processes it does not wait for: SIGCONT and SIGTERM now, SIGKILL after `grace` to
    /// whatever `targets` still finds then (a negative number is a process group) — on the loop, never blocking it.
    func end(grace: Double, _ targets: @escaping () -> [pid_t]) {
        for p in targets() { kill(p, SIGCONT); kill(p, SIGTERM) }
        loop.after(grace) { for p in targets() { kill(p, SIGKILL) } }
    }

    /// What a daemon that died left running: ended (never left frozen, never run twice at once), recorded,
    /// and re-queued if it is processing work; refresh work is dropped, as on iOS.
    func recoverInterrupted() {
        replayIntents()
        replayEnds()
        // Rows of an earlier boot name pids and start ticks that mean nothing now (a process of this boot may have
        // both, early boot being much the same each time), and their processes, units and tokens are gone with it:
        // nothing of them is signalled. Rows written before boots were kept are taken as of this boot.
        let boot = ProcInfo.bootID()
        let earlierBoot = boot != nil && ((try? store.runBoot()) ?? nil).map { $0 != boot } == true
        defer {
            if let b = boot {
                do { try store.setRunBoot(b) } catch { say("cannot record this boot in the queue: \(error)") }
            }
        }
        guard let rows = try? store.all(state: "running"), !rows.isEmpty else { return }
        // A transient unit (its row says `unit NAME`): thawed through systemd first; if its main process was
        // never known, systemd stops the whole unit.
        let units = rows.map { earlierBoot ? nil : $0.cgroup?.unitName }
        for (r, unit) in zip(rows, units) {
            let lost = "bgtaskd was gone while it ran (" + (r.pgid.map { "pid \($0)" } ?? "its start was recorded, its pid not yet") + ")"
            recordEvent(RunEvent(kind: .lost, monotonic: monotonic(), detail: lost, decision: nil, conditions: [:], exitStatus: nil,
                                  runID: r.runID ?? "\(r.id)-recovered"), task: r.fields)
            if let u = unit, let m = host.units { if r.pgid == nil { m.stopLeftover(u) } else { m.thawLeftover(u) } }
        }
        // All at once, found by process group and by run token: one grace for every task, not one each.
        let ended = earlierBoot ? [] : RunProcesses.endAll(rows.map { RunProcesses.Target(pgid: $0.pgid ?? 0, childStart: UInt64(max(0, $0.childStart ?? 0)),
                                                                                         containment: $0.cgroup ?? .processGroup, token: $0.token) },
                                                          grace: policy.settings.number("run.expire_grace"))
        for (i, r) in rows.enumerated() {
            var done = earlierBoot ? "the machine has restarted since, so nothing of it runs" : ended[i].description
            if let u = units[i] {
                if r.pgid == nil { done = host.units == nil ? "its unit \(u) could not be reached (no systemd manager now)" : "its unit \(u) was stopped" }
                else { host.units?.forgetLeftover(u) }
            }
            // A cancelled run is over, whenever the daemon died: its request does not come back.
            let requeue = RunEnd.requeuedAfterCrash(kind: r.kind) && r.cancelled == nil
            let pendingExists = (try? store.get(r.id, state: "pending")) != nil
            let dropped = r.cancelled.map { "it was cancelled (\($0)): not queued again" } ?? "refresh work is dropped"
            let what = "interrupted: \(done); " + (requeue ? (pendingExists ? "a newer request is pending" : "queued again") : dropped)
            recordEvent(RunEvent(kind: .recovered, monotonic: monotonic(), detail: what, decision: nil, conditions: [:], exitStatus: nil,
                                  runID: r.runID ?? "\(r.id)-recovered"), task: r.fields)
            say("\(r.id): \(what)")
            do {
                try store.remove(r.id, state: "running")
                if requeue, !pendingExists {
                    try store.put(r.requeued(runID: r.runID ?? QueueDriver.newRunID(r.id)))
                }
            } catch { say("\(r.id): cannot update the queue: \(error)") }
        }
    }

    /// Starts a dead daemon had under way whose running row it never wrote (`StartIntents`): into the queue as the
    /// running rows they were about to become, with no pid, for the recovery that follows. A line whose request is
    /// gone, or is another request of that id (its run id differs), is no start of the request that waits now.
    func replayIntents() {
        for i in files.intents.left() {
            guard ((try? store.get(i.id, state: "running")) ?? nil) == nil,
                  var r = (try? store.get(i.id, state: "pending")) ?? nil, QueueDriver.runID(of: r) == i.runID else { continue }
            r.runID = i.runID
            r.token = i.token
            r.pgid = nil; r.childStart = nil; r.cgroup = nil; r.started = nil
            do { try store.markRunning(r, from: "pending") } catch { say("\(i.id): cannot record its interrupted start: \(error)") }
        }
        files.intents.forget()
    }

    /// SIGTERM (logout, `systemctl --user stop`): running work is ended and re-queued, nothing left running
    /// unsupervised — all at once, within one grace of at most 5 s (under the unit's TimeoutStopSec=30). False: a
    /// stop is already under way.
    func stop(signal sig: Int32) -> Bool {
        guard !rounds.stopping else { return false }
        rounds.stopping = true
        // Runs already over are ended as such first, not taken for interrupted ones: those whose exit was reaped but
        // not yet settled, and those whose status the kernel holds (the SIGCHLD not read yet: a signal list can
        // bring SIGTERM first).
        events.reap(running.values.map(\.supervisor))
        finishDone()
        say("stopping (signal \(sig)); \(running.count) running task(s) end and wait in the queue")
        let entries = running.values.sorted { $0.id < $1.id }
        for e in entries {
            if e.supervisor.pid == nil, let u = e.supervisor.taskProcess?.unitName { host.units?.stopLeftover(u) }
            e.supervisor.taskProcess?.thawForSignal()
        }
        let ended = RunProcesses.endAll(entries.map { e in
            RunProcesses.Target(pgid: e.supervisor.pid ?? 0, childStart: UInt64(max(0, e.row.childStart ?? 0)),
                                containment: e.supervisor.taskProcess?.containment ?? .processGroup, token: e.supervisor.runOptions.runToken)
        }, grace: entries.map(\.supervisor.machine.limits.expireGrace).max() ?? 0)
        for (e, done) in zip(entries, ended) {
            if let pid = e.supervisor.pid {
                var status: Int32 = 0
                _ = waitpid(pid, &status, WNOHANG)
            }
            recordEvent(RunEvent(kind: .recovered, monotonic: monotonic(), detail: "interrupted: bgtaskd stopped; \(done)",
                                  decision: nil, conditions: [:], exitStatus: nil, runID: e.row.runID), task: e.row.fields)
            // A cancelled run stays over; other interrupted work (not refresh work) waits for the next daemon. A
            // write that fails leaves the running row, which that daemon's recovery handles alike.
            let requeue = e.row.kind != .refresh && e.row.cancelled == nil
            let runID = e.row.runID ?? e.supervisor.runOptions.runID
            do { try store.end(e.id, state: "running", runID: runID, next: requeue ? e.row.requeued(runID: runID) : nil) }
            catch { say("\(e.id): cannot update the queue: \(error)") }
        }
        for e in entries { _ = queue.finish(e.id) }
        // Ends the queue could not take yet: one last try (what fails again is in `ended` for the next daemon).
        writeUnwritten(now: monotonic(), force: true)
        if !rounds.unwritten.hasStart { files.intents.clear() }
        // Nothing is read from now until the next daemon: the history says so (`bgtask report` draws "not read").
        historyStopped()
        audit.flush()
        return true
    }
}
