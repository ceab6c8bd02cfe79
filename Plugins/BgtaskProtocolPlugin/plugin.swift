import Foundation
import PackagePlugin

/// Generates BgtaskProtocol's Swift from data/io.github.bgtask.Scheduler1.xml on every build where the XML changed:
/// the interface has one source, and Swift that does not follow it does not compile.
@main
struct BgtaskProtocolPlugin: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: Target) throws -> [Command] {
        let xml = context.package.directoryURL.appending(path: "data/io.github.bgtask.Scheduler1.xml")
        let out = context.pluginWorkDirectoryURL.appending(path: "SchedulerProtocol.swift")
        return [.buildCommand(displayName: "Generating the scheduler's D-Bus protocol from \(xml.lastPathComponent)",
                              executable: try context.tool(named: "bgtask-protocol-gen").url,
                              arguments: [xml.path, out.path], inputFiles: [xml], outputFiles: [out])]
    }
}
