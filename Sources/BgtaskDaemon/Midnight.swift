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

/// Local midnight: the daily budgets start again.
extension QueueDriver {
    func localDay() -> Int { QueueDriver.localDay() }

    static func localDay() -> Int {
        var t = time_t(wallClockNow())
        var parts = tm()
        localtime_r(&t, &parts)
        return Int((wallClockNow() + Double(parts.tm_gmtoff)) / 86_400)
    }

    /// At local midnight the budgets start again: work they held back is looked at anew.
    /// Local midnight, on the wall clock: a CLOCK_REALTIME timerfd set to the instant itself (it fires on time after
    /// a suspend, and a clock or time-zone change cancels it so it is set again) — not a monotonic delay, which
    /// stops while the machine sleeps, and not an hourly look, which would wake an idle daemon for nothing.
    func scheduleMidnight() {
        let fd = timerfd_create(CLOCK_REALTIME, Int32(TFD_NONBLOCK | TFD_CLOEXEC))
        guard fd >= 0 else { say("cannot set the midnight timer (timerfd: \(String(cString: strerror(errno))))"); return }
        // The descriptor is the watch's for the daemon's life: nothing else needs it.
        loop.watch(fd: fd) { [unowned self] in
            var expirations: UInt64 = 0
            let n = read(fd, &expirations, 8)
            // ECANCELED: the wall clock was set; the next midnight is another instant now.
            if n == 8 { self.midnight() }
            self.armMidnight(fd)
        }
        armMidnight(fd)
    }

    func armMidnight(_ fd: Int32) {
        var spec = itimerspec()
        spec.it_value.tv_sec = time_t(RunEnd.nextLocalMidnight(after: wallClockNow()))
        if timerfd_settime(fd, Int32(TFD_TIMER_ABSTIME) | Int32(TFD_TIMER_CANCEL_ON_SET), &spec, nil) != 0 {
            say("cannot set the midnight timer (timerfd_settime: \(String(cString: strerror(errno))))")
        }
    }

    func midnight() {
        try? store.pruneTransitions(before: wallClockNow() - ReadingHistory.days * 86_400)
        // Resting tasks wait for a condition only (no budget, no time rule): nothing to look at for them.
        for e in inOrder(queue.midnight(now: monotonic(), day: localDay())) where e.isWaiting {
            e.supervisor.reevaluate(now: monotonic())
        }
        host.actOnChanges()
    }
}
