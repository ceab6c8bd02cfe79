import BgtaskCore
import ArgumentParser
import BgtaskAudit
import BgtaskConfig
import BgtaskJSON
import BgtaskPolicy
import BgtaskProbes
import BgtaskRun
#if canImport(Glibc)
@preconcurrency import Glibc
#endif

/// The CLI's access to the state directory and the audit trail, and the crash recovery every
/// invocation that reads or writes tasks' state does first.
enum State {
    struct Failure: Error, CustomStringConvertible {
        var message: String
        var status: Int32
        var description: String { message }
    }

    /// The audit trail, for writing (creating the directory, 0700, checked) or reading (nil if none yet).
    static func audit(write: Bool) throws -> AuditLog? {
        do {
            if write {
                let dir = try StatePaths.preparedStateDirectory()
                return try AuditLog(path: dir + "/" + StatePaths.auditFile)
            }
            let dir = try StatePaths.stateDirectory()
            // A state path that is a file (or a link) is said, not taken for "nothing has run".
            var st = stat()
            guard lstat(dir, &st) == 0 else { return nil }
            try SecureDirectory.verify(dir)
            guard access(dir + "/" + StatePaths.auditFile, F_OK) == 0 else { return nil }
            return try AuditLog(path: dir + "/" + StatePaths.auditFile, readOnly: true)
        } catch let e as AuditError where e.empty {
            return nil
        } catch let e as PathError {
            throw Failure(message: "state directory \(e)", status: ExitStatus.cantCreate)
        } catch let e as AuditError {
            throw Failure(message: "audit trail \(e)", status: write ? ExitStatus.cantCreate : ExitStatus.failure)
        }
    }

    /// Records and puts right what killed `bgtask run`s left behind; prints what it did unless quiet.
    /// The policy and the conditions are read only when an orphaned command is still alive.
    static func recover(probe: ProbeOptions, audit: AuditLog?, quiet: Bool) {
        guard let runtime = try? StatePaths.runtimeDirectory() else { return }
        var cachedPolicy: Policy?
        var cachedValues: [String: PolicyValue]?
        var writer = audit
        let lines = Recovery.recoverAll(runtimeDirectory: runtime, observer: LazyObserver { writer = writer ?? (try? State.audit(write: true)) ?? nil; return writer }) { task in
            if cachedPolicy == nil {
                // As every command: a broken layer is left out, the others decide (never a command left frozen).
                cachedPolicy = PolicyLayers.load(PolicyLayers.sources()).0
            }
            guard let policy = cachedPolicy else { return nil }
            if cachedValues == nil {
                cachedValues = ConditionConversion.values(Prober(options: probe.applying(policy.settings)).snapshot().conditions)
            }
            return Policy.Evaluator(policy: policy, conditions: cachedValues ?? [:], time: localTime()).decideNow(task)
        }
        if !quiet { for l in lines { fputs(Terminal.safe("bgtask: recovered \(l)") + "\n", stderr) } }
    }
}

/// Opens the audit trail only when there is something to record.
final class LazyObserver: RunObserver {
    let open: () -> AuditLog?
    init(_ open: @escaping () -> AuditLog?) { self.open = open }
    func record(_ event: RunEvent, task: TaskFields) { open()?.record(event, task: task) }
}

/// Human output: a line with any control characters from outside (sysfs names, reasons) escaped.
func out(_ s: String) { print(Terminal.safe(s, keepNewlines: true)) }

/// How messages on stderr are written. Set once, by `main`, before any command runs (so the unchecked
/// global is never written concurrently): `--json` on the command line makes each message a JSON object.
enum Messages {
    nonisolated(unsafe) static var json = false
}

/// A message on stderr, in bgtask's one style: `bgtask: what happened`; with `--json`,
/// `{"error": "what happened", "exit_status": N}`, so a script reading JSON reads its errors too.
func err(_ s: String, status: Int32? = nil) {
    if Messages.json {
        var fields: [(String, JSONValue)] = [("error", .string(s))]
        if let status { fields.append(("exit_status", .number(Double(status)))) }
        fputs(JSONValue.object(fields).rendered + "\n", stderr)
    } else {
        fputs(Terminal.safe("bgtask: " + s, keepNewlines: true) + "\n", stderr)
    }
}
