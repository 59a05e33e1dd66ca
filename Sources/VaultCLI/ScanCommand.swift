import Foundation
import Vault
import VaultScan

extension VaultCommandLine {
  /// `vault scan PATH… [--canary TEXT]… [--canary-file FILE] [--verify] [--json]`: exit 0 clean and
  /// complete, 1 findings, 2 could not scan or could not read everything (the library does the
  /// walk and the container audit; this is arguments, progress and printing).
  func scan(_ arguments: Arguments) throws -> Int32 {
    guard !arguments.positionals.isEmpty else {
      throw UsageError(message: "give at least one PATH to scan", command: "scan")
    }
    var canaries = arguments.lists["--canary"] ?? []
    if let file = arguments.options["--canary-file"] {
      guard let text = try? String(contentsOfFile: file, encoding: .utf8) else {
        throw ScanError.unreadable(path: file, errno: errno == 0 ? ENOENT : errno)
      }
      // Split on line feeds by scalar ("\r\n" is one Character in Swift) and drop a trailing CR.
      canaries += text.unicodeScalars.split(separator: "\n").map { line in
        var line = String(String.UnicodeScalarView(line))
        if line.hasSuffix("\r") { line.removeLast() }
        return line
      }.filter { !$0.isEmpty }
    }
    // Shorter canaries would match everywhere and mean nothing: refuse rather than ignore them.
    if let short = canaries.first(where: { $0.utf8.count < 4 }) {
      throw UsageError(message: "canaries must be at least 4 bytes (got one of \(short.utf8.count))", command: "scan")
    }
    // The per-file decompression budget: MiB on top of 64 times the file's size, and seconds.
    var budget = InflateBudget()
    if let text = arguments.options["--inflate-limit"] {
      guard let mebibytes = Int(text), (1...1_048_576).contains(mebibytes) else {
        throw UsageError(
          message: "--inflate-limit must be a number of MiB from 1 to 1048576 (got '\(text)')", command: "scan")
      }
      budget.baseBytes = mebibytes << 20
    }
    let secondsText = arguments.options["--inflate-seconds"]
    guard let seconds = CommandLineEnvironment.seconds(secondsText, in: 1...86400, fallback: budget.seconds) else {
      throw UsageError(
        message: "--inflate-seconds must be a number of seconds from 1 to 86400 (got '\(secondsText ?? "")')",
        command: "scan")
    }
    budget.seconds = seconds
    // With --verify, the vault is opened first: a home that cannot be opened scans nothing.
    let vault = arguments.flags.contains("--verify") ? try openVault(arguments) : nil
    var report: ScanReport
    // Each directory level of the walk holds a descriptor: the soft open-file limit (often 1,024)
    // is raised to the hard one, so deep trees are read rather than cut at half the soft limit.
    ProcessResources.raiseOpenFileLimit(to: 1 << 16)
    do {
      var scanner = Scanner(canaries: canaries, verifyingWith: vault)
      scanner.inflateBudget = budget
      if terminal.isInteractive {
        // A progress line on stderr, redrawn at most four times a second; silent when not a terminal.
        var last = Date.distantPast
        let terminal = self.terminal
        scanner.progress = { files, bytes in
          guard Date().timeIntervalSince(last) >= 0.25 else { return }
          last = Date()
          terminal.writeError(String(format: "\rscanning: %d files, %.1f MB", files, Double(bytes) / 1e6))
        }
      }
      report = try scanner.scan(arguments.positionals)
      if terminal.isInteractive { terminal.writeError("\r\u{1B}[K") }
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
      for incomplete in report.incomplete {
        terminal.print("  not fully inspected \(incomplete.path): \(incomplete.reason)")
      }
      if let verify = report.verify {
        terminal.print(
          "Verified \(verify.opened + verify.failed) envelopes: \(verify.opened) open, \(verify.failed) do not")
        for (container, counts) in verify.containers.sorted(by: { $0.key < $1.key }) {
          let versions = counts.sorted { $0.key < $1.key }.map { "v\($0.key) \($0.value)" }.joined(separator: ", ")
          terminal.print("  \(container): \(versions.isEmpty ? "no records" : versions)")
        }
      }
    }
    // Findings come first (exit 1); otherwise an audit that could not read everything has not
    // proven anything about what it missed (exit 2), and only a complete one is clean (exit 0).
    if !report.clean { return ExitCode.failure.rawValue }
    if !report.complete {
      terminal.note(
        "Error: the audit is incomplete: \(report.incomplete.count) path(s) not fully inspected"
          + (arguments.flags.contains("--json") ? " (see \"incomplete\")" : " (listed above)"))
      return ExitCode.couldNotRun.rawValue
    }
    return ExitCode.success.rawValue
  }
}
