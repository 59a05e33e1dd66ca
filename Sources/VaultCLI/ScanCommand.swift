import Foundation
import Vault
import VaultQueue
import VaultScan

/// What `--verify` found in vault's own containers.
struct VerifyReport: Codable {
  var containers: [String: [String: Int]] = [:]
  var opened = 0
  var failed = 0
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
      canaries += text.split(separator: "\n").map(String.init).filter { !$0.isEmpty }
    }
    var report: ScanReport
    do {
      report = try Scanner(canaries: canaries).scan(arguments.positionals)
    } catch let error as ScanError {
      terminal.note("Error: \(error)")
      return ExitCode.couldNotRun.rawValue
    }
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
      if let verify {
        terminal.print(
          "Verified \(verify.opened + verify.failed) envelopes: \(verify.opened) open, \(verify.failed) do not")
        for (container, counts) in verify.containers.sorted(by: { $0.key < $1.key }) {
          let versions = counts.sorted { $0.key < $1.key }.map { "v\($0.key) \($0.value)" }.joined(separator: ", ")
          terminal.print("  \(container): \(versions.isEmpty ? "no records" : versions)")
        }
      }
    }
    return (report.clean ? ExitCode.success : ExitCode.failure).rawValue
  }
}

extension VaultCommandLine {
  /// Opens every envelope in every vault container among the scanned files with the vault of
  /// `--home`: counts records per key version per container (the audit before retiring a key) and
  /// reports each envelope that does not open as a finding, by kind.
  func verifyEnvelopes(_ arguments: Arguments, report: inout ScanReport) throws -> VerifyReport {
    let vault = try openVault(arguments)
    var result = VerifyReport()
    var files: [String] = []
    for path in arguments.positionals {
      if let enumerator = FileManager.default.enumerator(atPath: path) {
        while let name = enumerator.nextObject() as? String { files.append(path + "/" + name) }
      } else {
        files.append(path)
      }
    }
    for file in files.sorted() where !file.hasSuffix("-wal") && !file.hasSuffix("-shm") && !file.hasSuffix("-journal") {
      guard let head = FileManager.default.contents(atPath: file)?.prefix(16),
        head.starts(with: Array("SQLite format 3".utf8))
      else { continue }
      var counts: [String: Int] = [:]
      let isContainer = try QueueContainer.forEachEnvelope(path: file) { id, queue, version, envelope in
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
      if isContainer { result.containers[file] = counts }
    }
    return result
  }
}
