import Foundation
import Vault
import VaultQueue
import VaultScan

/// What `--verify` found in vault's own containers.
struct VerifyReport: Codable {
  var containers: [String: [String: Int]] = [:]
  var opened = 0
  var failed = 0
  /// Containers that could not be read (corrupt, unreadable): the audit is incomplete.
  var unreadable = 0
}

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
    var report: ScanReport
    do {
      var scanner = Scanner(canaries: canaries)
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
    try checkContainers(arguments.positionals, report: &report)
    var verify: VerifyReport?
    if arguments.flags.contains("--verify") {
      verify = try verifyEnvelopes(arguments, report: &report)
    }
    if arguments.flags.contains("--json") {
      struct Output: Encodable {
        let report: ScanReport
        let verify: VerifyReport?
        func encode(to encoder: any Encoder) throws {
          try report.encode(to: encoder)
          var container = encoder.container(keyedBy: Key.self)
          try container.encodeIfPresent(verify, forKey: .verify)
        }
        enum Key: String, CodingKey { case verify }
      }
      terminal.print(try JSON.encode(Output(report: report, verify: verify)))
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
      if let verify {
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

extension VaultCommandLine {
  /// SQLite files among `paths` (recursively), excluding -wal, -shm and -journal files.
  func sqliteFiles(_ paths: [String]) -> [String] {
    var files: [String] = []
    for path in paths {
      var isDirectory: ObjCBool = false
      guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else { continue }
      if isDirectory.boolValue, let enumerator = FileManager.default.enumerator(atPath: path) {
        while let name = enumerator.nextObject() as? String { files.append(path + "/" + name) }
      } else {
        files.append(path)
      }
    }
    return files.sorted().filter { file in
      guard !file.hasSuffix("-wal"), !file.hasSuffix("-shm"), !file.hasSuffix("-journal"),
        let handle = FileHandle(forReadingAtPath: file)
      else { return false }
      defer { try? handle.close() }
      return (try? handle.read(upToCount: 16)).map { $0.starts(with: Array("SQLite format 3".utf8)) } ?? false
    }
  }

  /// Without any key: in every vault container, each envelope column value must be a format-1
  /// envelope of the container's own keyring whose ciphertext looks random. A value that is not
  /// (plaintext written there, a truncated or foreign record) is a finding.
  func checkContainers(_ paths: [String], report: inout ScanReport) throws {
    for file in sqliteFiles(paths) {
      do {
        try checkContainer(file, report: &report)
      } catch {
        // A corrupt or unreadable database must not hide what the rest of the scan found.
        report.incomplete.append(Skipped(path: file, reason: "envelope columns not checked: \(Self.describe(error).0)"))
      }
    }
  }

  private func checkContainer(_ file: String, report: inout ScanReport) throws {
    guard let keyring = try QueueContainer.keyringID(path: file) else { return }
    _ = try QueueContainer.forEachEnvelope(path: file) { id, queue, _, envelope in
      var problem: String?
      do {
        let header = try Envelope.header(of: envelope)
        if header.keyring.hex != keyring { problem = "foreign-keyring" }
        if problem == nil, Self.looksLowEntropy(envelope.dropFirst(Envelope.headerCount)) { problem = "low-entropy" }
      } catch let error as EnvelopeError {
        problem = error == .truncated ? "truncated" : "not-an-envelope"
      }
      if let problem {
        report.findings.append(
          Finding(
            file: file, offset: 0, region: "live-cell", detector: "envelope-column", encoding: problem,
            excerpt: "record \(id) in queue \(queue)"))
      }
    }
  }

  /// Ciphertext has about as many distinct byte values as random data; text and padding do not.
  static func looksLowEntropy(_ bytes: ArraySlice<UInt8>) -> Bool {
    guard bytes.count >= 32 else { return false }
    let expected = 256 * (1 - pow(255.0 / 256.0, Double(bytes.count)))
    return Double(Set(bytes).count) < expected * 0.6
  }

  /// Opens every envelope in every vault container among the scanned files with the vault of
  /// `--home`: counts records per key version per container (the audit before retiring a key) and
  /// reports each envelope that does not open as a finding, by kind.
  func verifyEnvelopes(_ arguments: Arguments, report: inout ScanReport) throws -> VerifyReport {
    let vault = try openVault(arguments)
    var result = VerifyReport()
    for file in sqliteFiles(arguments.positionals) {
      var counts: [String: Int] = [:]
      let isContainer: Bool
      do {
        isContainer = try QueueContainer.forEachEnvelope(path: file) { id, queue, version, envelope in
          counts[String(version), default: 0] += 1
          let context = Array("vault.queue.v1".utf8) + [0] + Array(queue.utf8) + [0] + Array(id.utf8)
          do {
            _ = try vault.open(envelope, context: context)
            result.opened += 1
          } catch let error as EnvelopeError {
            result.failed += 1
            report.findings.append(
              Finding(
                file: file, offset: 0, region: "live-cell", detector: "envelope-verify",
                encoding: String(describing: error).components(separatedBy: ":").first,
                excerpt: "record \(id) in queue \(queue), key version \(version)"))
          }
        }
      } catch let error as QueueError {
        report.incomplete.append(Skipped(path: file, reason: "envelopes not verified: \(error)"))
        result.unreadable += 1
        continue
      }
      if isContainer { result.containers[file] = counts }
    }
    return result
  }
}
