import Foundation

/// A request to launch the app in the background (Apple's abstract `BGTaskRequest`): use one of the three
/// subclasses.
/// Unchecked, as Apple's classes are declared to Swift (Apple-shaped code hands requests across queues): the one
/// mutable property, `earliestBeginDate`, is set before `submit`, which reads it once.
open class BGTaskRequest: NSObject, @unchecked Sendable {
    /// The task's identifier: one of the app manifest's `permitted_identifiers` (exactly, or under a
    /// `prefix.*` entry), as Info.plist's `BGTaskSchedulerPermittedIdentifiers` on iOS.
    public let identifier: String
    /// Not before this date: a floor, not a time (nil for no delay).
    open var earliestBeginDate: Date?

    init(identifier: String, kind: String) {
        self.identifier = identifier
        self.kind = kind
    }

    /// The daemon's word for the request's class.
    let kind: String

    open override var description: String {
        "<\(type(of: self)): \(identifier)\(earliestBeginDate.map { ", earliestBeginDate: \($0)" } ?? "")>"
    }
}

/// A request to launch the app briefly to refresh its content (about 30 s: `run.refresh_budget`).
open class BGAppRefreshTaskRequest: BGTaskRequest, @unchecked Sendable {
    public init(identifier: String) { super.init(identifier: identifier, kind: "refresh") }
}

/// A request for deferrable maintenance work, for minutes, when the machine is idle and the policy allows.
open class BGProcessingTaskRequest: BGTaskRequest, @unchecked Sendable {
    /// Wait for a network link with a default route (`network.online`). Default false.
    open var requiresNetworkConnectivity = false
    /// Wait for the charger (`power.external`); as on iOS this also lifts the CPU cap. Default false.
    open var requiresExternalPower = false
    public init(identifier: String) { super.init(identifier: identifier, kind: "processing") }
}

/// Work a person started that goes on when they leave the app, with progress shown by the desktop and a
/// Cancel button (Apple's `BGContinuedProcessingTaskRequest`, iOS 26).
open class BGContinuedProcessingTaskRequest: BGTaskRequest, @unchecked Sendable {
    /// What to do when the task cannot start at once.
    public enum SubmissionStrategy: Int, Sendable, Equatable {
        /// `submit` throws `immediateRunIneligible`.
        case fail = 0
        /// Wait in the queue for room (the default).
        case queue = 1
    }

    /// What the task needs beyond CPU and network.
    public struct Resources: OptionSet, Sendable, Hashable {
        public let rawValue: Int
        public init(rawValue: Int) { self.rawValue = rawValue }
        /// Background CPU and network.
        public static let `default` = Resources([])
        /// A GPU: a DRM render node this user can open (the manifest must declare `resources = ["gpu"]`).
        public static let gpu = Resources(rawValue: 1 << 0)
    }

    /// Shown to the person in the notification or job view.
    open var title: String
    open var subtitle: String
    open var strategy: SubmissionStrategy = .queue
    open var requiredResources: Resources = .default

    public init(identifier: String, title: String, subtitle: String) {
        self.title = title
        self.subtitle = subtitle
        super.init(identifier: identifier, kind: "continued")
    }
}
