import BgtaskCore
import BgtaskPolicy
import BgtaskProbes
import BgtaskRun

func policy(_ text: String, path: String = "test.toml") throws -> Policy {
    switch PolicyFile.parse(text, path: path) {
    case .success(let f): return Policy.merge([f])
    case .failure(let e): throw e
    }
}

func file(_ text: String, path: String) throws -> PolicyFile {
    switch PolicyFile.parse(text, path: path) {
    case .success(let f): return f
    case .failure(let e): throw e
    }
}

/// A one-rule policy that defers when `when` holds.
func rule(_ when: String, extra: String = "") throws -> Policy {
    try policy("""
    [[rule]]
    id = "r"
    when = '\(when)'
    verdict = "defer"
    \(extra)
    """)
}

func conditionValues(_ s: ConditionSnapshot) -> [String: PolicyValue] { ConditionConversion.values(s.conditions) }

extension Policy {
    func verdict(_ conditions: [String: PolicyValue], _ task: TaskFields = TaskFields(id: "t"),
                 time: TimeFields = .midnightMonday) -> Verdict {
        Evaluator(policy: self, conditions: conditions, time: time).decideNow(task).verdict
    }
    func matches(_ conditions: [String: PolicyValue], _ task: TaskFields = TaskFields(id: "t")) -> Bool {
        verdict(conditions, task) != .run
    }
}
