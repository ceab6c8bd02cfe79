// ColorFeed: Apple's BackgroundTasks sample, ported. Its task code is the iOS code; what changed is the
// launch (no UIApplication: `main` plays didFinishLaunching and didEnterBackground) and a manifest,
// Examples/apps/com.example.apple-samplecode.ColorFeed.toml, in place of Info.plist.
//
//   ColorFeed            the person uses the app (a few colors arrive), then closes it: the refresh and the
//                        database cleaning are scheduled, as the sample does when the app enters the background
//   ColorFeed status     the feed and what is scheduled
//
// bgtaskd launches it with BGTASK_LAUNCHED_FOR_BACKGROUND=1 when a task is due; it registers its handlers and
// runs them, and bgtaskd ends it once they are done (as iOS suspends it).
import BackgroundTasks
import Foundation

/// The feed: colors, newest last, in a JSON file (`$XDG_DATA_HOME/ColorFeed/feed.json`).
final class FeedStore: @unchecked Sendable {
    struct Entry: Codable { var color: String; var added: Double }
    struct Feed: Codable { var entries: [Entry] = []; var lastCleaned: Double? }

    let url: URL
    let lock = NSLock()

    init() {
        let env = ProcessInfo.processInfo.environment
        let base = env["XDG_DATA_HOME"].map { URL(fileURLWithPath: $0) }
            ?? FileManager.default.homeDirectoryForCurrentUser.appendingPathComponent(".local/share")
        url = base.appendingPathComponent("ColorFeed/feed.json")
    }

    func read() -> Feed {
        lock.withLock { (try? JSONDecoder().decode(Feed.self, from: Data(contentsOf: url))) ?? Feed() }
    }

    func write(_ f: Feed) throws {
        try lock.withLock {
            try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
            try JSONEncoder().encode(f).write(to: url, options: .atomic)
        }
    }
}

/// The sample's "server": it makes up colors (Apple's ColorFeed uses a mock server too).
func fetchColors(count: Int) -> [FeedStore.Entry] {
    (0..<count).map { _ in
        FeedStore.Entry(color: String(format: "#%06X", Int.random(in: 0...0xFFFFFF)), added: Date().timeIntervalSince1970)
    }
}

final class FetchOperation: Operation, @unchecked Sendable {
    let store: FeedStore
    var fetched = 0
    init(store: FeedStore) { self.store = store }
    override func main() {
        guard !isCancelled else { return }
        var feed = store.read()
        let colors = fetchColors(count: 3)
        feed.entries += colors
        try? store.write(feed)
        fetched = colors.count
    }
}

final class CleanDatabaseOperation: Operation, @unchecked Sendable {
    let store: FeedStore
    let keep: Int
    var removed = 0
    init(store: FeedStore, keep: Int) { self.store = store; self.keep = keep }
    override func main() {
        var feed = store.read()
        // A database that takes a while to clean (COLORFEED_CLEAN_PACE seconds per entry), to watch it expire.
        let pace = Double(ProcessInfo.processInfo.environment["COLORFEED_CLEAN_PACE"] ?? "") ?? 0
        for _ in 0..<max(0, feed.entries.count - keep) {
            guard !isCancelled else { break }
            if pace > 0 { Thread.sleep(forTimeInterval: pace) }
            guard !isCancelled else { break }
            feed.entries.removeFirst()
            removed += 1
        }
        if !isCancelled { feed.lastCleaned = Date().timeIntervalSince1970 }
        try? store.write(feed)
    }
}

final class AppDelegate: @unchecked Sendable {
    let store = FeedStore()
    let operationQueue: OperationQueue = {
        let q = OperationQueue()
        q.maxConcurrentOperationCount = 1
        return q
    }()

    func application(didFinishLaunching: Void) -> Bool {
        BGTaskScheduler.shared.register(forTaskWithIdentifier: "com.example.apple-samplecode.ColorFeed.refresh", using: nil) { task in
            self.handleAppRefresh(task: task as! BGAppRefreshTask)
        }
        BGTaskScheduler.shared.register(forTaskWithIdentifier: "com.example.apple-samplecode.ColorFeed.db_cleaning", using: nil) { task in
            self.handleDatabaseCleaning(task: task as! BGProcessingTask)
        }
        return true
    }

    func applicationDidEnterBackground() {
        scheduleAppRefresh()
        scheduleDatabaseCleaningIfNeeded()
    }

    // MARK: Scheduling

    func scheduleAppRefresh() {
        let request = BGAppRefreshTaskRequest(identifier: "com.example.apple-samplecode.ColorFeed.refresh")
        request.earliestBeginDate = Date(timeIntervalSinceNow: 15 * 60)
        do {
            try BGTaskScheduler.shared.submit(request)
        } catch {
            print("Could not schedule app refresh: \(error)")
        }
    }

    func scheduleDatabaseCleaningIfNeeded() {
        let lastCleanDate = store.read().lastCleaned.map { Date(timeIntervalSince1970: $0) } ?? .distantPast
        let oneWeek = TimeInterval(7 * 24 * 60 * 60)
        // Clean the database at most once per week.
        guard Date() > lastCleanDate + oneWeek else { return }

        let request = BGProcessingTaskRequest(identifier: "com.example.apple-samplecode.ColorFeed.db_cleaning")
        request.requiresNetworkConnectivity = false
        request.requiresExternalPower = true
        do {
            try BGTaskScheduler.shared.submit(request)
        } catch {
            print("Could not schedule database cleaning: \(error)")
        }
    }

    // MARK: Handling launch for tasks

    func handleAppRefresh(task: BGAppRefreshTask) {
        scheduleAppRefresh()

        let operation = FetchOperation(store: store)
        task.expirationHandler = {
            // After all operations are cancelled, the completion block below is called to complete the task.
            self.operationQueue.cancelAllOperations()
        }
        operation.completionBlock = {
            print("ColorFeed: refreshed: \(operation.fetched) new colors")
            task.setTaskCompleted(success: !operation.isCancelled)
        }
        operationQueue.addOperation(operation)
    }

    func handleDatabaseCleaning(task: BGProcessingTask) {
        let operation = CleanDatabaseOperation(store: store, keep: 5)
        task.expirationHandler = {
            print("ColorFeed: cleaning expired; it stops")
            self.operationQueue.cancelAllOperations()
        }
        operation.completionBlock = {
            print("ColorFeed: cleaned: removed \(operation.removed) old colors")
            task.setTaskCompleted(success: !operation.isCancelled)
        }
        operationQueue.addOperation(operation)
    }
}

setvbuf(stdout, nil, _IOLBF, 0)
let app = AppDelegate()
_ = app.application(didFinishLaunching: ())
let arguments = CommandLine.arguments.dropFirst()

if BGTaskScheduler.shared.isLaunchedForBackground {
    // Launched by bgtaskd: the handlers run as tasks arrive; bgtaskd ends the process when they are done.
    print("ColorFeed: launched for background work")
    dispatchMain()
} else if arguments.first == "conditions" {
    // What an iOS app checks before heavy work, and the notifications it observes.
    @Sendable func describe() -> String {
        let thermal: String
        switch ProcessInfo.processInfo.thermalState {
        case .nominal: thermal = "nominal"
        case .fair: thermal = "fair"
        case .serious: thermal = "serious"
        case .critical: thermal = "critical"
        @unknown default: thermal = "unknown"
        }
        return "thermal \(thermal), low power \(ProcessInfo.processInfo.isLowPowerModeEnabled ? "on" : "off")"
    }
    print("ColorFeed: \(describe())")
    let observers = [
        NotificationCenter.default.addObserver(forName: ProcessInfo.thermalStateDidChangeNotification, object: nil, queue: .main) { _ in
            print("ColorFeed: thermal state changed: \(describe())")
        },
        NotificationCenter.default.addObserver(forName: .NSProcessInfoPowerStateDidChange, object: nil, queue: .main) { _ in
            print("ColorFeed: power state changed: \(describe())")
        },
    ]
    _ = observers
    dispatchMain()
} else if arguments.first == "status" {
    let feed = app.store.read()
    print("feed: \(feed.entries.count) colors; last cleaned: \(feed.lastCleaned.map { "\(Date(timeIntervalSince1970: $0))" } ?? "never")")
    let done = DispatchSemaphore(value: 0)
    BGTaskScheduler.shared.getPendingTaskRequests { requests in
        for request in requests {
            print("pending: \(request.identifier), earliest: \(request.earliestBeginDate.map { "\($0)" } ?? "now")")
        }
        done.signal()
    }
    done.wait()
} else {
    // The person opens the feed: new colors arrive while they look.
    var feed = app.store.read()
    feed.entries += fetchColors(count: 8)
    try app.store.write(feed)
    print("ColorFeed: \(feed.entries.count) colors in the feed")
    // …and closes the app.
    app.applicationDidEnterBackground()
}
