// Apple-shaped BackgroundTasks code in Swift 6 language mode (strict concurrency), compiled against the
// library: docs/porting.md says Swift 6 works, save the seeds' shared `var shouldContinue`, which Swift 6
// refuses against Apple's SDK too — here the flag is in a lock, as porting.md advises. Nothing here talks to a
// scheduler: the test makes requests and checks what they say.
import BackgroundTasks
import Foundation
import Testing

/// A scheduler object as Swift 6 apps write it: Sendable, handlers that hand the work to a `Task`.
final class FeedScheduler: Sendable {
    static let refreshID = "com.example.apple-samplecode.ColorFeed.refresh"
    static let cleaningID = "com.example.apple-samplecode.ColorFeed.db_cleaning"

    func registerHandlers() -> Bool {
        let refresh = BGTaskScheduler.shared.register(forTaskWithIdentifier: Self.refreshID, using: nil) { task in
            guard let task = task as? BGAppRefreshTask else { return }
            self.handleAppRefresh(task: task)
        }
        let cleaning = BGTaskScheduler.shared.register(forTaskWithIdentifier: Self.cleaningID, using: .main) { task in
            self.handleDatabaseCleaning(task: task as! BGProcessingTask)
        }
        return refresh && cleaning
    }

    func refreshRequest() -> BGAppRefreshTaskRequest {
        let request = BGAppRefreshTaskRequest(identifier: Self.refreshID)
        request.earliestBeginDate = Date(timeIntervalSinceNow: 15 * 60)
        return request
    }

    func cleaningRequest() -> BGProcessingTaskRequest {
        let request = BGProcessingTaskRequest(identifier: Self.cleaningID)
        request.requiresNetworkConnectivity = false
        request.requiresExternalPower = true
        return request
    }

    func scheduleAppRefresh() {
        do {
            try BGTaskScheduler.shared.submit(refreshRequest())
        } catch let error as BGTaskScheduler.Error where error.code == .unavailable {
            print("Background refresh is unavailable: \(error)")
        } catch {
            print("Could not schedule app refresh: \(error)")
        }
    }

    func handleAppRefresh(task: BGAppRefreshTask) {
        scheduleAppRefresh()
        let work = Task {
            try await Task.sleep(for: .milliseconds(1))
            task.setTaskCompleted(success: !Task.isCancelled)
        }
        task.expirationHandler = { work.cancel() }
    }

    func handleDatabaseCleaning(task: BGProcessingTask) {
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        task.expirationHandler = { queue.cancelAllOperations() }
        queue.addOperation { task.setTaskCompleted(success: true) }
    }

    func pendingIdentifiers() async -> [String] {
        await BGTaskScheduler.shared.pendingTaskRequests().map(\.identifier)
    }
}

/// The WWDC25 continued task with its flag in a lock: Swift 6 accepts it.
@MainActor final class ExportModel {
    let identifier = "com.colorfeed.wwdc25.userTask"

    func register() {
        BGTaskScheduler.shared.register(forTaskWithIdentifier: identifier, using: nil) { task in
            let task = task as! BGContinuedProcessingTask
            let shouldContinue = NSLock()
            nonisolated(unsafe) var stop = false
            task.expirationHandler = { shouldContinue.withLock { stop = true } }
            task.progress.totalUnitCount = 100
            while !shouldContinue.withLock({ stop }) && task.progress.completedUnitCount < 100 {
                task.progress.completedUnitCount += 1
            }
            task.updateTitle(task.title, subtitle: "done")
            task.setTaskCompleted(success: !shouldContinue.withLock { stop })
        }
    }

    func request(gpu: Bool) -> BGContinuedProcessingTaskRequest {
        let request = BGContinuedProcessingTaskRequest(identifier: identifier, title: "A succinct title",
                                                       subtitle: "A useful and informative subtitle")
        request.strategy = .fail
        if gpu && BGTaskScheduler.supportedResources.contains(.gpu) {
            request.requiredResources = .gpu
        }
        return request
    }
}

@Suite("BackgroundTasks in Swift 6 language mode")
struct Swift6ShapeTests {
    @Test("Apple-shaped requests made from Swift 6 code carry what the code set")
    @MainActor func requestsFromSwift6Code() {
        let s = FeedScheduler()
        let refresh = s.refreshRequest()
        #expect(refresh.identifier == FeedScheduler.refreshID)
        #expect((refresh.earliestBeginDate?.timeIntervalSinceNow ?? 0) > 14 * 60)
        let cleaning = s.cleaningRequest()
        #expect(cleaning.requiresExternalPower && !cleaning.requiresNetworkConnectivity)
        let continued = ExportModel().request(gpu: false)
        #expect(continued.strategy == .fail && continued.requiredResources == .default)
        #expect(continued.title == "A succinct title")
    }
}
