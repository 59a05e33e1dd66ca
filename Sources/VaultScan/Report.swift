import Foundation
import VaultCrypto

/// One place where data that should not be on disk was found.
public struct Finding: Codable, Hashable, Sendable {
  /// The file, as `PathText.display` shows paths: valid UTF-8 whatever bytes the name holds.
  public var file: String
  /// Where in the file (0 for findings about a container's records, which name the record instead).
  public var offset: Int
  /// live-cell, free-block, unallocated, freelist-page, overflow-page, other-page, page-header,
  /// wal-frame, stale-wal-frame, journal, shm, file, compressed-stream; file-name, symlink-target
  /// and xattr for a canary in the path, a symlink's target or an extended attribute.
  public var region: String
  /// canary, json-text, key-value-text, natural-language, key-material, and for vault's own
  /// containers envelope-column (checked without keys) and envelope-verify (with `--verify`).
  public var detector: String
  /// For canaries: utf8, utf16le, utf16be, base64, hex, json-escaped, url-encoded (prefixed
  /// "inflated+" when found in decoded data). For key material: raw-32-bytes, hex, base64,
  /// base64url, pem, vault-keyfile (inflated+pem and inflated+vault-keyfile for those in decoded
  /// data).
  /// For envelope checks: the problem or error kind. "inflated" for a heuristic finding in decoded
  /// data; nil otherwise.
  public var encoding: String?
  /// A redacted excerpt: never the full text.
  public var excerpt: String

  /// A finding; `excerpt` must already be redacted.
  ///
  /// - Parameters:
  ///   - file: the file, as `PathText.display(_:)` shows it.
  ///   - offset: where in the file (0 for a finding about a container's record).
  ///   - region: which part of the file (see `region`).
  ///   - detector: what found it (see `detector`).
  ///   - encoding: how it was written, or nil (see `encoding`).
  ///   - excerpt: a redacted excerpt; never the full text, never a secret.
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
  /// The path, shown as `PathText.display` shows it.
  public var path: String
  /// Why it was not read: a kind ("symlink (not followed)", "FIFO (never opened)", "not readable
  /// (Permission denied)"…), never anything read from the file.
  public var reason: String

  /// A path and why it was not read.
  ///
  /// - Parameters:
  ///   - path: the path, as `PathText.display(_:)` shows it.
  ///   - reason: the kind of file or error; never anything read from the file.
  public init(path: String, reason: String) {
    self.path = path
    self.reason = reason
  }
}

/// What `--verify` found in vault's own containers: records per key version per container (the
/// audit before retiring a key) and how many envelopes opened.
public struct VerifyReport: Codable, Equatable, Sendable {
  /// For each container (by path): records per key version ("1": 40, "2": 3).
  public var containers: [String: [String: Int]] = [:]
  /// Envelopes that opened with the vault.
  public var opened = 0
  /// Envelopes that did not (each is an `envelope-verify` finding).
  public var failed = 0
  /// Containers that could not be read (corrupt, unreadable): each is listed as incomplete.
  public var unreadable = 0

  /// An empty report, before any container was read.
  public init() {}
}

/// The result of a scan; its JSON form is `vault scan --json`.
public struct ScanReport: Codable, Equatable, Sendable {
  /// Regular files opened and read.
  public var filesScanned = 0
  /// Their bytes.
  public var bytesScanned = 0
  /// What should not be on disk, sorted by file and offset.
  public var findings: [Finding] = []
  /// Paths that hold no data of their own and were reported, not read: symlinks (never followed),
  /// special files (FIFOs, sockets, devices are never opened), and a directory that is one already
  /// being walked (a bind-mount loop).
  public var skipped: [Skipped] = []
  /// What could not be read, or not read to the end: unreadable files and directories, files that
  /// changed type while being opened, directories nested too deep, containers that could not be
  /// checked. Any entry means the audit is incomplete and proves nothing about these paths.
  public var incomplete: [Skipped] = []
  /// With a vault to verify against (`Scanner(canaries:verifyingWith:)`): what opening every
  /// envelope found. Nil otherwise.
  public var verify: VerifyReport?

  enum CodingKeys: String, CodingKey {
    case findings, skipped, incomplete, complete, verify
    case filesScanned = "files_scanned"
    case bytesScanned = "bytes_scanned"
  }

  /// An empty report, before anything was scanned.
  public init() {}

  /// Reads the JSON form (`complete` is derived, and ignored when read).
  ///
  /// - Parameter decoder: the decoder to read from.
  /// - Throws: `DecodingError` when a key other than `verify` is missing or has the wrong type.
  public init(from decoder: any Decoder) throws {
    let container = try decoder.container(keyedBy: CodingKeys.self)
    filesScanned = try container.decode(Int.self, forKey: .filesScanned)
    bytesScanned = try container.decode(Int.self, forKey: .bytesScanned)
    findings = try container.decode([Finding].self, forKey: .findings)
    skipped = try container.decode([Skipped].self, forKey: .skipped)
    incomplete = try container.decode([Skipped].self, forKey: .incomplete)
    verify = try container.decodeIfPresent(VerifyReport.self, forKey: .verify)
  }

  /// Writes the JSON form: files_scanned, bytes_scanned, findings, skipped, incomplete, complete,
  /// and verify when there is one.
  ///
  /// - Parameter encoder: the encoder to write to.
  /// - Throws: the encoder's errors.
  public func encode(to encoder: any Encoder) throws {
    var container = encoder.container(keyedBy: CodingKeys.self)
    try container.encode(filesScanned, forKey: .filesScanned)
    try container.encode(bytesScanned, forKey: .bytesScanned)
    try container.encode(findings, forKey: .findings)
    try container.encode(skipped, forKey: .skipped)
    try container.encode(incomplete, forKey: .incomplete)
    try container.encode(complete, forKey: .complete)
    // Absent is null, never omitted (the command line's JSON contract).
    try container.encode(verify, forKey: .verify)
  }

  /// At most this many findings of one detector are listed per file; the rest are counted in one
  /// closing finding for that file and detector (a file of a million JSON lines is one leak, and
  /// listing each would make memory grow with the file).
  public static let findingsPerDetectorPerFile = 100
  /// Findings per detector in the file being scanned.
  private var fileCounts: [String: Int] = [:]

  /// Whether a finding of `detector` would still be listed for the file being scanned.
  func admits(_ detector: String) -> Bool { fileCounts[detector, default: 0] < Self.findingsPerDetectorPerFile }

  /// Lists `finding`, or only counts it once its detector has reached the limit for this file.
  mutating func add(_ finding: Finding) {
    let count = fileCounts[finding.detector, default: 0]
    fileCounts[finding.detector] = count + 1
    if count < Self.findingsPerDetectorPerFile { findings.append(finding) }
  }

  /// Counts `count` more findings of `detector` in the file being scanned without listing them
  /// (a caller that held only the first ones it found, as many as a file lists).
  mutating func count(_ count: Int, moreOf detector: String) {
    guard count > 0 else { return }
    fileCounts[detector, default: 0] += count
  }

  /// Closes the file being scanned: one finding per detector that had more than the limit says how
  /// many more there were.
  mutating func finishFile(_ path: String) {
    for (detector, count) in fileCounts.sorted(by: { $0.key < $1.key }) where count > Self.findingsPerDetectorPerFile {
      findings.append(
        Finding(
          file: path, offset: 0, region: "file", detector: detector, encoding: nil,
          excerpt: "\(count - Self.findingsPerDetectorPerFile) more \(detector) findings in this file, not listed"))
    }
    fileCounts = [:]
  }

  /// Adds `other` after what this report holds (findings, skipped and incomplete paths, counts);
  /// its `verify` is not taken (the scan keeps one, in order).
  mutating func append(_ other: ScanReport) {
    filesScanned += other.filesScanned
    bytesScanned += other.bytesScanned
    findings += other.findings
    skipped += other.skipped
    incomplete += other.incomplete
  }

  /// Nothing read, found or noted yet.
  var isEmpty: Bool {
    filesScanned == 0 && bytesScanned == 0 && findings.isEmpty && skipped.isEmpty && incomplete.isEmpty
  }

  /// No findings (says nothing about completeness: see `complete`).
  public var clean: Bool { findings.isEmpty }
  /// Every path under the scan was read to the end.
  public var complete: Bool { incomplete.isEmpty }
}

/// Why a scan could not run at all.
public enum ScanError: Error, Equatable, CustomStringConvertible {
  /// A path given to `Scanner.scan` does not exist or cannot be looked at.
  case unreadable(path: String, errno: Int32)
  /// The scan's threads could not get a descriptor table of their own (`unshare` refused, as a
  /// seccomp filter may): nothing was read, since closing what it read in the process's table
  /// could drop the SQLite locks of containers this process has open. Run `vault scan` in a
  /// process of its own instead.
  case noPrivateDescriptorTable(errno: Int32)

  /// What happened, naming the path and the system's reason.
  public var description: String {
    switch self {
    case .unreadable(let path, let code): "cannot read \(path): \(String(cString: strerror(code)))"
    case .noPrivateDescriptorTable(let code):
      "cannot scan in this process: its scan threads could not get a descriptor table of their own "
        + "(\(String(cString: strerror(code)))), and closing files in the process's table could drop "
        + "the SQLite locks of containers it has open; run `vault scan` in a process of its own"
    }
  }
}

extension ScanError: CodedError {
  /// `scan.` and the case, in kebab case: stable across releases.
  public var code: String {
    switch self {
    case .unreadable: "scan.unreadable"
    case .noPrivateDescriptorTable: "scan.no-private-descriptor-table"
    }
  }
}
