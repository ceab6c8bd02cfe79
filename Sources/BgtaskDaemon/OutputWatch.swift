#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskBus
import BgtaskRun

/// Keeps running command tasks' output files bounded while they are written (`OutputFile.bound`): an inotify
/// watch that fires once (`IN_ONESHOT`) at the first write, is re-armed 2 s after each look, and is gone when
/// the task ends. A quiet task costs no wake-up; a chatty one at most one every 2 s.
final class OutputWatch {
    let loop: MainLoop
    let say: (String) -> Void
    var fd: Int32 = -1
    /// Files of running tasks, and the watch each has now (nil between a look and its re-arming).
    var files: [String: Int32?] = [:]
    static let rearmAfter = 2.0

    init(loop: MainLoop, say: @escaping (String) -> Void) {
        self.loop = loop
        self.say = say
    }

    func watch(_ path: String) {
        if fd < 0 {
            fd = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
            guard fd >= 0 else {
                say("cannot watch tasks' output (inotify: \(String(cString: strerror(errno)))); it is cut back when they end")
                return
            }
            loop.watch(fd: fd) { [unowned self] in self.events() }
        }
        files[path] = .some(nil)
        arm(path)
    }

    func unwatch(_ path: String) {
        if let wd = files.removeValue(forKey: path) ?? nil, fd >= 0 { inotify_rm_watch(fd, wd) }
    }

    /// Watches for the next write, then looks: what was written since the last look is seen either way.
    func arm(_ path: String) {
        guard fd >= 0, files[path] != nil else { return }
        let wd = inotify_add_watch(fd, path, UInt32(IN_MODIFY) | UInt32(IN_ONESHOT))
        files[path] = wd >= 0 ? .some(wd) : .some(nil)
        cut(path)
    }

    func cut(_ path: String) {
        if OutputFile.bound(path) { say("\(path): output over \(OutputFile.boundBytes >> 20) MiB; its last \(OutputFile.maxBytes >> 20) MiB kept") }
    }

    func events() {
        var buf = [UInt8](repeating: 0, count: 4096)
        var fired: Set<Int32> = []
        while true {
            let n = read(fd, &buf, buf.count)
            if n <= 0 { break }
            var at = 0
            while at + MemoryLayout<inotify_event>.size <= n {
                let (wd, len) = buf.withUnsafeBytes { raw in
                    let e = raw.loadUnaligned(fromByteOffset: at, as: inotify_event.self)
                    return (e.wd, Int(e.len))
                }
                fired.insert(wd)
                at += MemoryLayout<inotify_event>.size + len
            }
        }
        for (path, wd) in files where wd.map({ fired.contains($0) }) == true {
            files[path] = .some(nil)
            cut(path)
            loop.after(OutputWatch.rearmAfter) { [weak self] in self?.arm(path) }
        }
    }
}
