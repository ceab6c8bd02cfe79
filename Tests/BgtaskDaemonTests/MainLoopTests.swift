import BgtaskBus
import Testing

extension DefaultContextTests {
@Suite("the GLib main loop's one-shot timers")
struct MainLoopTests {
    final class Token {}

    @Test("a timer that has run lets go of what its action captured, without waiting for the next timer")
    func spentTimerReleasesItsCapture() {
        let loop = MainLoop()
        weak var captured: Token?
        var ran = false
        do {
            let token = Token()
            captured = token
            loop.after(0) {
                withExtendedLifetime(token) { ran = true }
                loop.quit()
            }
        }
        #expect(captured != nil)   // held by the pending timer
        loop.run()                 // returns when the timer has run and quit the loop
        #expect(ran)
        #expect(captured == nil)
    }
}
}
