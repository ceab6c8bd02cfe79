// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "bgtask",
    products: [
        .executable(name: "bgtask", targets: ["bgtask"]),
        .executable(name: "bgtaskd", targets: ["bgtaskd"]),
        .library(name: "BgtaskProbes", targets: ["BgtaskProbes"]),
        // Apple's BackgroundTasks API on bgtaskd: `import BackgroundTasks` in a ported iOS app.
        .library(name: "BackgroundTasks", targets: ["BackgroundTasks"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/LebJe/TOMLKit", from: "0.6.0"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.0.0"),
    ],
    targets: [
        // System libraries: thin module maps over the C APIs we read the machine through.
        .systemLibrary(name: "CUdev", path: "Sources/CUdev", pkgConfig: "libudev",
                       providers: [.apt(["libudev-dev"])]),
        // libupower-glib; pkg-config also brings gio/gobject/glib, which we use for D-Bus properties.
        .systemLibrary(name: "CUPower", path: "Sources/CUPower", pkgConfig: "upower-glib",
                       providers: [.apt(["libupower-glib-dev"])]),
        // Test-only: builds umockdev testbeds in-process so tests can send uevents.
        .systemLibrary(name: "CUMockdev", path: "Sources/CUMockdev", pkgConfig: "umockdev-1.0",
                       providers: [.apt(["libumockdev-dev"])]),

        // GDBus and the GLib main loop (glib-unix.h for file-descriptor sources).
        .systemLibrary(name: "CGio", path: "Sources/CGio", pkgConfig: "gio-unix-2.0",
                       providers: [.apt(["libglib2.0-dev"])]),

        // Linux calls the Glibc overlay does not import (pipe2, netlink).
        .systemLibrary(name: "CLinux", path: "Sources/CLinux"),
        // libsystemd's journal: bgtaskd's decisions as structured entries (journalctl BGTASK_TASK=…).
        .systemLibrary(name: "CSystemd", path: "Sources/CSystemd", pkgConfig: "libsystemd",
                       providers: [.apt(["libsystemd-dev"])]),

        // The JSON value every --json output, trace and audit record is made of: a leaf, no dependencies.
        .target(name: "BgtaskJSON"),
        // Reading files and directories with the path and errno of every error: a leaf, for whoever reads a file.
        .target(name: "BgtaskFiles"),

        // Reads the machine: sysfs, libudev, UPower, NetworkManager, power-profiles-daemon, rtnetlink.
        .target(name: "BgtaskProbes", dependencies: ["BgtaskJSON", "BgtaskFiles", "CUdev", "CUPower", "CLinux"]),

        // The policy language: parse, type-check, evaluate, explain. No I/O: text in, decisions out.
        .target(name: "BgtaskPolicy", dependencies: [.product(name: "TOMLKit", package: "TOMLKit")]),

        // Configuration shared by the CLI and the daemon: policy layers (and the built-in default), state
        // and runtime directories by the XDG rules, and the ownership checks on them.
        .target(name: "BgtaskConfig", dependencies: ["BgtaskPolicy", "BgtaskProtocol", "BgtaskProbes", "BgtaskFiles", .product(name: "TOMLKit", package: "TOMLKit")]),

        // The scheduler core: pure state machines over (conditions, tasks, now) → actions.
        // Also the task's events for observers, the trace format, and the meeting of readings and policy values.
        .target(name: "BgtaskCore", dependencies: ["BgtaskPolicy", "BgtaskJSON"]),

        // Executors and the run loop: spawn, throttle, pause, expire, driven by BgtaskCore.
        .target(name: "BgtaskRun", dependencies: ["BgtaskProbes", "BgtaskFiles", "BgtaskPolicy", "BgtaskCore", "BgtaskConfig", "CLinux"]),

        // What the queue's and the audit trail's SQLite files share: their application id, foreign files refused.
        .target(name: "BgtaskStorage", dependencies: [.product(name: "GRDB", package: "GRDB.swift")]),
        // The audit trail: every decision in SQLite (GRDB, WAL), and the story `bgtask why` tells from it.
        .target(name: "BgtaskAudit", dependencies: ["BgtaskCore", "BgtaskPolicy", "BgtaskJSON", "BgtaskConfig", "BgtaskStorage",
                                                    .product(name: "GRDB", package: "GRDB.swift")]),

        // The D-Bus side: typed values, a connection, exported objects, the GLib main loop.
        .target(name: "BgtaskBus", dependencies: ["CGio"]),
        // The scheduler's D-Bus contract, generated at build time from data/io.github.bgtask.Scheduler1.xml (the one
        // source): names, methods, signals, errors and the typed a{sv} values the daemon, the CLI and the library share.
        .executableTarget(name: "bgtask-protocol-gen"),
        .plugin(name: "BgtaskProtocolPlugin", capability: .buildTool(), dependencies: ["bgtask-protocol-gen"]),
        .target(name: "BgtaskProtocol", dependencies: ["BgtaskBus", "BgtaskJSON"], plugins: ["BgtaskProtocolPlugin"]),

        // The daemon's queue in SQLite: pending and running requests, schedules, retries.
        .target(name: "BgtaskQueue", dependencies: ["BgtaskConfig", "BgtaskJSON", "BgtaskPolicy", "BgtaskStorage",
                                                    .product(name: "GRDB", package: "GRDB.swift")]),

        // bgtaskd: the queue, N supervisors in one GLib loop, the D-Bus interface.
        .target(name: "BgtaskDaemon", dependencies: ["BgtaskBus", "BgtaskFiles", "BgtaskProtocol", "BgtaskQueue", "BgtaskRun", "BgtaskAudit", "BgtaskConfig", "BgtaskJSON",
                                                     "BgtaskCore", "BgtaskPolicy", "BgtaskProbes", "BgtaskStorage", "CLinux", "CSystemd"]),
        // An empty ICU data package in place of Foundation's 32 MiB one (bgtask asks ICU for no locale data).
        .target(name: "CICUNoData"),
        .executableTarget(name: "bgtaskd", dependencies: ["BgtaskDaemon", "BgtaskConfig", "BgtaskProbes", "CICUNoData",
                                                          .product(name: "ArgumentParser", package: "swift-argument-parser")]),

        // The app side: BGTaskScheduler, BGTask and the requests, talking to bgtaskd's app methods.
        .target(name: "BackgroundTasks", dependencies: ["BgtaskBus", "BgtaskProtocol"]),
        // Ports of Apple's samples, run end to end in the tests (Examples/README.md).
        // Swift 5 mode, as Apple's samples are written.
        .executableTarget(name: "ColorFeed", dependencies: ["BackgroundTasks"], path: "Examples/ColorFeed",
                          swiftSettings: [.swiftLanguageMode(.v5)]),
        .executableTarget(name: "Exporter", dependencies: ["BackgroundTasks"], path: "Examples/Exporter",
                          swiftSettings: [.swiftLanguageMode(.v5)]),

        // The libc `bgtask`'s front calls (Embedded Swift imports no Glibc module).
        .systemLibrary(name: "CFront", path: "Sources/CFront"),
        // `bgtask`: a front of about 50 KB in Embedded Swift (no runtime to start) that makes a plain `bgtask submit`
        // one call on the session bus and hands every other command, unchanged, to the full CLI (`bgtask-cli`):
        // scripts that queue work pay a process start like `at`'s, not the CLI's 60 MB one. docs/architecture.md.
        .executableTarget(name: "bgtask", dependencies: ["CFront"], path: "Sources/bgtask-front",
                          swiftSettings: [.enableExperimentalFeature("Embedded"), .unsafeFlags(["-wmo"])],
                          plugins: ["BgtaskProtocolPlugin"]),
        .executableTarget(name: "bgtask-cli", dependencies: ["BgtaskProtocol", 
            "BgtaskJSON", "BgtaskProbes", "BgtaskPolicy", "BgtaskCore", "BgtaskRun", "BgtaskAudit", "BgtaskConfig", "BgtaskBus",
            "CICUNoData", "CLinux", "BgtaskQueue", "BgtaskStorage",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
        ], path: "Sources/bgtask"),
        // umockdev testbeds and child-process helpers shared by the integration tests and the benchmark.
        .target(name: "BgtaskTestSupport", dependencies: ["CUMockdev", "BgtaskProbes", "CLinux"], path: "Tests/Support", exclude: ["dbusmock"]),
        .executableTarget(name: "bgtask-bench", dependencies: ["BgtaskProtocol", "BgtaskProbes", "BgtaskPolicy", "BgtaskAudit", "BgtaskTestSupport",
                                                               "BgtaskBus", "BgtaskQueue", "BgtaskCore"],
                          path: "Benchmarks/bgtask-bench"),

        .testTarget(name: "BgtaskProbesTests", dependencies: ["BgtaskProbes", "BgtaskFiles", "BgtaskTestSupport"],
                    exclude: ["Fixtures"]),
        .testTarget(name: "BgtaskPolicyTests", dependencies: ["BgtaskPolicy", "BgtaskCore", "BgtaskProbes", "BgtaskRun", "BgtaskConfig", "BgtaskTestSupport"],
                    exclude: ["BadPolicies", "Traces"]),
        .testTarget(name: "IntegrationTests", dependencies: ["BgtaskProbes", "BgtaskConfig", "BgtaskTestSupport"]),
        .testTarget(name: "BgtaskRunTests", dependencies: ["BgtaskRun", "BgtaskConfig", "BgtaskCore", "BgtaskPolicy", "BgtaskProbes"]),
        .testTarget(name: "BgtaskDaemonTests", dependencies: ["BgtaskDaemon", "BgtaskFiles", "BgtaskProtocol", "BgtaskJSON", "BgtaskQueue", "BgtaskCore", "BgtaskPolicy", "BgtaskBus", "BgtaskConfig", "BgtaskProbes", "BgtaskRun", "BgtaskTestSupport",
                                                                   .product(name: "GRDB", package: "GRDB.swift")]),
        // The seeds' code shapes, compiled unchanged against BackgroundTasks (Swift 5 mode, as Apple's samples).
        .testTarget(name: "BackgroundTasksTests", dependencies: ["BackgroundTasks", "BgtaskTestSupport"],
                    swiftSettings: [.swiftLanguageMode(.v5)]),
        // The same API from Swift 6 code (strict concurrency), as docs/porting.md promises.
        .testTarget(name: "BackgroundTasksSwift6Tests", dependencies: ["BackgroundTasks"]),
        // The pure core, in virtual time.
        .testTarget(name: "BgtaskCoreTests", dependencies: ["BgtaskCore", "BgtaskPolicy"]),
        .testTarget(name: "BgtaskAuditTests", dependencies: ["BgtaskAudit", "BgtaskRun", "BgtaskPolicy",
                                                                  .product(name: "GRDB", package: "GRDB.swift")]),
    ]
)
