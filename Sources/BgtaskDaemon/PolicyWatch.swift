#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskBus
import BgtaskConfig
import BgtaskProbes
import BgtaskFiles

/// Watches the directories the policy layers and the app manifests live in, including ones that do not exist
/// yet: a fresh account has no `~/.config/bgtask`, so the nearest existing ancestor is watched for the next
/// component of the path, and the watches move down as directories appear. Editors write in several steps,
/// so a burst of events becomes one reload 0.3 s after the last.
final class ConfigWatch {
    let fd: Int32
    let loop: MainLoop
    let directories: () -> [String]
    let changed: () -> Void
    /// Per watch: the directory, and the one name in it that leads toward a missing directory (nil: the
    /// directory is itself watched, any change in it counts).
    var watches: [Int32: (dir: String, toward: Set<String>?)] = [:]
    var generation = 0

    init?(loop: MainLoop, directories: @escaping () -> [String], changed: @escaping () -> Void) {
        fd = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        guard fd >= 0 else { return nil }
        self.loop = loop
        self.directories = directories
        self.changed = changed
        rewatch()
        loop.watch(fd: fd) { [unowned self] in self.events() }
    }

    /// Where `dir` is watched from: itself if it exists, else its nearest existing ancestor and the name in it
    /// that leads toward `dir`. nil when not even `/` can be read.
    static func anchor(_ dir: String, exists: (String) -> Bool) -> (dir: String, toward: String?)? {
        var path = dir
        var next: String?
        while !exists(path) {
            guard let slash = path.lastIndex(of: "/") else { return nil }
            next = String(path[path.index(after: slash)...])
            path = slash == path.startIndex ? "/" : String(path[..<slash])
            if path == "/" && !exists(path) { return nil }
        }
        return (path, next)
    }

    /// What the directories hold now (each entry's name, inode, size and change time): taken before the
    /// configuration is first read and again once the watches are in place, so what was written in between
    /// — before any watch could see it — is read too.
    static func fingerprint(_ dirs: [String]) -> [String] {
        var out: [String] = []
        for dir in dirs where dir.hasPrefix("/") {
            guard let names = FileIO.names(dir) else { out.append(dir + ": -"); continue }
            for name in names {
                var st = stat()
                guard lstat(dir + "/" + name, &st) == 0 else { continue }
                out.append("\(dir)/\(name) \(st.st_ino) \(st.st_size) \(st.st_ctim.tv_sec).\(st.st_ctim.tv_nsec)")
            }
        }
        return out
    }

    static func isDirectory(_ p: String) -> Bool { var st = stat(); return stat(p, &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR }

    func rewatch() {
        for wd in watches.keys { inotify_rm_watch(fd, wd) }
        watches = [:]
        let mask = UInt32(IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_CREATE | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF)
        for d in directories() where d.hasPrefix("/") {
            guard let (dir, toward) = ConfigWatch.anchor(d, exists: ConfigWatch.isDirectory) else { continue }
            let wd = inotify_add_watch(fd, dir, mask)   // the same directory twice gives the same watch
            guard wd >= 0 else { continue }
            switch (toward, watches[wd]) {
            case (let t?, let before?): watches[wd] = (dir, before.toward.map { $0.union([t]) })   // nil (all) stays all
            case (let t?, nil): watches[wd] = (dir, [t])
            case (nil, _): watches[wd] = (dir, nil)
            }
        }
    }

    func events() {
        var buf = [UInt8](repeating: 0, count: 8192)
        var relevant = false
        while true {
            let n = read(fd, &buf, buf.count)
            if n <= 0 { break }
            var at = 0
            while at + MemoryLayout<inotify_event>.size <= n {
                let (wd, mask, len) = buf.withUnsafeBytes { raw in
                    let e = raw.loadUnaligned(fromByteOffset: at, as: inotify_event.self)
                    return (e.wd, e.mask, Int(e.len))
                }
                let nameStart = at + MemoryLayout<inotify_event>.size
                let name = String(decoding: buf[nameStart..<min(n, nameStart + len)].prefix { $0 != 0 }, as: UTF8.self)
                at = nameStart + len
                guard let w = watches[wd] else { continue }
                // In an ancestor, only the next directory on the way matters; a watched directory itself going
                // away (IN_DELETE_SELF, IN_MOVE_SELF) matters too.
                if w.toward == nil || w.toward!.contains(name) || mask & UInt32(IN_DELETE_SELF | IN_MOVE_SELF) != 0 { relevant = true }
            }
        }
        guard relevant else { return }
        generation += 1
        let g = generation
        loop.after(0.3) { [weak self] in
            guard let self, g == self.generation else { return }   // a later event will reload
            self.rewatch()
            self.changed()
        }
    }
}

extension Daemon {
    /// SIGHUP, a file changed, or `bgtask policy reload`: the policy is read again; a broken file keeps the last
    /// good policy in force, and says so. Returns whether it loaded, and what changed (or why not).
    @discardableResult
    func reload() -> (ok: Bool, said: String) {
        let sources = Daemon.policySources(options)
        let (p, errors) = PolicyLayers.load(sources)
        if !errors.isEmpty {
            let w = PolicyWarning(what: "the policy does not load (the last good policy stays in force)", errors: errors)
            configuration.warning = w
            say(w.line)
            return (false, w.text)
        }
        configuration.warning = nil
        let changes = p.changes(from: driver.policy)
        driver.policyChanged(p)
        // Which files are in force now: for the journal reader, and for a test to know it sees its own file's reload.
        let files = "policy reloaded: " + sources.map(\.name).joined(separator: ", ")
        say(files)
        return (true, files + "\n" + (changes.isEmpty ? "nothing changed" : changes.joined(separator: "\n")))
    }

    /// Policy layers and manifests are read again when their files change (and on SIGHUP).
    func watchConfiguration() {
        let reread = { [unowned self] in
            self.apps.load()
            self.reload()
            self.afterRound(conditionsChanged: false)
        }
        configuration.watch = ConfigWatch(loop: loop, directories: { [unowned self] in self.configurationDirectories }, changed: reread)
        if configuration.watch == nil {
            say("cannot watch the policy files and manifests (inotify: \(String(cString: strerror(errno)))); reload with SIGHUP")
        } else if ConfigWatch.fingerprint(configurationDirectories) != configuration.atStart {
            loop.after(0, reread)   // written after it was read, before the watches were there
        }
        configuration.atStart = []
    }

    var configurationDirectories: [String] { Daemon.configurationDirectories(options) }
    static func configurationDirectories(_ options: DaemonOptions) -> [String] {
        if let p = options.places { return p.appDirectories }
        return PolicyLayers.directories(extra: options.policyFiles) + AppManifests.directories()
    }
}
