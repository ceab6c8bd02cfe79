#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskBus
import BgtaskCore
import BgtaskPolicy
import BgtaskRun

/// Sleep and shutdown through logind: a `sleep` and a `shutdown` delay lock, each taken on its own, while
/// tasks run; `PrepareForSleep(true)` becomes the condition `system.preparing_sleep`, so the policy decides what
/// happens to each task (the default: refresh work expires, the rest is frozen); the audit rows are committed
/// as each action is taken; the locks are kept while an expiring task is still in its grace (it must end before
/// the machine sleeps, as on iOS), at most until logind's `InhibitDelayMaxSec`, then released.
/// On `false` the locks are taken again and the queue is looked at anew: earliest dates missed while asleep,
/// and the conditions after resume.
extension Daemon {
    func watchSleep() {
        guard options.watchSleep else { return }
        let sys: BusConnection
        do { sys = try BusConnection(system: true) } catch {
            say("no system bus (\(error.message)): sleep and shutdown are not watched")
            return
        }
        system = sys
        inhibitDelayMax = sys.inhibitDelayMax()
        for member in ["PrepareForSleep", "PrepareForShutdown"] {
            sys.subscribe(sender: "org.freedesktop.login1", interface: "org.freedesktop.login1.Manager", member: member,
                          path: "/org/freedesktop/login1") { [unowned self] member, args in
                self.prepareForSleep(args.first?.bool ?? false, shutdown: member == "PrepareForShutdown")
            }
        }
    }

    /// Whether some running task is ending (its SIGTERM or its app's expiration sent, its grace not over).
    var expiring: Bool {
        running.values.contains { e in
            if case .expiring = e.supervisor.machine.phase { return !e.supervisor.isDone }
            return false
        }
    }

    /// Holds the delay locks while something runs and the machine is not on its way to sleep — and on the
    /// way, while a task is still expiring and logind's delay has not run out.
    func updateInhibitor() {
        guard let sys = system else { return }
        let busy = running.values.contains { !$0.supervisor.isDone }
        let want: Bool
        if let deadline = sleepDeadline {
            want = expiring && monotonic() < deadline
        } else {
            want = busy
        }
        if want, !sleeping, delayLocks.count < 2 {
            let missing = ["sleep", "shutdown"].filter { delayLocks[$0] == nil }
            let (held, refused) = sys.delayLocks(missing, who: "bgtaskd", why: "background tasks are running")
            delayLocks.merge(held) { $1 }
            for (kind, why) in refused.sorted(by: { $0.key < $1.key }) where refusedLocksSaid.insert(kind).inserted {
                // "If an application finds a lock denied it should not consider this much of an error."
                say("logind refused the \(kind) delay lock (\(why)); running tasks are not protected from \(kind == "sleep" ? "suspend" : "shutdown")")
            }
        } else if !want, !delayLocks.isEmpty {
            let n = delayLocks.count
            for fd in delayLocks.values { close(fd) }
            delayLocks = [:]
            if sleeping { say("ready for \(sleepKind ?? "sleep"); \(n == 1 ? "delay lock" : "delay locks") released") }
        }
        if sleepDeadline != nil, !want { sleepDeadline = nil }
    }

    func prepareForSleep(_ going: Bool, shutdown: Bool) {
        guard going != sleeping else { return }
        sleeping = going
        let what = shutdown ? "shutdown" : "sleep"
        if going {
            sleepKind = what
            say("the machine is going to \(what): the policy decides for \(running.count) running task(s)")
            let held = !delayLocks.isEmpty
            sleepDeadline = monotonic() + max(0, inhibitDelayMax - 0.5)
            deliver(now: monotonic())
            afterRound(conditionsChanged: true)   // acts and records; the locks go once no task is still expiring
            if !held { say("ready for \(what) (no delay lock was held)") }
        } else {
            sleepDeadline = nil
            sleepKind = nil
            say("resumed from \(what): the queue is looked at anew")
            // Monotonic deadlines did not advance while asleep: waiting work is supervised again from wall-clock times.
            for e in allPending { add(e.row, restored: true) }
            deliver(now: monotonic())
            afterRound(conditionsChanged: true)
        }
    }
}
