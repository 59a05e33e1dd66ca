import Foundation
import VaultScan

extension VaultCommandLine {
  /// `vault scan PATH… [--canary TEXT]… [--canary-file FILE] [--json]`: exit 0 clean, 1 findings,
  /// 2 could not scan.
  func scan(_ arguments: Arguments) throws -> Int32 {
    guard !arguments.positionals.isEmpty else {
      throw UsageError(message: "give at least one PATH to scan", command: "scan")
    }
    var canaries = arguments.lists["--canary"] ?? []
    if let file = arguments.options["--canary-file"] {
      guard let text = try? String(contentsOfFile: file, encoding: .utf8) else {
        throw ScanError.unreadable(path: file, errno: errno == 0 ? ENOENT : errno)
      }
      canaries += text.split(separator: "\n").map(String.init).filter { !$0.isEmpty }
    }
    let report: ScanReport
    do {
      report = try Scanner(canaries: canaries).scan(arguments.positionals)
    } catch let error as ScanError {
      terminal.note("Error: \(error)")
      return ExitCode.couldNotRun.rawValue
    }
    if arguments.flags.contains("--json") {
      terminal.print(try JSON.encode(report))
    } else {
      terminal.print(
        "Scanned \(report.filesScanned) files (\(report.bytesScanned) bytes) for \(canaries.count) canaries: "
          + (report.clean ? "no findings" : "\(report.findings.count) findings"))
      for finding in report.findings {
        terminal.print(
          "  \(finding.file) @\(finding.offset)  \(finding.region)  \(finding.detector)"
            + (finding.encoding.map { " (\($0))" } ?? "") + "  \(finding.excerpt)")
      }
      for skipped in report.skipped { terminal.print("  skipped \(skipped.path): \(skipped.reason)") }
    }
    return (report.clean ? ExitCode.success : ExitCode.failure).rawValue
  }
}
