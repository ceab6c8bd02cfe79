import TOMLKit

/// One policy file, checked: its settings and its rules, compiled.
public struct PolicyFile: Sendable {
    public var path: String
    public var settings: [String: (PolicyValue, SourceLocation)]
    public var rules: [Rule]
    /// Rule ids this file switches off (`enabled = false`).
    public var disabled: [(String, SourceLocation)]

    static let ruleKeys = ["id", "when", "verdict", "reason", "cpu_percent", "grace", "hold", "hold_on", "hold_off",
                           "when_unknown", "enabled"]
    static let sections = ["battery", "thermal", "idle", "storage", "run", "daemon", "rule"]

    /// A file's bytes as text: valid UTF-8 with no NUL or other control character but tab, CR and newline
    /// (TOML allows no others, and a NUL would end the text for the C++ parser, silently dropping the rest).
    public static func text(_ bytes: [UInt8], path: String) -> Result<String, PolicyErrors> {
        var line = 1, column = 1, i = 0
        func fail(_ what: String) -> Result<String, PolicyErrors> {
            let lineText = bytes.split(separator: 0x0A, omittingEmptySubsequences: false)
            let shown = lineText.indices.contains(line - 1) ? String(decoding: lineText[line - 1].map { $0 < 0x20 || $0 == 0x7F ? 0x3F : $0 }, as: UTF8.self) : nil
            return .failure(PolicyErrors([PolicyError(location: SourceLocation(file: path, line: line, column: column),
                                                      message: what, sourceLine: shown)]))
        }
        while i < bytes.count {
            let b = bytes[i]
            if b == 0x0A { line += 1; column = 1; i += 1; continue }
            if b < 0x20 && b != 0x09 && b != 0x0D || b == 0x7F {
                return fail(b == 0 ? "a NUL byte: not a text file (the rest of the file would be lost)"
                                   : "control character \\u{\(String(b, radix: 16))} is not allowed in a policy file")
            }
            // One UTF-8 sequence: its length from the lead byte, then continuation bytes (no overlongs, no surrogates).
            var n = 0
            var lo: UInt8 = 0x80, hi: UInt8 = 0xBF
            switch b {
            case 0x00...0x7F: n = 0
            case 0xC2...0xDF: n = 1
            case 0xE0: n = 2; lo = 0xA0
            case 0xE1...0xEC, 0xEE...0xEF: n = 2
            case 0xED: n = 2; hi = 0x9F
            case 0xF0: n = 3; lo = 0x90
            case 0xF1...0xF3: n = 3
            case 0xF4: n = 3; hi = 0x8F
            default: return fail("invalid UTF-8 (byte 0x\(String(b, radix: 16)))")
            }
            for k in 1...max(1, n) where n > 0 {
                guard i + k < bytes.count else { return fail("invalid UTF-8 (truncated sequence at the end of the file)") }
                let c = bytes[i + k]
                let (l, h) = k == 1 ? (lo, hi) : (UInt8(0x80), UInt8(0xBF))
                guard c >= l && c <= h else { return fail("invalid UTF-8 (byte 0x\(String(b, radix: 16)) 0x\(String(c, radix: 16)))") }
            }
            i += n + 1
            column += 1
        }
        return .success(String(decoding: bytes, as: UTF8.self))
    }

    /// Parses and checks a file's text under the standard schema; every problem found is returned, each with
    /// file:line:column. A text parsed before for the same path gives the result it gave (`TOMLMemo`).
    public static func parse(_ text: String, path: String) -> Result<PolicyFile, PolicyErrors> {
        memo.value(path: path, text: text) { parse(text, path: path, schema: .standard) }
    }
    static let memo = TOMLMemo<Result<PolicyFile, PolicyErrors>>()

    /// Parses and checks a file's text under `schema`, every time.
    public static func parse(_ text: String, path: String, schema: Schema) -> Result<PolicyFile, PolicyErrors> {
        if case .failure(let e) = PolicyFile.text(Array(text.utf8), path: path) { return .failure(e) }
        let src = SourceIndex(path: path, text: text)
        if let e = malformedHeader(src) { return .failure(PolicyErrors([e])) }
        let table: TOMLTable
        do {
            table = try TOMLTable(string: text)
        } catch let e as TOMLParseError {
            let line = max(1, e.source.begin.line), column = max(1, e.source.begin.column)
            var message = "TOML: \(e.description)"
            // toml++ finds an unclosed string at the end of its line and talks about control characters.
            if e.description.contains("string"), src.lines.indices.contains(line - 1),
               column > src.lines[line - 1].reversed().drop(while: { $0 == " " }).count {
                message += " (is a closing quote missing?)"
            }
            return .failure(PolicyErrors([src.error(message, line: line, column: column)]))
        } catch {
            return .failure(PolicyErrors([src.error("TOML: \(error)", line: 1)]))
        }
        var errors: [PolicyError] = []
        var settings: [String: (PolicyValue, SourceLocation)] = [:]
        var rules: [Rule] = []
        var disabled: [(String, SourceLocation)] = []
        let compiler = Compiler(schema: schema, slots: Slots(schema: schema))

        for key in table.keys.sorted() where !sections.contains(key) {
            let at = src.find(key: key, from: 1, to: nil, atValue: false) ?? src.header(key).map { ($0, 2) } ?? (1, 1)
            let hint = sections.filter { editDistance($0, key) <= 2 }.first.map { "; did you mean [\($0)]?" } ?? ""
            errors.append(src.error("unknown section or key '\(key)' (known: [battery], [thermal], [idle], [storage], [run], [daemon], [[rule]])\(hint)",
                                    line: at.0, column: at.1, length: key.count))
        }

        // Settings sections.
        for section in ["battery", "thermal", "idle", "storage", "run", "daemon"] {
            guard let value = table[section] else { continue }
            let headerLine = src.header(section) ?? 1
            guard let t = value.table else {
                errors.append(src.error("[\(section)] must be a table", line: headerLine)); continue
            }
            let nextHeader = src.lines.indices.dropFirst(headerLine).first { src.stripped(src.lines[$0]).hasPrefix("[") }.map { $0 + 1 }
            for key in t.keys.sorted() {
                let name = "\(section).\(key)"
                let at = src.find(key: key, from: headerLine, to: nextHeader) ?? (headerLine, 1)
                let loc = src.location(line: at.line, column: at.column)
                guard let expected = PolicySettings.defaults[name] else {
                    let known = PolicySettings.defaults.keys.filter { $0.hasPrefix(section + ".") }.sorted()
                        .map { String($0.dropFirst(section.count + 1)) }
                    let close = known.filter { editDistance($0, key) <= 3 }
                    let hint = close.isEmpty ? "" : "; did you mean '\(close[0])'?"
                    errors.append(src.error("unknown setting '\(key)' in [\(section)] (known: \(known.joined(separator: ", ")))\(hint)",
                                            line: at.line, column: max(1, (src.find(key: key, from: headerLine, to: nextHeader, atValue: false)?.column ?? 1)),
                                            length: key.count))
                    continue
                }
                let v = t[key]!
                switch expected {
                case .number:
                    let top = name.hasSuffix("_percent") ? 100 : (PolicySettings.maxNumber[name] ?? 200)
                    if let n = v.double ?? v.int.map(Double.init), n.isFinite, n >= 0, n <= top {
                        settings[name] = (.number(n), loc)
                    } else {
                        errors.append(src.error("\(key) must be a number from 0 to \(Int(top))", line: at.line, column: at.column))
                    }
                case .duration:
                    let limit = PolicySettings.maxDuration[name] ?? 86_400
                    if let s = v.string, let d = parseDuration(s), d >= 0, d <= limit { settings[name] = (.duration(d), loc) }
                    else { errors.append(src.error("\(key) must be a duration string from \"0s\" to \"\(formatDuration(limit))\"", line: at.line, column: at.column)) }
                default: break
                }
            }
        }

        // Rules.
        let headers = src.ruleHeaders
        if let ruleValue = table["rule"] {
            guard let array = ruleValue.array else {
                return .failure(PolicyErrors(errors + [src.error("rules are written [[rule]] (an array of tables)", line: src.header("rule") ?? 1)]))
            }
            var seen: [String: SourceLocation] = [:]
            for i in 0..<array.count {
                let start = headers.indices.contains(i) ? headers[i] : 1
                let end: Int? = headers.indices.contains(i + 1) ? headers[i + 1] : nil
                guard let t = array[i].table else {
                    errors.append(src.error("rule \(i + 1) is not a table", line: start)); continue
                }
                switch parseRule(t, index: i, start: start, end: end, src: src, compiler: compiler, schema: schema) {
                case .failure(let es): errors += es.errors
                case .success(.disabled(let id, let loc)):
                    disabled.append((id, loc))
                case .success(.rule(let r)):
                    if let first = seen[r.id] {
                        errors.append(src.error("duplicate rule id '\(r.id)' (first at \(first))", line: r.location.line,
                                                column: r.location.column, length: r.id.count + 2))
                    } else {
                        seen[r.id] = r.location
                        rules.append(r)
                    }
                }
            }
        }
        if !errors.isEmpty { return .failure(PolicyErrors(errors.sorted { ($0.location.line, $0.location.column) < ($1.location.line, $1.location.column) })) }
        return .success(PolicyFile(path: path, settings: settings, rules: rules, disabled: disabled))
    }

    /// toml++ (inside TOMLKit) asserts, aborting debug builds, on a table header whose name starts with
    /// a character that cannot begin a key (`[`` ` ``, `[\u{14}`); such headers are rejected here first.
    /// Found by FuzzTests.
    static func malformedHeader(_ src: SourceIndex) -> PolicyError? {
        for (n, line) in src.lines.enumerated() {
            let chars = Array(line)
            var i = 0
            while i < chars.count, chars[i] == " " || chars[i] == "\t" { i += 1 }
            guard i < chars.count, chars[i] == "[" else { continue }
            i += 1
            if i < chars.count, chars[i] == "[" { i += 1 }
            while i < chars.count, chars[i] == " " || chars[i] == "\t" { i += 1 }
            guard i < chars.count else {
                return src.error("TOML: a table header needs a name after '['", line: n + 1, column: i + 1)
            }
            let c = chars[i]
            if !(c.isASCII && (c.isLetter || c.isNumber || c == "_" || c == "-" || c == "\"" || c == "'")) {
                return src.error("TOML: a table name cannot start with '\(c.unicodeScalars.map { $0.value < 32 || $0.value == 127 ? "\\u{\(String($0.value, radix: 16))}" : String($0) }.joined())'",
                                 line: n + 1, column: i + 1)
            }
        }
        return nil
    }

    enum Parsed { case rule(Rule), disabled(String, SourceLocation) }

    static func parseRule(_ t: TOMLTable, index i: Int, start: Int, end: Int?, src: SourceIndex,
                          compiler: Compiler, schema: Schema) -> Result<Parsed, PolicyErrors> {
        var errors: [PolicyError] = []
        func at(_ key: String) -> (line: Int, column: Int) { src.find(key: key, from: start, to: end) ?? (start, 1) }
        func err(_ key: String, _ msg: String, length: Int = 1) { let p = at(key); errors.append(src.error(msg, line: p.line, column: p.column, length: length)) }

        for key in t.keys.sorted() where !ruleKeys.contains(key) {
            let close = ruleKeys.filter { editDistance($0, key) <= 2 }
            let hint = close.isEmpty ? "" : "; did you mean '\(close[0])'?"
            let p = src.find(key: key, from: start, to: end, atValue: false) ?? (start, 1)
            errors.append(src.error("unknown key '\(key)' in a rule\(hint)", line: p.line, column: p.column, length: key.count))
        }
        guard let id = t["id"]?.string else {
            if t["id"] != nil { err("id", "id must be a string") }
            else { errors.append(src.error("rule \(i + 1) has no id", line: start, length: 8)) }
            return .failure(PolicyErrors(errors))
        }
        let idLoc = src.location(line: at("id").line, column: at("id").column)
        let idOK = !id.isEmpty && id.count <= 128 && id.first!.isLetter
            && id.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || "._-".contains($0)) }
        if !idOK { err("id", "rule id '\(id)' must start with a letter and use only letters, digits, '.', '_', '-' (128 at most)", length: id.count + 2) }

        var enabled = true
        if let e = t["enabled"] {
            if let b = e.bool { enabled = b } else { err("enabled", "enabled must be true or false") }
        }
        if !enabled {
            // Switching a rule off needs only its id.
            return errors.isEmpty ? .success(.disabled(id, idLoc)) : .failure(PolicyErrors(errors))
        }

        guard let whenValue = t["when"] else {
            errors.append(src.error("rule '\(id)' has no 'when' (the condition under which it applies)", line: start, length: 8))
            return .failure(PolicyErrors(errors))
        }
        guard let when = whenValue.string else { err("when", "when must be a string holding an expression"); return .failure(PolicyErrors(errors)) }
        guard let verdictText = t["verdict"]?.string else {
            if t["verdict"] != nil { err("verdict", "verdict must be a string") }
            else { errors.append(src.error("rule '\(id)' has no 'verdict' (run, throttle, defer, pause or expire)", line: start, length: 8)) }
            return .failure(PolicyErrors(errors))
        }
        guard let verdict = Verdict(rawValue: verdictText) else {
            let close = Verdict.allCases.map(\.rawValue).filter { editDistance($0, verdictText) <= 2 }
            let hint = close.isEmpty ? "" : "; did you mean '\(close[0])'?"
            err("verdict", "unknown verdict '\(verdictText)' (run, throttle, defer, pause, expire)\(hint)", length: verdictText.count + 2)
            return .failure(PolicyErrors(errors))
        }

        var cpu: Int?
        if let c = t["cpu_percent"] {
            if verdict != .throttle { err("cpu_percent", "cpu_percent applies only to verdict = \"throttle\"") }
            else if let n = c.int, n >= 1, n <= 100 { cpu = n }
            else { err("cpu_percent", "cpu_percent must be a whole number from 1 to 100") }
        } else if verdict == .throttle {
            errors.append(src.error("rule '\(id)' throttles but has no cpu_percent", line: at("verdict").line, column: at("verdict").column))
        }
        var grace: Double?
        if let g = t["grace"] {
            if verdict != .expire { err("grace", "grace applies only to verdict = \"expire\"") }
            else if let s = g.string, let d = parseDuration(s), d >= 0, d <= 3600 { grace = d }
            else { err("grace", "grace must be a duration string from \"0s\" to \"1h\"") }
        }
        func duration(_ key: String) -> Double? {
            guard let v = t[key] else { return nil }
            if let s = v.string, let d = parseDuration(s), d >= 0, d <= 86_400 { return d }
            err(key, "\(key) must be a duration string such as \"30s\" (at most 1d)")
            return nil
        }
        let hold = duration("hold") ?? 0
        let holdOn = duration("hold_on") ?? hold
        let holdOff = duration("hold_off") ?? hold
        var whenUnknown = WhenUnknown.ignore
        if let w = t["when_unknown"] {
            if let s = w.string, let v = WhenUnknown(rawValue: s) { whenUnknown = v }
            else { err("when_unknown", "when_unknown must be \"ignore\" or \"match\"") }
        }

        // The expression: parse, type-check, compile. Errors point into the string.
        let whenAt = at("when")
        let whenLoc = src.location(line: whenAt.line, column: whenAt.column)
        var compiled: (Expr, Typed)?
        do {
            let expr = try Parser.parse(when)
            let typed = try compiler.compile(expr)
            if typed.type != .bool && typed.type != .null {
                throw ExpressionError(message: "when must be a condition (bool), but this is \(typed.type.shortName)", span: expr.span)
            }
            compiled = (expr, typed)
        } catch let e as ExpressionError {
            let p = src.position(ofOffset: e.span.start, inStringAt: whenAt.line, column: whenAt.column)
            errors.append(src.error("in 'when' of rule '\(id)': \(e.message)", line: p.line, column: p.column,
                                    length: max(1, e.span.end - e.span.start)))
        } catch {}

        var template: [TemplatePart] = []
        if let r = t["reason"] {
            if let s = r.string {
                switch parseTemplate(s, compiler: compiler) {
                case .success(let parts): template = parts
                case .failure(let e):
                    let p = at("reason")
                    let q = src.position(ofOffset: e.span.start, inStringAt: p.line, column: p.column)
                    errors.append(src.error("in 'reason' of rule '\(id)': \(e.message)", line: q.line, column: q.column,
                                            length: max(1, e.span.end - e.span.start)))
                }
            } else { err("reason", "reason must be a string") }
        }

        guard errors.isEmpty, let (expr, typed) = compiled else { return .failure(PolicyErrors(errors)) }
        let whenChars = Array(when)
        var conjuncts: [(text: String, eval: Eval, names: [String])] = []
        for c in expr.conjuncts {
            let text = String(whenChars[max(0, c.span.start)..<min(whenChars.count, c.span.end)])
            let eval: Eval
            do { eval = try compiler.compile(c).eval } catch { eval = { _ in .null } }
            conjuncts.append((text: text, eval: eval, names: c.names))
        }
        var names: [String] = []
        for n in expr.names where !names.contains(n) { names.append(n) }
        return .success(.rule(Rule(
            id: id, when: when, verdict: verdict, reason: t["reason"]?.string, cpuPercent: cpu, grace: grace,
            holdOn: holdOn, holdOff: holdOff, whenUnknown: whenUnknown, enabled: true, location: idLoc, whenLocation: whenLoc,
            expr: expr, compiled: typed.eval, conjuncts: conjuncts, names: names, template: template,
            setsHolds: t["hold"] != nil || t["hold_on"] != nil || t["hold_off"] != nil)))
    }

    /// `"waiting for power ({battery.state}, {battery.percent}%)"`: every `{name}` must be a known name.
    static func parseTemplate(_ s: String, compiler: Compiler) -> Result<[TemplatePart], ExpressionError> {
        var parts: [TemplatePart] = []
        let chars = Array(s)
        var i = 0, text = ""
        while i < chars.count {
            if chars[i] == "{" {
                guard let close = chars[i...].firstIndex(of: "}") else {
                    return .failure(ExpressionError(message: "'{' is not closed", span: Span(start: i, end: i + 1)))
                }
                let name = String(chars[(i + 1)..<close]).trimmingCharacters(in: " ")
                guard compiler.schema.entries[name] != nil else {
                    let s = compiler.schema.suggestions(for: name)
                    let hint = s.isEmpty ? "" : "; did you mean '\(s[0])'?"
                    return .failure(ExpressionError(message: "unknown name '\(name)'\(hint)", span: Span(start: i + 1, end: close)))
                }
                if !text.isEmpty { parts.append(.text(text)); text = "" }
                if let t = compiler.slots.task[name] { parts.append(.name(name, slot: (true, t))) }
                else { parts.append(.name(name, slot: (false, compiler.slots.shared[name]!))) }
                i = close + 1
            } else {
                text.append(chars[i]); i += 1
            }
        }
        if !text.isEmpty { parts.append(.text(text)) }
        return .success(parts)
    }
}
