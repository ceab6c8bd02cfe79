#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskPolicy
import CLinux

/// What a process that waits for hours gives back once it has started: the heap freed by start-up, and the
/// start-up code's pages.
public enum Memory {
    /// How long a process must have been quiet (everything waiting, nothing running) before it gives back what
    /// start-up used. Not at once: the code that runs next then faults its pages back in, which cost the first
    /// reaction about 5 ms here (docs/benchmarks.md) — an event right after start, the common case of a charger
    /// plugged in as a backup is started, keeps the pages; a run that waits for the evening pays it once.
    public static let settleSeconds = 30.0

    /// When a process gives back what it used: once per quiet spell (everything waiting in `bgtask run`, nothing
    /// running in bgtaskd) that has lasted `settleSeconds`. Pure; the loops give it the clock.
    public struct QuietSpell: Sendable {
        public let after: Double
        var since: Double?
        var released = false

        public init(after: Double = Memory.settleSeconds) { self.after = after }

        /// Whether to give back now; `quiet` says whether the process is quiet at `now`.
        public mutating func observe(quiet: Bool, now: Double) -> Bool {
            guard quiet else {
                since = nil
                released = false
                return false
            }
            let start = since ?? now
            since = start
            guard !released, now - start >= after else { return false }
            released = true
            return true
        }

        /// Something large was just made and freed while quiet (bgtaskd's reply listing thousands of tasks: 60 MB
        /// that glibc keeps): give back again once `after` more seconds have stayed quiet.
        public mutating func rearm(now: Double) {
            since = now
            released = false
        }

        /// When the loop must wake for it (nil: nothing due).
        public var deadline: Double? { released ? nil : since.map { $0 + after } }
    }

    /// Keeps what the heap frees until the process is quiet, where glibc would give it back at once: buffers of
    /// 1 MB or more (a page of a listing, 2,500 tasks of it) then come back as heap already faulted in, not as a new
    /// mapping whose every page the kernel zeroes and charges again (7 % of bgtaskd's CPU over a long listing). What
    /// was kept goes back with `releaseFreedHeap` once the process has settled, as everything else start-up used.
    public static func keepFreedHeapUntilQuiet() {
        // 32 MB, glibc's own bound for its sliding threshold; the trim threshold above anything a call makes.
        _ = mallopt(M_MMAP_THRESHOLD, 32 << 20)
        _ = mallopt(M_TRIM_THRESHOLD, 256 << 20)
    }

    /// Gives freed heap pages back to the kernel. After a burst of short-lived allocations (a queue of thousands
    /// taken up at start) glibc keeps the pages, and a daemon that then waits for hours would carry them as RSS.
    public static func releaseFreedHeap() {
        _ = malloc_trim(0)
    }

    /// Unmaps the pages of read-only file mappings (the binary's code and constants, the libraries') that nothing
    /// has copied: start-up touches about 14 MB of a 30 MB binary — argument parsing, the policy compiler, TOML,
    /// Foundation's and the Swift runtime's set-up — and the kernel maps 64 KB around each page touched. None of
    /// that runs again while a task waits. The pages stay in the page cache (clean, the first the kernel reclaims);
    /// what runs next faults its pages back in from there. Called when the process has settled into waiting.
    ///
    /// Only mappings that cannot have been written are dropped: not writable, backed by a file, with no private
    /// (copied-on-write) page — there `MADV_DONTNEED` means "read it from the file again", which gives back what
    /// was there. A writable mapping, or a read-only one with copies (RELRO: relocated, then made read-only),
    /// would lose its contents, and is left alone. Returns the kilobytes unmapped.
    @discardableResult
    public static func releaseStartupPages() -> Int {
        guard let f = fopen("/proc/self/smaps", "re") else { return 0 }
        defer { fclose(f) }
        var released = 0
        var current: Mapping?
        // Read to the end first, drop after: the parsing is code too, and each page of it touched after the
        // binary's text was dropped would be faulted in again with 64 KB around it (2.8 MB of bgtaskd's text was).
        var drop: [Mapping] = []
        drop.reserveCapacity(64)
        func finish(_ m: Mapping?) {
            if let m, m.droppable { drop.append(m) }
        }
        var line: UnsafeMutablePointer<CChar>?
        var capacity = 0
        defer { free(line) }
        while getline(&line, &capacity, f) > 0, let l = line {
            let text = String(cString: l).trimmingCharacters(in: "\n")
            if let m = Mapping(header: text) {
                finish(current)
                current = m
            } else {
                current?.read(field: text)
            }
        }
        finish(current)
        for m in drop where madvise(UnsafeMutableRawPointer(bitPattern: m.start), m.end - m.start, MADV_DONTNEED) == 0 {
            released += m.rssKB
        }
        return released
    }

    /// One mapping of `/proc/self/smaps`: its header line and the fields that decide whether it may be dropped.
    struct Mapping {
        let start: Int
        let end: Int
        let readOnlyFile: Bool
        var rssKB = 0
        var copiedKB = 0
        var locked = false

        /// `start-end perms offset dev inode [path]`; nil for a field line.
        init?(header: String) {
            let parts = header.split(separator: " ", maxSplits: 5, omittingEmptySubsequences: true)
            guard parts.count >= 5, let dash = parts[0].firstIndex(of: "-"),
                  let s = Int(parts[0][..<dash], radix: 16), let e = Int(parts[0][parts[0].index(after: dash)...], radix: 16),
                  parts[1].count == 4 else { return nil }
            start = s
            end = e
            let path = parts.count > 5 ? String(parts[5]).trimmingCharacters(in: " ") : ""
            readOnlyFile = !parts[1].contains("w") && path.hasPrefix("/") && !path.hasSuffix(" (deleted)")
        }

        mutating func read(field: String) {
            func kB() -> Int { Int(field.split(separator: " ").dropFirst().first ?? "") ?? 0 }
            if field.hasPrefix("Rss:") { rssKB = kB() }
            // Copies are anonymous pages, resident or swapped. (Private_Dirty also counts the file's own pages
            // not yet written back — a binary just built — which the page cache keeps through an unmap.)
            else if field.hasPrefix("Anonymous:") || field.hasPrefix("Swap:") { copiedKB += kB() }
            else if field.hasPrefix("VmFlags:") { locked = field.split(separator: " ").contains { $0 == "lo" } }
        }

        var droppable: Bool { readOnlyFile && rssKB > 0 && copiedKB == 0 && !locked }
    }
}
