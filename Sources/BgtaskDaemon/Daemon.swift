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

/// bgtaskd: the queue (`QueueDriver`: the `Scheduler`, its rows in SQLite, one supervisor per awake task) composed
/// with its adapters — the bus service, the app broker, systemd's units, the presenter, sleep, the policy's watch —
/// in one event loop (the GLib main loop, which also serves the D-Bus interface).
public final class Daemon {
    let options: DaemonOptions
    let loop = MainLoop()
    let events: EventLoop
    let bus: BusConnection
    /// The queue, and the rounds that act on it.
    let driver: QueueDriver
    /// The exported object, the callers, what runs after a reply.
    let service = BusService()
    /// The policy in force, what is wrong with its layers, the watch on their directories.
    let configuration: PolicyInForce
    /// logind's sleep and shutdown, and the delay locks held while work runs.
    lazy var sleep = SleepWatch { [unowned self] in self.say($0) }
    /// The app broker: manifests, switches, who a caller is, the apps on the bus and their methods, launches.
    lazy var apps: AppBroker = {
        let b = AppBroker(bus: bus, loop: loop, stateDirectory: driver.stateDir, appDirectories: options.places?.appDirectories) { [unowned self] in self.say($0) }
        b.queue = driver
        return b
    }()
    /// Continued tasks as the person sees them (notifications, KDE's job view).
    lazy var presenter = Presenter(Presenter.Host(
        bus: bus, loop: loop, say: { [unowned self] in self.say($0) }, settings: { [unowned self] in self.driver.policy.settings },
        cancel: { [unowned self] key, who in _ = self.driver.cancel(key, by: who) },
        expire: { [unowned self] key, why in
            self.driver.running[key]?.supervisor.expireNow(now: monotonic(), why: why)
            self.afterRound(conditionsChanged: false)
        }))
    /// The user's systemd manager, where one runs: command tasks are its transient units (nil: bgtaskd's children).
    var systemd: SystemdUnits?

    public init(options: DaemonOptions) throws {
        self.options = options
        let files = try StateFiles(options)
        let atStart = ConfigWatch.fingerprint(Daemon.configurationDirectories(options))
        let (p, errors) = PolicyLayers.load(Daemon.policySources(options))
        // A broken layer in a policy directory is left out with a warning, the others in force: a daemon that
        // exited would leave the user with no background work after the next login. A file named on the command
        // line is what was asked for: without it, nothing.
        if PolicyLayers.inNamedFile(errors, named: options.policyFiles) {
            throw DaemonError(message: errors.map(\.description).joined(separator: "\n") + "\nbgtaskd: the policy does not load; fix the file above (bgtask policy check)",
                              status: ExitStatus.config)
        }
        let warning = errors.isEmpty ? nil : PolicyWarning(
            what: PolicyLayers.leftOutWarning, errors: errors)
        configuration = PolicyInForce(p, warning: warning, atStart: atStart)
        // Signals are blocked and read from a signalfd before any other thread exists (GDBus starts one): a
        // thread that does not block SIGCHLD or SIGTERM would take them, and a child's exit would go unseen.
        let watch = options.readings == nil ? EventLoop.watchOptions(QueueDriver.probe(options.probe, p.settings), policies: [p]) : nil
        do { events = try EventLoop(watch: watch, signals: options.ownsSignals) } catch {
            throw DaemonError(message: "\(error)", status: ExitStatus.failure)
        }
        do { bus = try BusConnection(address: options.busAddress) } catch {
            throw DaemonError(message: "cannot connect to the session bus: \(error.message)", status: ExitStatus.unavailable)
        }
        driver = QueueDriver(files: files, options: options, loop: loop, events: events, configuration: configuration, bus: bus)
        driver.host = self
        // A state file removed or replaced under the daemon is put back before the next write (HeldFile): said.
        files.store.onRestore = { [unowned driver] in driver.say($0) }
        files.audit.onRestore = { [unowned driver] in driver.say($0) }
        service.commands = driver
        service.apps = apps
    }

    /// The policy's sources: the layers and the files named on the command line, or the places' own.
    static func policySources(_ options: DaemonOptions) -> [PolicySource] {
        options.places?.policySources ?? PolicyLayers.sources(extra: options.policyFiles)
    }

    func say(_ s: String) { driver.say(s) }

    /// Recovers what a previous daemon left, loads the queue, takes the bus name, and serves until SIGTERM.
    public func run() throws -> Int32 {
        Memory.keepFreedHeapUntilQuiet()
        try prepare()
        loop.run()
        return 0
    }

    /// All of `run` but the loop: recovery, the apps, the bus name, the watches; the first round.
    public func prepare() throws {
        driver.scheduleMidnight()
        apps.load()
        connectSystemd()
        driver.recoverInterrupted()
        driver.audit.flush()
        try serve()
        // Work starts only once the daemon answers on the bus: a client never sees a task it cannot ask about.
        // The queue is taken up in slices between calls, so a daemon with 10,000 waiting tasks answers at once.
        say("serving \(SchedulerBus.name) (pid \(getpid()))")
        if let w = configuration.warning { say(w.line) }
        if let p = driver.files.intents.problem { say("\(p): a start is written to the queue instead") }
        loop.after(0) { [unowned self] in self.driver.restoreSlice() }
        if events.signalFD >= 0 { loop.watch(fd: events.signalFD) { [unowned self] in self.signals() } }
        loop.watch(fd: events.wakeFD) { [unowned self] in
            if let values = self.events.takeConditions() { self.driver.readingsChanged(values) }
            self.afterRound(conditionsChanged: true)
        }
        watchSleep()
        if options.places == nil { watchConfiguration() }
        apps.watchConnections()
        afterRound(conditionsChanged: false)
    }

    /// After every round of events: the replies' follow-ups, the queue's round, the delay locks, the next timer.
    func afterRound(conditionsChanged: Bool) {
        service.followUps()
        let now = monotonic()
        driver.settle(now: now)
        let sups = driver.supervisors
        updateInhibitor()
        // Resting tasks are not among the supervisors: when one begins to rest, the zones' need is asked again.
        // An app that is connected reads ProcessInfo.thermalState: the zones are read for it too (2–30 s, by distance).
        events.afterEvents(sups, conditionsChanged: conditionsChanged || driver.rounds.newlyResting || apps.connected != driver.rounds.appsConnected) { [unowned self] in
            self.apps.connected > 0 || self.driver.restingDependOnThermal()
        }
        driver.thermalReadChanged(events.readsThermal)
        driver.rounds.appsConnected = apps.connected
        driver.rounds.newlyResting = false
        let releasing = driver.rounds.quiet.observe(quiet: driver.running.isEmpty, now: now)
        let next = [events.nextDeadline(sups), driver.rounds.quiet.deadline, sleep.deadline, driver.rounds.unwritten.due].compactMap { $0 }.min()
        loop.setTimer(in: next.map { max(0, $0 - monotonic()) }) { [unowned self] in self.afterRound(conditionsChanged: false) }
        // Last, so that little code runs between giving pages back and the loop's sleep: every page touched after
        // it is faulted in again with its neighbours (the kernel maps 64 KB around a fault).
        if releasing { driver.release() }
    }

    func signals() {
        for sig in events.readSignals() {
            switch sig {
            case SIGCHLD:
                events.reap(driver.running.values.map(\.supervisor))
                apps.reap()
            case SIGHUP:
                apps.load()
                reload()
            default:
                shutdown(signal: sig)
            }
        }
        afterRound(conditionsChanged: false)
    }

    /// SIGTERM (logout, `systemctl --user stop`): running work ends and waits in the queue, then the loop ends.
    func shutdown(signal sig: Int32) {
        guard driver.stop(signal: sig) else { return }
        apps.endLaunched()
        updateInhibitor()
        driver.announce.send()
        bus.flush()
        loop.quit()
    }
}
