import Foundation
import PackagePlugin

/// Generates BgtaskProtocol's Swift from data/io.github.bgtask.Scheduler1.xml on every build where the XML changed:
/// the interface has one source, and Swift that does not follow it does not compile.
@main
struct BgtaskProtocolPlugin: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: Target) throws -> [Command] {
        let xml = context.package.directoryURL.appending(path: "data/io.github.bgtask.Scheduler1.xml")
        // `bgtask`'s front is Embedded Swift: it gets the names and typed keys only (no BusValue).
        let names = target.name == "bgtask"
        let out = context.pluginWorkDirectoryURL.appending(path: names ? "SchedulerNames.swift" : "SchedulerProtocol.swift")
        return [.buildCommand(displayName: "Generating the scheduler's D-Bus \(names ? "names" : "protocol") from \(xml.lastPathComponent)",
                              executable: try context.tool(named: "bgtask-protocol-gen").url,
                              arguments: (names ? ["--names"] : []) + [xml.path, out.path], inputFiles: [xml], outputFiles: [out])]
    }
}
