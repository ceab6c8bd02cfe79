// Exporter: a continued processing task (iOS 26's BGContinuedProcessingTask), ported. The person starts an
// export; it goes on when they leave, with its title, subtitle and progress shown by the desktop (a
// notification, or KDE's job view) and a Cancel there that stops it through the expiration handler.
// The handler is the WWDC25 one: it loops on its queue, and the expiration handler flips a flag.
//
//   Exporter [--fail] [--gpu] [COUNT]
//                                 export COUNT photos (default 20) to $EXPORTER_OUT (default ./exported);
//                                 --gpu asks for a GPU even where `supportedResources` has none (to show the
//                                 rejection; without it the GPU is asked for only where it is supported)
//   Exporter --save               the Linux extra: hold off sleep while "saving" (a logind delay lock), until
//                                 the machine is about to sleep or 30 s pass
//
// Exit status: 0 all exported, 3 stopped by its expiration (cancelled, stalled, a policy verdict), 75 the
// scheduler would not start it now (--fail: `.fail` strategy), 77 not permitted by the manifest, 69 no scheduler.
import BackgroundTasks
import Foundation

setvbuf(stdout, nil, _IOLBF, 0)
let env = ProcessInfo.processInfo.environment
var arguments = Array(CommandLine.arguments.dropFirst())
let failFast = arguments.contains("--fail")
let forceGPU = arguments.contains("--gpu")
arguments.removeAll { $0 == "--fail" || $0 == "--gpu" }
let photos = max(1, Int(arguments.first ?? "") ?? 20)
let outDir = URL(fileURLWithPath: env["EXPORTER_OUT"] ?? "exported")
let secondsPerPhoto = Double(env["EXPORTER_SECONDS_PER_PHOTO"] ?? "") ?? 0.3
let identifier = env["EXPORTER_IDENTIFIER"] ?? "io.github.bgtask.Exporter.export.\(ProcessInfo.processInfo.processIdentifier)"

if arguments.first == "--save" {
    // UIKit's beginBackgroundTask, as the WWDC25 slide has it (with its inverted guard put right).
    var backgroundTaskID = BGBackgroundTaskIdentifier.invalid
    let expired = DispatchSemaphore(value: 0)
    backgroundTaskID = BGTaskScheduler.shared.beginBackgroundTask(withName: "Finish Export") {
        print("Exporter: the machine is going to sleep; saved what could be saved")
        BGTaskScheduler.shared.endBackgroundTask(backgroundTaskID)
        backgroundTaskID = .invalid
        expired.signal()
    }
    guard backgroundTaskID != .invalid else {
        print("Exporter: no sleep lock could be taken")
        exit(69)
    }
    print("Exporter: saving, sleep held off")
    let woken = expired.wait(timeout: .now() + 30)
    if woken == .timedOut {
        BGTaskScheduler.shared.endBackgroundTask(backgroundTaskID)
        print("Exporter: saved")
    }
    exit(0)
}

final class Outcome: @unchecked Sendable {
    let done = DispatchSemaphore(value: 0)
    var exported = 0
    var success = false
}
let outcome = Outcome()

func exportPhoto(_ index: Int) {
    try? FileManager.default.createDirectory(at: outDir, withIntermediateDirectories: true)
    try? Data("photo \(index)\n".utf8).write(to: outDir.appendingPathComponent("photo-\(index).txt"))
    Thread.sleep(forTimeInterval: secondsPerPhoto)
}

func handleDialogConfirmation() {
    BGTaskScheduler.shared.register(identifier) { task in
        let task = task as! BGContinuedProcessingTask

        var shouldContinue = true
        task.expirationHandler = {
            shouldContinue = false
        }

        task.progress.totalUnitCount = Int64(photos)
        task.progress.completedUnitCount = 0

        while shouldContinue && task.progress.completedUnitCount < task.progress.totalUnitCount {
            exportPhoto(Int(task.progress.completedUnitCount) + 1)
            task.progress.completedUnitCount += 1
            task.updateTitle(task.title, subtitle: "\(task.progress.completedUnitCount) of \(photos) photos complete")
        }

        outcome.exported = Int(task.progress.completedUnitCount)
        outcome.success = shouldContinue
        task.setTaskCompleted(success: shouldContinue)
        outcome.done.signal()
    }
}

func submitContinuedProcessingTaskRequest() throws {
    let request = BGContinuedProcessingTaskRequest(
        identifier: identifier,
        title: "Exporting \(photos) photos",
        subtitle: "0 of \(photos) photos complete"
    )
    request.strategy = failFast ? .fail : .queue
    // As Apple's sample: ask for the GPU where the scheduler says it has one.
    let gpu = BGTaskScheduler.supportedResources.contains(.gpu)
    print("Exporter: GPU \(gpu ? "supported" : "not supported") here")
    if gpu || forceGPU {
        request.requiredResources = .gpu
    }
    try BGTaskScheduler.shared.submit(request)
}

handleDialogConfirmation()
do {
    try submitContinuedProcessingTaskRequest()
} catch BGTaskScheduler.Error.immediateRunIneligible {
    print("Exporter: cannot export in the background right now")
    exit(75)
} catch let error as BGTaskScheduler.Error where error.code == .notPermitted {
    print("Exporter: not permitted: \(error.localizedDescription)")
    exit(77)
} catch {
    print("Exporter: could not start the export: \(error.localizedDescription)")
    exit(69)
}
print("Exporter: exporting \(photos) photos to \(outDir.path)")
outcome.done.wait()
if outcome.success {
    print("Exporter: done, \(outcome.exported) of \(photos) exported")
    exit(0)
}
print("Exporter: stopped after \(outcome.exported) of \(photos) (expired)")
exit(3)
