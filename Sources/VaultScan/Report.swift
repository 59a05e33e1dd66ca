import Foundation

/// One place where data that should not be on disk was found.
public struct Finding: Codable, Equatable, Sendable {
  public var file: String
  public var offset: Int
  /// live-cell, free-block, unallocated, freelist-page, overflow-page, other-page, page-header,
  /// wal-frame, stale-wal-frame, journal, shm, file, compressed-stream.
  public var region: String
  /// canary, json-text, key-value-text, natural-language, key-material (and, from the CLI,
  /// envelope-column and envelope-verify).
  public var detector: String
  /// For canaries: utf8, utf16le, utf16be, base64, hex, json-escaped (prefixed "inflated+" when found
  /// inside a compressed stream).
  public var encoding: String?
  /// A redacted excerpt: never the full text.
  public var excerpt: String

  public init(file: String, offset: Int, region: String, detector: String, encoding: String?, excerpt: String) {
    self.file = file
    self.offset = offset
    self.region = region
    self.detector = detector
    self.encoding = encoding
    self.excerpt = excerpt
  }
}

/// A path the scanner did not read, and why.
public struct Skipped: Codable, Equatable, Sendable {
  public var path: String
  public var reason: String

  public init(path: String, reason: String) {
    self.path = path
    self.reason = reason
  }
}

/// The result of a scan; its JSON form is `vault scan --json`.
public struct ScanReport: Codable, Equatable, Sendable {
  public var filesScanned = 0
  public var bytesScanned = 0
  public var findings: [Finding] = []
  /// Paths that hold no data of their own and were reported, not read: symlinks (never followed)
  /// and special files (FIFOs, sockets, devices are never opened).
  public var skipped: [Skipped] = []
  /// What could not be read, or not read to the end: unreadable files and directories, containers
  /// that could not be checked, compressed streams cut off by the per-file budget. Any entry means
  /// the audit is incomplete and proves nothing about these paths.
  public var incomplete: [Skipped] = []

  enum CodingKeys: String, CodingKey {
    case findings, skipped, incomplete, complete
    case filesScanned = "files_scanned"
    case bytesScanned = "bytes_scanned"
  }

  public init() {}

  public init(from decoder: any Decoder) throws {
    let container = try decoder.container(keyedBy: CodingKeys.self)
    filesScanned = try container.decode(Int.self, forKey: .filesScanned)
    bytesScanned = try container.decode(Int.self, forKey: .bytesScanned)
    findings = try container.decode([Finding].self, forKey: .findings)
    skipped = try container.decode([Skipped].self, forKey: .skipped)
    incomplete = try container.decode([Skipped].self, forKey: .incomplete)
  }

  public func encode(to encoder: any Encoder) throws {
    var container = encoder.container(keyedBy: CodingKeys.self)
    try container.encode(filesScanned, forKey: .filesScanned)
    try container.encode(bytesScanned, forKey: .bytesScanned)
    try container.encode(findings, forKey: .findings)
    try container.encode(skipped, forKey: .skipped)
    try container.encode(incomplete, forKey: .incomplete)
    try container.encode(complete, forKey: .complete)
  }

  /// No findings (says nothing about completeness: see `complete`).
  public var clean: Bool { findings.isEmpty }
  /// Every path under the scan was read to the end.
  public var complete: Bool { incomplete.isEmpty }
}

/// Why a scan could not run at all.
public enum ScanError: Error, Equatable, CustomStringConvertible {
  case unreadable(path: String, errno: Int32)

  public var description: String {
    switch self {
    case .unreadable(let path, let code): "cannot read \(path): \(String(cString: strerror(code)))"
    }
  }
}
