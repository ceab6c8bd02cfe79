#if canImport(Glibc)
@preconcurrency import Glibc
#endif
@testable import BgtaskDaemon
import BgtaskBus
import BgtaskCore
import BgtaskPolicy
import BgtaskProtocol
import BgtaskQueue
import BgtaskTestSupport
import Foundation
import Testing

/// The queue as the broker sees it, written down: what it was asked to queue and cancel, with answers the test sets.
final class FakeAppQueue: AppQueue {
    var waiting: [String: TaskKind] = [:]
    var ended = 0
    var holdBack = 0.0
    var refusing: String?
    var notNow: String?
    private(set) var enqueued: [QueuedTask] = []
    private(set) var cancelled: [(key: String, by: String)] = []
    private(set) var rounds = 0
    let presenter: Presenter

    init(bus: BusConnection, loop: MainLoop) {
        presenter = Presenter(Presenter.Host(bus: bus, loop: loop, say: { _ in }, settings: { Policy.empty.settings },
                                             cancel: { _, _ in }, expire: { _, _ in }))
    }

    func runningTask(_ key: String) -> Entry? { nil }
    func startingTask(_ key: String) -> Entry? { nil }
    func runningTasks(app: String) -> [Entry] { [] }
    func waitingIDs(app: String) -> [String] { waiting.keys.filter { $0.hasPrefix(app + "/") }.sorted() }
    func waitingKind(_ key: String) -> TaskKind? { waiting[key] }
    func pending(app: String) -> [(task: PendingTask, row: QueuedTask?)] { [] }
    func standing(app: String) -> (ended: Int, holdBack: Double) { (ended, holdBack) }
    func countAgainst(_ app: String) -> String { ended += 1; return "counted" }
    func madeGood(_ app: String, by key: String) { ended -= 1 }
    func refusal(_ row: QueuedTask, sender: String) -> String? { refusing }
    func cannotStartNow(_ row: QueuedTask) -> String? { notNow }
    func enqueue(_ row: QueuedTask) -> Result<Void, BusError> { enqueued.append(row); waiting[row.id] = row.kind; return .success(()) }
    func cancel(_ key: String, by who: String) -> Result<String, BusError> {
        cancelled.append((key, who))
        return waiting.removeValue(forKey: key) == nil ? .failure(SchedulerError.noSuchTask("no task \(key)")) : .success("removed")
    }
    func actOnChanges() { rounds += 1 }
    func callerLeft(_ name: String) {}
    func end(grace: Double, _ targets: @escaping () -> [pid_t]) {}
}

/// The app broker alone, over a fake queue: identity, an app's requests checked against its manifest and Apple's
/// rules, and what an app's leaving does to its work. (The daemon's side of it is `ServiceTests`.)
@Suite("The app broker: who calls, what an app may ask, what its leaving ends", .serialized)
struct AppBrokerTests {
    static let feed = "org.example.Feed"
    let dir: URL
    let bus: PrivateBus
    let connection: BusConnection
    let broker: AppBroker
    let queue: FakeAppQueue

    init() throws {
        dir = FileManager.default.temporaryDirectory.appendingPathComponent("bgtask-broker-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        // Refresh and processing work listed as it is; continued work under a wildcard; no continued for refresh.
        try """
        id = "\(Self.feed)"
        command = ["/bin/true"]
        permitted_identifiers = ["org.example.feed.refresh", "org.example.feed.clean", "org.example.feed.export.*"]
        kinds = ["refresh", "processing", "continued"]
        """.write(to: dir.appendingPathComponent("\(Self.feed).toml"), atomically: true, encoding: .utf8)
        try """
        id = "org.example.Plain"
        command = ["/bin/true"]
        permitted_identifiers = ["org.example.plain.refresh"]
        kinds = ["refresh"]
        """.write(to: dir.appendingPathComponent("org.example.Plain.toml"), atomically: true, encoding: .utf8)
        bus = try PrivateBus()
        connection = try BusConnection(address: bus.address)
        let loop = MainLoop()
        broker = AppBroker(bus: connection, loop: loop, stateDirectory: dir.path, appDirectories: [dir.path]) { _ in }
        queue = FakeAppQueue(bus: connection, loop: loop)
        broker.queue = queue
        broker.load()
    }

    func call(_ method: SchedulerMethod, _ args: [BusValue], from who: Caller = InProcessDaemon.user) -> Result<[BusValue], BusError>? {
        broker.handle(method, BusCall(sender: ":1.7", method: method.rawValue, args: args, signature: method.signature), who)
    }

    func submit(_ request: [String: BusValue], app: String = AppBrokerTests.feed, from who: Caller = InProcessDaemon.user) -> String? {
        switch call(.appSubmit, [.string(app), .dict(request)], from: who) {
        case .failure(let e)?: return e.name
        case .success?: return nil
        case nil: return "not handled"
        }
    }

    static func request(_ identifier: String, _ kind: String, _ more: [String: BusValue] = [:]) -> [String: BusValue] {
        more.merging(["identifier": .string(identifier), "kind": .string(kind)]) { a, _ in a }
    }

    @Test("a Flatpak caller is the app its sandbox names, whatever it claims; a snap or another namespace is refused; a switched-off app is Unavailable")
    func identity() throws {
        let flatpak = Caller(uid: getuid(), pid: getpid(), sandbox: .flatpak(appID: Self.feed))
        #expect(throws: Never.self) { try broker.identity(flatpak, claimed: Self.feed).get() }
        #expect(throws: BusError.self) { try broker.identity(flatpak, claimed: "org.example.Plain").get() }
        if case .failure(let e) = broker.identity(Caller(uid: getuid(), pid: getpid(), sandbox: .snap(label: "snap.feed.feed")), claimed: Self.feed) {
            #expect(e.name == SchedulerError.accessDenied.rawValue)
        } else { Issue.record("a snap was taken at its word") }
        if case .failure(let e) = broker.identity(InProcessDaemon.user, claimed: "org.example.Nobody") {
            #expect(e.name == SchedulerError.notPermitted.rawValue && e.message.contains("no manifest"))
        } else { Issue.record("an app with no manifest was let in") }
        broker.roster.disabled = [Self.feed]
        #expect(submit(Self.request("org.example.feed.refresh", "refresh")) == SchedulerError.unavailable.rawValue)
        #expect(queue.enqueued.isEmpty)
    }

    @Test("an app's request: refresh and processing work need their identifier listed as it is, a wildcard permits continued work only, the manifest's kinds bound it")
    func manifestRules() throws {
        #expect(submit(Self.request("org.example.feed.refresh", "refresh")) == nil)
        #expect(submit(Self.request("org.example.feed.export.photos", "continued")) == nil)
        #expect(submit(Self.request("org.example.feed.export.photos", "processing")) == SchedulerError.notPermitted.rawValue)
        #expect(submit(Self.request("org.example.feed.other", "refresh")) == SchedulerError.notPermitted.rawValue)
        #expect(submit(Self.request("org.example.plain.refresh", "processing"), app: "org.example.Plain") == SchedulerError.notPermitted.rawValue)
        #expect(submit(Self.request("org.example.feed.refresh", "sometime")) == SchedulerError.invalidArgs.rawValue)
        #expect(submit(Self.request("org.example.feed.refresh", "refresh", ["strategy": .string("maybe")])) == SchedulerError.invalidArgs.rawValue)
        #expect(submit(Self.request("org.example.feed.refresh", "refresh", ["title": .string(String(repeating: "x", count: 1025))])) == SchedulerError.invalidArgs.rawValue)
        #expect(submit(Self.request("org.example.feed.refresh", "refresh", ["earliest": .double(Date().timeIntervalSince1970 + 20 * 365 * 86_400)]))
                == SchedulerError.invalidArgs.rawValue, "over ten years ahead")
        // What was queued: keyed by app, the app's own command, a continued task user-initiated.
        #expect(queue.enqueued.map(\.id) == ["\(Self.feed)/org.example.feed.refresh", "\(Self.feed)/org.example.feed.export.photos"])
        #expect(queue.enqueued.map(\.app) == [Self.feed, Self.feed])
        #expect(queue.enqueued.map(\.userInitiated) == [false, true])
        #expect(queue.enqueued.allSatisfy { $0.command == ["/bin/true"] })
    }

    @Test("the queue's refusal and `.fail`'s cannot-start-now reach the app as TooManyPendingTaskRequests and ImmediateRunIneligible; refresh work of an app with ended tasks is held back")
    func queueAnswers() throws {
        queue.refusing = "at most 1 pending refresh task per app"
        #expect(submit(Self.request("org.example.feed.refresh", "refresh")) == SchedulerError.tooManyPending.rawValue)
        queue.refusing = nil
        queue.notNow = "on battery — rule power (policy.toml:3)"
        let fail = Self.request("org.example.feed.export.a", "continued", ["strategy": .string("fail")])
        #expect(submit(fail) == SchedulerError.immediateRunIneligible.rawValue)
        #expect(submit(Self.request("org.example.feed.export.a", "continued", ["strategy": .string("queue")])) == nil, "`.queue` waits instead")
        queue.ended = 2
        queue.holdBack = 7200
        let before = Date().timeIntervalSince1970
        #expect(submit(Self.request("org.example.feed.refresh", "refresh")) == nil)
        let held = try #require(queue.enqueued.last?.earliest)
        #expect(held >= before + 7200 && held < before + 7260)
        #expect(submit(Self.request("org.example.feed.clean", "processing")) == nil)
        #expect(queue.enqueued.last?.earliest == nil, "processing work is not held back")
    }

    @Test("why an app task was expired is kept until it ends, then given once and forgotten, whatever its kind")
    func expiryReasonGoesWithItsTask() throws {
        let t = AppTask(broker: broker, app: Self.feed, identifier: "org.example.feed.clean")
        broker.tellExpire(t, reason: "its budget is spent")
        let key = AppBroker.key(Self.feed, "org.example.feed.clean")
        #expect(broker.roster.expiredReasons[key] == "its budget is spent")
        #expect(broker.taskEnded(key, app: Self.feed) == "its budget is spent")
        #expect(broker.roster.expiredReasons.isEmpty && broker.roster.views.isEmpty)
        #expect(broker.taskEnded(key, app: Self.feed) == nil, "given once")
    }

    @Test("an app that leaves the bus: its queued continued work is cancelled, its refresh and processing requests stay; AppCancelAll cancels them all")
    func leaving() throws {
        for (id, kind) in [("org.example.feed.refresh", "refresh"), ("org.example.feed.clean", "processing"), ("org.example.feed.export.a", "continued")] {
            #expect(submit(Self.request(id, kind)) == nil)
        }
        broker.left(Self.feed, connections: [], why: "left the bus")
        #expect(queue.cancelled.map(\.key) == ["\(Self.feed)/org.example.feed.export.a"])
        #expect(queue.cancelled.first?.by.contains("left the bus") == true)
        #expect(queue.rounds == 1)
        _ = try #require(call(.appCancelAll, [.string(Self.feed)])).get()
        #expect(queue.waiting.isEmpty)
        #expect(Set(queue.cancelled.dropFirst().map(\.by)) == ["the app (cancelAllTaskRequests)"])
    }
}

@Suite("an app's relaunches, in virtual time")
struct RelaunchBudgetTests {
    @Test("relaunch is bounded: three within the window, at once then after 1 s and 2 s; a fourth is refused, and so is any launch, until the oldest leaves the window")
    func relaunchIsBoundedWithinItsWindow() {
        var b = RelaunchBudget()
        #expect(b.next("a", now: 100) == .after(delay: 0, number: 1))
        #expect(b.next("a", now: 101) == .after(delay: 1, number: 2))
        #expect(b.next("a", now: 103) == .after(delay: 2, number: 3))
        #expect(b.refused("a", now: 104) == nil, "the three allowed relaunches refuse nothing")
        #expect(b.next("a", now: 106) == .spent(until: 100 + RelaunchBudget.window))
        #expect(b.refused("a", now: 107) == 100 + RelaunchBudget.window, "a task started meanwhile does not launch it")
        #expect(b.next("b", now: 107) == .after(delay: 0, number: 1), "per app")
        // The oldest relaunch out of the window: one more is allowed, after the backoff of the two still in it.
        #expect(b.refused("a", now: 100 + RelaunchBudget.window) == nil)
        #expect(b.next("a", now: 100 + RelaunchBudget.window) == .after(delay: 2, number: 3))
    }
}
