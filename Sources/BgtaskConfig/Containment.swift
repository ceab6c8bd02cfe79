/// Where a run's processes were kept, as the crash-recovery records say it (the queue row's `cgroup` column, the
/// run's state file): what a later bgtask needs to thaw and end them. Its text form is stable — rows written by
/// one version are read by the next.
public enum Containment: Sendable, Equatable, CustomStringConvertible {
    /// A process group only (signals cap it): "-".
    case processGroup
    /// A cgroup v1 pair `bgtask/NAME` under the cpu and freezer hierarchies: "v1 NAME".
    case cgroupV1(name: String)
    /// A cgroup v2 directory: "v2 /sys/fs/cgroup/…".
    case cgroupV2(directory: String)
    /// A transient unit of the systemd user manager: "unit NAME.service".
    case unit(String)

    /// Reads the text form; nil for anything else (a damaged or foreign record is not acted on).
    public init?(_ text: String) {
        if text == "-" { self = .processGroup; return }
        let parts = text.split(separator: " ", maxSplits: 1).map(String.init)
        guard parts.count == 2, !parts[1].isEmpty else { return nil }
        switch parts[0] {
        case "v1": self = .cgroupV1(name: parts[1])
        case "v2": self = .cgroupV2(directory: parts[1])
        case "unit": self = .unit(parts[1])
        default: return nil
        }
    }

    public var description: String {
        switch self {
        case .processGroup: return "-"
        case .cgroupV1(let n): return "v1 " + n
        case .cgroupV2(let d): return "v2 " + d
        case .unit(let u): return "unit " + u
        }
    }

    /// The unit's name, for a run kept in one.
    public var unitName: String? { if case .unit(let u) = self { return u }; return nil }
}

extension Containment: Codable {
    public init(from decoder: any Decoder) throws {
        let c = try decoder.singleValueContainer()
        let text = try c.decode(String.self)
        guard let v = Containment(text) else {
            throw DecodingError.dataCorruptedError(in: c, debugDescription: "'\(text)' is not a containment record (-, v1 NAME, v2 DIR, unit NAME)")
        }
        self = v
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(description)
    }
}
