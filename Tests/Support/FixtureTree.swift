import BgtaskProbes
import Foundation

/// Builds a sysfs tree in a temporary directory from a umockdev recording: `devices/...` with one
/// file per attribute and a `uevent` of the properties, and `class/<subsystem>/<name>` links, as the
/// kernel lays it out. The probes then read it through `--sysfs-root`, with the same code as `/sys`.
public struct FixtureTree {
    public let root: URL

    /// The recordings in the source tree (Tests/BgtaskProbesTests/Fixtures).
    public static var fixtures: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../BgtaskProbesTests/Fixtures").standardized
    }

    public static func load(_ relative: String, proc: String? = nil) throws -> FixtureTree {
        let text = try String(contentsOf: fixtures.appendingPathComponent(relative), encoding: .utf8)
        return try FixtureTree(umockdev: text)
    }

    public init(umockdev text: String) throws {
        root = FileManager.default.temporaryDirectory.appendingPathComponent("bgtask-fixture-\(UUID().uuidString)")
        let fm = FileManager.default
        try fm.createDirectory(at: root.appendingPathComponent("class"), withIntermediateDirectories: true)
        for block in text.components(separatedBy: "\n\n") {
            var devpath: String?
            var props: [(String, String)] = []
            var attrs: [(String, String)] = []
            var links: [(String, String)] = []
            for line in block.split(separator: "\n").map(String.init) {
                guard line.count > 3 else { continue }
                let body = String(line.dropFirst(3))
                switch line.prefix(3) {
                case "P: ": devpath = body
                case "E: ": if let eq = body.firstIndex(of: "=") { props.append((String(body[..<eq]), String(body[body.index(after: eq)...]))) }
                case "A: ": if let eq = body.firstIndex(of: "=") { attrs.append((String(body[..<eq]), Self.unescape(String(body[body.index(after: eq)...])))) }
                case "L: ": if let eq = body.firstIndex(of: "=") { links.append((String(body[..<eq]), String(body[body.index(after: eq)...]))) }
                default: continue
                }
            }
            guard let dp = devpath else { continue }
            let dir = root.appendingPathComponent(String(dp.dropFirst()))
            try fm.createDirectory(at: dir, withIntermediateDirectories: true)
            for (name, value) in attrs {
                let f = dir.appendingPathComponent(name)
                try fm.createDirectory(at: f.deletingLastPathComponent(), withIntermediateDirectories: true)
                try value.write(to: f, atomically: false, encoding: .utf8)
            }
            for (name, target) in links {
                try? fm.createSymbolicLink(atPath: dir.appendingPathComponent(name).path, withDestinationPath: target)
            }
            let uevent = props.filter { $0.0 != "SUBSYSTEM" }.map { "\($0.0)=\($0.1)\n" }.joined()
            try uevent.write(to: dir.appendingPathComponent("uevent"), atomically: false, encoding: .utf8)
            if let subsystem = props.first(where: { $0.0 == "SUBSYSTEM" })?.1 {
                let classDir = root.appendingPathComponent("class/\(subsystem)")
                try fm.createDirectory(at: classDir, withIntermediateDirectories: true)
                try? fm.createSymbolicLink(atPath: classDir.appendingPathComponent(dir.lastPathComponent).path,
                                           withDestinationPath: "../.." + dp)
            }
        }
    }

    static func unescape(_ s: String) -> String {
        var out = ""
        var it = s.makeIterator()
        while let c = it.next() {
            guard c == "\\" else { out.append(c); continue }
            switch it.next() {
            case "n": out.append("\n")
            case "\\": out.append("\\")
            case let o?: out.append(o)
            case nil: out.append("\\")
            }
        }
        return out
    }

    /// A path inside the tree (`class/power_supply/BAT0/energy_now`).
    public func url(_ relative: String) -> URL { root.appendingPathComponent(relative) }

    public func set(_ relative: String, _ value: String) throws {
        try value.write(to: url(relative).resolvingSymlinksInPath(), atomically: false, encoding: .utf8)
    }

    public func remove() { try? FileManager.default.removeItem(at: root) }

    public func options(proc: String? = nil) -> ProbeOptions {
        let procDir = proc.map { FixtureTree.fixtures.appendingPathComponent($0).path } ?? root.appendingPathComponent("proc").path
        return ProbeOptions(root: SysfsRoot(sysfs: root.path, proc: procDir), useDBus: false)
    }

    public func snapshot(proc: String? = nil) -> ConditionSnapshot {
        Prober(options: options(proc: proc)).snapshot()
    }
}
