import CZlib
import Foundation
import VaultCrypto

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
  public var skipped: [Skipped] = []

  enum CodingKeys: String, CodingKey {
    case findings, skipped
    case filesScanned = "files_scanned"
    case bytesScanned = "bytes_scanned"
  }

  public var clean: Bool { findings.isEmpty }
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
        report.skipped.append(Skipped(path: path, reason: "directory not readable"))
        return
      }
      for name in names.sorted() {
        let child = path.hasSuffix("/") ? path + name : path + "/" + name
        var childInfo = stat()
        guard lstat(child, &childInfo) == 0 else {
          report.skipped.append(Skipped(path: child, reason: "vanished or unreadable"))
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
      report.skipped.append(Skipped(path: path, reason: "not readable"))
      return
    }
    defer { close(fd) }
    report.filesScanned += 1
    report.bytesScanned += size
    let name = (path as NSString).lastPathComponent
    let regions = RegionMap(fd: fd, size: size, name: name)
    if let keyFinding = keyMaterial(fd: fd, size: size, path: path) {
      report.findings.append(keyFinding)
      return
    }
    let knownMetadata = Self.isVaultMetadata(fd: fd, size: size, name: name)
    let textFile =
      regions.kind == .other && !knownMetadata && Self.looksLikeText(RegionMap.read(fd, at: 0, count: 4096))
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
        if !knownMetadata {
          for hit in jsonText(bytes) where seen.insert([offset + hit.start, -1]).inserted {
            report.findings.append(
              Finding(
                file: path, offset: offset + hit.start, region: regions.region(at: offset + hit.start),
                detector: "json-text", encoding: nil, excerpt: redact(chunk[hit.start..<hit.end])))
          }
        }
        // Text files are judged line by line; anything else by its runs of printable bytes.
        // (vault's own metadata files are neither: they hold paths and states, not user data.)
        let textHits =
          knownMetadata ? [] : textFile ? TextDetectors.findings(bytes) : TextDetectors.runFindings(bytes)
        for hit in textHits where seen.insert([offset + hit.start, -2]).inserted {
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

  /// A vault keyfile (format 1 or 2 with a valid checksum) or a bare 32-byte high-entropy file.
  private func keyMaterial(fd: Int32, size: Int, path: String) -> Finding? {
    if size == 32 {
      let bytes = RegionMap.read(fd, at: 0, count: 32)
      if Set(bytes).count >= 24 {
        return Finding(
          file: path, offset: 0, region: "file", detector: "key-material", encoding: "raw-32-bytes",
          excerpt: "32 random-looking bytes (possible raw key, redacted)")
      }
    }
    guard size >= 48, size <= 1 << 20 else { return nil }
    let bytes = RegionMap.read(fd, at: 0, count: size)
    // Keyfile formats 1 and 2 both end in the SHA-256 of everything before it.
    guard bytes.count == size, Array(bytes[0..<3]) == Array("VKF".utf8), bytes[3] == 1 || bytes[3] == 2 else {
      return nil
    }
    let body = Array(bytes[0..<(size - 32)])
    guard let digest = try? SHA256.hash(body), digest == Array(bytes[(size - 32)...]) else { return nil }
    return Finding(
      file: path, offset: 0, region: "file", detector: "key-material", encoding: "vault-keyfile",
      excerpt: "a vault keyfile (redacted); keys belong outside the data directory")
  }

  /// vault's own metadata files hold JSON that is not application data: the manifest and memo's
  /// delivery history. They are still searched for canaries.
  static func isVaultMetadata(fd: Int32, size: Int, name: String) -> Bool {
    guard size < 1 << 20, name == "manifest.json" || name == "memo-history.jsonl" else { return false }
    let text = String(decoding: RegionMap.read(fd, at: 0, count: size), as: UTF8.self)
    if name == "manifest.json" { return text.contains("\"vault_id\"") && text.contains("\"versions\"") }
    return text.split(separator: "\n").allSatisfy { $0.hasPrefix("{\"id\":\"") && $0.contains("\"delivered_at\"") }
  }

  /// A file whose first 4 KiB are at least 95% printable text (logs, dumps, CSV).
  static func looksLikeText(_ head: [UInt8]) -> Bool {
    guard head.count >= 64 else { return false }
    let printable = head.filter { ($0 >= 0x20 && $0 < 0x7f) || $0 == 0x0a || $0 == 0x0d || $0 == 0x09 || $0 >= 0x80 }
    return Double(printable.count) >= Double(head.count) * 0.95
  }

  /// Runs of printable text that look like JSON objects: `{"` followed by `":` within the run,
  /// at least 16 bytes long, with two or more keys.
  private func jsonText(_ bytes: UnsafeRawBufferPointer) -> [(start: Int, end: Int)] {
    var found: [(Int, Int)] = []
    var index = 0
    let opening: [UInt8] = [0x7b, 0x22]  // {"
    for hit in Patterns.occurrences(of: opening, in: bytes) where hit >= index {
      var end = hit
      while end < bytes.count, bytes[end] >= 0x20, bytes[end] < 0x7f { end += 1 }
      let run = UnsafeRawBufferPointer(rebasing: bytes[hit..<end])
      if end - hit >= 16, Patterns.occurrences(of: [0x22, 0x3a], in: run).count >= 2 {
        found.append((hit, end))
      }
      index = end
    }
    return found
  }

  /// Offsets where a gzip member starts (1f 8b 08).
  /// Offsets where a gzip member (1f 8b 08) or a zlib stream starts: 0x78 then a flag byte that
  /// makes the 16-bit header a multiple of 31 (RFC 1950), with no preset dictionary.
  private func compressedStreams(_ bytes: UnsafeRawBufferPointer) -> [(start: Int, isGzip: Bool)] {
    var starts = Patterns.occurrences(of: [0x1f, 0x8b, 0x08], in: bytes).map { (start: $0, isGzip: true) }
    for offset in Patterns.occurrences(of: [0x78], in: bytes) where offset + 2 < bytes.count {
      let flags = bytes[offset + 1]
      if (0x7800 | Int(flags)) % 31 == 0, flags & 0x20 == 0 { starts.append((offset, false)) }
    }
    return starts
  }

  /// Inflates a stream (up to 64 MiB out) and searches it for canaries and JSON text.
  /// Inflates a stream (up to 64 MiB out) and searches it. It starts from the chunk in memory; a
  /// stream that runs past the chunk's end is inflated again from the file (up to 64 MiB in).
  private func scanCompressed(
    _ input: UnsafeRawBufferPointer, fd: Int32, fileSize: Int, path: String, fileOffset: Int, minimumOutput: Int
  ) -> [Finding] {
    guard var result = Self.inflate(input, limit: 64 << 20) else { return [] }
    if result.ranOutOfInput, fileOffset + input.count < fileSize {
      let window = RegionMap.read(fd, at: fileOffset, count: min(64 << 20, fileSize - fileOffset))
      if let longer = window.withUnsafeBytes({ Self.inflate($0, limit: 64 << 20) }) { result = longer }
    }
    // Random data passes a 2-byte zlib header check now and then; a real stream inflates to something.
    let inflated = result.output
    guard inflated.count >= minimumOutput else { return [] }
    var findings: [Finding] = []
    inflated.withUnsafeBytes { bytes in
      var reported = Set<Int>()
      searcher.search(bytes) { _, index in
        guard reported.insert(index).inserted else { return }
        findings.append(
          Finding(
            file: path, offset: fileOffset, region: "compressed-stream", detector: "canary",
            encoding: "inflated+" + patterns[index].encoding, excerpt: "inside a compressed stream (redacted)"))
      }
      if let first = jsonText(bytes).first {
        findings.append(
          Finding(
            file: path, offset: fileOffset, region: "compressed-stream", detector: "json-text", encoding: "inflated",
            excerpt: redact(inflated[first.start..<first.end])))
      }
    }
    return findings
  }

  /// Inflates a gzip or zlib stream read straight from `input` (no copy): zlib consumes only what
  /// the stream needs, so a false start fails after a few bytes. Nil when nothing valid came out.
  /// `ranOutOfInput` says the stream had not ended when `input` did.
  static func inflate(_ input: UnsafeRawBufferPointer, limit: Int) -> (
    output: [UInt8], ranOutOfInput: Bool, consumed: Int
  )? {
    guard let base = input.baseAddress, !input.isEmpty else { return nil }
    var stream = z_stream()
    guard vault_inflate_init_auto(&stream) == Z_OK else { return nil }
    defer { inflateEnd(&stream) }
    var output: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 16_384)
    stream.next_in = UnsafeMutablePointer(mutating: base.assumingMemoryBound(to: UInt8.self))
    stream.avail_in = UInt32(min(input.count, Int(UInt32.max)))
    while output.count < limit {
      let (result, produced) = chunk.withUnsafeMutableBufferPointer { out -> (Int32, Int) in
        stream.next_out = out.baseAddress
        stream.avail_out = UInt32(out.count)
        let result = CZlib.inflate(&stream, Z_NO_FLUSH)
        return (result, out.count - Int(stream.avail_out))
      }
      output += chunk[0..<produced]
      let consumed = Int(stream.total_in)
      if result == Z_STREAM_END { return (output, false, consumed) }
      if result == Z_BUF_ERROR || (result == Z_OK && produced == 0 && stream.avail_in == 0) {
        return output.isEmpty ? nil : (output, stream.avail_in == 0, consumed)
      }
      if result != Z_OK { return output.isEmpty ? nil : (output, false, consumed) }
    }
    return (output, false, Int(stream.total_in))
  }
}
