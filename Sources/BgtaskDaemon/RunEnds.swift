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
    /// A task's run is over: retried, rescheduled (`--every`) or removed from the queue.
    func finished(_ e: Entry) {
        if e.row.isAppTask { try? store.saveUsage(day: queue.batteryUse.day, seconds: queue.batteryUse.seconds) }
        let s = e.supervisor
        let status = s.finish()
        if let why = s.startRefused {
            // Nothing ran: the request is not spent. It waits out the retry backoff and tries again.
            var r = e.row
            guard case .tryAgain(let notBefore) = queue.next(.init(kind: r.kind, submitted: r.submitted), .notStarted(why: why), now: wallClockNow()) else { return }
            r.earliest = notBefore
            say("\(r.id): not started (\(why)); it tries again not before \(untilText(r.earliest!))")
            if !queue.isWaiting(r.id) { add(r) }
            return
        }
        // Units included: a manager that crashed leaves its units' processes running.
        if let token = s.runOptions.runToken { endLeftovers(of: e.id, token: token) }
        if e.row.isAppTask { host.appTaskEnded(e, status: status) }
        if !e.row.isAppTask { outputWatch.unwatch(outputPath(e.id)) }
        let wasRunning = e.row.state == "running"
        let request = RunEnd.Request(kind: e.row.kind, retry: e.row.retry, failures: e.row.failures, calendar: e.row.calendar,
                                     every: e.row.every, anchor: e.row.anchor, submitted: e.row.submitted, started: e.row.started)
        var next: QueuedTask?
        var r = e.row
        switch queue.next(request, .ended(status: status, expiredByRule: s.machine.expiredByRule, ownStatus: s.machine.ownStatus), now: wallClockNow()) {
        case .retry(let attempt, let notBefore):
            r.failures = attempt
            r.earliest = notBefore
            next = r
            say("\(e.id): failed (status \(status)); retry \(attempt) of \(r.retry) not before \(untilText(notBefore))")
        case .waitAgain(let rule):
            next = r
            say("\(e.id): ended by rule \(rule); queued again, to run when its conditions hold")
        case .calendar(let at), .period(let at):
            r.failures = 0
            r.earliest = at
            next = r
        case .calendarEnded(let reason):
            say("\(e.id): \(reason); not queued again")
        case .done, .tryAgain:
            break
        }
        do {
            if wasRunning { try store.remove(e.id, state: "running") } else { try store.remove(e.id, state: "pending") }
            // A request submitted while it ran takes precedence over its own rescheduling.
            if let n = next, !queue.isWaiting(n.id) {
                var r = n.requeued(runID: QueueDriver.newRunID(n.id))
                r.submitted = wallClockNow()
                try store.put(r)
                add(r)
            }
        } catch { say("\(e.id): cannot update the queue: \(error)") }
        announce.emit(.taskChanged, [.string(e.id), .string(next != nil && queue.isWaiting(e.id) ? "pending" : "finished")])
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
        guard let rows = try? store.all(state: "running"), !rows.isEmpty else { return }
        // A transient unit (its row says `unit NAME`): thawed through systemd first; if its main process was
        // never known, systemd stops the whole unit.
        let units = rows.map { $0.cgroup?.unitName }
        for (r, unit) in zip(rows, units) {
            let lost = "bgtaskd was gone while it ran (" + (r.pgid.map { "pid \($0)" } ?? "its start was recorded, its pid not yet") + ")"
            recordEvent(RunEvent(kind: .lost, monotonic: monotonic(), detail: lost, decision: nil, conditions: [:], exitStatus: nil,
                                  runID: r.runID ?? "\(r.id)-recovered"), task: r.fields)
            if let u = unit, let m = host.units { if r.pgid == nil { m.stopLeftover(u) } else { m.thawLeftover(u) } }
        }
        // All at once, found by process group and by run token: one grace for every task, not one each.
        let ended = RunProcesses.endAll(rows.map { RunProcesses.Target(pgid: $0.pgid ?? 0, childStart: UInt64(max(0, $0.childStart ?? 0)),
                                                                       containment: $0.cgroup ?? .processGroup, token: $0.token) },
                                        grace: policy.settings.number("run.expire_grace"))
        for (i, r) in rows.enumerated() {
            var done = ended[i].description
            if let u = units[i] {
                if r.pgid == nil { done = host.units == nil ? "its unit \(u) could not be reached (no systemd manager now)" : "its unit \(u) was stopped" }
                else { host.units?.forgetLeftover(u) }
            }
            let requeue = RunEnd.requeuedAfterCrash(kind: r.kind)
            let pendingExists = (try? store.get(r.id, state: "pending")) != nil
            let what = "interrupted: \(done); " + (requeue ? (pendingExists ? "a newer request is pending" : "queued again") : "refresh work is dropped")
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
            do {
                try store.remove(e.id, state: "running")
                if e.row.kind != .refresh, !queue.isWaiting(e.id) {
                    try store.put(e.row.requeued(runID: e.row.runID ?? QueueDriver.newRunID(e.id)))
                }
            } catch { say("\(e.id): cannot update the queue: \(error)") }
        }
        for e in entries { _ = queue.finish(e.id) }
        files.intents.clear()
        writeHistory()
        audit.flush()
        return true
    }
}
