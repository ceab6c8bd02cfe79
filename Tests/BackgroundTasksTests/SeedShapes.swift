// Code in the shapes the seed documents give (../shared/seeds/), compiled unchanged against BackgroundTasks
// (Swift 5 mode, as Apple's samples are). UIKit's types are stood in for by the smallest local ones; the
// BackgroundTasks calls are as the seeds write them. Slide artefacts are put right and marked (S1 shows
// `submit(request)!`, which compiles nowhere, and an inverted guard in beginBackgroundTask).
import BackgroundTasks
import Foundation

// MARK: WWDC25 (S1): register a processing task, submit it

final class SeedAppDelegate {
    var currentOperation: Operation?
    let operationQueue = OperationQueue()
    var lastMaintenanceDate = Date.distantPast
    var workItems: [Int] = [1, 2, 3]
    var photos: [Int] = [1, 2]

    func application(didFinishLaunchingWithOptions launchOptions: [String: Any]?) -> Bool {
        BGTaskScheduler.shared.register(
            forTaskWithIdentifier: "com.example.apple-samplecode.ColorFeed.db_cleaning",
            using: nil
        ) { task in
            self.handleAppRefresh(task: task as! BGProcessingTask)
        }
        // S3: the labelled form, with a queue of the app's
        BGTaskScheduler.shared.register(
            forTaskWithIdentifier: "com.yourapp.refresh",
            using: DispatchQueue.main
        ) { task in
            self.handleAppRefresh(task: task as! BGAppRefreshTask)
        }
        return true
    }

    func handleAppRefresh(task: BGProcessingTask) {
        task.setTaskCompleted(success: true)
    }

    func submitProcessingTaskRequest() {
        let request = BGProcessingTaskRequest(
            identifier: "com.example.apple-samplecode.ColorFeed.db_cleaning"
        )
        request.requiresNetworkConnectivity = true
        request.requiresExternalPower = true

        try? BGTaskScheduler.shared.submit(request)   // S1: `submit(request)!` (a slide artefact)
    }

    // MARK: S3: app refresh, the continuous pattern, with every catch it shows

    func scheduleAppRefresh() {
        let request = BGAppRefreshTaskRequest(identifier: "com.yourapp.refresh")
        request.earliestBeginDate = Date(timeIntervalSinceNow: 15 * 60)
        do {
            try BGTaskScheduler.shared.submit(request)
        } catch BGTaskScheduler.Error.notPermitted {
            // (S3 says "Background App Refresh disabled"; that is `unavailable` — see the design notes)
        } catch BGTaskScheduler.Error.tooManyPendingTaskRequests {
        } catch BGTaskScheduler.Error.unavailable {
        } catch {
            print("Schedule failed: \(error)")
        }
    }

    func fetchLatestContentOperation() -> Operation { BlockOperation {} }

    func handleAppRefresh(task: BGAppRefreshTask) {
        task.expirationHandler = { [weak self] in
            self?.currentOperation?.cancel()
        }
        scheduleAppRefresh()
        let operation = fetchLatestContentOperation()
        currentOperation = operation
        operation.completionBlock = {
            task.setTaskCompleted(success: !operation.isCancelled)
        }
        operationQueue.addOperation(operation)
    }

    // MARK: S3: maintenance with Swift concurrency inside the handler

    func saveProgress() {}
    func processItem(_ item: Int) async {}

    func scheduleMaintenanceIfNeeded() {
        guard Date().timeIntervalSince(lastMaintenanceDate) > 7 * 24 * 3600 else {
            return
        }
        let request = BGProcessingTaskRequest(identifier: "com.yourapp.maintenance")
        request.requiresExternalPower = true
        request.requiresNetworkConnectivity = true
        do {
            try BGTaskScheduler.shared.submit(request)
        } catch {
            print("Schedule failed: \(error)")
        }
    }

    func handleMaintenance(task: BGProcessingTask) {
        var shouldContinue = true
        task.expirationHandler = {
            shouldContinue = false
        }
        Task {
            for item in workItems {
                guard shouldContinue else {
                    saveProgress()
                    break
                }
                await processItem(item)
                saveProgress()
            }
            task.setTaskCompleted(success: shouldContinue)
        }
    }

    // MARK: S3: continued export, registered at the person's action (no `using:`), wildcard identifier

    func showError(_ s: String) {}
    func exportPhoto(_ p: Int) async {}

    func userTappedExportButton() {
        BGTaskScheduler.shared.register(
            forTaskWithIdentifier: "com.yourapp.export.photos"
        ) { task in
            let continuedTask = task as! BGContinuedProcessingTask
            self.handleExport(task: continuedTask)
        }
        submitExportRequest()
    }

    func submitExportRequest() {
        let request = BGContinuedProcessingTaskRequest(
            identifier: "com.yourapp.export.photos",
            title: "Exporting Photos",
            subtitle: "0 of 100 photos complete"
        )
        request.strategy = .fail
        do {
            try BGTaskScheduler.shared.submit(request)
        } catch {
            showError("Cannot export in background right now")
        }
    }

    func handleExport(task: BGContinuedProcessingTask) {
        var shouldContinue = true
        task.expirationHandler = {
            shouldContinue = false
        }
        task.progress.totalUnitCount = Int64(photos.count)
        task.progress.completedUnitCount = 0
        Task {
            for (index, photo) in photos.enumerated() {
                guard shouldContinue else { break }
                await exportPhoto(photo)
                task.progress.completedUnitCount = Int64(index + 1)
            }
            task.setTaskCompleted(success: shouldContinue)
        }
    }

    func gpuCheck() -> Bool {
        let supportedResources = BGTaskScheduler.shared.supportedResources       // S3's form
        let classForm = BGTaskScheduler.supportedResources                       // Apple's class property
        return supportedResources.contains(.gpu) && classForm.contains(.gpu)
    }

    func listPending() {
        BGTaskScheduler.shared.getPendingTaskRequests { requests in
            for request in requests {
                print("Pending: \(request.identifier)")
                print(" Earliest: \(request.earliestBeginDate ?? Date())")
            }
        }
    }
}

// MARK: WWDC25 (S1): the continued task, exactly as on the slide (the unlabelled register included)

func handleDialogConfirmation() {
    BGTaskScheduler.shared.register("com.colorfeed.wwdc25.userTask") { task in
        let task = task as! BGContinuedProcessingTask

        var shouldContinue = true
        task.expirationHandler = {
            shouldContinue = false
        }

        task.progress.totalUnitCount = 100
        task.progress.completedUnitCount = 0

        while shouldContinue {
            // Do some work
            task.progress.completedUnitCount += 1
        }

        task.setTaskCompleted(success: true)
    }
}

func submitContinuedProcessingTaskRequest() {
    let request = BGContinuedProcessingTaskRequest(
        identifier: "com.colorfeed.wwdc25.userTask",
        title: "A succinct title",
        subtitle: "A useful and informative subtitle"
    )

    request.strategy = .fail

    try? BGTaskScheduler.shared.submit(request)   // S1: `submit(request)!` (a slide artefact)
}

// MARK: S4: scheduling from async code, its catches, and the pending list

func scheduleNightlyCleanup() {
    let request = BGProcessingTaskRequest(
        identifier: "com.swiftcrafted.example.cleanup"
    )
    request.requiresNetworkConnectivity = true
    request.requiresExternalPower = true
    request.earliestBeginDate = nextRunAfterMidnight()

    do {
        try BGTaskScheduler.shared.submit(request)
    } catch {
        print("Cleanup schedule failed: \(error)")
    }
}

private func nextRunAfterMidnight() -> Date {
    let calendar = Calendar.current
    let tomorrow = calendar.date(byAdding: .day, value: 1, to: Date())!
    return calendar.startOfDay(for: tomorrow)
}

func showAlert(_ s: String) {}

func startExport(named name: String) {
    let request = BGContinuedProcessingTaskRequest(
        identifier: "com.swiftcrafted.example.export",
        title: "Exporting \(name)",
        subtitle: "4K \u{2022} H.265"
    )
    request.strategy = .fail // or .queue to wait if too many are running

    do {
        try BGTaskScheduler.shared.submit(request)
    } catch BGTaskScheduler.Error.tooManyPendingTaskRequests {
        showAlert("Too many exports already in progress.")
    } catch {
        showAlert("Could not start export: \(error.localizedDescription)")
    }
}

func printPending() {
    Task {
        let pending = await BGTaskScheduler.shared.pendingTaskRequests()
        for request in pending {
            print(request.identifier, request.earliestBeginDate as Any)
        }
    }
}

// MARK: Apple's bridged error, switched on its code

func describe(_ request: BGTaskRequest) -> String {
    do {
        try BGTaskScheduler.shared.submit(request)
        return "submitted"
    } catch let error as BGTaskScheduler.Error {
        switch error.code {
        case .unavailable: return "unavailable"
        case .tooManyPendingTaskRequests: return "too many"
        case .notPermitted: return "not permitted"
        case .immediateRunIneligible: return "not now"
        @unknown default: return "unknown"
        }
    } catch {
        return "other"
    }
}

// MARK: WWDC25 (S1): begin and end a background task — here the Linux extra on BGTaskScheduler

final class PersistenceDelegate {
    var backgroundTaskID: BGBackgroundTaskIdentifier = .invalid

    func saveState() { /*  ... */ }

    func handlePersistence() {
        let app = BGTaskScheduler.shared
        guard backgroundTaskID == .invalid else { return }   // S1's guard reads `!=` (inverted on the slide)
        backgroundTaskID = app.beginBackgroundTask(withName: "Finish Export") {
            app.endBackgroundTask(self.backgroundTaskID)
            self.backgroundTaskID = .invalid
        }

        self.saveState()

        app.endBackgroundTask(backgroundTaskID)
        backgroundTaskID = .invalid
    }
}

// MARK: the README's example

func cleanDatabase() {}

func readmeExample() throws {
    BGTaskScheduler.shared.register(forTaskWithIdentifier: "com.example.Feed.cleanup", using: nil) { task in
        task.expirationHandler = { /* stop soon */ }
        cleanDatabase()
        task.setTaskCompleted(success: true)
    }
    let request = BGProcessingTaskRequest(identifier: "com.example.Feed.cleanup")
    request.requiresExternalPower = true
    try BGTaskScheduler.shared.submit(request)
}
