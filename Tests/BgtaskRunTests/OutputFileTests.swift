@testable import BgtaskRun
import Foundation
import Testing

/// Where the tests cut files: this machine's temporary directory, and tmpfs (no COLLAPSE_RANGE, so the
/// hole-punching path) when there is one.
private let directories: [String] = [FileManager.default.temporaryDirectory.path] + (FileManager.default.fileExists(atPath: "/dev/shm") ? ["/dev/shm"] : [])

@Suite("a running task's output file, cut back while it is written")
struct OutputFileTests {
    /// Appends `count` numbered lines of 9 bytes ("%08d\n") through O_APPEND, as a command's stdout does.
    private static func appendLines(_ path: String, count: Int) {
        let fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC)
        precondition(fd >= 0)
        defer { close(fd) }
        var chunk = [UInt8]()
        for n in 0..<count {
            chunk += Array(String(format: "%08d\n", n).utf8)
            if chunk.count >= 4500 || n == count - 1 {
                _ = chunk.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
                chunk.removeAll(keepingCapacity: true)
            }
        }
    }

    /// The numbered lines in the file's last `bytes` (a punched hole's zeros and the first, partial line left out).
    private static func lastLines(_ path: String, bytes: Int = OutputFile.maxBytes) throws -> [Int] {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        try #require(fd >= 0)
        defer { close(fd) }
        var st = stat()
        try #require(fstat(fd, &st) == 0)
        var buf = [UInt8](repeating: 0, count: bytes)
        let n = pread(fd, &buf, buf.count, max(0, st.st_size - off_t(bytes)))
        try #require(n >= 0)
        let held = buf[0..<n].drop { $0 == 0 }
        let lines = String(decoding: held, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false)
        return lines.dropFirst().dropLast().map { Int($0) ?? -1 }
    }

    @Test("a cut while a writer appends loses none of its lines, and the file's blocks stay bounded", arguments: directories)
    func cutLosesNothingWrittenMeanwhile(directory: String) throws {
        let path = directory + "/bgtask-out-\(UUID().uuidString)"
        #expect(FileManager.default.createFile(atPath: path, contents: nil))
        defer { unlink(path) }
        let total = 700_000   // 6.3 MB, three times the bound
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            Self.appendLines(path, count: total)
            done.signal()
        }
        var cuts = 0, gaps: [String] = []
        var mostBlocks: Int64 = 0
        while done.wait(timeout: .now()) == .timedOut {
            // All the file holds (at most 2 MiB and what came since the last look): what the writer appended
            // during a cut that copied would be missing, later lines going on after the gap.
            let seen = try Self.lastLines(path, bytes: 6 << 20)
            if let first = seen.first, seen != Array(first..<first + seen.count) { gaps.append("before cut \(cuts + 1)") }
            if OutputFile.bound(path) { cuts += 1 }
            var st = stat()
            if stat(path, &st) == 0 { mostBlocks = max(mostBlocks, Int64(st.st_blocks) * 512) }
        }
        OutputFile.dropFront(path)
        #expect(cuts > 0)
        #expect(gaps.isEmpty, "lines lost: \(gaps)")
        // Cut at 2 MiB to 1 MiB: between two looks the writer adds at most what one loop turn lets it.
        #expect(mostBlocks < 4 << 20, "\(mostBlocks) bytes allocated")
        let lines = try Self.lastLines(path)
        #expect(lines.last == total - 1)
        // Every line from the first kept one to the last: a cut that copied could drop what came meanwhile.
        let first = try #require(lines.first)
        #expect(lines == Array(first..<total), "a gap in \(lines.count) lines from \(first)")
        #expect(total - first >= OutputFile.maxBytes / 9 - 1)
    }

    @Test("a file under the limit is left as it is; a cut keeps its last 1 MiB and up to one block more", arguments: directories)
    func cutKeepsTheTail(directory: String) throws {
        let path = directory + "/bgtask-out-\(UUID().uuidString)"
        #expect(FileManager.default.createFile(atPath: path, contents: nil))
        defer { unlink(path) }
        Self.appendLines(path, count: 200_000)   // 1.8 MB
        #expect(!OutputFile.bound(path))
        #expect(OutputFile.dropFront(path))
        var st = stat()
        #expect(stat(path, &st) == 0)
        #expect(Int64(st.st_blocks) * 512 <= Int64(OutputFile.maxBytes) + 2 * Int64(st.st_blksize))
        let lines = try Self.lastLines(path)
        #expect(lines.count >= OutputFile.maxBytes / 9 - 1)
        #expect(lines == Array(200_000 - lines.count..<200_000))
        #expect(!OutputFile.dropFront(path))   // now under the limit
    }
}

@Suite("the output file made ahead of a start")
struct SpareOutputFileTests {
    private static func directory() throws -> String {
        let d = FileManager.default.temporaryDirectory.appendingPathComponent("bgtask-spare-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: d, withIntermediateDirectories: false)
        return d
    }

    private static func inode(_ fd: Int32) -> ino_t? {
        var st = stat()
        return fstat(fd, &st) == 0 ? st.st_ino : nil
    }

    @Test("the spare becomes the run's output file: that very inode, named, 0600, appended to; the next start makes its own")
    func spareIsNamed() throws {
        let d = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: d) }
        OutputFile.prepareSpare(in: d)
        let spare = try #require(OutputFile.spares.withLock { $0[d] }, "no O_TMPFILE here")
        let made = Self.inode(spare)
        let fd = try OutputFile.open(d + "/a.log")
        #expect(Self.inode(fd) == made)
        #expect(OutputFile.spares.withLock { $0[d] } == nil)
        _ = write(fd, "one\n", 4)
        _ = lseek(fd, 0, SEEK_SET)   // O_APPEND: the next write still goes to the end
        _ = write(fd, "two\n", 4)
        close(fd)
        var st = stat()
        #expect(lstat(d + "/a.log", &st) == 0)
        #expect(st.st_mode & S_IFMT == S_IFREG && st.st_mode & 0o077 == 0 && st.st_nlink == 1)
        #expect(try String(contentsOfFile: d + "/a.log", encoding: .utf8) == "one\ntwo\n")
        // No spare: the file is created where it is opened, as before.
        let second = try OutputFile.open(d + "/b.log")
        close(second)
        #expect(FileManager.default.fileExists(atPath: d + "/b.log"))
    }

    @Test("a link or a FIFO planted at the output's name is neither replaced nor followed; the spare is dropped")
    func plantedNamesAreRefused() throws {
        let d = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: d) }
        let target = d + "/target"
        #expect(FileManager.default.createFile(atPath: target, contents: Data("kept\n".utf8)))
        #expect(symlink(target, d + "/link.log") == 0)
        #expect(mkfifo(d + "/fifo.log", 0o600) == 0)
        for name in ["link.log", "fifo.log"] {
            OutputFile.prepareSpare(in: d)
            #expect(throws: SpawnError.self) { try OutputFile.open(d + "/" + name) }
            #expect(OutputFile.spares.withLock { $0[d] } == nil)
        }
        #expect(try String(contentsOfFile: target, encoding: .utf8) == "kept\n")
        var st = stat()
        #expect(lstat(d + "/link.log", &st) == 0 && st.st_mode & S_IFMT == S_IFLNK)
    }

    @Test("a spare is used only for a file in its own directory")
    func spareStaysInItsDirectory() throws {
        let d = try Self.directory(), other = try Self.directory()
        defer { try? FileManager.default.removeItem(atPath: d); try? FileManager.default.removeItem(atPath: other) }
        OutputFile.prepareSpare(in: d)
        let spare = try #require(OutputFile.spares.withLock { $0[d] }, "no O_TMPFILE here")
        let made = Self.inode(spare)
        let fd = try OutputFile.open(other + "/a.log")
        defer { close(fd) }
        #expect(Self.inode(fd) != made)
        #expect(OutputFile.spares.withLock { $0[d] } == spare)
    }
}
