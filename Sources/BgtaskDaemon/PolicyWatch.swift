#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskConfig

/// Reloads the policy when a file in one of its layer directories changes: inotify on each directory
/// that exists (and on the parent of a missing one, so creating `~/.config/bgtask/policy.d` is seen).
/// Editors write in several steps, so a burst of events becomes one reload 0.3 s after the last.
extension Daemon {
    func watchPolicyFiles() {
        let fd = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        guard fd >= 0 else {
            say("cannot watch the policy files (inotify: \(String(cString: strerror(errno)))); reload with SIGHUP")
            return
        }
        policyWatchFD = fd
        addPolicyWatches()
        loop.watch(fd: fd) { [unowned self] in
            var buf = [UInt8](repeating: 0, count: 8192)
            var relevant = false
            while true {
                let n = read(fd, &buf, buf.count)
                if n <= 0 { break }
                relevant = true
            }
            guard relevant else { return }
            self.reloadGeneration += 1
            let generation = self.reloadGeneration
            self.loop.after(0.3) { [unowned self] in
                guard generation == self.reloadGeneration else { return }   // a later event will reload
                self.addPolicyWatches()
                self.reload()
                self.afterRound(conditionsChanged: false)
            }
        }
    }

    func addPolicyWatches() {
        guard policyWatchFD >= 0 else { return }
        let mask = UInt32(IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_CREATE | IN_ATTRIB)
        for dir in PolicyLayers.directories(extra: options.policyFiles) {
            var target = dir
            var st = stat()
            if stat(target, &st) != 0 {
                target = dir.split(separator: "/", omittingEmptySubsequences: false).dropLast().joined(separator: "/")
                if target.isEmpty || stat(target, &st) != 0 { continue }
            }
            _ = inotify_add_watch(policyWatchFD, target, mask)   // the same directory twice gives the same watch
        }
    }
}
