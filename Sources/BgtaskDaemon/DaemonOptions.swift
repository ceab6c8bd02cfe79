#if canImport(Glibc)
@preconcurrency import Glibc
#endif
import BgtaskAudit
import BgtaskBus
import BgtaskProtocol
import BgtaskConfig
import BgtaskCore
import BgtaskPolicy
import BgtaskProbes
import BgtaskQueue
import BgtaskRun
@preconcurrency import CLinux

public struct DaemonOptions {
    /// The bus to serve on (nil: the session bus, `$DBUS_SESSION_BUS_ADDRESS`).
    public var busAddress: String?
    public var probe: ProbeOptions
    /// The policy files named on the command line (on top of the layers).
    public var policyFiles: [String] = []
    public var quiet = false
    /// Watch logind on the system bus for sleep and shutdown (off with `--no-dbus`).
    public var watchSleep = true
    /// Run command tasks as transient units where a systemd user manager runs (off with `--no-systemd-units`).
    public var systemdUnits = true
    /// Where its configuration and state are, when not where the user's environment says (nil: there).
    public var places: DaemonPlaces?
    /// The readings, when given rather than watched (nil: the condition watcher reads the machine).
    public var readings: [String: PolicyValue]?
    /// Whether the process's terminating signals and SIGCHLD are bgtaskd's (a signalfd); false in a process that
    /// has other users of signals.
    public var ownsSignals = true
    /// Starts command tasks (nil: a transient systemd unit where a manager runs, else a child process).
    public var launcher: TaskLauncher?
    /// How long a write to the queue waits for a lock another process holds before it fails (a test's is short).
    public var queueBusyTimeout = 5.0
    public init(probe: ProbeOptions) { self.probe = probe }
}

/// A daemon's own files, in place of the user's configuration and state directories: a daemon run inside a test
/// process reads and writes only these.
public struct DaemonPlaces {
    public var stateDirectory: String
    public var policySources: [PolicySource]
    public var appDirectories: [String]
    public init(stateDirectory: String, policySources: [PolicySource], appDirectories: [String]) {
        self.stateDirectory = stateDirectory
        self.policySources = policySources
        self.appDirectories = appDirectories
    }
}

public struct DaemonError: Error, CustomStringConvertible {
    public var message: String
    public var status: Int32
    public var description: String { message }
}
