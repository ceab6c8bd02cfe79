import BgtaskFiles

public struct NetworkLink: Sendable, Equatable {
    public enum Kind: String, Sendable, Codable { case ethernet, wifi, cellular, loopback, virtual, other }

    public var name: String
    public var path: String
    public var kind: Kind
    public var operstate: String?
    public var carrier: Bool?
    /// operstate "up", or "unknown" with carrier 1 (cellular modems and some drivers never say "up").
    public var isUp: Bool
    public var defaultRoute: Bool
    public var routeMetric: Int?
    public var notes: [String]

    public init(device d: SysfsDevice, routes: [DefaultRoute]) {
        name = d.name
        path = d.path
        var notes: [String] = []
        operstate = d.text("operstate")
        switch d.attributes["carrier"] ?? .missing {
        case .text("1"): carrier = true
        case .text("0"): carrier = false
        case .text(let t): carrier = nil; notes.append("carrier: '\(t)' is not 0 or 1")
        case .missing, .unreadable: carrier = nil   // EINVAL while the interface is administratively down
        }
        isUp = operstate == "up" || ((operstate == "unknown" || operstate == nil) && carrier == true)
        let devtype = d.properties["DEVTYPE"]
        let arphrd = d.text("type").flatMap(Int.init)
        if arphrd == 772 { kind = .loopback }
        else if devtype == "wlan" || FileIO.exists(d.path + "/wireless") || FileIO.exists(d.path + "/phy80211") { kind = .wifi }
        else if devtype == "wwan" || arphrd == 519 /* ARPHRD_RAWIP, as wwan drivers use */ { kind = .cellular }
        else if d.path.contains("/devices/virtual/") || devtype == "bridge" || devtype == "vlan" || arphrd == 65534 { kind = .virtual }
        else if arphrd == 1 { kind = .ethernet }
        else { kind = .other }
        let mine = routes.filter { $0.interface == d.name }
        defaultRoute = !mine.isEmpty
        routeMetric = mine.map(\.metric).min()
        self.notes = notes
    }
}

public struct DefaultRoute: Sendable, Equatable {
    public var interface: String
    public var metric: Int
    public var family: String
}

public enum Routes {
    /// Default routes from `/proc/net/route` (IPv4) and `/proc/net/ipv6_route`.
    public static func parse(ipv4: String?, ipv6: String?) -> [DefaultRoute] {
        var out: [DefaultRoute] = []
        for line in (ipv4 ?? "").split(separator: "\n").dropFirst() {
            let f = line.split(whereSeparator: { $0 == "\t" || $0 == " " })
            guard f.count >= 8, let flags = Int(f[3], radix: 16) else { continue }
            // RTF_UP and not RTF_REJECT; destination and mask 0.0.0.0/0
            if f[1] == "00000000" && f[7] == "00000000" && flags & 0x1 != 0 && flags & 0x200 == 0 {
                out.append(DefaultRoute(interface: String(f[0]), metric: Int(f[6]) ?? 0, family: "ipv4"))
            }
        }
        for line in (ipv6 ?? "").split(separator: "\n") {
            let f = line.split(separator: " ", omittingEmptySubsequences: true)
            guard f.count >= 10, let flags = Int(f[8], radix: 16) else { continue }
            let iface = String(f[9])
            if f[0].allSatisfy({ $0 == "0" }) && f[1] == "00" && flags & 0x1 != 0 && flags & 0x200 == 0 && iface != "lo" {
                out.append(DefaultRoute(interface: iface, metric: Int(f[5], radix: 16) ?? 0, family: "ipv6"))
            }
        }
        return out
    }
}

public struct NetworkReading: Sendable, Equatable {
    public var online: Bool?
    public var kind: String?
    public var interface: String?
    public var metered: Bool?
    public var meteredSource: String
    public var reason: String
}

/// NetworkManager's `Metered` (NMMetered): 0 unknown, 1 yes, 2 no, 3 guess-yes, 4 guess-no.
public enum NMMetered {
    public static func meaning(_ v: UInt32) -> Bool? {
        switch v { case 1, 3: return true; case 2, 4: return false; default: return nil }
    }
    public static func name(_ v: UInt32) -> String {
        ["unknown", "yes", "no", "guess-yes", "guess-no"].indices.contains(Int(v))
            ? ["unknown", "yes", "no", "guess-yes", "guess-no"][Int(v)] : "value \(v)"
    }
}

public enum NetworkAnalysis {
    public static func analyze(_ links: [NetworkLink], nmMetered: UInt32?, routesReadable: Bool) -> NetworkReading {
        let candidates = links.filter { $0.kind != .loopback && $0.isUp && $0.defaultRoute }
        let primary = candidates.min { ($0.routeMetric ?? 0, $0.name) < ($1.routeMetric ?? 0, $1.name) }
        var online: Bool? = primary != nil
        var reason: String
        if let p = primary {
            reason = "\(p.name) is \(p.operstate ?? "?")\(p.carrier == true ? " with carrier" : "") and holds a default route"
        } else if !routesReadable {
            online = nil
            reason = "routing table unreadable"
        } else {
            let up = links.filter { $0.kind != .loopback && $0.isUp }.map(\.name)
            reason = up.isEmpty ? "no link is up" : "links up (\(up.joined(separator: ", "))) but no default route"
        }
        var metered: Bool?
        var source: String
        if let v = nmMetered, let m = NMMetered.meaning(v) {
            metered = m
            source = "NetworkManager Metered=\(NMMetered.name(v))"
        } else if let p = primary, p.kind == .cellular {
            metered = true
            source = "\(p.name) is a cellular link"
        } else {
            metered = nil
            source = nmMetered != nil ? "NetworkManager Metered=unknown" : "NetworkManager not running; link is not cellular"
        }
        return NetworkReading(online: online, kind: primary?.kind.rawValue, interface: primary?.name,
                              metered: metered, meteredSource: source, reason: reason)
    }
}

extension DeviceReader {
    public func defaultRoutes() -> (routes: [DefaultRoute], readable: Bool) {
        let v4 = FileIO.read(root.proc + "/net/route")
        let v6 = FileIO.read(root.proc + "/net/ipv6_route")
        let readable = (try? v4.get()) != nil || (try? v6.get()) != nil
        return (Routes.parse(ipv4: try? v4.get(), ipv6: try? v6.get()), readable)
    }

    public func networkLinks(routes: [DefaultRoute]) -> [NetworkLink] {
        devices(subsystem: "net", attributes: ["operstate", "carrier", "type"])
            .map { NetworkLink(device: $0, routes: routes) }
    }

    /// `some avg10` of `/proc/pressure/cpu`, in percent; nil without PSI.
    public func cpuPressure() -> Double? {
        guard case .success(let text) = FileIO.read(root.proc + "/pressure/cpu") else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix("some ") {
            for field in line.split(separator: " ") where field.hasPrefix("avg10=") {
                return Double(field.dropFirst(6))
            }
        }
        return nil
    }
}
