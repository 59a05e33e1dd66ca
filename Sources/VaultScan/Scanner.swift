import CZlib
import Foundation
import VaultCrypto

/// Looks through files for plaintext that should not be on disk: known canaries in many encodings
/// (also inside gzip/zlib streams), JSON text, and key material outside the key store. Knows the
/// structure of SQLite databases, WAL files and rollback journals, so each finding names the kind
/// of region it sits in. Files are streamed, never loaded whole.
public struct Scanner {
  public let canaries: [String]
  let patterns: [Pattern]
  let searcher: MultiSearcher
  /// Called after each chunk with files and bytes done so far (for a progress line).
  public var progress: ((_ files: Int, _ bytes: Int) -> Void)?
  static let chunk = 4 << 20

  /// - Parameter canaries: strings that must not appear; each must be at least 4 bytes of UTF-8
  ///   (shorter ones match too much to mean anything and are ignored).
  public init(canaries: [String]) {
    self.canaries = canaries.filter { $0.utf8.count >= 4 }
    patterns = self.canaries.enumerated().flatMap { Patterns.variants(of: $0.element, index: $0.offset) }
    searcher = MultiSearcher(patterns.map(\.bytes))
    precondition(searcher.patterns.count == patterns.count, "every canary form is at least 4 bytes")
  }

  /// Scans files and directories (recursively). Symlinks are reported and not followed.
  /// - Throws: `ScanError.unreadable` when a path given on the command line cannot be read.
  public func scan(_ paths: [String]) throws -> ScanReport {
    var report = ScanReport()
    for path in paths {
      var info = stat()
      guard lstat(path, &info) == 0 else { throw ScanError.unreadable(path: path, errno: errno) }
      try walk(path, info: info, report: &report)
    }
    report.findings.sort { ($0.file, $0.offset) < ($1.file, $1.offset) }
    return report
  }

  private func walk(_ path: String, info: stat, report: inout ScanReport) throws {
    switch info.st_mode & S_IFMT {
    case S_IFLNK:
      report.skipped.append(Skipped(path: path, reason: "symlink (not followed)"))
    case S_IFDIR:
      guard let names = try? FileManager.default.contentsOfDirectory(atPath: path) else {
        report.incomplete.append(Skipped(path: path, reason: "directory not readable"))
        return
      }
      for name in names.sorted() {
        let child = path.hasSuffix("/") ? path + name : path + "/" + name
        var childInfo = stat()
        guard lstat(child, &childInfo) == 0 else {
          report.incomplete.append(Skipped(path: child, reason: "vanished or unreadable"))
          continue
        }
        try walk(child, info: childInfo, report: &report)
      }
    case S_IFREG:
      scanFile(path, size: Int(info.st_size), report: &report)
    default:
      report.skipped.append(Skipped(path: path, reason: "not a regular file"))
    }
  }

  private func scanFile(_ path: String, size: Int, report: inout ScanReport) {
    let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
    guard fd >= 0 else {
      report.incomplete.append(Skipped(path: path, reason: "not readable"))
      return
    }
    defer { close(fd) }
    report.filesScanned += 1
    report.bytesScanned += size
    let name = (path as NSString).lastPathComponent
    let regions = RegionMap(fd: fd, size: size, name: name)
    if let key = keyMaterial(fd: fd, size: size, path: path) {
      report.findings.append(key.finding)
      // A file that is only a key holds nothing else; an .env file with a key line may.
      if key.wholeFile { return }
    }
    // What the file is decides which heuristics mean something in it (ContentKind).
    let content = ContentKind.of(
      head: RegionMap.read(fd, at: 0, count: 65536), fileKind: regions.kind,
      vaultMetadata: Self.isVaultMetadata(fd: fd, size: size, name: name))
    let overlap = max(patterns.map(\.bytes.count).max() ?? 1, 64) - 1
    var offset = 0
    // One finding per offset and detector (and per pattern for canaries): the chunks overlap.
    var seen = Set<[Int]>()
    while offset < size {
      let count = min(Self.chunk + overlap, size - offset)
      let chunk = RegionMap.read(fd, at: offset, count: count)
      if chunk.isEmpty { break }
      chunk.withUnsafeBytes { bytes in
        searcher.search(bytes) { hit, index in
          guard seen.insert([offset + hit, index]).inserted else { return }
          let pattern = patterns[index]
          report.findings.append(
            Finding(
              file: path, offset: offset + hit, region: regions.region(at: offset + hit), detector: "canary",
              encoding: pattern.encoding, excerpt: redact(chunk[hit..<(hit + pattern.bytes.count)])))
        }
        for key in KeyMaterial.armouredKeys(bytes) where seen.insert([offset + key.start, -4]).inserted {
          report.findings.append(
            Finding(
              file: path, offset: offset + key.start, region: regions.region(at: offset + key.start),
              detector: "key-material", encoding: "pem", excerpt: redact(chunk[key.start..<key.end])))
        }
        if content.judgesJSON {
          for hit in jsonText(bytes) where seen.insert([offset + hit.start, -1]).inserted {
            report.findings.append(
              Finding(
                file: path, offset: offset + hit.start, region: regions.region(at: offset + hit.start),
                detector: "json-text", encoding: nil, excerpt: redact(chunk[hit.start..<hit.end])))
          }
        }
        for hit in content.textFindings(bytes) where seen.insert([offset + hit.start, -2]).inserted {
          report.findings.append(
            Finding(
              file: path, offset: offset + hit.start, region: regions.region(at: offset + hit.start),
              detector: hit.detector, encoding: nil, excerpt: redact(chunk[hit.start..<hit.end])))
        }
        for stream in compressedStreams(bytes) where seen.insert([offset + stream.start, -3]).inserted {
          for finding in scanCompressed(
            UnsafeRawBufferPointer(rebasing: bytes[stream.start...]), fd: fd, fileSize: size, path: path,
            fileOffset: offset + stream.start, minimumOutput: stream.isGzip ? 1 : 16)
          {
            report.findings.append(finding)
          }
        }
      }
      progress?(report.filesScanned, report.bytesScanned - size + min(size, offset + count))
      if offset + count >= size { break }
      offset += Self.chunk
    }
    if regions.kind == .database { scanOverflowPayloads(regions, fd: fd, path: path, report: &report) }
  }

  /// Data that spills onto SQLite overflow pages is interrupted by each page's 4-byte pointer, so
  /// the chunk pass cannot see a canary or a compressed stream that crosses a page. Payloads are
  /// reassembled and searched again; only what crosses a page boundary (or sits in a compressed
  /// stream) is reported here, the rest was found already.
  private func scanOverflowPayloads(_ regions: RegionMap, fd: Int32, path: String, report: inout ScanReport) {
    var seen = Set<[Int]>()
    regions.forEachOverflowPayload { payload, segments in
      func fileOffset(_ payloadOffset: Int) -> Int {
        let segment = segments.last { $0.payloadOffset <= payloadOffset } ?? segments[0]
        return segment.fileOffset + payloadOffset - segment.payloadOffset
      }
      func crossesPages(_ start: Int, _ count: Int) -> Bool {
        !segments.contains { $0.payloadOffset <= start && start + count <= $0.payloadOffset + $0.count }
      }
      payload.withUnsafeBytes { bytes in
        searcher.search(bytes) { hit, index in
          let pattern = patterns[index]
          guard crossesPages(hit, pattern.bytes.count), seen.insert([fileOffset(hit), index]).inserted else { return }
          report.findings.append(
            Finding(
              file: path, offset: fileOffset(hit), region: "overflow-page", detector: "canary",
              encoding: pattern.encoding,
              excerpt: redact(payload[hit..<(hit + pattern.bytes.count)])))
        }
        for stream in compressedStreams(bytes) where seen.insert([fileOffset(stream.start), -3]).inserted {
          let input = UnsafeRawBufferPointer(rebasing: bytes[stream.start...])
          // A stream that ends inside one page was inflated whole by the chunk pass already.
          guard let trial = Self.inflate(input, limit: 64 << 20), crossesPages(stream.start, trial.consumed) else {
            continue
          }
          for var finding in scanCompressed(
            input, fd: fd, fileSize: 0, path: path, fileOffset: fileOffset(stream.start),
            minimumOutput: stream.isGzip ? 1 : 16)
          {
            finding.region = "overflow-page"
            if !report.findings.contains(finding) { report.findings.append(finding) }
          }
        }
      }
    }
  }

  /// vault's own metadata files hold JSON that is not application data: the manifest and memo's
  /// delivery history. They are still searched for canaries.
  static func isVaultMetadata(fd: Int32, size: Int, name: String) -> Bool {
    guard size < 1 << 20, name == "manifest.json" || name == "memo-history.jsonl" else { return false }
    let text = String(decoding: RegionMap.read(fd, at: 0, count: size), as: UTF8.self)
    if name == "manifest.json" { return text.contains("\"vault_id\"") && text.contains("\"versions\"") }
    return text.split(separator: "\n").allSatisfy { $0.hasPrefix("{\"id\":\"") && $0.contains("\"delivered_at\"") }
  }
}
