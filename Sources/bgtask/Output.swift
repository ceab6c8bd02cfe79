import ArgumentParser
import BgtaskConfig
import BgtaskRun
#if canImport(Glibc)
@preconcurrency import Glibc
#endif

extension Bgtask {
    struct Output: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "output",
            abstract: "Print the stdout and stderr of a daemon task's last run (at most its last 1 MiB).",
            discussion: "A run that bgtaskd started as a systemd unit wrote to the journal: its output is read with journalctl --user -u UNIT.")

        @Flag(name: .long, help: "The run before the last.")
        var previous = false

        @Argument(help: ArgumentHelp("The task's id.", valueName: "id"), completion: TaskIDCompletion.kind)
        var id: String

        func run() throws {
            let dir: String
            do { dir = try StatePaths.stateDirectory(); try SecureDirectory.verify(dir) } catch {
                err("state directory \(error)")
                throw ExitCode(ExitStatus.failure)
            }
            let path = StatePaths.outputFile(stateDirectory: dir, id: id) + (previous ? ".1" : "")
            if let unit = OutputFile.unit(of: path) { journal(unit) }
            let fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
            guard fd >= 0 else {
                err("no output kept for \(id) (\(path): \(String(cString: strerror(errno))))")
                throw ExitCode(ExitStatus.failure)
            }
            defer { close(fd) }
            var st = stat()
            guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else {
                err("\(path) is not a regular file")
                throw ExitCode(ExitStatus.failure)
            }
            // The last 1 MiB, as the help says (a run still writing may have more until it is cut back).
            if st.st_size > off_t(OutputFile.maxBytes) { _ = lseek(fd, st.st_size - off_t(OutputFile.maxBytes), SEEK_SET) }
            var buf = [UInt8](repeating: 0, count: 65_536)
            while true {
                let n = read(fd, &buf, buf.count)
                if n <= 0 { break }
                _ = buf.withUnsafeBytes { fwrite($0.baseAddress, 1, n, stdout) }
            }
            fflush(stdout)
        }

        /// The run was a transient unit: its output is the journal's, read by journalctl (which replaces this process).
        func journal(_ unit: String) -> Never {
            err("\(id) ran as the systemd unit \(unit); its output is in the journal (journalctl --user -u \(unit))")
            fflush(stderr)
            let argv = ["journalctl", "--user", "-u", unit, "-o", "cat", "--no-pager"]
            let c = argv.map { strdup($0) } + [nil]
            execvp("journalctl", c)
            err("cannot run journalctl: \(String(cString: strerror(errno)))")
            Glibc.exit(ExitStatus.failure)
        }
    }
}
