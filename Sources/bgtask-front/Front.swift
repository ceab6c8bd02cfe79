// `bgtask`: the command people and scripts type. A plain `bgtask submit` is one call on the session bus made here; every other
// command, and any submit this does not fully understand, is handed unchanged (argv and all) to the full CLI,
// `bgtask-cli`, which parses, validates and words every message as it always has.
//
// Embedded Swift, built without the Swift runtime: the full CLI's start (a 60 MB binary, GLib, the runtime's
// conformance scan, ArgumentParser) took 7 ms before its first word was read; this starts as a C program does.
// docs/architecture.md ("The front") and docs/benchmarks.md (the `bgtask submit` row).
//
// What keeps the two in step: this acts only on words whose meaning it knows exactly (a subset of submit's options,
// an identifier of plain characters); on anything else, and on any refusal from bgtaskd (an error reply means
// nothing was queued), it hands over, and the full CLI does the whole submit again and says what it says.
import CFront

@main
struct Front {
    static func main() {
        bgt_front_ignore_sigpipe()   // as the CLI: a reader that left gets EPIPE, not a killed process
        var words = Arguments()
        words.withArgv { argc, argv in
            if argc > 1, let verb = argv[1], strcmp(verb, "submit") == 0, var request = SubmitWords(argc: argc, argv: argv) {
                request.send()
            }
            handOver(argv)
        }
    }

    /// Runs the full CLI in this process, with the same arguments: `bgtask-cli` in `PREFIX/libexec/bgtask/` where
    /// installed, else beside this program (a build tree). Never returns.
    static func handOver(_ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> Never {
        let size = Int(PATH_MAX) + 64
        var dir = [CChar](repeating: 0, count: size)
        let n = readlink("/proc/self/exe", &dir, Int(PATH_MAX))
        guard n > 0, let slash = strrchr(dir, Int32(UInt8(ascii: "/"))) else {
            fail("cannot find bgtask-cli: /proc/self/exe cannot be read (", UnsafePointer(strerror(bgt_front_errno()))!, ")", 127)
        }
        let base = dir.withUnsafeBufferPointer { slash - UnsafeMutablePointer(mutating: $0.baseAddress!) } + 1
        for tail: StaticString in ["../libexec/bgtask/bgtask-cli", "bgtask-cli"] {
            var path = dir
            path.withUnsafeMutableBufferPointer { p in
                _ = strcpy(p.baseAddress! + base, SubmitWords.c(tail))
            }
            if access(path, X_OK) == 0 {
                execv(path, argv)
                let why = bgt_front_errno()
                path.withUnsafeBufferPointer { fail("cannot run ", $0.baseAddress!, ": ", 126, then: UnsafePointer(strerror(why))!) }
            }
        }
        dir[base] = 0
        dir.withUnsafeBufferPointer {
            fail("cannot find bgtask-cli in ", $0.baseAddress!, "../libexec/bgtask/ or beside this program (build it: make, or swift build --product bgtask-cli)", 127)
        }
    }

    /// `bgtask: HEAD WHAT TAIL[THEN]` on stderr, then the exit status: what the front says when it cannot hand over.
    static func fail(_ head: StaticString, _ what: UnsafePointer<CChar>, _ tail: StaticString, _ status: Int32,
                     then more: UnsafePointer<CChar>? = nil) -> Never {
        var o = Output()
        o.add("bgtask: "); o.add(head); o.printable(what); o.add(tail)
        if let more { o.printable(more) }
        o.add("\n")
        o.write(to: 2)
        exit(status)
    }
}

/// This process's arguments, from `/proc/self/cmdline` (Embedded Swift has no `CommandLine`): the kernel's copy of
/// argv, NUL after each word.
struct Arguments {
    var bytes: [CChar] = []

    init() {
        let fd = bgt_front_open_read("/proc/self/cmdline")
        guard fd >= 0 else { return }
        var chunk = [CChar](repeating: 0, count: 65536)
        while true {
            let n = chunk.withUnsafeMutableBufferPointer { read(fd, $0.baseAddress!, $0.count) }
            if n < 0 && bgt_front_errno() == EINTR { continue }
            if n <= 0 { break }
            bytes.append(contentsOf: chunk[0..<n])
        }
        close(fd)
        if bytes.last != 0 { bytes.append(0) }
    }

    /// argv as C has it (argc words and a NULL), valid inside `body`.
    mutating func withArgv(_ body: (Int, UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> Void) {
        bytes.withUnsafeMutableBufferPointer { b in
            var argv: [UnsafeMutablePointer<CChar>?] = []
            var start = 0
            for i in 0..<b.count where b[i] == 0 {
                argv.append(b.baseAddress! + start)
                start = i + 1
            }
            let argc = argv.count
            argv.append(nil)
            argv.withUnsafeMutableBufferPointer { body(argc, $0.baseAddress!) }
        }
    }
}
