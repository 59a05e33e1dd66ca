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

  /// The AVX2 pair filter passes every pair of its set (all 65,536 pairs tried) and, for the
  /// stream signatures, few others; and its 32-at-a-time loop passes exactly the positions its
  /// one-position rule does, on random buffers of every length from every start.
  func testPairFilterPassesEveryPairOfItsSetAndTheSamePositionsAsItsRule() throws {
    let signatures = Scanner.startPairs
    let pairs = Set(Scanner.startHeaders)
    XCTAssertEqual(pairs.count, 48, "46, and the base64 of zlib at levels 1 and 2–5 (eA, eF)")
    var passed = 0
    for pair in 0..<65536 where signatures.passes(UInt8(pair >> 8), UInt8(pair & 0xff)) { passed += 1 }
    for pair in pairs { XCTAssertTrue(signatures.passes(UInt8(pair >> 8), UInt8(pair & 0xff)), "pair \(pair)") }
    XCTAssertLessThan(passed, 1000, "the buckets filter: \(passed) of 65,536 pairs pass")
    let dashes = PairFilter(pairs: [0x2d2d])
    for pair in 0..<65536 {
      XCTAssertEqual(dashes.passes(UInt8(pair >> 8), UInt8(pair & 0xff)), pair == 0x2d2d)
    }

    try XCTSkipUnless(PairFilter.available, "no AVX2 here: the byte-by-byte loops run instead")
    var generator = SystemRandomNumberGenerator()
    // Bytes drawn from the pairs' own bytes as well, so that passing positions are frequent.
    let alphabet = Array(Set(pairs.flatMap { [UInt8($0 >> 8), UInt8($0 & 0xff)] })) + [0x00, 0x2d, 0x41, 0xff]
    // Short buffers from every start, and long ones where more positions pass than one call of
    // the loop can hand back (512): a run of dashes passes everywhere.
    for round in 0..<3020 {
      let count =
        round < 3000 ? Int.random(in: 0...200, using: &generator) : Int.random(in: 600...20_000, using: &generator)
      let bytes =
        round % 2 == 1 && round >= 3000
        ? [UInt8](repeating: 0x2d, count: count)
        : (0..<count).map { _ in
          Bool.random(using: &generator)
            ? alphabet.randomElement(using: &generator)! : UInt8.random(in: 0...255, using: &generator)
        }
      let from = Int.random(in: -2...(count + 2), using: &generator)
      for filter in [signatures, dashes] {
        var found: [Int] = []
        let rest = bytes.withUnsafeBytes { filter.forEachCandidate(in: $0, from: from) { found.append($0) } }
        XCTAssertGreaterThanOrEqual(rest, max(from, 0))
        XCTAssertTrue(rest >= count - 32 || count <= 32, "round \(round): stopped at \(rest) of \(count)")
        if rest < count - 1 { found += (rest..<(count - 1)).filter { filter.passes(bytes[$0], bytes[$0 + 1]) } }
        let expected =
          max(from, 0) < count - 1
          ? (max(from, 0)..<(count - 1)).filter { filter.passes(bytes[$0], bytes[$0 + 1]) } : []
        XCTAssertEqual(found, expected, "round \(round), from \(from)")
      }
    }
  }

  /// A `ByteClass` holds exactly the bytes of its rule (all 256 tried), and its AVX2 loop finds the
  /// blocks of 16 and of 32 bytes its one-block rule finds, on buffers of every length from every
  /// start, with runs of the class of every length from 29 to 50 put either side of the 16-byte
  /// block edges; and measuring the run through each block found, then looking on from its end,
  /// meets every run of 31 (or 47) or more before where the loop stops.
  func testByteClassFindsTheBlocksItsRuleFinds() throws {
    let printable: (UInt8) -> Bool = { ($0 >= 0x20 && $0 < 0x7f) || $0 == 0x0a || $0 == 0x0d || $0 == 0x09 }
    let classes: [(ByteClass, (UInt8) -> Bool, [UInt8])] = [
      (TextDetectors.printableBytes, printable, Array("ab 9\t\n\r~".utf8)),
      (Scanner.base64Bytes, Scanner.isBase64, Array("Az09+/-_".utf8)),
    ]
    for (byteClass, rule, _) in classes {
      for byte in 0...255 { XCTAssertEqual(byteClass.contains(UInt8(byte)), rule(UInt8(byte)), "byte \(byte)") }
    }
    try XCTSkipUnless(PairFilter.available, "no AVX2 here: the byte-by-byte loops run instead")
    var generator = SystemRandomNumberGenerator()
    for round in 0..<4000 {
      let (byteClass, rule, members) = classes[round % 2]
      let span = round % 4 < 2 ? 16 : 32
      var bytes = (0..<Int.random(in: 0...300, using: &generator)).map { _ in
        Int.random(in: 0..<4, using: &generator) == 0
          ? members.randomElement(using: &generator)! : UInt8.random(in: 0...255, using: &generator)
      }
      for _ in 0..<Int.random(in: 0...3, using: &generator) where bytes.count > 60 {
        let length = Int.random(in: 29...50, using: &generator)
        let edge = Int.random(in: 0...(bytes.count / 16), using: &generator) * 16
        let at = min(max(0, edge + Int.random(in: -2...2, using: &generator)), bytes.count - length)
        for index in at..<(at + length) { bytes[index] = members.randomElement(using: &generator)! }
      }
      let from = Int.random(in: -2...(bytes.count + 2), using: &generator)
      // The one-block rule, as the loop applies it 32 bytes at a time.
      func firstBlock(from start: Int) -> (position: Int, found: Bool) {
        var block = start
        var previousHigh = false
        while block + 32 <= bytes.count {
          let low = bytes[block..<(block + 16)].allSatisfy(rule)
          let high = bytes[(block + 16)..<(block + 32)].allSatisfy(rule)
          if span == 32 {
            if previousHigh && low { return (block - 16, true) }
            if low && high { return (block, true) }
            previousHigh = high
          } else {
            if low { return (block, true) }
            if high { return (block + 16, true) }
          }
          block += 32
        }
        return (block, false)
      }
      var expected: [Int] = []
      var position = max(from, 0)
      while position < bytes.count {
        let (block, found) = firstBlock(from: position)
        guard found else {
          position = block
          break
        }
        expected.append(block)
        position = block + block % 37 + 1
      }
      var blocks: [Int] = []
      let stop = bytes.withUnsafeBytes { buffer in
        byteClass.forEachBlock(in: buffer, from: from, span: span) { block in
          blocks.append(block)
          return block + block % 37 + 1
        }
      }
      XCTAssertEqual(blocks, expected, "round \(round), from \(from)")
      XCTAssertEqual(stop, position, "round \(round), from \(from)")

      // Every maximal run of `span + 15` or more from `from` on that ends before the stop is met.
      var runs: [Range<Int>] = []
      func run(through index: Int) -> Range<Int> {
        var (start, end) = (index, index + 1)
        while start > 0, rule(bytes[start - 1]) { start -= 1 }
        while end < bytes.count, rule(bytes[end]) { end += 1 }
        return start..<end
      }
      let end = bytes.withUnsafeBytes { buffer in
        byteClass.forEachBlock(in: buffer, from: from, span: span) { block in
          runs.append(run(through: block))
          return runs.last!.upperBound
        }
      }
      var index = max(from, 0)
      while index < bytes.count {
        guard rule(bytes[index]) else {
          index += 1
          continue
        }
        let whole = run(through: index)
        let fromStart = max(whole.lowerBound, max(from, 0))..<whole.upperBound
        if fromStart.count >= span + 15, whole.upperBound <= end {
          XCTAssertTrue(runs.contains(whole), "round \(round): run \(whole) from \(from), stop \(end)")
        }
        index = whole.upperBound
      }
    }
  }

  /// A `SpacedPair` finds every position its one-position rule finds, less those the caller
  /// skips, on buffers of every length from every start, up to where it stops; and the searches built on it (`-----BEGIN `, braces a quote follows,
  /// arrays of strings) find the same with AVX2 as without, in buffers made of their own bytes.
  func testSpacedPairsFindWhatTheirRuleFinds() throws {
    try XCTSkipUnless(PairFilter.available, "no AVX2 here: the byte-by-byte loops run instead")
    let pairs = [
      SpacedPair(first: 0x2d, distance: 5, second: ByteClass { $0 == 0x42 }),
      SpacedPair(first: 0x7b, distance: 1, second: ByteClass { $0 == 0x22 || $0 == 0x27 || $0 == 0x20 }),
    ]
    let alphabet = Array("-B{[\"' \n\t,]}a:1".utf8)
    var generator = SystemRandomNumberGenerator()
    let planted = [#"["ana", "4111111111111111"]"#, #"{ "user": "ana"}"#, "{'a': 1}", "-----BEGIN ", "[\n\"a\",\"b\"]"]
    var counted = (braces: 0, arrays: 0, begins: 0)
    for round in 0..<4000 {
      var bytes = (0..<Int.random(in: 0...300, using: &generator)).map { _ in
        Int.random(in: 0..<8, using: &generator) == 0
          ? UInt8.random(in: 0...255, using: &generator) : alphabet.randomElement(using: &generator)!
      }
      for _ in 0..<Int.random(in: 0...3, using: &generator) {
        let piece = Array(planted.randomElement(using: &generator)!.utf8)
        guard bytes.count > piece.count else { continue }
        let at = Int.random(in: 0...(bytes.count - piece.count), using: &generator)
        bytes.replaceSubrange(at..<(at + piece.count), with: piece)
      }
      let from = Int.random(in: -2...(bytes.count + 2), using: &generator)
      let pair = pairs[round % 2]
      // Every position where the pair occurs, from `from` on, skipping what the body skips, up to
      // where the loop stops: fewer than `distance + 32` bytes from a block's start.
      let skip = Int.random(in: 1...40, using: &generator)
      var matches: [Int] = []
      let stop = bytes.withUnsafeBytes { buffer in
        pair.forEachMatch(in: buffer, from: from) { position in
          matches.append(position)
          return position + skip
        }
      }
      XCTAssertGreaterThanOrEqual(stop, max(from, 0))
      XCTAssertTrue(
        stop >= bytes.count - pair.distance - 32 || bytes.count < pair.distance + 32, "round \(round): stop \(stop)")
      var expected: [Int] = []
      var next = max(from, 0)
      for position in max(from, 0)..<max(max(from, 0), min(stop, bytes.count - pair.distance))
      where position >= next && bytes[position] == pair.first && pair.second.contains(bytes[position + pair.distance]) {
        expected.append(position)
        next = position + skip
      }
      XCTAssertEqual(matches, expected, "round \(round), from \(from), skip \(skip)")

      bytes.withUnsafeBytes { buffer in
        XCTAssertEqual(
          RecordSyntax.quotedBraces(buffer, vectorised: true), RecordSyntax.quotedBraces(buffer, vectorised: false),
          "round \(round)")
        XCTAssertEqual(
          RecordSyntax.stringArrays(buffer, vectorised: true).map { [$0.start, $0.end] },
          RecordSyntax.stringArrays(buffer, vectorised: false).map { [$0.start, $0.end] }, "round \(round)")
        XCTAssertEqual(
          KeyMaterial.beginLines(buffer, vectorised: true), KeyMaterial.beginLines(buffer, vectorised: false),
          "round \(round)")
        counted.braces += RecordSyntax.quotedBraces(buffer).count
        counted.arrays += RecordSyntax.stringArrays(buffer).count
        counted.begins += KeyMaterial.beginLines(buffer).count
      }
    }
    XCTAssertGreaterThan(counted.braces, 500)
    XCTAssertGreaterThan(counted.arrays, 500)
    XCTAssertGreaterThan(counted.begins, 500)
  }

  /// `streamStarts` finds the same starts with the AVX2 pre-filter as byte by byte: signatures
  /// planted at random offsets (either side of every 32-byte block edge) in random bytes.
  func testStreamStartsAreTheSameWithAndWithoutThePreFilter() throws {
    try XCTSkipUnless(PairFilter.available, "no AVX2 here: only the byte-by-byte loop runs")
    let signatures: [[UInt8]] = [
      [0x1f, 0x8b, 0x08, 0x00], [0x78, 0x9c], [0x78, 0x01], [0x78, 0xda], [0x08, 0x1d], [0x58, 0x85],
      [0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00], [0x28, 0xb5, 0x2f, 0xfd], Array("BZh91AY&SY".utf8),
      [0x50, 0x4b, 0x03, 0x04, 0x14, 0x00, 0x00, 0x00, 0x08, 0x00], Array("H4sIAAAAAAAAA+3BAQ0AAADC".utf8),
      Array("eJzzSM3JyVcozy/KSQEAGKsEPQ==".utf8), Array("KLUv/QBYAAAAAAAAAAAA".utf8), [0x04, 0x22, 0x4d, 0x18],
    ]
    let scanner = Scanner(canaries: [])
    let probe = DeflateProbe()
    var generator = SystemRandomNumberGenerator()
    for round in 0..<1500 {
      var bytes = (0..<Int.random(in: 0...400, using: &generator)).map { _ in
        UInt8.random(in: 0...255, using: &generator)
      }
      for _ in 0..<Int.random(in: 0...6, using: &generator) {
        let signature = signatures.randomElement(using: &generator)!
        guard bytes.count > signature.count else { continue }
        let block = Int.random(in: 0...(bytes.count / 32), using: &generator) * 32
        let at = min(max(0, block + Int.random(in: -3...3, using: &generator)), bytes.count - signature.count)
        bytes.replaceSubrange(at..<(at + signature.count), with: signature)
      }
      let from = Int.random(in: -1...(bytes.count + 1), using: &generator)
      func starts(_ vectorised: Bool) -> [String] {
        bytes.withUnsafeBytes { buffer in
          scanner.streamStarts(buffer, from: from, probe: probe, vectorised: vectorised).map {
            "\($0.signature) \($0.start) \($0.format) \($0.base64) \($0.unreadable ?? "-")"
          }
        }
      }
      XCTAssertEqual(starts(true), starts(false), "round \(round)")
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

  /// Random bytes with planted pieces: text drawn from `pieces` (some judged, some not), printable
  /// filler and line breaks, so runs and lines of every length and at every offset occur.
  private static func mixed(_ count: Int, _ pieces: [String], using generator: inout SystemRandomNumberGenerator)
    -> [UInt8]
  {
    var bytes: [UInt8] = []
    while bytes.count < count {
      switch Int.random(in: 0..<5, using: &generator) {
      case 0:
        bytes += (0..<Int.random(in: 1...40, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator)
        }
      case 1: bytes += Array(pieces.randomElement(using: &generator)!.utf8)
      case 2: bytes += [0x0a]
      case 3:
        bytes += (0..<Int.random(in: 1...70, using: &generator)).map { _ in
          UInt8.random(in: 0x20...0x7e, using: &generator)
        }
      default:
        bytes += [0x00, 0x0d, 0x0a, 0xff].shuffled(using: &generator).prefix(Int.random(in: 1...3, using: &generator))
      }
    }
    return Array(bytes.prefix(count))
  }

  /// `runFindings`, which looks at 16-byte blocks (AVX2) or every 25th byte until a run is found,
  /// reports what judging every maximal run of 32 or more printable bytes on its own reports (a
  /// buffer that is one run is measured whole whatever the sampling), with AVX2 and without.
  func testSampledRunsAreEveryRunOfThirtyTwoOrMore() {
    let pieces = [
      "Dear Ana, the plumber comes on Tuesday so please leave the key", "user=ana&card=4111111111111111&amount=90",
      "name: ana\nplan: gold\ncity: Porto\n", "id,name,card,city,zip\n17,ana,4111111111111111,Porto,4000",
      "<card>4111</card><name>ana</name>", "{\"user\":\"ana\",\"note\":\"rent\"}", "CREATE TABLE t(x, y)",
    ]
    var generator = SystemRandomNumberGenerator()
    for round in 0..<300 {
      let bytes = Self.mixed(Int.random(in: 1...3000, using: &generator), pieces, using: &generator)
      func printable(_ byte: UInt8) -> Bool {
        (byte >= 0x20 && byte < 0x7f) || byte == 0x0a || byte == 0x0d || byte == 0x09
      }
      var expected: [String] = []
      var start = 0
      while start < bytes.count {
        guard printable(bytes[start]) else {
          start += 1
          continue
        }
        var end = start
        while end < bytes.count, printable(bytes[end]) { end += 1 }
        if end - start >= 32 {
          let run = Array(bytes[start..<end])
          for hit in run.withUnsafeBytes({ TextDetectors.runFindings($0) }) {
            expected.append("\(start + hit.start)-\(start + hit.end) \(hit.detector)")
          }
        }
        start = end
      }
      for vectorised in Set([false, PairFilter.available]) {
        let found = bytes.withUnsafeBytes { TextDetectors.runFindings($0, vectorised: vectorised) }.map {
          "\($0.start)-\($0.end) \($0.detector)"
        }
        XCTAssertEqual(found, expected, "round \(round), AVX2 \(vectorised)")
      }
    }
  }

  /// A `key=value` line of 31 to 40 bytes in zero bytes is judged as it is alone wherever it lies: at
  /// every offset of buffers of 40 to 140 bytes (each side of every 16-byte block edge and of the
  /// point where the AVX2 loop hands over to the sampled one), with AVX2 and without.
  func testARunIsFoundAtEveryOffsetOfEveryLength() {
    let line = Array("user=ana&card=4111111111111111&amount=90&city=porto".utf8)
    for length in [31, 32, 33, 40] {
      let run = Array(line.prefix(length))
      let alone = run.withUnsafeBytes { TextDetectors.runFindings($0, vectorised: false) }.map {
        "\($0.start)-\($0.end) \($0.detector)"
      }
      if length >= 32 { XCTAssertFalse(alone.isEmpty, "a line of \(length) bytes is a finding") }
      for count in 40...140 where count >= length {
        for at in 0...(count - length) {
          var bytes = [UInt8](repeating: 0, count: count)
          bytes.replaceSubrange(at..<(at + length), with: run)
          let expected = length >= 32 ? alone.map { shifted($0, by: at) } : []
          for vectorised in Set([false, PairFilter.available]) {
            let found = bytes.withUnsafeBytes { TextDetectors.runFindings($0, vectorised: vectorised) }.map {
              "\($0.start)-\($0.end) \($0.detector)"
            }
            XCTAssertEqual(found, expected, "length \(length) at \(at) of \(count), AVX2 \(vectorised)")
          }
        }
      }
    }
    func shifted(_ hit: String, by offset: Int) -> String {
      let parts = hit.split(separator: " ", maxSplits: 1)
      let range = parts[0].split(separator: "-").map { Int($0)! + offset }
      return "\(range[0])-\(range[1]) \(parts[1])"
    }
  }

  /// `wrappedBase64Blocks`, which looks at 16-byte blocks (AVX2) or every 60th byte until a base64
  /// run is found, gives the blocks a search of every line start (after each line feed from `from`
  /// on) gives, with AVX2 and without.
  func testSampledWrappedBase64IsTheLineByLineSearch() {
    func reference(_ bytes: [UInt8], from: Int) -> [Int] {
      func lineLength(_ start: Int) -> Int? {
        var end = start
        while end < bytes.count, end - start <= 80, Scanner.isBase64(bytes[end]) { end += 1 }
        guard (60...80).contains(end - start), end < bytes.count, bytes[end] == 0x0a || bytes[end] == 0x0d else {
          return nil
        }
        return end - start
      }
      func previousLineIsBase64(_ end: Int) -> Bool {
        var before = end
        if before > 0, bytes[before - 1] == 0x0d { before -= 1 }
        var start = before
        while start > 0, before - start <= 80, Scanner.isBase64(bytes[start - 1]) { start -= 1 }
        return (60...80).contains(before - start) && (start == 0 || bytes[start - 1] == 0x0a)
      }
      var starts = from <= 0 ? [0] : []
      for index in max(0, from)..<max(max(0, from), bytes.count) where bytes[index] == 0x0a { starts.append(index + 1) }
      return starts.filter { start in
        guard start < bytes.count, let length = lineLength(start), start == 0 || !previousLineIsBase64(start - 1)
        else { return false }
        var next = start + length
        if next < bytes.count, bytes[next] == 0x0d { next += 1 }
        return next + 1 < bytes.count && bytes[next] == 0x0a && Scanner.isBase64(bytes[next + 1])
      }
    }
    let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/-_".utf8)
    var generator = SystemRandomNumberGenerator()
    for round in 0..<400 {
      var bytes: [UInt8] = []
      let count = Int.random(in: 1...4000, using: &generator)
      while bytes.count < count {
        switch Int.random(in: 0..<4, using: &generator) {
        case 0, 1:
          bytes += (0..<Int.random(in: 55...85, using: &generator)).map { _ in
            alphabet.randomElement(using: &generator)!
          }
          bytes += Bool.random(using: &generator) ? [0x0a] : [0x0d, 0x0a]
        case 2:
          bytes += (0..<Int.random(in: 1...90, using: &generator)).map { _ in
            UInt8.random(in: 0...255, using: &generator)
          }
        default: bytes += [0x0a]
        }
      }
      for from in [-5, 0, 1, 59, 60, 61, Int.random(in: 0...count, using: &generator), count, count + 3] {
        for vectorised in Set([false, PairFilter.available]) {
          let found = bytes.withUnsafeBytes { Scanner.wrappedBase64Blocks($0, from: from, vectorised: vectorised) }
          XCTAssertEqual(found, reference(bytes, from: from), "round \(round), from \(from), AVX2 \(vectorised)")
        }
      }
    }
  }

  /// Two wrapped base64 lines of 60 or 64 characters in zero bytes are one block wherever they
  /// lie: at every offset of buffers of 130 to 260 bytes, the second line cut short by the buffer's
  /// end from its first character on (each side of every 16-byte block edge and of the point where
  /// the AVX2 loop hands over to the sampled one), with AVX2 and without.
  func testAWrappedBase64BlockIsFoundAtEveryOffset() {
    let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
    for width in [60, 64] {
      let line = (0..<width).map { alphabet[$0 * 7 % alphabet.count] }
      let block = [0x0a] + line + [0x0a] + line + [0x0a]
      for count in 130...260 {
        // The block's first line feed, its first line, the line feed after it and one character.
        for at in 0...(count - width - 3) {
          var bytes = [UInt8](repeating: 0, count: count)
          let kept = min(block.count, count - at)
          bytes.replaceSubrange(at..<(at + kept), with: block.prefix(kept))
          for vectorised in Set([false, PairFilter.available]) {
            let found = bytes.withUnsafeBytes { Scanner.wrappedBase64Blocks($0, from: 0, vectorised: vectorised) }
            XCTAssertEqual(found, [at + 1], "width \(width) at \(at) of \(count), AVX2 \(vectorised)")
          }
        }
      }
    }
  }

  /// `beginLines` gives the offsets memmem gives for `-----BEGIN `, among runs of dashes of every
  /// length, with AVX2 and without.
  func testBeginLinesAreWhereMemmemFindsThem() {
    let needle = Array("-----BEGIN ".utf8)
    let alphabet = Array("-----BEGIN x".utf8)
    var generator = SystemRandomNumberGenerator()
    for round in 0..<2000 {
      var bytes = (0..<Int.random(in: 0...300, using: &generator)).map { _ in alphabet.randomElement(using: &generator)!
      }
      for _ in 0..<Int.random(in: 0...3, using: &generator) where bytes.count > needle.count {
        let at = Int.random(in: 0...(bytes.count - needle.count), using: &generator)
        bytes.replaceSubrange(at..<(at + needle.count), with: needle)
      }
      let expected = bytes.withUnsafeBytes { Patterns.occurrences(of: needle, in: $0, longNeedle: true) }
      for vectorised in Set([false, PairFilter.available]) {
        let found = bytes.withUnsafeBytes { KeyMaterial.beginLines($0, vectorised: vectorised) }
        XCTAssertEqual(found, expected, "round \(round), AVX2 \(vectorised)")
      }
    }
  }

  /// The CSV-row and schema-text tests, rewritten without copies, judge generated lines as their
  /// first versions (below) did.
  func testRecordTestsJudgeAsTheirFirstVersions() {
    func delimitedRow(_ line: ArraySlice<UInt8>) -> Bool {
      separators: for separator: UInt8 in [0x2c, 0x3b, 0x7c, 0x09] {
        var fields = 0
        var lettered = false
        var numeric = false
        var start = line.startIndex
        while true {
          let end = line[start...].firstIndex(of: separator) ?? line.endIndex
          let field = line[start..<end]
          guard !field.isEmpty, field.count <= 64, fields == 0 || field.first != 0x20 else { continue separators }
          fields += 1
          if !lettered { lettered = field.lazy.filter(RecordSyntax.isLetter).count >= 2 }
          if !numeric { numeric = field.count >= 3 && field.allSatisfy(RecordSyntax.isDigit) }
          guard end < line.endIndex else { break }
          start = end + 1
        }
        if fields >= 5 && lettered && numeric { return true }
      }
      return false
    }
    func schemaText(_ run: [UInt8]) -> Bool {
      let window = Array(run.prefix(64)).map { $0 >= 0x41 && $0 <= 0x5a ? $0 | 0x20 : $0 }
      let phrases = ["create table ", "create index ", "create unique index ", "create view ", "create trigger "]
      for phrase in phrases.map({ Array($0.utf8) }) where phrase.count <= window.count {
        for start in 0...(window.count - phrase.count) where window[start] == phrase[0] {
          if window[start..<(start + phrase.count)].elementsEqual(phrase) { return true }
        }
      }
      return false
    }
    let words = [
      "ana", "4111", "17", "Porto", "", " x", "CREATE", "create", "Table ", "TABLE ", "index ", "unique ", "view ",
      "trigger ", String(repeating: "a", count: 64), String(repeating: "7", count: 65),
    ]
    var generator = SystemRandomNumberGenerator()
    for round in 0..<20000 {
      var line: [UInt8] = []
      for _ in 0..<Int.random(in: 0...12, using: &generator) {
        line += Array(words.randomElement(using: &generator)!.utf8)
        if Bool.random(using: &generator) {
          line.append([0x2c, 0x3b, 0x7c, 0x09, 0x20].randomElement(using: &generator)!)
        }
      }
      let padded = [0x61, 0x62] + line
      XCTAssertEqual(RecordSyntax.isDelimitedRow(padded[2...]), delimitedRow(padded[2...]), "round \(round)")
      XCTAssertEqual(line.withUnsafeBytes { TextDetectors.isSchemaText($0) }, schemaText(line), "round \(round)")
    }
  }
}
