#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskBus
import BgtaskJSON
import BgtaskProtocol
import BgtaskRun

/// What the bus service asks of the queue (`QueueDriver`): one command for each method that is not the apps'.
protocol ServiceCommands: AnyObject {
    /// What start-up has not taken up of the stored queue, taken up now (a call that reads or changes it sees all).
    func takeUpQueue()
    func allowSubmit(_ sender: String) -> Bool
    func submit(_ opts: SubmitOptions, _ argv: [String]) -> Result<String, BusError>
    func cancel(_ id: String, by who: String) -> Result<String, BusError>
    func cancelAll() -> Int
    /// Every waiting task (`ListPending`'s one reply).
    func pendingAll() -> [PendingTask]
    /// A page of the waiting tasks, each given to `body` as it is made; the cursor of the next page.
    func pendingPage(_ range: PageRange, _ body: (PendingTask) -> Void) -> Result<String, BusError>
    func listRunning() -> [RunningTask]
    /// Changes when the stored queue does: a listing's page made earlier is told only while it has not.
    var listingStamp: Int { get }
    func debugLaunch(_ id: String) -> Result<Void, BusError>
    func debugExpire(_ id: String) -> Result<Void, BusError>
    func reloadPolicy() -> (ok: Bool, said: String)
    var appConditions: Conditions { get }
    var status: DaemonStatus { get }
}

/// The bus service: a call in, its caller established, a command to the queue, a reply out. It keeps what the
/// service alone needs: the exported object, who has called (by unique name), and what a call does once its reply
/// has gone.
final class BusService {
    var object: BusObject?
    /// Callers identified so far, by unique name (`caller(of:)`), bounded.
    var callers: [String: Caller] = [:]
    /// Messages and signals the caller does not wait for, run in the round after the reply.
    var afterReply: [() -> Void] = []
    /// What each method asks of: the queue, which the daemon sets here once both are made (and which outlives it).
    unowned var commands: (any ServiceCommands)?
    /// The `App*` methods and the ones an app may call: the app broker's, which the daemon sets here.
    unowned var apps: AppBroker?

    /// What a sandboxed caller may call besides the `App*` methods (for its own app id): nothing of another app's.
    static let sandboxedMethods: Set<SchedulerMethod> = [.getSupportedResources, .listApps]
    /// Calls that neither read nor change the queue: answered while start-up still takes it up.
    static let queueFreeMethods: Set<SchedulerMethod> = [.getStatus, .getSupportedResources, .listApps, .getConditions]

    /// Exports the interface on `bus` and takes the scheduler's name. `answered` runs after each call has its
    /// reply (`large`: a reply, or a refused call, big enough that its memory should go back once quiet).
    /// Returns false when another process owns the name.
    func serve(on bus: BusConnection, answered: @escaping (_ large: Bool) -> Void) throws(BusError) -> Bool {
        let object = try BusObject(connection: bus, path: SchedulerBus.path, xml: SchedulerBus.xml) { [unowned self] call in
            let r = self.handle(call)
            if case .success(let v) = r { answered(BusService.isLarge(v.first)) } else { answered(false) }
            return r
        }
        // So does a call refused for its size: GDBus had read all of it before it was seen.
        object.onOversized = { answered(true) }
        self.object = object
        return try object.ownName(SchedulerBus.name)
    }

    /// A reply of this many tasks or more is large: its memory is given back once the daemon is quiet again.
    static let largeReply = 1_000
    static func isLarge(_ reply: BusValue?) -> Bool {
        switch reply {
        case .dicts(let list)?: return list.count >= largeReply
        case .bytes(let b)?: return b.count >= largeReply * 256   // a page of JSON lines
        default: return false
        }
    }

    /// Who sent `call`, established once per connection (unique names are never reused on a bus) and
    /// forgotten when it leaves. Anything that cannot be established is a refusal (`CallerCheck`).
    func caller(of call: BusCall) -> Result<Caller, BusError> {
        if let c = callers[call.sender] { return .success(c) }
        let receivedAt = CallerCheck.ticksSinceBoot()
        switch CallerCheck().identify(object?.credentials(of: call.sender), receivedAt: receivedAt) {
        case .failure(let why):
            return .failure(SchedulerError.accessDenied("bgtaskd cannot establish who is calling: \(why)"))
        case .success(let c):
            // The session bus is the user's own, but a system-wide bus configured oddly is not: check.
            guard c.uid == getuid() else {
                return .failure(SchedulerError.accessDenied("bgtaskd serves only uid \(getuid())"))
            }
            if callers.count >= 4096 { callers = [:] }
            callers[call.sender] = c
            return .success(c)
        }
    }

    /// What followed the replies already sent (`afterReply`): run by the round after them, or first thing when a
    /// call comes before that round, so that every call finds the queue as the replies before it left it.
    func followUps() {
        guard !afterReply.isEmpty else { return }
        let due = afterReply
        afterReply = []
        for f in due { f() }
    }

    func handle(_ call: BusCall) -> Result<[BusValue], BusError> {
        switch caller(of: call) {
        case .failure(let e): return .failure(e)
        case .success(let who): return handle(call, from: who)
        }
    }

    /// A call from a caller already identified: request in, command, reply out.
    func handle(_ call: BusCall, from who: Caller) -> Result<[BusValue], BusError> {
        followUps()
        guard let d = commands else { return .failure(SchedulerError.unavailable("bgtaskd is not serving yet")) }
        // GDBus checked the arguments' types against the interface before this runs; an unknown name is refused too.
        guard let method = SchedulerMethod(rawValue: call.method) else { return .failure(SchedulerError.unknownMethod("no method \(call.method)")) }
        // A sandboxed app reaches the user's queue only through its own app id: a Submit would run a command
        // outside its sandbox, a Cancel or a listing would reach other apps' work.
        if who.sandbox != .none, !call.method.hasPrefix("App"), !BusService.sandboxedMethods.contains(method) {
            return .failure(SchedulerError.accessDenied(
                                     "\(call.method) is not for a sandboxed caller (\(who.sandbox)): it may use the App* methods for its own app id"))
        }
        if !BusService.queueFreeMethods.contains(method) { d.takeUpQueue() }
        func str(_ i: Int) -> String? { call.args.count > i ? call.args[i]?.string : nil }
        // Exhaustive: a method the XML gains and nothing here handles fails the build.
        switch method {
        case .getSupportedResources, .listApps, .setAppEnabled, .appRegister, .appReady, .appSubmit, .appCancel, .appCancelAll,
             .appPending, .appLaunchReceived, .appComplete, .appProgress, .appUpdateTitle:
            return apps?.handle(method, call, who) ?? .failure(SchedulerError.unknownMethod("\(call.method) is not handled"))
        case .submit:
            guard call.args.count == 2, case .dict(let o)? = call.args[0], let argv = call.args[1]?.strings else {
                return .failure(SchedulerError.invalidArgs("Submit takes \(method.signature)"))
            }
            let opts: SubmitOptions
            do { opts = try SubmitOptions(variant: o) } catch { return .failure(error.busError) }
            if !d.allowSubmit(call.sender) {
                return .failure(SchedulerError.tooManyPending("too many submissions from \(call.sender); slow down"))
            }
            return d.submit(opts, argv).map { [.string($0)] }
        case .cancel:
            guard let id = str(0) else { return .failure(SchedulerError.invalidArgs("Cancel takes (s id)")) }
            return d.cancel(id, by: "bgtask cancel").map { [.string($0)] }
        case .cancelAll:
            return .success([.uint32(UInt32(d.cancelAll()))])
        case .listPending:
            // The whole queue in one reply, as the interface has always said (clients page with ListPendingPage).
            return .success([.dicts(d.pendingAll().map(\.variant))])
        case .listPendingPage, .listPendingJSON:
            guard call.args.count == 1, case .dict(let asked)? = call.args[0] else {
                return .failure(SchedulerError.invalidArgs("\(call.method) takes \(method.signature)"))
            }
            let range: PageRange
            do { range = try PageRange(variant: asked) } catch { return .failure(error.busError) }
            if method == .listPendingPage {
                var tasks: [[String: BusValue]] = []
                return d.pendingPage(range) { tasks.append($0.variant) }.map { [.dicts(tasks), .string($0)] }
            }
            return jsonPage(range, for: call.sender, d)
        case .listRunning:
            return .success([.dicts(d.listRunning().map(\.variant))])
        case .debugLaunch:
            guard let id = str(0) else { return .failure(SchedulerError.invalidArgs("DebugLaunch takes (s id)")) }
            return d.debugLaunch(id).map { [] }
        case .debugExpire:
            guard let id = str(0) else { return .failure(SchedulerError.invalidArgs("DebugExpire takes (s id)")) }
            return d.debugExpire(id).map { [] }
        case .reloadPolicy:
            let (ok, said) = d.reloadPolicy()
            return .success([.bool(ok), .string(said)])
        case .getConditions:
            return .success([.dict(d.appConditions.variant)])
        case .getStatus:
            return .success([.dict(d.status.variant)])
        }
    }

    /// A `ListPendingJSON` page: the one made ahead for this caller if it still holds, else made now. The page
    /// after it is made in the round after this reply, while the bus carries this one: a whole listing asks for page
    /// after page, and bgtaskd, not the round trip, is then what paces it.
    func jsonPage(_ range: PageRange, for sender: String, _ commands: any ServiceCommands) -> Result<[BusValue], BusError> {
        var reply: Result<[BusValue], BusError>?
        if let p = ahead, p.sender == sender, p.range == range, p.stamp == commands.listingStamp,
           monotonic() - p.made <= BusService.aheadLife {
            reply = p.reply
        }
        ahead = nil
        let page = reply ?? BusService.jsonPage(range, commands)
        // None after a page of one task, a page that failed, or the last page.
        if case .success(let v) = page, range.id == nil, let next = v.last?.string, !next.isEmpty {
            var following = range
            following.after = next
            afterReply.append { [unowned self] in
                let stamp = commands.listingStamp
                self.ahead = Ahead(sender: sender, range: following, stamp: stamp, made: monotonic(),
                                   reply: BusService.jsonPage(following, commands))
            }
        }
        return page
    }

    /// A page made ahead (`jsonPage`): for whom, which, and the queue's stamp and the time when it was made.
    struct Ahead {
        let sender: String
        let range: PageRange
        let stamp: Int
        let made: Double
        let reply: Result<[BusValue], BusError>
    }
    /// The page made ahead, until it is asked for, another page is, or the heap is trimmed after a listing.
    var ahead: Ahead?
    /// How old a page made ahead may be when told: a later page of a listing may tell what an awake task waited for
    /// this long before it was asked for (a row written or deleted since, and it is made again).
    static let aheadLife = 0.25

    /// A `ListPendingJSON` page, each task written as it is made: no page of tasks held beside its text.
    static func jsonPage(_ range: PageRange, _ commands: any ServiceCommands) -> Result<[BusValue], BusError> {
        var lines = JSONLines()
        return commands.pendingPage(range) { lines.append($0) }.map { [.bytes(lines.bytes), .string($0)] }
    }

    /// Tasks as `bgtask pending --json` prints each, one a line: the bytes of a page (`ListPendingJSON`).
    struct JSONLines {
        var out = JSONBytes(capacity: 1 << 16)
        var iso = (second: Double.nan, text: "")
        var lists = BusValue.SharedLists()

        mutating func append(_ t: PendingTask) {
            if !out.bytes.isEmpty { out.byte(0x0A) }
            t.writeJSON(into: &out, iso: &iso, lists: &lists)
        }
        var bytes: [UInt8] { out.bytes }
    }
}
