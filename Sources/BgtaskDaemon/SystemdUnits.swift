#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskBus
import BgtaskConfig
import BgtaskRun

/// The user's systemd manager, where one runs: bgtaskd starts each command task as a transient service in
/// `background.slice` (`StartTransientUnit`), so the cap (`CPUQuota=`), the freezer and the output (the
/// journal) come with systemd's own delegation. Reached as `systemctl --user` reaches it: its private socket
/// `$XDG_RUNTIME_DIR/systemd/private` first, else `org.freedesktop.systemd1` on the session bus. Without
/// either, commands are spawned by the supervisor as `bgtask run` spawns them.
final class SystemdUnits {
    static let name = "org.freedesktop.systemd1"
    static let path = "/org/freedesktop/systemd1"
    static let manager = "org.freedesktop.systemd1.Manager"
    static let unitInterface = "org.freedesktop.systemd1.Unit"
    static let serviceInterface = "org.freedesktop.systemd1.Service"

    /// Where the manager answers: its private socket, or its name on the session bus.
    enum Place {
        case socket(String)
        case sessionBus
    }
    let place: Place
    /// What was reached, for the log.
    let how: String
    /// The connection, with its subscriptions, while units run (see `link`).
    private var open: (connection: BusConnection, destination: String?)?
    /// Units started and not yet over, by object path.
    var running: [String: RunningUnit] = [:]
    var counter = 0

    /// Runs its argument on the daemon's loop after this many seconds.
    var after: (Double, @escaping () -> Void) -> Void = { _, f in f() }
    /// A unit's main process, as systemd told it; a unit's end (after its supervisor is told); what to log.
    var onMainPID: (Supervisor, pid_t) -> Void = { _, _ in }
    var onExit: () -> Void = {}
    var say: (String) -> Void = { _ in }
    /// After the current event (a connection is not closed in its own callback).
    func later(_ f: @escaping () -> Void) { after(0, f) }

    init(place: Place, how: String) {
        self.place = place
        self.how = how
    }

    /// The manager, if one is there for this user (nil otherwise, or when `BGTASK_SYSTEMD_UNITS=0`). Only located
    /// here, not asked: bgtaskd may start while the manager itself is starting (it starts bgtaskd.service), and a
    /// connection made then waits until the manager's start-up is over. The connection is opened when a unit
    /// starts and closed when the last one is over, because systemd tells every connection of every unit's change,
    /// and an idle bgtaskd must not wake for them. If it cannot be opened then, the task is spawned as a child.
    static func connect(session: BusConnection) -> SystemdUnits? {
        if Environment.get("BGTASK_SYSTEMD_UNITS") == "0" { return nil }
        if let socket = privateSocket { return SystemdUnits(place: .socket(socket), how: socket) }
        if session.hasOwner(name) { return SystemdUnits(place: .sessionBus, how: "\(name) on the session bus") }
        return nil
    }

    /// The manager's private socket, if one is there: `$XDG_RUNTIME_DIR/systemd/private`, a socket this user owns
    /// (the user's own manager only), not followed if a link. One lstat.
    static var privateSocket: String? {
        guard let rt = Environment.get("XDG_RUNTIME_DIR"), rt.hasPrefix("/") else { return nil }
        let socket = rt + "/systemd/private"
        var st = stat()
        guard lstat(socket, &st) == 0, (st.st_mode & S_IFMT) == S_IFSOCK, st.st_uid == geteuid() else { return nil }
        return socket
    }

    /// The connection, opened if it is not: a peer connection to the private socket, or a connection of its own to
    /// the session bus (so that closing it drops its match rules too). The unit's state changes (ActiveState, then
    /// ExecMainCode/Status) and failed start jobs are subscribed to at once.
    func link() throws(BusError) -> (connection: BusConnection, destination: String?) {
        if let o = open { return o }
        let c: BusConnection
        let destination: String?
        switch place {
        case .socket(let path):
            c = try BusConnection(peerSocket: path)
            destination = nil
        case .sessionBus:
            c = try BusConnection(privateSession: true)
            destination = SystemdUnits.name
        }
        c.subscribe(sender: destination, interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged") { [weak self] path, _, args in
            guard let u = self?.running[path], args.count >= 2, let iface = args[0].string, case .dict(let changed) = args[1] else { return }
            u.changed(interface: iface, changed)
        }
        c.subscribe(sender: destination, interface: SystemdUnits.manager, member: "JobRemoved") { [weak self] _, _, args in
            guard args.count >= 4, let unit = args[2].string, let result = args[3].string else { return }
            self?.running.values.first { $0.unitName == unit }?.jobRemoved(result: result)
        }
        // The manager gone while units run (it stops them as it exits, or it crashed): their tasks are over.
        c.onClosed { [weak self] in self?.managerGone() }
        open = (c, destination)
        // On the session bus the manager sends unit signals only to subscribers.
        if destination != nil { _ = try? call("Subscribe", []) }
        return (c, destination)
    }

    /// Told when the manager went away with units running (the daemon says so; their tasks end as killed).
    var onManagerGone: ((Int) -> Void)?
    /// Told when the connection closed with units running, and when the manager answered again (re-executed).
    var onManagerSilent: ((Int) -> Void)?
    var onManagerBack: ((Int) -> Void)?
    /// How long a manager that closed the connection is asked again, every half second, before its units count as
    /// gone: a re-execution (`systemctl --user daemon-reexec`, as a systemd upgrade does to every user manager)
    /// closes every connection and serves the same units a moment later.
    static let answerAgainWithin = 6.0

    /// The connection closed while units run: the manager crashed or exited — or re-executed itself, its units
    /// still running. Asked again before their tasks are taken as over (a task ended by mistake would have what
    /// it left running killed, and could run again beside itself).
    func managerGone() {
        guard !running.isEmpty, !askingAgain else { return }
        askingAgain = true
        onManagerSilent?(running.count)
        later { [weak self] in
            self?.open = nil
            self?.askAgain(until: SystemdUnits.answerAgainWithin)
        }
    }
    private var askingAgain = false

    private func askAgain(until left: Double) {
        guard !running.isEmpty else { askingAgain = false; return }
        if (try? call("Get", [.string(SystemdUnits.manager), .string("Version")], interface: "org.freedesktop.DBus.Properties",
                      timeoutMs: 2_000)) != nil {
            askingAgain = false
            let units = Array(running.values)
            onManagerBack?(units.count)
            for u in units { reread(u) }
            closeIfIdle()
            return
        }
        open = nil
        guard left > 0 else {
            askingAgain = false
            let units = Array(running.values)
            onManagerGone?(units.count)
            for u in units { u.managerGone() }
            return
        }
        after(0.5) { [weak self] in self?.askAgain(until: left - 0.5) }
    }

    /// A unit read as it is now, after the manager answered again: still running (followed on), over (with its
    /// status), or unknown to it — a transient unit that ended meanwhile is gone, and systemd describes any name
    /// it does not know as "not-found" and inactive: over, its status unknown, as killed.
    private func reread(_ u: RunningUnit) {
        func all(_ interface: String) -> [String: BusValue]? {
            guard let reply = try? call("GetAll", [.string(interface)], path: u.path, interface: "org.freedesktop.DBus.Properties"),
                  case .dict(let values)? = reply.first else { return nil }
            return values
        }
        guard let unit = all(SystemdUnits.unitInterface), unit["LoadState"]?.string != "not-found",
              let service = all(SystemdUnits.serviceInterface) else { u.managerGone(); return }
        u.changed(interface: SystemdUnits.serviceInterface, service)
        u.changed(interface: SystemdUnits.unitInterface, unit)
    }

    /// Closes the connection once no unit of ours runs (after the current event: this may be one of its signals).
    func closeIfIdle() {
        guard running.isEmpty, open != nil else { return }
        later { [weak self] in
            if let self, self.running.isEmpty { self.open = nil }
        }
    }

    @discardableResult
    func call(_ method: String, _ args: [BusValue], path: String = SystemdUnits.path, interface: String = SystemdUnits.manager,
              timeoutMs: Int32 = 5_000) throws(BusError) -> [BusValue] {
        let (c, destination) = try link()
        return try c.call(method, args, destination: destination, path: path, interface: interface, timeoutMs: timeoutMs)
    }

    /// The object path of a unit: systemd's bus-label escaping (every byte but [A-Za-z0-9] as `_xx`).
    static func objectPath(unit: String) -> String {
        var label = ""
        for b in unit.utf8 {
            let c = Character(Unicode.Scalar(b))
            if (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5a) || (b >= 0x61 && b <= 0x7a) { label.append(c) }
            else { label += "_" + (b < 16 ? "0" : "") + String(b, radix: 16) }
        }
        return path + "/unit/" + label
    }

    /// The file `ExecStart=` runs: systemd wants an absolute path, so a bare name is looked up in the task's
    /// `PATH` (else bgtaskd's), as the shell and `execvp` would. Nil when there is none to run.
    static func executable(_ command: String, directory: String?, environment: [String]) -> (path: String?, errno: Int32) {
        let path = environment.last { $0.hasPrefix("PATH=") }.map { String($0.dropFirst(5)) } ?? CommandCheck.searchPath
        return CommandCheck.executable(command, directory: directory, path: path)
    }

    static func currentDirectory() -> String { CommandCheck.currentDirectory() }

    /// What systemd sets for each unit itself: bgtaskd's own values (it may run as a unit) must not override them.
    static let managerSet: Set<String> = ["INVOCATION_ID", "JOURNAL_STREAM", "NOTIFY_SOCKET", "LISTEN_FDS", "LISTEN_PID",
                                          "LISTEN_FDNAMES", "WATCHDOG_PID", "WATCHDOG_USEC", "MANAGERPID", "SYSTEMD_EXEC_PID",
                                          "MAINPID", "MONITOR_SERVICE_RESULT", "TRIGGER_UNIT"]

    /// The environment a unit gets: bgtaskd's own (as a spawned command inherits it), then the task's.
    static func environment(adding extra: [String]) -> [String] {
        TaskProcess.environment(adding: extra, dropping: managerSet)
    }

    /// Starts `argv` as `bgtask-<id>-<n>.service` in `background.slice`. Throws `SpawnError` for a command that
    /// cannot run, `BusError` when the manager cannot be reached or refuses (the caller then spawns it itself).
    func start(id: String, argv: [String], background: Bool, directory: String?, environment extra: [String],
               onMainPID: @escaping (pid_t) -> Void, onExit: @escaping (Int32) -> Void) throws -> RunningUnit {
        let env = SystemdUnits.environment(adding: extra)
        let (exe, err) = SystemdUnits.executable(argv[0], directory: directory, environment: env)
        guard let exe else { throw SpawnError(command: argv[0], errno: err) }
        counter += 1
        let unit = "bgtask-\(StatePaths.safeName(id))-\(getpid())-\(counter).service"
        var props: [(String, BusValue)] = [
            ("Description", .string("bgtask: \(id)")),
            ("Slice", .string("background.slice")),
            // ExecStartEx with no-env-expand: the words are run as given, as by execvp; with ExecStart, systemd
            // would expand `$VAR` and `$$` in them (`sh -c 'echo $$'` would print `$`).
            ("ExecStartEx", .array(element: "(sasas)", [.tuple([.string(exe), .strings(argv), .strings(["no-env-expand"])])])),
            ("Environment", .strings(env)),
            ("WorkingDirectory", .string(directory ?? SystemdUnits.currentDirectory())),
            ("CPUAccounting", .bool(true)),
        ]
        if background {
            // As `bgtask run` spawns background work: nice 10, SCHED_IDLE, the idle I/O class — and the lowest CPU
            // weight (SCHED_IDLE yields only inside its own cgroup; a cgroup yields by its weight among siblings).
            props += [("Nice", .int32(10)), ("CPUSchedulingPolicy", .int32(5)), ("IOSchedulingClass", .int32(3))]
            yieldingSlice()
        }
        let u = RunningUnit(manager: self, name: unit, onMainPID: onMainPID, onExit: onExit)
        // Known before the call: signals about it can come before the reply is read.
        running[u.path] = u
        func startUnit(weight: UInt64?) throws(BusError) {
            let all = props + (weight.map { [("CPUWeight", BusValue.uint64($0))] } ?? [])
            try call("StartTransientUnit", [.string(unit), .string("fail"),
                                            .array(element: "(sv)", all.map { .tuple([.string($0.0), .variant($0.1)]) }),
                                            .array(element: "(sa(sv))", [])])
        }
        do {
            do { try startUnit(weight: background ? idleWeight : nil) } catch where background && idleWeight == 0 && error.message.contains("CPUWeight") {
                idleWeight = 1   // systemd before 252 has no CPUWeight=idle: the lowest weight instead
                try startUnit(weight: idleWeight)
            }
        } catch {
            running[u.path] = nil
            closeIfIdle()
            throw error
        }
        return u
    }

    /// `CPUWeight=idle` (0, systemd 252+; cgroup v2's `cpu.idle`), or 1 where the manager does not take it.
    private var idleWeight: UInt64 = 0
    private var sliceChecked = false

    /// background.slice competes with app.slice by its own weight: at systemd's shipped 30 against 100, a
    /// task capped at 25 % still took its whole cap beside two hogs of the user's (measured on a guest). Unless
    /// the user or the admin configured the slice (a file or drop-in in /etc or ~/.config), it is made idle for
    /// as long as the manager runs (a runtime property), so background work yields to the user's for real.
    private func yieldingSlice() {
        guard !sliceChecked else { return }
        func property(_ path: String, _ interface: String, _ name: String) throws(BusError) -> BusValue? {
            let got = try call("Get", [.string(interface), .string(name)], path: path, interface: "org.freedesktop.DBus.Properties")
            if case .variant(let inner)? = got.first { return inner }
            return got.first
        }
        do throws(BusError) {
            guard let path = try call("LoadUnit", [.string("background.slice")]).first?.string else {
                throw BusError("org.freedesktop.DBus.Error.InvalidArgs", "LoadUnit's reply is not an object path")
            }
            let files = [try property(path, "org.freedesktop.systemd1.Unit", "FragmentPath")?.string ?? ""]
                + (try property(path, "org.freedesktop.systemd1.Unit", "DropInPaths")?.strings ?? [])
            if let own = files.first(where: { $0.hasPrefix("/etc/") || $0.contains("/.config/systemd/") }) {
                sliceChecked = true
                say("background.slice is configured in \(own): its CPU weight is left as it is")
                return
            }
            if case .uint64(let w)? = try property(path, "org.freedesktop.systemd1.Slice", "CPUWeight"), w <= 1 {
                sliceChecked = true
                return
            }
            var refused: BusError?
            for weight in [idleWeight, 1] {
                do {
                    try call("SetUnitProperties", [.string("background.slice"), .bool(true),
                                                   .array(element: "(sv)", [.tuple([.string("CPUWeight"), .variant(.uint64(weight))])])])
                    idleWeight = weight
                    sliceChecked = true
                    return
                } catch { refused = error }
            }
            if let refused { throw refused }
        } catch {
            // Not marked as checked: asked again at the next background start (the manager may have been busy).
            say("background.slice keeps its CPU weight for now (\(error.message)); background work may not yield to the user's")
        }
    }

    /// A daemon that died left this unit (its row says `unit NAME`): thawed, so nothing stays frozen. Ending its
    /// processes is the caller's (by process group, as for any command), then `forgetLeftover`.
    func thawLeftover(_ unit: String) {
        _ = try? call("ThawUnit", [.string(unit)])
    }

    /// After a leftover unit's processes were ended: its failed state cleared.
    func forgetLeftover(_ unit: String) {
        _ = try? call("ResetFailedUnit", [.string(unit)])
        closeIfIdle()
    }

    /// The same when the main process was never known: the unit is stopped as a whole.
    func stopLeftover(_ unit: String) {
        _ = try? call("ThawUnit", [.string(unit)])
        _ = try? call("StopUnit", [.string(unit), .string("replace")])
        _ = try? call("ResetFailedUnit", [.string(unit)])
        closeIfIdle()
    }
}

/// One task's transient service, from its start to its end.
final class RunningUnit: TaskHandle {
    unowned let manager: SystemdUnits
    let unitName: String
    let path: String
    private(set) var mainPID: pid_t?
    var pid: pid_t? { mainPID }
    var mechanism: CapMechanism { .systemdUnit }
    var containment: Containment { .unit(unitName) }
    var description: String { "systemd unit \(unitName)" }
    var execCode: Int32 = 0
    var execStatus: Int32 = 0
    var seenActive = false
    private(set) var ended = false
    /// Set once systemd says it cannot freeze this unit (cgroup v1 or hybrid): SIGSTOP/SIGCONT instead.
    var cannotFreeze = false
    let onMainPID: (pid_t) -> Void
    let onExit: (Int32) -> Void

    init(manager: SystemdUnits, name: String, onMainPID: @escaping (pid_t) -> Void, onExit: @escaping (Int32) -> Void) {
        self.manager = manager
        unitName = name
        path = SystemdUnits.objectPath(unit: name)
        self.onMainPID = onMainPID
        self.onExit = onExit
    }

    /// A `PropertiesChanged` of the unit. systemd sends the service's (MainPID, ExecMainCode, ExecMainStatus)
    /// before the unit's ActiveState, so the exit status is known when the state says it is over. A unit loaded
    /// anew says "inactive" before it starts, and states in one turn of systemd's loop are merged into the last:
    /// an end counts once the unit was seen started, or once its start job is over (systemd sends a unit's
    /// pending state before the job's removal, so the state seen then is current).
    func changed(interface: String, _ values: [String: BusValue]) {
        guard !ended else { return }
        if interface == SystemdUnits.serviceInterface {
            if let p = values["MainPID"]?.number, p > 0, mainPID == nil {
                mainPID = pid_t(p)
                onMainPID(pid_t(p))
            }
            if let c = values["ExecMainCode"]?.number { execCode = Int32(c) }
            if let s = values["ExecMainStatus"]?.number { execStatus = Int32(s) }
        } else if interface == SystemdUnits.unitInterface, let state = values["ActiveState"]?.string {
            lastState = state
            if ["activating", "active", "reloading", "deactivating"].contains(state) { seenActive = true }
            if isOver, seenActive || jobDone { end() }
        }
    }

    var lastState = ""
    var jobDone = false
    var isOver: Bool { lastState == "inactive" || lastState == "failed" }

    /// The start job is over: done (started), or not (a dependency failed, the manager is stopping).
    func jobRemoved(result: String) {
        guard !ended, !jobDone else { return }
        jobDone = true
        if result != "done", !seenActive, execCode == 0 {
            execCode = 1
            execStatus = 1
            end()
        } else if isOver {
            end()
        }
    }

    /// A wait status as `waitpid` gives one: CLD_EXITED (1) → the code, CLD_KILLED (2) / CLD_DUMPED (3) → the signal.
    static func waitStatus(code: Int32, status: Int32) -> Int32 {
        switch code {
        case 2: return status & 0x7f
        case 3: return (status & 0x7f) | 0x80
        default: return (status & 0xff) << 8
        }
    }

    /// The manager is gone: no state will come; the unit is over, as killed (a manager stops its units with
    /// SIGTERM as it exits; what a crashed one left is ended by the task's run token).
    func managerGone() {
        guard !ended else { return }
        if execCode == 0 { execCode = 2; execStatus = SIGTERM }
        end()
    }

    func end() {
        ended = true
        manager.running[path] = nil
        onExit(RunningUnit.waitStatus(code: execCode, status: execStatus))
    }

    func signal(_ sig: Int32) {
        guard !ended else { return }
        _ = try? manager.call("KillUnit", [.string(unitName), .string("all"), .int32(sig)])
    }

    func setCap(_ percent: Int?) -> Bool {
        guard !ended else { return true }
        // µs of CPU time per second; UINT64_MAX is "no quota".
        let perSecond: UInt64 = percent.map { UInt64(max(1, $0)) * 10_000 } ?? UInt64.max
        _ = try? manager.call("SetUnitProperties", [.string(unitName), .bool(true),
                                                   .array(element: "(sv)", [.tuple([.string("CPUQuotaPerSecUSec"), .variant(.uint64(perSecond))])])])
        return true
    }

    /// Through the manager (`FreezeUnit`); where it cannot freeze (cgroup v1, hybrid), SIGSTOP/SIGCONT to the unit.
    func freeze(_ on: Bool) -> Bool {
        guard !ended else { return true }
        if !cannotFreeze {
            do {
                try manager.call(on ? "FreezeUnit" : "ThawUnit", [.string(unitName)])
                return true
            } catch {
                // NotSupported: no cgroup v2 freezer here; anything else: signals will do as well.
                cannotFreeze = true
            }
        }
        signal(on ? SIGSTOP : SIGCONT)
        return true
    }

    /// The unit's cgroup v2 directory, found from its main process once it is known (nil on cgroup v1).
    private var cgroupDirectory: String?

    func cpuSeconds() -> Double? {
        // The unit's cgroup's cpu.stat: a file read, not a blocking call to the manager per unit on the main loop
        // (ListRunning asks for every running task; `bgtask tasks` asks each second).
        if cgroupDirectory == nil, !ended, let p = mainPID { cgroupDirectory = ProcessCgroup.directory(of: p) }
        if let d = cgroupDirectory, let seconds = ProcessCgroup.cpuSeconds(directory: d) { return seconds }
        if !ended, let v = try? manager.call("Get", [.string(SystemdUnits.serviceInterface), .string("CPUUsageNSec")], path: path,
                                               interface: "org.freedesktop.DBus.Properties", timeoutMs: 1_000).first?.number,
           v < Double(UInt64.max) {
            return v / 1e9
        }
        // No CPU accounting for the unit (cgroup v1 user managers): its process group, as for a spawned command.
        guard let p = mainPID else { return nil }
        return TaskProcess.groupCPUSeconds(pgid: p)
    }

    func release() {
        manager.running[path] = nil
        // A failed unit stays loaded until its failure is reset; an inactive one is collected on its own.
        _ = try? manager.call("ResetFailedUnit", [.string(unitName)])
        manager.closeIfIdle()
    }
}

extension SystemdUnits: TaskLauncher {
    /// A command task's start, where a systemd user manager is there: its transient unit. The unit's main process
    /// goes to `onMainPID` once systemd says it (the queue's row keeps it); its end is the supervisor's child exit,
    /// then `onExit`.
    func launch(_ s: Supervisor, argv: [String], background: Bool, directory: String?, environment: [String]) throws -> TaskProcess? {
        guard !argv.isEmpty else { return nil }
        let unit: RunningUnit
        do {
            unit = try start(id: s.id, argv: argv, background: background, directory: directory, environment: environment,
            onMainPID: { [weak self, unowned s] pid in self?.onMainPID(s, pid) },
            onExit: { [weak self, unowned s] status in
                s.childExited(waitStatus: status)
                self?.onExit()
            })
        } catch let e as BusError {
            say("\(s.id): systemd did not start its unit (\(e.message)); it runs as bgtaskd's child")
            return nil
        }
        if let out = s.runOptions.outputPath { OutputFile.noteUnit(out, unit: unit.unitName) }
        return TaskProcess(handle: unit)
    }
}
