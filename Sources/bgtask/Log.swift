import ArgumentParser
import BgtaskAudit
import BgtaskProbes
#if canImport(Glibc)
@preconcurrency import Glibc
#endif

extension Bgtask {
    struct Log: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print decisions as they are made, for any task (woken by the audit database changing, not polling).")

        @Option(name: [.customShort("n"), .long], help: ArgumentHelp("Show this many earlier decisions first.", valueName: "n"))
        var lines: Int = 10

        @Flag(name: .long, help: "Print what is there and exit.")
        var noFollow = false

        @Flag(name: .long, help: "One JSON object per decision.")
        var json = false

        func run() throws {
            let dir = StatePaths.directory
            mkdir(dir, 0o700)
            // Watch the directory first, so nothing written between the read and the wait is missed.
            let fd = inotify_init1(Int32(IN_CLOEXEC))
            // audit.sqlite.changed is closed after each commit (see AuditLog.append): that is the event.
            if fd >= 0 { inotify_add_watch(fd, dir, UInt32(IN_CLOSE_WRITE)) }
            defer { if fd >= 0 { close(fd) } }
            var lastID: Int64 = 0
            var audit: AuditLog?
            func drain(initial: Bool) throws {
                // Read-write on purpose: a read-only connection opened while no writer has the database open
                // gets a private WAL index and never sees later commits.
                if audit == nil, access(dir + "/audit.sqlite", R_OK) == 0 { audit = try StatePaths.openAudit(dir, readOnly: false) }
                guard let a = audit else { return }
                var es = try a.entries(after: lastID)
                if initial { es = Array(es.suffix(max(0, lines))) }
                for e in es {
                    print(json ? entryJSON(e).rendered : "\(Story.clock(e.time)) \(e.taskID) \(e.event)\(e.verdict.map { " (\($0))" } ?? ""): \(e.detail)")
                    lastID = max(lastID, e.id ?? 0)
                }
            }
            try drain(initial: true)
            guard !noFollow else { return }
            guard fd >= 0 else {
                fputs("bgtask: cannot follow \(dir): inotify: \(String(cString: strerror(errno)))\n", stderr)
                throw ExitCode(1)
            }
            var buf = [UInt8](repeating: 0, count: 4096)
            while read(fd, &buf, buf.count) > 0 { try drain(initial: false) }
        }
    }
}
