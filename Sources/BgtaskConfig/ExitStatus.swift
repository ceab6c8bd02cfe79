import BgtaskProbes

/// Every exit status bgtask gives, in one place (sysexits.h names where one fits).
public enum ExitStatus {
    public static let ok: Int32 = 0
    /// A check failed (`policy check` found errors, `why` found no record).
    public static let failure: Int32 = 1
    /// Usage errors, as Unix tools do (ArgumentParser's own default is EX_USAGE, 64).
    public static let usage: Int32 = 2
    /// EX_UNAVAILABLE: a service bgtask needs is not there.
    public static let unavailable: Int32 = 69
    /// EX_SOFTWARE: an internal error.
    public static let software: Int32 = 70
    /// EX_CANTCREAT: the audit trail or a state directory cannot be written.
    public static let cantCreate: Int32 = 73
    /// EX_TEMPFAIL: gave up waiting, or the command was expired by bgtask.
    public static let tempFail: Int32 = 75
    /// EX_CONFIG: the policy does not load.
    public static let config: Int32 = 78
    /// The command cannot be executed / was not found, as shells say.
    public static let cannotExecute: Int32 = 126
    public static let notFound: Int32 = 127
}

/// Text from outside (sysfs names, a policy's reason, a command line) made safe to print to a terminal:
/// control characters, which could move the cursor, retitle the window or hide text, and the invisible ones
/// that reorder or hide what is read (`Printable`), are shown escaped.
public enum Terminal {
    public static func safe(_ s: String, keepNewlines: Bool = false) -> String {
        var out = ""
        out.unicodeScalars.reserveCapacity(s.unicodeScalars.count)
        for u in s.unicodeScalars {
            let v = u.value
            if v == 0x09 {
                out += " "
            } else if keepNewlines && v == 0x0A {
                out.unicodeScalars.append(u)
            } else if Printable.isHidden(u) {
                out += Printable.escaped(u)
            } else {
                out.unicodeScalars.append(u)
            }
        }
        return out
    }
}

/// The version `bgtask --version`, `bgtaskd --version` and the daemon's GetStatus report.
public let bgtaskVersion = "0.2.0"
