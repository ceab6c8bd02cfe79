/// What a rule decides, from least to most strict. When several rules match, the strictest wins.
public enum Verdict: String, Sendable, CaseIterable, Comparable, Codable {
    case run, throttle
    case `defer` = "defer"
    case pause, expire

    var rank: Int { Self.allCases.firstIndex(of: self)! }
    public static func < (a: Self, b: Self) -> Bool { a.rank < b.rank }
}

public struct SourceLocation: Sendable, Equatable, CustomStringConvertible {
    public var file: String
    public var line: Int
    public var column: Int
    /// `file:line`; a built-in check (line 0) is just its name.
    public var description: String { line == 0 ? file : "\(file):\(line)" }
    public var full: String { line == 0 ? file : "\(file):\(line):\(column)" }

    public init(file: String, line: Int, column: Int) {
        self.file = file
        self.line = line
        self.column = column
    }
}

/// A load error: where, what, and the offending line with a caret under it.
public struct PolicyError: Error, Sendable, Equatable, CustomStringConvertible {
    public var location: SourceLocation
    public var message: String
    public var sourceLine: String?
    public var length: Int = 1

    public init(location: SourceLocation, message: String, sourceLine: String? = nil, length: Int = 1) {
        self.location = location
        self.message = message
        self.sourceLine = sourceLine
        self.length = length
    }

    /// Where and what, on one line (a log line: the journal keeps one line an entry).
    public var summary: String { "\(location.full): \(message)" }

    public var description: String {
        var s = summary
        if var line = sourceLine {
            // A window of at most 120 characters around the column: a generated file can have a huge line.
            var column = location.column
            let chars = Array(line)
            if chars.count > 120 {
                let start = max(0, min(column - 40, chars.count - 120))
                line = (start > 0 ? "…" : "") + String(chars[start..<min(chars.count, start + 120)]) + (start + 120 < chars.count ? "…" : "")
                column = column - start + (start > 0 ? 1 : 0)
            }
            let pad = String(repeating: " ", count: max(0, column - 1))
            s += "\n    \(line)\n    \(pad)^" + String(repeating: "~", count: max(0, min(length, 80) - 1))
        }
        return s
    }
}

/// What to do when a rule's condition cannot be decided because a reading is unknown.
public enum WhenUnknown: String, Sendable, Codable { case ignore, match }

public struct Rule: Sendable {
    public var id: String
    public var when: String
    public var verdict: Verdict
    public var reason: String?
    public var cpuPercent: Int?
    public var grace: Double?
    public var holdOn: Double
    public var holdOff: Double
    public var whenUnknown: WhenUnknown
    public var enabled: Bool
    public var location: SourceLocation
    public var whenLocation: SourceLocation

    var expr: Expr
    var compiled: Eval
    var conjuncts: [(text: String, eval: Eval, names: [String])]
    public internal(set) var names: [String]
    var template: [TemplatePart]
    /// Whether the file set `hold`, `hold_on` or `hold_off`: a rule that replaces another by id and sets none
    /// keeps the holds of the one it replaces (a wobbly charger stays debounced when only the reason changes).
    public var setsHolds = true
}

enum TemplatePart: Sendable {
    case text(String)
    case name(String, slot: (task: Bool, index: Int))
}

/// Every error a file had, in file order.
public struct PolicyErrors: Error, Sendable, CustomStringConvertible {
    public var errors: [PolicyError]
    public init(_ errors: [PolicyError]) { self.errors = errors }
    public var description: String { errors.map(\.description).joined(separator: "\n") }
}
