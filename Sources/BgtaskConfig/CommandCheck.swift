#if canImport(Glibc)
@preconcurrency import Glibc
#endif

/// What execve(2) and the exec path refuse of a command, checked where a command is accepted (`bgtask run` and
/// `submit`, bgtaskd's Submit), so that it is refused at once, with its reason, and not at every start of it —
/// a nightly job would otherwise fail the next morning, and every morning after.
public enum CommandCheck {
    /// MAX_ARG_STRLEN: one argument (or environment string) of execve, its NUL included, is at most 32 pages;
    /// longer, execve fails with E2BIG whatever the total is. 32 pages of the machine's size (4 KiB on x86-64:
    /// 131,072 bytes), as the kernel counts them.
    public static var maxArgumentBytes: Int { 32 * max(4096, Int(sysconf(Int32(_SC_PAGESIZE)))) }

    /// The first word of `argv` over MAX_ARG_STRLEN, said with its index (0 is the command) and its size.
    public static func oversizeArgument(_ argv: [String]) -> String? {
        let most = maxArgumentBytes
        guard let i = argv.firstIndex(where: { $0.utf8.count + 1 > most }) else { return nil }
        return "argument \(i) of the command is \(argv[i].utf8.count) bytes: the kernel takes at most \(most - 1) in one "
            + "argument (MAX_ARG_STRLEN, \(most / 1024) KiB with its NUL), so it could never start; pass it in a file instead"
    }

    /// The file a command's first word runs, as execvp and systemd would find it: a word with a slash is a path
    /// (relative to `directory`, else this process's working directory); a bare name is looked up in `path`'s
    /// directories in order (an empty entry is the working directory). `errno` is ENOENT when there is none,
    /// EACCES when one was found but is not a regular file this user may execute.
    public static func executable(_ command: String, directory: String?, path: String) -> (path: String?, errno: Int32) {
        func runnable(_ p: String) -> Int32 {
            var st = stat()
            guard stat(p, &st) == 0 else { return ENOENT }
            guard (st.st_mode & S_IFMT) == S_IFREG, access(p, X_OK) == 0 else { return EACCES }
            return 0
        }
        if command.contains("/") {
            let p = command.hasPrefix("/") ? command : (directory ?? currentDirectory()) + "/" + command
            let e = runnable(p)
            return (e == 0 ? p : nil, e)
        }
        var found: Int32 = ENOENT
        for d in path.split(separator: ":", omittingEmptySubsequences: false) {
            let p = (d.isEmpty ? "." : String(d)) + "/" + command
            let e = runnable(p)
            if e == 0 { return (p, 0) }
            if e == EACCES { found = EACCES }
        }
        return (nil, found)
    }

    /// Why `command` cannot be run from `directory` with `path` (nil: it can), worded for the person who gave it.
    public static func notRunnable(_ command: String, directory: String?, path: String) -> String? {
        let (found, e) = executable(command, directory: directory, path: path)
        if found != nil { return nil }
        if command.contains("/") {
            let relative = command.hasPrefix("/") ? "" : " (relative to \(directory ?? currentDirectory()))"
            return "command \(command)\(relative) " + (e == EACCES ? "is not an executable file this user may run" : "does not exist")
        }
        return "command \(command) " + (e == EACCES ? "is in PATH but not executable by this user" : "is not found in PATH")
            + " (PATH=\(path))"
    }

    /// PATH as a command started by this process would search it (execvp's default when it is unset).
    public static var searchPath: String { Environment.get("PATH") ?? "/usr/bin:/bin" }

    public static func currentDirectory() -> String {
        guard let cwd = getcwd(nil, 0) else { return "/" }
        defer { free(cwd) }
        return String(cString: cwd)
    }
}
