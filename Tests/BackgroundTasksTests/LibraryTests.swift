@testable import BackgroundTasks
import Foundation
import Testing

/// The library alone: this process has no scheduler (its session bus address points nowhere), so nothing here
/// reads the machine's own bus.
@Suite("BackgroundTasks without a scheduler", .serialized)
struct LibraryTests {
    init() {
        setenv("DBUS_SESSION_BUS_ADDRESS", "unix:path=/nonexistent/bgtask-test-bus", 1)
        unsetenv("BGTASK_APP_ID")
        unsetenv("FLATPAK_ID")
    }

    @Test("error codes have Apple's raw values and domain, and match in `catch BGTaskScheduler.Error.x` patterns")
    func errorCodes() {
        #expect(BGTaskScheduler.Error.Code.unavailable.rawValue == 1)
        #expect(BGTaskScheduler.Error.Code.tooManyPendingTaskRequests.rawValue == 2)
        #expect(BGTaskScheduler.Error.Code.notPermitted.rawValue == 3)
        #expect(BGTaskScheduler.Error.Code.immediateRunIneligible.rawValue == 4)
        #expect(BGTaskScheduler.Error.errorDomain == "BGTaskSchedulerErrorDomain")
        let e: Error = BGTaskScheduler.Error(.notPermitted, message: "x is not among y's permitted identifiers")
        #expect(BGTaskScheduler.Error.notPermitted ~= e)
        #expect(!(BGTaskScheduler.Error.unavailable ~= e))
        #expect(e.localizedDescription.contains("permitted identifiers"), "\(e.localizedDescription)")
        #expect((e as NSError).code == 3)
        #expect((e as NSError).domain == "BGTaskSchedulerErrorDomain")
        #expect((e as NSError).domain == BGTaskSchedulerErrorDomain)
    }

    @Test("requests default as Apple's: no floor, no requirements, strategy .queue, resources .default")
    func requestDefaults() {
        let p = BGProcessingTaskRequest(identifier: "a.b")
        #expect(p.earliestBeginDate == nil && !p.requiresExternalPower && !p.requiresNetworkConnectivity)
        let c = BGContinuedProcessingTaskRequest(identifier: "a.b.c", title: "T", subtitle: "S")
        #expect(c.strategy == .queue)
        #expect(c.requiredResources == .default)
        #expect(!c.requiredResources.contains(.gpu))
    }

    @Test("with no scheduler: register returns false (no crash), submit throws unavailable, pending is empty, resources are .default")
    func noScheduler() async {
        #expect(BGTaskScheduler.shared.register(forTaskWithIdentifier: "io.example.App.refresh", using: nil) { _ in } == false)
        do {
            try BGTaskScheduler.shared.submit(BGAppRefreshTaskRequest(identifier: "io.example.App.refresh"))
            Issue.record("submit did not throw")
        } catch BGTaskScheduler.Error.unavailable {
        } catch {
            Issue.record("unexpected \(error)")
        }
        #expect(await BGTaskScheduler.shared.pendingTaskRequests().isEmpty)
        #expect(BGTaskScheduler.supportedResources == .default)
        BGTaskScheduler.shared.cancelAllTaskRequests()   // nothing to cancel, nothing thrown
    }

    @Test("the abstract BGTaskRequest is refused as not permitted")
    func abstractRequest() {
        setenv("BGTASK_APP_ID", "io.example.App", 1)
        defer { unsetenv("BGTASK_APP_ID") }
        do {
            try BGTaskScheduler.shared.submit(BGTaskRequest(identifier: "io.example.App.x", kind: "processing"))
            Issue.record("accepted")
        } catch let e as BGTaskScheduler.Error {
            #expect(e.code == .notPermitted)
        } catch {
            Issue.record("\(error)")
        }
    }
}
