#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskBus
import BgtaskCore
import BgtaskPolicy
import BgtaskRun

/// Sleep and shutdown through logind: one `sleep:shutdown` delay lock while tasks run; `PrepareForSleep(true)`
/// becomes the condition `system.preparing_sleep`, so the policy decides what happens to each task (the
/// default: refresh work expires, the rest is frozen); the audit rows are committed as each action is
/// taken, then the lock is released, well within logind's `InhibitDelayMaxSec` (5 s by default).
/// On `false` the lock is taken again and the queue is looked at anew: earliest dates missed while asleep,
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
        for member in ["PrepareForSleep", "PrepareForShutdown"] {
            sys.subscribe(sender: "org.freedesktop.login1", interface: "org.freedesktop.login1.Manager", member: member,
                          path: "/org/freedesktop/login1") { [unowned self] member, args in
                self.prepareForSleep(args.first?.bool ?? false, shutdown: member == "PrepareForShutdown")
            }
        }
    }

    /// Holds the delay lock exactly while something runs and the machine is not on its way to sleep.
    func updateInhibitor() {
        guard let sys = system else { return }
        let want = !sleeping && running.values.contains { !$0.supervisor.isDone }
        if want, inhibitFD < 0 {
            do { inhibitFD = try sys.inhibit(what: "sleep:shutdown", who: "bgtaskd", why: "background tasks are running", mode: "delay") }
            catch {
                // "If an application finds a lock denied it should not consider this much of an error."
                if !inhibitRefusedSaid { say("logind refused a delay lock (\(error.message)); tasks are not protected from sleep") }
                inhibitRefusedSaid = true
            }
        } else if !want, inhibitFD >= 0 {
            close(inhibitFD)
            inhibitFD = -1
        }
    }

    func prepareForSleep(_ going: Bool, shutdown: Bool) {
        guard going != sleeping else { return }
        sleeping = going
        let what = shutdown ? "shutdown" : "sleep"
        if going {
            say("the machine is going to \(what): the policy decides for \(running.count) running task(s)")
            deliver(now: monotonic())
            afterRound(conditionsChanged: true)   // acts, records, and releases the lock (nothing may hold it now)
            say("ready for \(what); delay lock released")
        } else {
            say("resumed from \(what): the queue is looked at anew")
            // Monotonic deadlines did not advance while asleep: waiting work is supervised again from wall-clock times.
            for (id, e) in pending {
                pending[id] = nil
                add(e.row, restored: true)
            }
            deliver(now: monotonic())
            afterRound(conditionsChanged: true)
        }
    }
}
