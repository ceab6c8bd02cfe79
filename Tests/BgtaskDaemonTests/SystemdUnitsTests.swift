import BgtaskCore
import BgtaskPolicy
@testable import BgtaskDaemon
import Foundation
import Testing

@Suite("talking to systemd about transient units (the pure parts)")
struct SystemdUnitsTests {
    @Test("a unit's object path is systemd's bus-label escaping: every byte but a letter or digit as _xx")
    func objectPathEscaping() {
        #expect(SystemdUnits.objectPath(unit: "bgtask-a.b_c-1.service")
                == "/org/freedesktop/systemd1/unit/bgtask_2da_2eb_5fc_2d1_2eservice")
        #expect(SystemdUnits.objectPath(unit: "x") == "/org/freedesktop/systemd1/unit/x")
    }

    @Test("ExecMainCode and ExecMainStatus become the wait status waitpid would have given")
    func waitStatusFromSystemd() {
        // CLD_EXITED with 3 → exit 3; CLD_KILLED with 15 → killed by SIGTERM; CLD_DUMPED with 11 → SIGSEGV and a core.
        #expect(RunningUnit.waitStatus(code: 1, status: 3) == 3 << 8)
        #expect(RunningUnit.waitStatus(code: 2, status: 15) == 15)
        #expect(RunningUnit.waitStatus(code: 3, status: 11) == 11 | 0x80)
        #expect(RunningUnit.waitStatus(code: 0, status: 0) == 0)
    }

    @Test("a bare command is looked up in the task's PATH; a missing one is ENOENT, a file that cannot run EACCES")
    func executableLookup() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("bgtask-exe-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let tool = dir.appendingPathComponent("tool"), data = dir.appendingPathComponent("data")
        try "#!/bin/sh\n".write(to: tool, atomically: true, encoding: .utf8)
        try "x".write(to: data, atomically: true, encoding: .utf8)
        chmod(tool.path, 0o755)
        chmod(data.path, 0o644)
        let env = ["PATH=/nonexistent:\(dir.path)"]
        #expect(SystemdUnits.executable("tool", directory: nil, environment: env).path == tool.path)
        #expect(SystemdUnits.executable("no-such-tool", directory: nil, environment: env).errno == ENOENT)
        #expect(SystemdUnits.executable("data", directory: nil, environment: env).errno == EACCES)
        // A relative path with a slash is the task's working directory's, not looked up in PATH.
        #expect(SystemdUnits.executable("./tool", directory: dir.path, environment: []).path == dir.path + "/./tool")
    }

    @Test("what systemd sets for each unit is not overridden by bgtaskd's own values (bgtaskd may run as a unit itself)")
    func managerSetVariablesAreNotPassed() {
        setenv("JOURNAL_STREAM", "8:1234", 1)
        defer { unsetenv("JOURNAL_STREAM") }
        let env = SystemdUnits.environment(adding: ["BGTASK_TASK_ID=t"])
        #expect(!env.contains { $0.hasPrefix("JOURNAL_STREAM=") })
        #expect(env.contains("BGTASK_TASK_ID=t"))
    }
}

@Suite("decisions in the journal: the fields")
struct JournalFieldsTests {
    @Test("an event becomes MESSAGE, one MESSAGE_ID, and BGTASK_TASK, RUN, EVENT, RULE, RULE_ORIGIN, VERDICT (and the exit status and energy at the end)")
    func fields() {
        let m = Match(ruleID: "processing.needs-power", verdict: .defer, reason: "waiting for external power",
                      location: SourceLocation(file: "/usr/share/bgtask/policies/default.toml", line: 34, column: 1), readings: [])
        let d = Decision(verdict: .defer, cpuPercent: nil, grace: nil, matches: [m], pending: [])
        let e = RunEvent(kind: .deferred, monotonic: 0, detail: "waiting for external power", decision: d, conditions: [:], exitStatus: nil)
        let f = Journal.fields(e, task: TaskFields(id: "backup"), runID: "backup-1")
        #expect(f.contains("MESSAGE=backup: deferred: waiting for external power — rule processing.needs-power (/usr/share/bgtask/policies/default.toml:34)"))
        for want in ["MESSAGE_ID=\(Journal.messageID)", "PRIORITY=6", "BGTASK_TASK=backup", "BGTASK_RUN=backup-1", "BGTASK_EVENT=deferred",
                     "BGTASK_RULE=processing.needs-power", "BGTASK_RULE_ORIGIN=/usr/share/bgtask/policies/default.toml:34", "BGTASK_VERDICT=defer"] {
            #expect(f.contains(want), "\(want) in \(f)")
        }
        // A detail that already names the rule (a deferral as the queue words it) gets it once.
        let named = RunEvent(kind: .deferred, monotonic: 0, detail: "held — rule processing.needs-power (/usr/share/bgtask/policies/default.toml:34)",
                             decision: d, conditions: [:], exitStatus: nil)
        #expect(Journal.fields(named, task: TaskFields(id: "backup"), runID: "backup-1")
                    .contains("MESSAGE=backup: deferred: held — rule processing.needs-power (/usr/share/bgtask/policies/default.toml:34)"))
        var end = RunEvent(kind: .finished, monotonic: 1, detail: "exit 0", decision: nil, conditions: [:], exitStatus: 0)
        end.energyWh = 0.5
        end.energy = "used ~0.5 Wh"
        let g = Journal.fields(end, task: TaskFields(id: "backup"), runID: "backup-1")
        #expect(g.contains("BGTASK_EXIT_STATUS=0") && g.contains("BGTASK_ENERGY_WH=0.5") && g.contains("MESSAGE=backup: finished: exit 0; used ~0.5 Wh"))
        #expect(Journal.fields(RunEvent(kind: .expired, monotonic: 2, detail: "x", decision: nil, conditions: [:], exitStatus: nil),
                               task: TaskFields(id: "b"), runID: "r").contains("PRIORITY=5"))
    }
}
