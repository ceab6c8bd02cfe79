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
///
/// An adapter of bgtaskd's: it holds logind's connection and locks, and tells the daemon what happens through
/// `changed`; it knows nothing of the queue (the daemon says whether work runs or expires: `update`).
final class SleepWatch {
    /// Between PrepareForSleep(true) and (false): `system.preparing_sleep` is true for every task.
    private(set) var preparing = false
    /// While the machine prepares to sleep: until when the locks may hold it (logind's InhibitDelayMaxSec).
    private(set) var deadline: Double?
    /// What the machine prepares for ("sleep", "shutdown"), while it does.
    private(set) var kind: String?
    private var system: BusConnection?
    /// logind's delay locks held, by kind ("sleep", "shutdown"), and the kinds whose refusal was said.
    private var delayLocks: [String: Int32] = [:]
    private var refusedSaid: Set<String> = []
    private var inhibitDelayMax = 5.0
    private let say: (String) -> Void
    /// The machine began to prepare for `kind` (true) or resumed from it (false); `preparing` is already set.
    var changed: (_ going: Bool, _ kind: String) -> Void = { _, _ in }

    init(say: @escaping (String) -> Void) { self.say = say }

    /// Subscribes to logind's PrepareForSleep and PrepareForShutdown on the system bus (none: said, not watched).
    func watch() {
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
                self.prepare(args.first?.bool ?? false, shutdown: member == "PrepareForShutdown")
            }
        }
    }

    /// Holds the delay locks while something runs (`busy`) and the machine is not on its way to sleep — and on
    /// the way, while a task is still `expiring` and logind's delay has not run out.
    func update(busy: Bool, expiring: Bool, now: Double) {
        guard let sys = system else { return }
        let want = deadline.map { expiring && now < $0 } ?? busy
        if want, !preparing, delayLocks.count < 2 {
            let missing = ["sleep", "shutdown"].filter { delayLocks[$0] == nil }
            let (held, refused) = sys.delayLocks(missing, who: "bgtaskd", why: "background tasks are running")
            delayLocks.merge(held) { $1 }
            for (kind, why) in refused.sorted(by: { $0.key < $1.key }) where refusedSaid.insert(kind).inserted {
                // "If an application finds a lock denied it should not consider this much of an error."
                say("logind refused the \(kind) delay lock (\(why)); running tasks are not protected from \(kind == "sleep" ? "suspend" : "shutdown")")
            }
        } else if !want, !delayLocks.isEmpty {
            let n = delayLocks.count
            for fd in delayLocks.values { close(fd) }
            delayLocks = [:]
            if preparing { say("ready for \(kind ?? "sleep"); \(n == 1 ? "delay lock" : "delay locks") released") }
        }
        if deadline != nil, !want { deadline = nil }
    }

    func prepare(_ going: Bool, shutdown: Bool) {
        guard going != preparing else { return }
        preparing = going
        let what = shutdown ? "shutdown" : "sleep"
        if going {
            kind = what
            let held = !delayLocks.isEmpty
            deadline = monotonic() + max(0, inhibitDelayMax - 0.5)
            changed(true, what)
            if !held { say("ready for \(what) (no delay lock was held)") }
        } else {
            deadline = nil
            kind = nil
            changed(false, what)
        }
    }
}

extension Daemon {
    func watchSleep() {
        guard options.watchSleep else { return }
        sleep.changed = { [unowned self] going, what in
            self.driver.preparingSleep = going   // system.preparing_sleep changed
            if going {
                self.say("the machine is going to \(what): the policy decides for \(self.driver.running.count) running task(s)")
                self.driver.deliver(now: monotonic())
                self.afterRound(conditionsChanged: true)   // acts and records; the locks go once no task is still expiring
            } else {
                self.say("resumed from \(what): the queue is looked at anew")
                // Monotonic deadlines did not advance while asleep: waiting work is supervised again from wall-clock times.
                self.driver.superviseAllAgain(evaluator: self.driver.evaluator())
                self.driver.deliver(now: monotonic())
                self.afterRound(conditionsChanged: true)
            }
        }
        sleep.watch()
    }

    /// The delay locks follow what runs: held while a task runs, and on the way to sleep while one still expires.
    func updateInhibitor() {
        let expiring = driver.running.values.contains { e in
            if case .expiring = e.supervisor.machine.phase { return !e.supervisor.isDone }
            return false
        }
        sleep.update(busy: driver.running.values.contains { !$0.supervisor.isDone }, expiring: expiring, now: monotonic())
    }
}
