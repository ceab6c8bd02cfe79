import BgtaskTestSupport
import Foundation
import Testing

/// Tests that need umockdev's preload. Outside CI they are skipped when it is missing; in CI
/// (`CI` set) they run and fail, so a broken set-up is never mistaken for a pass.
/// True in CI (CI set), so that a test needing a tool `scripts/install-deps.sh --test` installs fails there when the
/// tool is missing instead of skipping; elsewhere, whether every one of `paths` is an executable.
func installedOrCI(_ paths: String...) -> Bool {
    ProcessInfo.processInfo.environment["CI"] != nil || paths.allSatisfy { FileManager.default.isExecutableFile(atPath: $0) }
}

let umockdevReady = Testbed.preloaded || ProcessInfo.processInfo.environment["CI"] != nil

func requirePreload() throws {
    try #require(Testbed.preloaded, "not under umockdev-wrapper: LD_PRELOAD lacks libumockdev-preload.so.0")
}

func parseJSON(_ line: String) throws -> [String: Any] {
    let obj = try JSONSerialization.jsonObject(with: Data(line.utf8))
    return try #require(obj as? [String: Any], "not a JSON object: \(line)")
}

/// `changes["power.external"]["new"]` of a watch line.
func newValue(_ line: [String: Any], _ path: String) -> Any? {
    ((line["changes"] as? [String: Any])?[path] as? [String: Any])?["new"]
}

func value(_ json: [String: Any], _ path: String) -> Any? {
    var cur: Any? = json
    for key in path.split(separator: ".") { cur = (cur as? [String: Any])?[String(key)] }
    return cur
}
