@testable import BgtaskRun
import Foundation
import Testing

/// A file of `pages` pages, each filled with its own number, mapped privately with `protection`.
final class MappedFile {
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("bgtask-map-\(UUID().uuidString)").path
    let size: Int
    let base: UnsafeMutableRawPointer

    init(pages: Int, protection: Int32) throws {
        size = pages * 4096
        var data = Data(count: size)
        for p in 0..<pages { data.replaceSubrange(p * 4096..<(p + 1) * 4096, with: Data(repeating: UInt8(p % 251), count: 4096)) }
        try data.write(to: URL(fileURLWithPath: path))
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw POSIXError(.EIO) }
        defer { close(fd) }
        // Writable mappings of a read-only descriptor are allowed when private (copies, never the file).
        guard let m = mmap(nil, size, protection, MAP_PRIVATE, fd, 0), m != MAP_FAILED else { throw POSIXError(.ENOMEM) }
        base = m
    }

    deinit {
        munmap(base, size)
        unlink(path)
    }

    func byte(page: Int) -> UInt8 { base.load(fromByteOffset: page * 4096 + 7, as: UInt8.self) }
    func touchAll() -> Int { (0..<size / 4096).reduce(0) { $0 + Int(byte(page: $1)) } }

    /// Its resident kilobytes, from this process's smaps (read with stdio: /proc files have no size to read up to).
    var residentKB: Int {
        guard let f = fopen("/proc/self/smaps", "re") else { return -1 }
        defer { fclose(f) }
        var line: UnsafeMutablePointer<CChar>?
        var capacity = 0
        defer { free(line) }
        var inside = false
        while getline(&line, &capacity, f) > 0, let l = line {
            let text = String(cString: l)
            if let m = Memory.Mapping(header: text) { inside = m.start == Int(bitPattern: base); continue }
            if inside, text.hasPrefix("Rss:") { return Int(text.split(separator: " ")[1]) ?? -1 }
        }
        return -1
    }
}

/// One at a time: `releaseStartupPages` reads the whole process's mappings, then drops those it found. A test beside
/// it that unmapped its file and mapped another at the same address in between had a page it wrote dropped (CI, once).
@Suite("what a waiting process gives back", .serialized)
struct MemoryTests {
    @Test("once the heap keeps what it frees, buffers of 1 to 30 MB come from the heap, not from mappings of their own")
    func bigBuffersComeFromTheHeap() throws {
        // glibc marks a chunk it mapped on its own with bit 1 (IS_MMAPPED) of the size word just before it.
        func mapped(_ p: UnsafeMutableRawPointer) -> Bool { (p - MemoryLayout<UInt>.size).load(as: UInt.self) & 2 != 0 }
        // (glibc's default maps each buffer over 128 KB on its own, until it has freed a bigger mapped one; 30 MB is
        // more than this process frees in one piece elsewhere.)
        Memory.keepFreedHeapUntilQuiet()
        for size in [1 << 20, 2_500 * 650, 16 << 20, 30 << 20] {
            let p = try #require(malloc(size))
            #expect(!mapped(p), "\(size) bytes mapped on their own")
            free(p)
        }
    }

    @Test("a read-only file mapping nothing copied is unmapped, and reads the same afterwards")
    func readOnlyPagesAreDroppedAndReadBack() throws {
        let f = try MappedFile(pages: 64, protection: PROT_READ)
        let sum = f.touchAll()
        #expect(f.residentKB >= 64 * 4)
        let released = Memory.releaseStartupPages()
        #expect(released >= 64 * 4)
        #expect(f.residentKB == 0)
        #expect(f.touchAll() == sum)
    }

    @Test("a read-only mapping with a page written before it was made read-only keeps what was written (RELRO's case)")
    func copiedPagesAreKept() throws {
        let f = try MappedFile(pages: 16, protection: PROT_READ | PROT_WRITE)
        _ = f.touchAll()
        f.base.storeBytes(of: 0xEE, toByteOffset: 3 * 4096 + 7, as: UInt8.self)
        #expect(mprotect(f.base, f.size, PROT_READ) == 0)
        Memory.releaseStartupPages()
        #expect(f.byte(page: 3) == 0xEE)
        #expect(f.byte(page: 4) == 4)
        #expect(f.residentKB > 0)
    }

    @Test("a writable file mapping is never dropped, even with no page copied yet")
    func writableMappingsAreLeftAlone() throws {
        let f = try MappedFile(pages: 8, protection: PROT_READ | PROT_WRITE)
        let sum = f.touchAll()
        Memory.releaseStartupPages()
        #expect(f.residentKB == 8 * 4)
        #expect(f.touchAll() == sum)
    }

    @Test("smaps headers: paths with spaces, deleted files, anonymous and writable mappings", arguments: [
        ("7f00a000-7f00b000 r-xp 00000000 fe:00 12 /usr/lib/lib x.so", true),
        ("7f00a000-7f00b000 r--s 00000000 fe:00 12                    /var/cache/hwdb.bin", true),
        ("7f00a000-7f00b000 r--p 00000000 fe:00 12 /tmp/gone (deleted)", false),
        ("7f00a000-7f00b000 rw-p 00000000 fe:00 12 /usr/lib/libc.so.6", false),
        ("7f00a000-7f00b000 r--p 00000000 00:00 0 ", false),
        ("7ffd000-7ffe000 r-xp 00000000 00:00 0                  [vdso]", false),
    ])
    func headers(line: String, readOnlyFile: Bool) throws {
        let m = try #require(Memory.Mapping(header: line))
        #expect(m.start == 0x7f00a000 || m.start == 0x7ffd000)
        #expect(m.readOnlyFile == readOnlyFile)
    }

    @Test("field lines are not headers, and copies or locks make a mapping stay")
    func fields() throws {
        #expect(Memory.Mapping(header: "Rss:                 120 kB") == nil)
        #expect(Memory.Mapping(header: "VmFlags: rd ex mr mw me") == nil)
        var m = try #require(Memory.Mapping(header: "1000-3000 r-xp 00000000 fe:00 12 /usr/bin/x"))
        m.read(field: "Rss:                   8 kB")
        #expect(m.droppable)
        m.read(field: "Swap:                  4 kB")
        #expect(!m.droppable)
        var l = try #require(Memory.Mapping(header: "1000-3000 r-xp 00000000 fe:00 12 /usr/bin/x"))
        l.read(field: "Rss:                   8 kB")
        l.read(field: "VmFlags: rd ex mr mw me lo")
        #expect(!l.droppable)
    }

    @Test("a quiet spell gives back once, after 30 s of quiet; activity starts the count again, a new spell gives back again, and so does a large reply")
    func quietSpellInVirtualTime() {
        var q = Memory.QuietSpell(after: 30)
        func gives(quiet: Bool, now: Double) -> Bool { q.observe(quiet: quiet, now: now) }
        #expect(q.deadline == nil)
        #expect(!gives(quiet: true, now: 100))
        #expect(q.deadline == 130)
        #expect(!gives(quiet: true, now: 129.9))
        #expect(gives(quiet: true, now: 130))
        #expect(q.deadline == nil)
        #expect(!gives(quiet: true, now: 500))          // once per spell
        #expect(!gives(quiet: false, now: 501))         // a task runs
        #expect(q.deadline == nil)
        #expect(!gives(quiet: true, now: 510))
        #expect(!gives(quiet: false, now: 520))         // runs again before the spell is long enough
        #expect(!gives(quiet: true, now: 545))
        #expect(q.deadline == 575)
        #expect(!gives(quiet: true, now: 574))
        #expect(gives(quiet: true, now: 575.5))
        // A large reply while quiet (given back already): once more, 30 s after it, if it stays quiet.
        q.rearm(now: 600)
        #expect(q.deadline == 630)
        #expect(!gives(quiet: true, now: 629))
        #expect(gives(quiet: true, now: 630))
        #expect(!gives(quiet: true, now: 700))
    }
}
