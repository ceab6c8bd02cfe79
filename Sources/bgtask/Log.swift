import ArgumentParser
import BgtaskAudit
import BgtaskConfig
import BgtaskProbes
import BgtaskProbes
#if canImport(Glibc)
@preconcurrency import Glibc
#endif

extension Bgtask {
    struct Log: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "log",
            abstract: "Print the recent decisions, for any task; on a terminal (or with -f) keep printing them as they are made.",
            discussion: """
            Following is woken by the audit database changing, not by polling. As journalctl does with -f: when \
            stdout is not a terminal (a pipe, a file, a script), the decisions there are printed and log exits \
            unless -f is given.
            """)

        @Option(name: [.customShort("n"), .long], help: ArgumentHelp("Show this many earlier decisions first.", valueName: "n"))
        var lines: Int = 10

        @Flag(name: .long, help: "Print what is there and exit, even on a terminal.")
        var noFollow = false

        @Flag(name: [.customShort("f"), .long], help: "Keep printing decisions as they are made, even into a pipe.")
        var follow = false

        @Flag(name: .long, help: "One JSON object per decision.")
        var json = false

        func validate() throws {
            if lines < 0 { throw ValidationError("-n \(lines): a number of lines, 0 or more") }
            if follow && noFollow { throw ValidationError("-f and --no-follow exclude each other") }
        }

        func run() throws {
            let dir: String
            do { dir = try StatePaths.preparedStateDirectory() } catch {
                err("state directory: \(error)")
                throw ExitCode(ExitStatus.cantCreate)
            }
            State.recover(probe: ProbeOptions(root: SysfsRoot.fromEnvironment()), audit: nil, quiet: false)
            // Watch the directory first, so nothing written between the read and the wait is missed.
            // audit.sqlite.changed is closed after each commit (see AuditLog.append): that is the event.
            let following = follow || (!noFollow && isatty(STDOUT_FILENO) == 1)
            var fd: Int32 = -1
            if following {
                fd = inotify_init1(Int32(IN_CLOEXEC))
                guard fd >= 0, inotify_add_watch(fd, dir, UInt32(IN_CLOSE_WRITE)) >= 0 else {
                    err("cannot follow \(dir): inotify: \(String(cString: strerror(errno)))")
                    if fd >= 0 { close(fd) }
                    throw ExitCode(ExitStatus.failure)
                }
            }
            defer { if fd >= 0 { close(fd) } }
            var lastID: Int64 = 0
            var audit: AuditLog?
            func show(_ e: AuditEntry) {
                print(json ? e.json.rendered
                      : Terminal.safe("\(Story.clock(e.time)) \(e.taskID) \(e.event)\(e.verdict.map { " (\($0))" } ?? ""): \(e.detail)\(e.energy.map { "; \($0)" } ?? "")"))
                lastID = max(lastID, e.id ?? 0)
            }
            func drain(initial: Bool) throws {
                // Read-write on purpose: a read-only connection opened while no writer has the database open
                // gets a private WAL index and never sees later commits.
                if audit == nil, access(dir + "/" + StatePaths.auditFile, F_OK) == 0 {
                    do { audit = try AuditLog(path: dir + "/" + StatePaths.auditFile) } catch {
                        err("audit trail \(error)")
                        throw ExitCode(ExitStatus.failure)
                    }
                }
                guard let a = audit else { return }
                if initial {
                    // The tail only: the table may hold 100,000 entries; -n 0 starts at the newest.
                    lastID = try a.lastID()
                    try a.tail(lines).forEach(show)
                } else {
                    try a.entries(after: lastID).forEach(show)
                }
            }
            try drain(initial: true)
            guard following else { return }
            var buf = [UInt8](repeating: 0, count: 4096)
            while true {
                let n = read(fd, &buf, buf.count)
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { break }
                // A database created after we started is read from its first entry: all of it is new.
                try drain(initial: false)
            }
        }
    }
}
