import Foundation
import VaultTestSupport
import XCTest

@testable import VaultScan

/// What a file's division into chunks (`Scanner.chunk`, overlapping by `Scanner.chunkOverlap`)
/// must not change: a finding cut by an edge, and the heuristics that judge a chunk as a whole.
/// (Issue 15: 128 KiB chunks scanned faster and failed the last two; a review found them.)
final class ChunkEdgeTests: XCTestCase {
  var temporary: TemporaryDirectory!

  override func setUp() { temporary = TemporaryDirectory() }
  override func tearDown() { temporary = nil }

  private func findings(_ bytes: [UInt8], detector: String) throws -> [Finding] {
    try Data(bytes).write(to: URL(fileURLWithPath: temporary.sub("file")))
    return try Scanner(canaries: []).scan([temporary.sub("file")]).findings.filter { $0.detector == detector }
  }

  /// Log lines that raise nothing, up to `count` bytes, ending with a line break.
  private func filler(_ count: Int) -> [UInt8] {
    let line = Array("2026-12-01 10:00:00 service started, nothing to report\n".utf8)
    var bytes = (0..<(count / line.count + 1)).flatMap { _ in line }.prefix(count - 1)
    bytes.append(0x0a)
    return Array(bytes)
  }

  /// A JSON line longer than the old 255-byte overlap, starting shortly before the first chunk's
  /// edge, is found once. With 255 bytes the first chunk saw it cut and the second saw no start:
  /// neither reported it (14 of 21 edges lost their line in 2.7 MB of 900-byte lines).
  func testAJSONLineCutByAChunkEdgeIsFoundOnce() throws {
    let note = (0..<150).map { ["alpha", "beta", "gamma", "delta"][$0 % 4] }.joined(separator: " ")
    let record = Array(#"{"user": "ana", "note": "\#(note)", "card": "4111"}"#.utf8) + [0x0a]
    for before in [300, 450, 800] {
      let start = Scanner.chunk - before
      let file = filler(start) + record + filler(Scanner.chunk)
      XCTAssertEqual(
        try findings(file, detector: "json-text").map(\.offset), [start],
        "line starting \(before) bytes before the edge")
    }
  }

  /// A run of sentences in binary data that a chunk's edge cuts is one finding, where it starts:
  /// the next chunk, which begins inside it, reported its tail again.
  func testARunCutByAChunkEdgeIsReportedOnceWhereItStarts() throws {
    let run = Array(
      Array(repeating: "the customer asked about her balance and wanted to transfer money today", count: 4)
        .joined(separator: " ").utf8)
    for before in [40, 100, 250] {
      // Binary filler that holds no text (control bytes), so the run is exactly the sentences.
      var file = (0..<(Scanner.chunk + 300_000)).map { UInt8(truncatingIfNeeded: $0 % 8) }
      let start = Scanner.chunk - before
      file.replaceSubrange(start..<(start + run.count), with: run)
      XCTAssertEqual(
        try findings(file, detector: "natural-language").map(\.offset), [start], "run starting \(before) bytes before")
    }
  }

  /// A record inside a run another finding of the same detector reported across the edge is still
  /// listed in the next chunk: only a hit at the chunk's first byte is that run's tail (review:
  /// the form line after an XML run was hidden).
  func testARecordInsideARunReportedAcrossTheEdgeIsStillListed() throws {
    let run = Array(
      ("\n<user>ana</user>\n<card>4111111111111111</card>\n<city>lisbon</city>\n"
        + "user=bob&pass=hunter2&card=4111111111111111\n").utf8)
    var file = (0..<(Scanner.chunk + 30_000)).map { UInt8(truncatingIfNeeded: $0 % 8) }
    let start = Scanner.chunk - 10
    file.replaceSubrange(start..<(start + run.count), with: run)
    let form = start + run.count - 44
    let offsets = try findings(file, detector: "key-value-text").map(\.offset)
    XCTAssertTrue(offsets.contains(start), "\(offsets)")
    XCTAssertTrue(offsets.contains(form), "the form line: \(offsets)")
    XCTAssertFalse(offsets.contains(Scanner.chunk), "the run's tail is not a finding of its own: \(offsets)")
  }

  /// Sentences rare in a log before an edge are reported although many follow it: the rule that a
  /// sentence counts while rare among a chunk's lines counted the 8 KiB overlap's too, and 60
  /// sentences just past the edge hid the 2 before it (review; the file was called clean).
  func testSentencesBeforeAnEdgeAreNotOutnumberedByThoseInTheOverlap() throws {
    func logLine(_ i: Int) -> [UInt8] {
      let head = Array("2026-11-30 10:00:\(i % 60) INFO req \(i) path /api/v1/items/\(i % 977) data ".utf8)
      return head + Array(repeating: UInt8(ascii: "7"), count: 8000 - head.count - 1) + [0x0a]
    }
    func sentence(_ k: Int) -> [UInt8] {
      Array("the customer called about her missing card and asked us to block it now please \(k)\n".utf8)
    }
    let short = Array("2026-11-30 10:00:00 x\n".utf8)
    var file: [UInt8] = []
    var i = 0
    while file.count + 8000 < Scanner.chunk - 3200 {
      file += logLine(i)
      i += 1
    }
    while file.count < Scanner.chunk - 2 * 81 - 30 { file += short }
    let before = file.count
    file += sentence(1) + sentence(2)
    while file.count < Scanner.chunk - 22 { file += short }
    for k in 0..<60 { file += sentence(100 + k) }
    while file.count < Scanner.chunk + 20_000 {
      file += logLine(i)
      i += 1
    }
    let offsets = try findings(file, detector: "natural-language").map(\.offset)
    XCTAssertTrue(offsets.contains(before), "the sentences before the edge: \(offsets)")
  }

  /// A whole file that is one pretty-printed record of 3,200 fields (about 160 KB) is a record, as a
  /// small one is: it is judged whole only when one chunk holds all of it.
  func testAPrettyPrintedRecordOfAFewHundredKilobytesIsFound() throws {
    let fields = (0..<3200).map { #"  "field_\#($0)": "value for customer record \#($0)""# }
    let file = Array(("{\n" + fields.joined(separator: ",\n") + "\n}").utf8)
    XCTAssertGreaterThan(file.count, 140_000)
    XCTAssertEqual(try findings(file, detector: "json-text").map(\.offset), [0])
  }

  /// 150 sentences, one every other line, among 300 KB of log lines: they are rare among a
  /// 4 MiB chunk's lines and reported; among a 128 KiB chunk's they were not rare, and dropped.
  func testAClusterOfSentencesInALogIsFound() throws {
    func logLine(_ i: Int) -> String { "2026-11-30 10:00:\(i % 60) INFO req id=\(i) path=/api/v1/items/\(i % 977)\n" }
    var lines: [String] = []
    var count = 0
    while count < 50_000 {
      lines.append(logLine(lines.count))
      count += lines.last!.utf8.count
    }
    for k in 0..<150 {
      lines.append("the customer called about her missing card and asked us to block it now please \(k)\n")
      lines.append(logLine(lines.count))
    }
    while lines.reduce(0, { $0 + $1.utf8.count }) < 300_000 {
      lines += (0..<500).map { logLine(lines.count + $0) }
    }
    let found = try findings(Array(lines.joined().utf8), detector: "natural-language")
    XCTAssertFalse(found.isEmpty, "the sentences were dropped")
  }
}
