import Foundation
import VaultTestSupport
import XCTest

@testable import VaultScan

/// Issue 15 (scan throughput): the pre-filters skip only what the detectors would not report, and
/// files read on two threads make the same report as one thread reading them in walk order.
final class ScanThroughputTests: XCTestCase {
  private static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent().path

  /// The 8-byte tests agree with the byte-by-byte definitions, for every byte value in every lane.
  func testEightByteClassTestsAgreeWithTheByteDefinitions() {
    func printable(_ byte: UInt8) -> Bool {
      (byte >= 0x20 && byte < 0x7f) || byte == 0x0a || byte == 0x0d || byte == 0x09
    }
    func letterOrSpace(_ byte: UInt8) -> Bool {
      (0x41...0x5a).contains(byte) || (0x61...0x7a).contains(byte) || byte >= 0x80 || byte == 0x20
    }
    var generator = SystemRandomNumberGenerator()
    for lane in 0..<8 {
      for value in 0...255 {
        // Around the byte: printable filler, then random bytes.
        for filler in [UInt64(0x6161_6161_6161_6161), generator.next()] {
          var bytes = withUnsafeBytes(of: filler) { Array($0) }
          bytes[lane] = UInt8(value)
          let word = bytes.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }
          XCTAssertEqual(TextDetectors.allPrintable(word), bytes.allSatisfy(printable), "\(bytes)")
          let marks = TextDetectors.letterOrSpace(word)
          for index in 0..<8 {
            XCTAssertEqual(
              marks >> (8 * UInt64(index) + 7) & 1 == 1, letterOrSpace(bytes[index]), "\(bytes) at \(index)")
          }
        }
      }
    }
  }

  /// `findings` judges each line as the rule says, whatever the mix of words, digits and '='
  /// (the sentence test now stops early and skips the pair count on lines with fewer than two '=').
  func testLineJudgementsMatchTheRuleOnGeneratedLines() {
    var generator = SystemRandomNumberGenerator()
    let pieces = [
      "the", "a", "plumber", "Tuesday", "2026-11-30", "10:00:01", "=", "key=value", "x=1", " ", "  ",
      "42", "ü", "-", "_", "k_1=v", "a=", "=b", ",", "\t",
    ]
    var text = ""
    for _ in 0..<3000 {
      let count = Int.random(in: 1...30, using: &generator)
      text += (0..<count).map { _ in pieces.randomElement(using: &generator)! }.joined(separator: " ") + "\n"
    }
    let bytes = Array(text.utf8)
    let found = bytes.withUnsafeBytes { TextDetectors.findings($0) }
    XCTAssertEqual(found.map { [$0.start, $0.end] }, Self.reference(bytes).map { [$0.start, $0.end] })
    XCTAssertEqual(found.map(\.detector), Self.reference(bytes).map(\.detector))
    XCTAssertTrue(found.contains { $0.detector == "natural-language" })
    XCTAssertTrue(found.contains { $0.detector == "key-value-text" })
  }

  /// The rule `TextDetectors.findings` documents, byte by byte, without shortcuts.
  private static func reference(_ bytes: [UInt8]) -> [TextDetectors.Hit] {
    func isLetter(_ byte: UInt8) -> Bool {
      (0x41...0x5a).contains(byte) || (0x61...0x7a).contains(byte) || byte >= 0x80
    }
    func isWord(_ byte: UInt8) -> Bool {
      isLetter(byte) || (0x30...0x39).contains(byte) || byte == 0x5f || byte == 0x2d
    }
    var hits: [TextDetectors.Hit] = []
    var start = 0
    while start < bytes.count {
      let end = bytes[start...].firstIndex(of: 0x0a) ?? bytes.count
      let line = bytes[start..<end]
      if line.count >= 16 {
        var letters = 0
        var spaces = 0
        var words = 0
        var run = 0
        var key = 0
        var pairs = 0
        var afterEquals = false
        for byte in line {
          if afterEquals && byte > 0x20 { pairs += 1 }
          afterEquals = false
          if isLetter(byte) {
            letters += 1
            run += 1
          } else {
            if run >= 2 { words += 1 }
            run = 0
            if byte == 0x20 { spaces += 1 }
          }
          if isWord(byte) {
            key += 1
          } else {
            afterEquals = byte == 0x3d && key >= 2
            key = 0
          }
        }
        if run >= 2 { words += 1 }
        if pairs >= 2 {
          hits.append(TextDetectors.Hit(start: start, end: end, detector: "key-value-text"))
        } else if words >= 8, Double(letters + spaces) >= Double(line.count) * 0.8 {
          hits.append(TextDetectors.Hit(start: start, end: end, detector: "natural-language"))
        }
      }
      start = end + 1
    }
    return hits
  }

  /// A sentence anywhere in random binary data, at every alignment and at the buffer's edges, is
  /// found by the 8-byte run pre-filter; a run one byte short of 32 is not judged at all.
  func testRunsInBinaryDataAreFoundAtEveryAlignment() {
    let sentence = Array("Dear Ana, the plumber comes on Tuesday, leave the key".utf8)
    var generator = SystemRandomNumberGenerator()
    for size in [sentence.count, sentence.count + 1, 200] {
      for offset in 0...(size - sentence.count) {
        var bytes = (0..<size).map { _ in UInt8.random(in: 0x80...0xff, using: &generator) }
        bytes.replaceSubrange(offset..<(offset + sentence.count), with: sentence)
        let hits = bytes.withUnsafeBytes { TextDetectors.runFindings($0) }
        XCTAssertEqual(hits.map(\.detector), ["natural-language"], "size \(size), offset \(offset)")
        XCTAssertEqual(hits.first?.start, offset)
      }
    }
    let short =
      [UInt8](repeating: 0xff, count: 40) + Array("one two three four five six sevens".utf8.prefix(31))
      + [UInt8](repeating: 0xff, count: 40)
    XCTAssertEqual(short.withUnsafeBytes { TextDetectors.runFindings($0) }.count, 0)
  }

  /// UTF-16 text is found past the zero-byte pre-filter, in both byte orders and at odd offsets.
  func testUTF16RunsAreFoundPastThePreFilter() {
    let sentence = "Dear Ana, the plumber comes on Tuesday, please leave the spare key outside"
    var generator = SystemRandomNumberGenerator()
    for littleEndian in [true, false] {
      for offset in [0, 1, 61, 62, 63, 200] {
        var bytes = (0..<400).map { _ in UInt8.random(in: 1...0xff, using: &generator) }
        let encoded = sentence.utf16.flatMap { unit -> [UInt8] in
          littleEndian ? [UInt8(unit & 0xff), UInt8(unit >> 8)] : [UInt8(unit >> 8), UInt8(unit & 0xff)]
        }
        bytes.replaceSubrange(offset..<(offset + encoded.count), with: encoded)
        let hits = bytes.withUnsafeBytes { TextDetectors.utf16Findings($0) }
        XCTAssertTrue(hits.contains { $0.detector == "natural-language" }, "\(littleEndian) at \(offset)")
      }
    }
  }

  /// Stream signatures are found at every offset of a buffer, by the 2-byte pass in memory order.
  func testStreamSignaturesAreFoundAtEveryOffset() {
    // gzip.compress(b"abc", mtime=0)
    let gzip: [UInt8] = [
      0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x03, 0x4b, 0x4c, 0x4a, 0x06, 0x00, 0xc2, 0x41, 0x24, 0x35,
      0x03, 0x00, 0x00, 0x00,
    ]
    let probe = DeflateProbe()
    for offset in 0..<40 {
      var bytes = [UInt8](repeating: 0x20, count: 64)
      bytes.replaceSubrange(offset..<(offset + gzip.count), with: gzip)
      let starts = bytes.withUnsafeBytes { Scanner(canaries: []).streamStarts($0, probe: probe) }
      XCTAssertEqual(starts.filter { $0.format == .gzip }.map(\.start), [offset])
    }
  }

  /// Two threads make the report one thread makes reading the same files one by one in walk order:
  /// the leak corpus (SQLite databases with their -wal and -shm files, audited, compressed streams,
  /// keys) with a symlink and a FIFO beside it, several times over.
  func testTwoThreadsReportWhatOneThreadReadingInWalkOrderReports() throws {
    let temporary = TemporaryDirectory()
    let corpus = temporary.sub("corpus")
    let made = try Spawn.run("/usr/bin/env", ["python3", Self.root + "/tools/leak-corpus.py", corpus])
    XCTAssertEqual(made.status, 0, made.error)
    XCTAssertEqual(symlink("/etc/hostname", corpus + "/link"), 0)
    XCTAssertEqual(mkfifo(corpus + "/fifo", 0o644), 0)
    let manifest = try JSONSerialization.jsonObject(
      with: Data(contentsOf: URL(fileURLWithPath: corpus + "/manifest.json")))
    let canaries = try XCTUnwrap((manifest as? [String: Any])?["canaries"] as? [String])
    let scanner = Scanner(canaries: canaries)
    // One thread, in the walk's order (names in byte order), with what the walk lists itself.
    func oneByOne() throws -> ScanReport {
      var report = ScanReport()
      let directory = open(corpus, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
      XCTAssertGreaterThanOrEqual(directory, 0)
      defer { close(directory) }
      let names = try FileManager.default.contentsOfDirectory(atPath: corpus).map { Array($0.utf8) }.sorted {
        $0.lexicographicallyPrecedes($1)
      }
      for name in names {
        let shown = corpus + "/" + String(decoding: name, as: UTF8.self)
        var info = stat()
        XCTAssertEqual(lstat(shown, &info), 0)
        if info.st_mode & S_IFMT == S_IFREG {
          try scanner.readFile(in: directory, name: name, shown: shown, report: &report)
        } else {
          report.skipped.append(Skipped(path: shown, reason: Scanner.notRead(info)))
        }
      }
      report.findings.sort { ($0.file, $0.offset) < ($1.file, $1.offset) }
      return report
    }
    _ = try scanner.scan([corpus])  // (the first audit of a WAL database writes its -shm file)
    let expected = try oneByOne()
    XCTAssertGreaterThan(expected.findings.count, 50)
    XCTAssertEqual(expected.skipped.count, 2)
    XCTAssertTrue(expected.complete, "\(expected.incomplete)")
    for _ in 0..<5 {
      let report = try scanner.scan([corpus])
      XCTAssertEqual(report.findings, expected.findings)
      XCTAssertEqual(report.skipped, expected.skipped)
      XCTAssertEqual(report.incomplete, expected.incomplete)
      XCTAssertEqual(report.filesScanned, expected.filesScanned)
      XCTAssertEqual(report.bytesScanned, expected.bytesScanned)
    }
  }

  /// A file that cannot be read in the middle of a tree is listed in its place among the others,
  /// and more files than the pipeline keeps open at once are all read, each once.
  func testManyFilesAreEachReadOnceAndListedInWalkOrder() throws {
    let temporary = TemporaryDirectory()
    let tree = temporary.sub("tree")
    try FileManager.default.createDirectory(atPath: tree, withIntermediateDirectories: true)
    for index in 0..<60 {
      let text = index % 7 == 3 ? "x canary-\(index)-Qz7 y" : "nothing in file \(index)"
      try text.write(toFile: tree + "/f\(String(format: "%02d", index))", atomically: false, encoding: .utf8)
    }
    for name in ["f10", "f40"] { XCTAssertEqual(symlink("/nonexistent", tree + "/" + name + "-link"), 0) }
    let canaries = (0..<60).map { "canary-\($0)-Qz7" }
    let report = try Scanner(canaries: canaries).scan([tree])
    XCTAssertEqual(report.filesScanned, 60)
    XCTAssertEqual(
      report.findings.map(\.file), (0..<60).filter { $0 % 7 == 3 }.map { tree + "/f\(String(format: "%02d", $0))" })
    XCTAssertEqual(report.skipped.map(\.path), [tree + "/f10-link", tree + "/f40-link"])
    XCTAssertTrue(report.complete)
  }
}
