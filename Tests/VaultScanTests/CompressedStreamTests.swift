import CCompression
import Foundation
import VaultTestSupport
import XCTest

@testable import VaultScan

/// Compressed streams are inflated to their end, whatever their window size or wrapper, within a
/// per-file budget that makes the file "incomplete" rather than silently clean (issue 10 item 3).
final class CompressedStreamTests: XCTestCase {
  var temporary: TemporaryDirectory!

  override func setUp() { temporary = TemporaryDirectory() }
  override func tearDown() { temporary = nil }

  /// A rotated log: 70 MiB of ordinary lines, a canary past the 64 MiB mark, in one gzip member.
  /// (Before: inflation stopped at 64 MiB of output and the scan said clean.)
  func testACanaryDeepInsideAGzipMemberIsFound() throws {
    let path = temporary.sub("app.log.1.gz")
    try python(
      """
      import gzip,sys
      line = b'2026-12-01T10:00:00Z INFO request served in 3 ms\\n'
      filler = line * (70 * 1024 * 1024 // len(line))
      cut = 66 * 1024 * 1024
      data = filler[:cut] + b'user note: deep-gzip-canary-31\\n' + filler[cut:]
      open(sys.argv[1], 'wb').write(gzip.compress(data, compresslevel=1))
      """, [path])
    let report = try Scanner(canaries: ["deep-gzip-canary-31"]).scan([path])
    XCTAssertEqual(report.findings.map(\.encoding), ["inflated+utf8"], "\(report.findings)")
    XCTAssertEqual(report.findings.first?.offset, 0)
    XCTAssertTrue(report.complete, "\(report.incomplete)")
  }

  /// zlib streams written with every window size zlib allows (windowBits 9–15: CMF bytes 0x18–0x78).
  /// (Before: only CMF 0x78, a 32 KiB window, was recognised.)
  func testZlibStreamsOfEveryWindowSizeAreInflated() throws {
    for bits in 9...15 {
      let path = temporary.sub("window-\(bits).bin")
      try python(
        """
        import os,sys,zlib
        c = zlib.compressobj(6, zlib.DEFLATED, int(sys.argv[2]))
        stream = c.compress(b'a note that says window-canary-%s and more text' % sys.argv[2].encode()) + c.flush()
        open(sys.argv[1], 'wb').write(os.urandom(300) + stream + os.urandom(300))
        """, [path, String(bits)])
      let report = try Scanner(canaries: ["window-canary-\(bits)"]).scan([path])
      // (The sentence is also a natural-language finding: a blob in a binary file is a record.)
      XCTAssertEqual(
        report.findings.filter { $0.detector == "canary" }.map(\.encoding), ["inflated+utf8"],
        "windowBits \(bits): \(report.findings)")
    }
  }

  /// A deflated entry of a ZIP archive (an export, a .docx) is raw deflate behind a local header.
  func testADeflatedZipEntryIsInflated() throws {
    let path = temporary.sub("export.zip")
    try python(
      """
      import sys,zipfile
      with zipfile.ZipFile(sys.argv[1], 'w', zipfile.ZIP_DEFLATED) as z:
        z.writestr('readme.txt', 'nothing here ' * 50)
        z.writestr('notes/today.txt', 'remember zip-entry-canary-8 ' * 20)
      """, [path])
    let report = try Scanner(canaries: ["zip-entry-canary-8"]).scan([path])
    XCTAssertEqual(report.findings.map(\.encoding), ["inflated+utf8"], "\(report.findings)")
  }

  /// Deflated entries named by a path of over 1,024 bytes (`zip -r` of a deep tree), by nothing,
  /// or by a name with a tab are inflated too, and an encrypted one so named is listed: an outside
  /// review found each passed over, clean.
  func testZipEntriesWithLongEmptyOrTabbedNamesAreInflated() throws {
    try python(
      """
      import sys,zipfile
      for file, name in (('long.zip', 'a/' * 1000 + 'x.txt'), ('empty.zip', ''), ('tab.zip', 'no\\ttes.txt')):
        with zipfile.ZipFile(sys.argv[1] + '/' + file, 'w', zipfile.ZIP_DEFLATED) as z:
          z.writestr(zipfile.ZipInfo(name) if name == '' else name, b'log line\\nzip-name-canary-4\\n' * 3,
                     compress_type=zipfile.ZIP_DEFLATED)
      # Encrypted entries (flag bit 0) under a long name, no name, and one with line breaks: a local
      # header, then bytes unzip cannot read.
      for file, name in (('sealed.zip', b'b/' * 700 + b'y.txt'), ('sealed-empty.zip', b''),
                         ('sealed-lines.zip', b'notes\\r\\nof may.txt'), ('sealed-esc.zip', b'\\x1b[1mx\\x7f\\x01')):
        header = b'PK\\x03\\x04' + bytes([20, 0, 1, 0, 8, 0]) + bytes(16) + len(name).to_bytes(2, 'little') + bytes(2)
        open(sys.argv[1] + '/' + file, 'wb').write(header + name + bytes(range(256)) * 4)
      # One whose 300-byte name runs across the end of the scan's first buffer (256 KiB and 8 KiB
      # of overlap), its header 232 bytes before that end.
      name = b'dir/' * 74 + b'x.tx'
      header = b'PK\\x03\\x04' + bytes([20, 0, 1, 0, 8, 0]) + bytes(16) + len(name).to_bytes(2, 'little') + bytes(2)
      padding = bytes(range(1, 256)) * 1100
      padding = padding[:(264 << 10) - 232]
      open(sys.argv[1] + '/sealed-edge.zip', 'wb').write(padding + header + name + bytes(range(256)) * 4)
      """, [temporary.path])
    let report = try Scanner(canaries: ["zip-name-canary-4"]).scan([temporary.path])
    let found = Set(report.findings.map { ($0.file as NSString).lastPathComponent })
    XCTAssertEqual(found, ["long.zip", "empty.zip", "tab.zip"], "\(report.findings)")
    XCTAssertEqual(
      report.incomplete.map { ($0.path as NSString).lastPathComponent }.sorted(),
      ["sealed-edge.zip", "sealed-empty.zip", "sealed-esc.zip", "sealed-lines.zip", "sealed.zip"])
    XCTAssertTrue(
      report.incomplete.allSatisfy { $0.reason.contains("encrypted ZIP entries") }, "\(report.incomplete)")
  }

  /// A file of decompression bombs (gzip members of zeros, about 1,000:1) stops at the budget, is
  /// reported as incomplete, and still reports what it found before the budget ran out.
  func testDecompressionBombsStopAtTheBudgetAndMakeTheFileIncomplete() throws {
    let path = temporary.sub("bombs.bin")
    try python(
      """
      import gzip,sys
      first = gzip.compress(b'bomb-canary-77 ' + bytes(4 * 1024 * 1024))
      bomb = gzip.compress(bytes(16 * 1024 * 1024))
      open(sys.argv[1], 'wb').write(first + bomb * 40)
      """, [path])
    var scanner = Scanner(canaries: ["bomb-canary-77"])
    scanner.inflateBudget = InflateBudget(baseBytes: 64 << 20, ratio: 0, seconds: 60)
    let started = Date()
    let report = try scanner.scan([path])
    XCTAssertLessThan(Date().timeIntervalSince(started), 30, "bounded by the budget, not by the 640 MiB inside")
    XCTAssertEqual(report.findings.map(\.encoding), ["inflated+utf8"])
    XCTAssertEqual(report.incomplete.map(\.path), [path])
    XCTAssertTrue(report.incomplete.first?.reason.contains("inflate budget (bytes)") ?? false, "\(report.incomplete)")
    XCTAssertFalse(report.complete)

    // The time budget: nothing may be inflated after the deadline.
    scanner.inflateBudget = InflateBudget(baseBytes: 1 << 40, ratio: 0, seconds: 0)
    let timed = try scanner.scan([path])
    XCTAssertTrue(timed.incomplete.first?.reason.contains("inflate budget (time)") ?? false, "\(timed.incomplete)")
  }

  /// The default budget lets an ordinary compressed file through whole: complete, nothing to report.
  func testAnOrdinaryCompressedFileIsCompleteUnderTheDefaultBudget() throws {
    let path = temporary.sub("changelog.gz")
    try python(
      """
      import gzip,sys
      text = b''.join(b'  * Fix number %d in the parser, with a longer line of prose.\\n' % i for i in range(200000))
      open(sys.argv[1], 'wb').write(gzip.compress(text))
      """, [path])
    let report = try Scanner(canaries: ["never-written-canary"]).scan([path])
    XCTAssertTrue(report.complete, "\(report.incomplete)")
    XCTAssertEqual(report.findings.filter { $0.detector == "canary" }, [])
  }

  /// The allowance arithmetic: base plus ratio times size, saturating instead of overflowing.
  func testTheBudgetScalesWithTheFileAndSaturates() {
    XCTAssertEqual(InflateBudget(baseBytes: 100, ratio: 3, seconds: 1).bytes(forFileOfSize: 10), 130)
    XCTAssertEqual(InflateBudget(baseBytes: 100, ratio: Int.max, seconds: 1).bytes(forFileOfSize: 10), Int.max)
    XCTAssertEqual(InflateBudget(baseBytes: Int.max, ratio: 1, seconds: 1).bytes(forFileOfSize: 10), Int.max)
  }

  /// logrotate's other compressors: xz, bzip2 and zstd streams are decoded to their end and searched,
  /// as files and inside other files. (Before: scanned raw, nothing found, exit 0.)
  func testXzBzip2AndZstdStreamsAreDecoded() throws {
    try python(
      """
      import bz2,lzma,os,sys
      text = b'2026-12-01 INFO the user wrote other-codec-canary-5 here\\n' * 2000
      open(sys.argv[1] + '/log.1.xz', 'wb').write(lzma.compress(text))
      open(sys.argv[1] + '/log.2.bz2', 'wb').write(bz2.compress(text))
      open(sys.argv[1] + '/blob.bin', 'wb').write(os.urandom(5000) + lzma.compress(text) + os.urandom(5000))
      """, [temporary.path])
    let text = Array(String(repeating: "2026-12-01 INFO the user wrote other-codec-canary-5 here\n", count: 2000).utf8)
    var frame = [UInt8](repeating: 0, count: ZSTD_compressBound(text.count))
    let size = ZSTD_compress(&frame, frame.count, text, text.count, 3)
    XCTAssertEqual(ZSTD_isError(size), 0)
    try Data(frame.prefix(size)).write(to: URL(fileURLWithPath: temporary.sub("log.3.zst")))
    let report = try Scanner(canaries: ["other-codec-canary-5"]).scan([temporary.path])
    XCTAssertEqual(
      report.findings.filter { $0.encoding == "inflated+utf8" }.map { ($0.file as NSString).lastPathComponent }
        .sorted(),
      ["blob.bin", "log.1.xz", "log.2.bz2", "log.3.zst"], "\(report.findings)")
    XCTAssertTrue(report.complete, "\(report.incomplete)")
  }

  /// What the scanner will not decode makes the file incomplete, never clean: an xz stream whose
  /// dictionary needs more than 128 MiB, a ZIP entry compressed with LZMA (method 14), an lzip file.
  func testStreamsTheScannerWillNotDecodeMakeTheFileIncomplete() throws {
    try python(
      """
      import lzma,sys,zipfile
      text = b'the user wrote undecoded-canary-6 here\\n' * 100
      big = [{'id': lzma.FILTER_LZMA2, 'dict_size': 192 << 20, 'mf': lzma.MF_HC3, 'nice_len': 8}]
      open(sys.argv[1] + '/huge-dictionary.xz', 'wb').write(lzma.compress(text, filters=big))
      with zipfile.ZipFile(sys.argv[1] + '/export.zip', 'w', zipfile.ZIP_LZMA) as z:
        z.writestr('notes.txt', text)
      with zipfile.ZipFile(sys.argv[1] + '/plain.zip', 'w', zipfile.ZIP_DEFLATED) as z:
        z.writestr('readme.txt', b'nothing to see ' * 40)
      open(sys.argv[1] + '/log.lz', 'wb').write(b'LZIP\\x01\\x0c' + bytes(40))
      """, [temporary.path])
    let report = try Scanner(canaries: ["undecoded-canary-6"]).scan([temporary.path])
    XCTAssertEqual(
      report.incomplete.map { ($0.path as NSString).lastPathComponent }.sorted(),
      ["export.zip", "huge-dictionary.xz", "log.lz"], "\(report.incomplete)")
    XCTAssertTrue(
      report.incomplete.contains { $0.reason.contains("more than 128 MiB") }
        && report.incomplete.contains { $0.reason.contains("does not decode") }, "\(report.incomplete)")
    XCTAssertEqual(report.findings.filter { $0.detector == "canary" }, [])
  }

  /// Streams inside streams: a .gz inside a .tar.gz, a deflated .gz entry inside a .zip, a zlib blob
  /// inside an xz stream; and base64 text of a compressed stream in a log line, in JSON and in a
  /// MIME-wrapped mail, as files and inside a gzip. (Before: only the outer layer was decoded.)
  func testNestedAndBase64EncodedStreamsAreDecoded() throws {
    try python(
      """
      import base64,gzip,io,lzma,os,sys,tarfile,zipfile,zlib
      d = sys.argv[1]
      def secret(n): return b'the user typed nested-canary-%d into the form ' % n * 30
      inner = gzip.compress(secret(1), mtime=0)
      buffer = io.BytesIO()
      with tarfile.open(fileobj=buffer, mode='w:gz') as t:
        info = tarfile.TarInfo('logs/app.log.1.gz'); info.size = len(inner); t.addfile(info, io.BytesIO(inner))
      open(d + '/backup.tar.gz', 'wb').write(buffer.getvalue())
      with zipfile.ZipFile(d + '/export.zip', 'w', zipfile.ZIP_DEFLATED) as z:
        z.writestr('app.log.2.gz', gzip.compress(secret(2), mtime=0))
      open(d + '/blob.xz', 'wb').write(lzma.compress(os.urandom(100) + zlib.compress(secret(3)) + os.urandom(100)))
      line = b'2026-12-01 DEBUG body=' + base64.b64encode(gzip.compress(secret(4))) + b' status=200\\n'
      open(d + '/debug.log', 'wb').write(b'2026-12-01 INFO started\\n' * 50 + line)
      open(d + '/event.json', 'wb').write(b'{"payload": "' + base64.b64encode(zlib.compress(secret(5))) + b'"}')
      mail = base64.encodebytes(gzip.compress(secret(6) * 20))
      open(d + '/mail.eml', 'wb').write(b'Content-Transfer-Encoding: base64\\n\\n' + mail)
      open(d + '/rotated.log.gz', 'wb').write(gzip.compress(b'INFO ok\\n' * 100 + line.replace(b'4 into', b'4 into')))
      # base64 of zlib at levels 1 (eA...) and 3 (eF...), as an outside review found passed over.
      open(d + '/level1.json', 'wb').write(b'{"payload": "' + base64.b64encode(zlib.compress(secret(7), 1)) + b'"}')
      open(d + '/level3.json', 'wb').write(b'{"payload": "' + base64.b64encode(zlib.compress(secret(8), 3)) + b'"}')
      """, [temporary.path])
    let canaries = (1...8).map { "nested-canary-\($0)" }
    let report = try Scanner(canaries: canaries).scan([temporary.path])
    let found = Set(
      report.findings.filter { $0.encoding == "inflated+utf8" }.map { ($0.file as NSString).lastPathComponent })
    XCTAssertEqual(
      found,
      [
        "backup.tar.gz", "export.zip", "blob.xz", "debug.log", "event.json", "mail.eml", "rotated.log.gz",
        "level1.json", "level3.json",
      ],
      "\(report.findings)")
    XCTAssertTrue(report.complete, "\(report.incomplete)")
  }

  /// Base64 decoding skips line breaks, spaces, tabs and JSON's `\n` escapes (reading `\/` as `/`),
  /// stops at the first other byte that is not base64, and decodes short final groups (2
  /// characters are 1 byte, 3 are 2), unpadded or padded, in either alphabet.
  func testTheBase64LayerDecodesExactly() {
    final class Collector: ByteSink {
      var bytes: [UInt8] = []
      var finished = false
      func push(_ bytes: UnsafeRawBufferPointer) -> Bool {
        self.bytes += bytes
        return true
      }
      func finish() { finished = true }
    }
    let cases: [(String, [UInt8])] = [
      ("aGVsbG8gd29ybGQ=", Array("hello world".utf8)), ("aGVsbG8gd29ybGQ", Array("hello world".utf8)),
      ("aGVs\nbG8g\r\nd29y bG\tQ", Array("hello world".utf8)),
      (#"aGVs\nbG8g\r\nd29ybGQ"#, Array("hello world".utf8)), (#"P\/8A"#, [0x3f, 0xff, 0x00]),
      ("aGVsbG8g!d29ybGQ", Array("hello ".utf8)), (#"aGVs\qbG8g"#, Array("hel".utf8)), ("-_-_", [0xfb, 0xff, 0xbf]),
    ]
    for (text, expected) in cases {
      let collector = Collector()
      let layer = Base64Layer(collector)
      // Pushed a byte at a time, as a stream would arrive.
      var alive = true
      for byte in Array(text.utf8) where alive { alive = [byte].withUnsafeBytes { layer.push($0) } }
      layer.finish()
      XCTAssertTrue(collector.finished)
      XCTAssertEqual(collector.bytes, expected, text)
    }
  }

  /// A gzip member with a flipped byte in its middle keeps the rest of its data unreadable: the file is
  /// incomplete. A bare zlib candidate that breaks is not (it may be a false start), and neither is a
  /// stream cut by SQLite's page boundaries (the overflow pass reads it whole).
  func testAStreamThatBreaksAfterDecodingMakesTheFileIncomplete() throws {
    try python(
      """
      import gzip,os,random,sqlite3,sys
      random.seed(7)
      text = b''.join(b'line %d: ' % i + bytes(random.choice(b'abcdefgh ') for _ in range(60)) + b'\\n' for i in range(4000))
      member = bytearray(gzip.compress(text))
      member[len(member) // 2] ^= 0xff
      open(sys.argv[1] + '/flipped.log.gz', 'wb').write(bytes(member))
      open(sys.argv[1] + '/whole.log.gz', 'wb').write(gzip.compress(text))
      c = sqlite3.connect(sys.argv[1] + '/blobs.db'); c.execute('create table t(b)')
      c.execute('insert into t values (?)', (gzip.compress(text),)); c.commit(); c.close()
      """, [temporary.path])
    let report = try Scanner(canaries: ["never-written-canary"]).scan([temporary.path])
    XCTAssertEqual(report.incomplete.map { ($0.path as NSString).lastPathComponent }, ["flipped.log.gz"])
    XCTAssertTrue(report.incomplete.first?.reason.contains("gzip stream is corrupt") ?? false, "\(report.incomplete)")
  }

  /// Random bytes that start like a gzip member, decode a few bytes and break (what ciphertext holds
  /// about once in 200 MB, an outside review) leave the file complete, unless the header's extra
  /// flags and operating system are what a gzip writer puts there (zlib on macOS writes system 19,
  /// past RFC 1952's list: an outside review); a member that breaks after
  /// 1,024 bytes out is damaged whatever its header.
  func testAGzipStartThatBreaksEarlyIsDamagedOnlyWithAWritersHeader() throws {
    try python(
      """
      import gzip,random,sys,zlib
      rng = random.Random(11)
      def header(xfl, os): return bytes([0x1f, 0x8b, 8, 0, 1, 2, 3, 4, xfl, os])
      def out_before_break(data):
          d = zlib.decompressobj(31); n = 0
          try:
              for i in range(len(data)): n += len(d.decompress(data[i:i + 1]))
          except zlib.error: return n
          return None
      while True:
          body = bytes(rng.getrandbits(8) for _ in range(4096))
          try: zlib.decompressobj(31).decompress(header(0, 3) + body[:54])
          except zlib.error: continue
          n = out_before_break(header(0, 3) + body)
          if n is not None and 16 <= n < 1024: break
      junk = bytes(rng.getrandbits(8) for _ in range(2048))
      open(sys.argv[1] + '/random.bin', 'wb').write(junk + header(0x77, 0x99) + body + junk)
      open(sys.argv[1] + '/written.bin', 'wb').write(junk + header(2, 3) + body + junk)
      open(sys.argv[1] + '/apple.bin', 'wb').write(junk + header(0, 19) + body + junk)
      rng = random.Random(7)
      text = b''.join(b'line %d: ' % i + bytes(rng.choice(b'abcdefgh ') for _ in range(60)) + b'\\n' for i in range(4000))
      member = bytearray(gzip.compress(text))
      member[len(member) // 2] ^= 0xff
      member[8], member[9] = 0x77, 0x99
      open(sys.argv[1] + '/flipped.bin', 'wb').write(bytes(member))
      """, [temporary.path])
    let report = try Scanner(canaries: ["never-written-canary"]).scan([temporary.path])
    XCTAssertEqual(
      report.incomplete.map { ($0.path as NSString).lastPathComponent }.sorted(),
      ["apple.bin", "flipped.bin", "written.bin"])
    XCTAssertTrue(report.incomplete.allSatisfy { $0.reason.contains("gzip stream is corrupt") }, "\(report.incomplete)")
  }

  /// A zstd frame header asking for a window over 128 MiB makes the file incomplete only when its
  /// first block header could be a writer's: random bytes after the magic number (4 GB of random
  /// files held one such start) ask for anything, and their block header is rarely valid.
  func testAZstdFrameNeedingTooLargeAWindowIsUnreadableOnlyWithAPlausibleFirstBlock() throws {
    // Magic, a descriptor with no optional field but the window, a window of 2^30, then a last
    // raw block of 5 bytes (0x29: last, type 0, size 5) or one of the reserved type (0x2f).
    let frame = { (block: UInt8) in [0x28, 0xb5, 0x2f, 0xfd, 0x00, 20 << 3, block, 0x00, 0x00] + Array("hello".utf8) }
    let padding = [UInt8](repeating: 0x2e, count: 100)
    try Data(padding + frame(0x29) + padding).write(to: URL(fileURLWithPath: temporary.sub("plausible.bin")))
    try Data(padding + frame(0x2f) + padding).write(to: URL(fileURLWithPath: temporary.sub("random.bin")))
    let report = try Scanner(canaries: ["never-written-canary"]).scan([temporary.path])
    XCTAssertEqual(report.incomplete.map { ($0.path as NSString).lastPathComponent }, ["plausible.bin"])
    XCTAssertTrue(
      report.incomplete.first?.reason.contains("window larger than 128 MiB") ?? false, "\(report.incomplete)")
  }

  /// A stream whose signature cannot be chance (xz, bzip2) that breaks before its first byte out,
  /// and a zstd frame that names a dictionary, are not read: the file is incomplete, never clean
  /// (an outside review: a bzip2 file with a corrupt first block, whose later blocks
  /// `bzip2recover` read back, and a zstd frame made with a dictionary were both passed over).
  /// A zstd magic number followed by garbage, or the xz magic number with no valid stream header
  /// after it (programs hold it as a constant), stays a false start.
  func testAStreamThatCannotBeReadFromItsStartMakesTheFileIncomplete() throws {
    try python(
      """
      import base64,bz2,lzma,random,sys
      random.seed(1)
      text = base64.b64encode(random.randbytes(300000)) + b'\\nnote: unread-canary-77\\n'
      stream = bytearray(bz2.compress(text, 1)); stream[14] ^= 0xff
      open(sys.argv[1] + '/first-block.bz2', 'wb').write(bytes(stream))
      stream = bytearray(lzma.compress(text)); stream[13] ^= 0xff
      open(sys.argv[1] + '/first-block.xz', 'wb').write(bytes(stream))
      # The xz magic alone, as programs hold it (liblzma, libmagic): not a stream.
      open(sys.argv[1] + '/magic-constant.bin', 'wb').write(random.randbytes(100) + bytes([0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00, 0, 1, 2, 3, 4, 5]) + random.randbytes(100))
      # A zstd frame (RFC 8878 3.1.1): descriptor 0x21 = single segment, a 1-byte dictionary id (7),
      # then a 1-byte content size (16) and one raw last block of 16 bytes.
      frame = bytes([0x28, 0xb5, 0x2f, 0xfd, 0x21, 7, 16]) + (1 | 16 << 3).to_bytes(3, 'little') + random.randbytes(16)
      open(sys.argv[1] + '/dictionary.zst', 'wb').write(random.randbytes(100) + frame + random.randbytes(100))
      open(sys.argv[1] + '/magic-only.bin', 'wb').write(random.randbytes(100) + bytes([0x28, 0xb5, 0x2f, 0xfd, 0xff, 0xff]) + random.randbytes(100))
      """, [temporary.path])
    let report = try Scanner(canaries: ["unread-canary-77"]).scan([temporary.path])
    XCTAssertEqual(report.findings, [], "\(report.findings)")
    let reasons = Dictionary(
      uniqueKeysWithValues: report.incomplete.map { (($0.path as NSString).lastPathComponent, $0.reason) })
    XCTAssertEqual(reasons.keys.sorted(), ["dictionary.zst", "first-block.bz2", "first-block.xz"], "\(reasons)")
    XCTAssertTrue(reasons["first-block.bz2"]?.contains("bzip2 stream is corrupt from its start") == true, "\(reasons)")
    XCTAssertTrue(reasons["first-block.xz"]?.contains("an xz stream is corrupt from its start") == true, "\(reasons)")
    XCTAssertTrue(reasons["dictionary.zst"]?.contains("needs a dictionary") == true, "\(reasons)")
  }

  /// An encrypted ZIP entry cannot be read (and ZipCrypto proves nothing): the file is incomplete.
  func testAnEncryptedZipEntryMakesTheFileIncomplete() throws {
    // A local file header (APPNOTE §4.3.7) with the encryption flag, method 8, a 9-byte name.
    var header: [UInt8] = [0x50, 0x4b, 0x03, 0x04, 20, 0, 1, 0, 8, 0] + [UInt8](repeating: 0, count: 16)
    header += [9, 0, 0, 0] + Array("notes.txt".utf8) + (0..<64).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
    try Data(header).write(to: URL(fileURLWithPath: temporary.sub("locked.zip")))
    let report = try Scanner(canaries: []).scan([temporary.sub("locked.zip")])
    XCTAssertEqual(report.incomplete.map(\.reason), ["holds encrypted ZIP entries, which the scanner cannot read"])
  }

  /// What a stream decodes to is judged by what it is, as a file would be: a form body in a
  /// compressed blob beside the data, a typed sentence in a gzipped log of machine records.
  func testHeuristicsRunOnDecodedContentByItsKind() throws {
    try python(
      """
      import gzip,os,sys
      open(sys.argv[1] + '/spill.bin', 'wb').write(os.urandom(200) + gzip.compress(b'user=ana&card=4111111111111111&cvv=123\\n') + os.urandom(200))
      log = b''.join(b'2026-12-01T10:%02d:%02dZ INFO request id=%d served in 3 ms\\n' % (i // 60 % 60, i % 60, i) for i in range(300))
      log += b'2026-12-01T11:00:00Z DEBUG note from the user: please call my sister about the surgery on Friday morning\\n'
      open(sys.argv[1] + '/app.log.1.gz', 'wb').write(gzip.compress(log))
      """, [temporary.path])
    let report = try Scanner(canaries: []).scan([temporary.path])
    let found = Set(report.findings.map { "\(($0.file as NSString).lastPathComponent) \($0.detector)" })
    XCTAssertTrue(found.contains("spill.bin key-value-text"), "\(report.findings)")
    XCTAssertTrue(found.contains("app.log.1.gz natural-language"), "\(report.findings)")
    XCTAssertTrue(report.findings.allSatisfy { $0.region == "compressed-stream" })
  }

  /// MIME bodies wrap base64 every 76 characters, PEM every 64: a wrap inside a canary's base64
  /// form hides it from the encoded patterns, so wrapped blocks are decoded and searched.
  func testLineWrappedBase64IsDecodedAndSearched() throws {
    try python(
      """
      import base64,sys
      for name, width, eol in (('mail.eml', 76, b'\\r\\n'), ('blob.pem', 64, b'\\n')):
        # The canary's base64 form crosses the first line break (53 bytes of 'A' fill 70.7 characters).
        encoded = base64.b64encode(b'A' * 53 + b'wrapped-canary-44 was typed here' + b'B' * 90)
        body = eol.join(encoded[i:i + width] for i in range(0, len(encoded), width))
        open(sys.argv[1] + '/' + name, 'wb').write(b'Content-Transfer-Encoding: base64' + eol + eol + body + eol)
      """, [temporary.path])
    let report = try Scanner(canaries: ["wrapped-canary-44"]).scan([temporary.path])
    XCTAssertEqual(
      Set(report.findings.filter { $0.detector == "canary" }.map { ($0.file as NSString).lastPathComponent }),
      ["mail.eml", "blob.pem"], "\(report.findings)")
  }

  /// A PEM private key inside compressed data is key material on disk, as the README promises for
  /// the exact detectors ("on every file and on everything decoded"): a gzipped key file, a ZIP
  /// entry, base64 of gzip in a log line. (Review: each of these was scanned clean.)
  func testAPrivateKeyInsideCompressedDataIsFound() throws {
    try python(
      """
      import base64,gzip,io,sys,zipfile
      d = sys.argv[1]
      body = base64.encodebytes(bytes((i * 31 + 5) % 256 for i in range(900))).decode()
      key = ('-----BEGIN RSA PRIVATE KEY-----\\n' + body + '-----END RSA PRIVATE KEY-----\\n').encode()
      open(d + '/id_rsa.gz', 'wb').write(gzip.compress(key))
      buffer = io.BytesIO()
      with zipfile.ZipFile(buffer, 'w', zipfile.ZIP_DEFLATED) as z: z.writestr('keys/id_rsa', key)
      open(d + '/keys.zip', 'wb').write(buffer.getvalue())
      line = '2026-12-01 10:00:00 backup blob=' + base64.b64encode(gzip.compress(key)).decode() + '\\n'
      open(d + '/app.log', 'w').write('2026-12-01 09:59:59 started\\n' + line + '2026-12-01 10:00:01 done\\n')
      """, [temporary.path])
    let report = try Scanner(canaries: []).scan([temporary.path])
    let keys = report.findings.filter { $0.detector == "key-material" }
    XCTAssertEqual(
      Set(keys.map { ($0.file as NSString).lastPathComponent }), ["id_rsa.gz", "keys.zip", "app.log"],
      "\(report.findings)")
    XCTAssertTrue(keys.allSatisfy { $0.encoding == "inflated+pem" && $0.region == "compressed-stream" }, "\(keys)")
    XCTAssertFalse(keys.contains { $0.excerpt.contains("PRIVATE") }, "redacted")
  }

  /// A stream that decodes to exactly a vault keyfile (gzipped, or a ZIP entry) is key material, as
  /// the keyfile on disk is (it was flagged only by the JSON heuristic); one byte changed and the
  /// checksum no longer holds, so it is not.
  func testAVaultKeyfileInsideCompressedDataIsKeyMaterial() throws {
    try python(
      """
      import gzip,hashlib,io,os,sys,zipfile
      d = sys.argv[1]
      body = b'VKF\\x02' + os.urandom(600)
      keyfile = body + hashlib.sha256(body).digest()
      open(d + '/vault.keys.gz', 'wb').write(gzip.compress(keyfile))
      buffer = io.BytesIO()
      with zipfile.ZipFile(buffer, 'w', zipfile.ZIP_DEFLATED) as z: z.writestr('keys/vault.keys', keyfile)
      open(d + '/keys.zip', 'wb').write(buffer.getvalue())
      damaged = bytearray(keyfile); damaged[100] ^= 1
      open(d + '/damaged.keys.gz', 'wb').write(gzip.compress(bytes(damaged)))
      """, [temporary.path])
    let report = try Scanner(canaries: []).scan([temporary.path])
    let keys = report.findings.filter { $0.detector == "key-material" }
    XCTAssertEqual(
      Set(keys.map { ($0.file as NSString).lastPathComponent }), ["vault.keys.gz", "keys.zip"], "\(report.findings)")
    XCTAssertTrue(
      keys.allSatisfy { $0.encoding == "inflated+vault-keyfile" && $0.region == "compressed-stream" }, "\(keys)")
  }

  /// What a stream inside a document, source or configuration decodes to is not judged by the
  /// heuristics (a certificate's base64, a PDF's page streams hold text by design); canaries still
  /// are searched. Inside a binary spill file the same content is judged.
  func testDecodedContentInsideDocumentsIsNotJudgedByHeuristics() throws {
    try python(
      """
      import base64,gzip,os,sys
      prose = b'The committee met on Tuesday to discuss the budget for the coming year and agreed on it. ' * 8
      block = base64.encodebytes(prose + b'doc-canary-12')
      open(sys.argv[1] + '/notes.txt', 'wb').write(b'Attached, as agreed:\\n\\n' + block)
      open(sys.argv[1] + '/manual.pdf', 'wb').write(b'%PDF-1.4\\n1 0 obj\\n<< /Filter /FlateDecode >>\\nstream\\n' + gzip.compress(prose) + b'\\nendstream\\n')
      open(sys.argv[1] + '/spill.bin', 'wb').write(os.urandom(100) + gzip.compress(prose) + os.urandom(100))
      """, [temporary.path])
    let report = try Scanner(canaries: ["doc-canary-12"]).scan([temporary.path])
    let found = Set(report.findings.map { "\(($0.file as NSString).lastPathComponent) \($0.detector)" })
    XCTAssertEqual(found, ["notes.txt canary", "spill.bin natural-language"], "\(report.findings)")
  }

  /// Members of an archive are files in their own right: a gzipped document inside a tar, or an
  /// object in a git pack, is judged as the document it holds (prose there is not a record), where
  /// the same stream embedded in an unknown binary is a record. (Before: a gc'd git repository of
  /// source code was flagged as natural language.)
  func testStreamsInsideArchivesAreJudgedAsTheFilesTheyHold() throws {
    try python(
      """
      import gzip,io,os,subprocess,sys,tarfile
      d = sys.argv[1]
      prose = b'The committee met on Tuesday to discuss the budget for the coming year and agreed on it.\\n' * 40
      member = gzip.compress(prose, mtime=0)
      with tarfile.open(d + '/docs.tar', 'w') as t:
        info = tarfile.TarInfo('minutes.txt.gz'); info.size = len(member); t.addfile(info, io.BytesIO(member))
      os.mkdir(d + '/repo')
      env = dict(os.environ, GIT_AUTHOR_NAME='A', GIT_AUTHOR_EMAIL='a@example.org', GIT_COMMITTER_NAME='A',
                 GIT_COMMITTER_EMAIL='a@example.org', HOME=d)
      open(d + '/repo/minutes.txt', 'wb').write(prose)
      for command in (['init', '-q'], ['add', '.'], ['commit', '-qm', 'Add the minutes of the meeting'], ['gc', '-q']):
        subprocess.run(['git', '-C', d + '/repo'] + command, env=env, check=True)
      os.remove(d + '/repo/minutes.txt')
      open(d + '/spill.bin', 'wb').write(os.urandom(100) + member + os.urandom(100))
      """, [temporary.path])
    let report = try Scanner(canaries: []).scan([temporary.path])
    XCTAssertEqual(
      Set(report.findings.map { ($0.file as NSString).lastPathComponent }), ["spill.bin"], "\(report.findings)")
  }

  /// A file of a million leaks lists 100 per detector and counts the rest: memory does not grow with
  /// the number of findings (before: 1.08 GB for 20 MB of JSON lines). Each place is reported once
  /// although chunks overlap.
  func testFindingsPerFileAreCappedAndCounted() throws {
    let line = Array(#"{"user":"ana","card":"4111"}"#.utf8) + [0]
    let count = (5 << 20) / line.count
    try Data((0..<count).flatMap { _ in line }).write(to: URL(fileURLWithPath: temporary.sub("many.bin")))
    let report = try Scanner(canaries: []).scan([temporary.sub("many.bin")])
    XCTAssertEqual(report.findings.count, ScanReport.findingsPerDetectorPerFile + 1)
    let summary = report.findings.first { $0.excerpt.hasSuffix("not listed") }
    XCTAssertEqual(summary?.excerpt, "\(count - 100) more json-text findings in this file, not listed")
  }

  /// A stream whose signature is in the last bytes of a chunk's buffer (which the next chunk reads
  /// again) is decoded once: both chunks decoded it, and each of its findings was listed twice.
  func testAStreamAtTheEndOfAChunksBufferIsReportedOnce() throws {
    let path = temporary.sub("edge.bin")
    for before in [1, 100, StreamStart.lookahead] {
      try python(
        """
        import gzip,random,sys
        random.seed(5)
        body = b'some log text ' * 50 + b'chunk-edge-canary-3' + b' more text' * 20
        data = bytearray(random.randbytes(int(sys.argv[2]) + 200000))
        position = int(sys.argv[2]) - int(sys.argv[3])
        stream = gzip.compress(body)
        data[position:position + len(stream)] = stream
        open(sys.argv[1], 'wb').write(data)
        """, [path, String(Scanner.chunk + Scanner.chunkOverlap), String(before)])
      let found = try Scanner(canaries: ["chunk-edge-canary-3"]).scan([path]).findings.filter {
        $0.detector == "canary"
      }
      XCTAssertEqual(found.map(\.offset), [Scanner.chunk + Scanner.chunkOverlap - before], "\(before) bytes before")
    }
  }

  /// A mail body: base64 of gzip, wrapped in lines after a blank line. It is both a base64 stream
  /// (`H4sI`) and a block of wrapped lines at one offset, and both decoded it: every finding was
  /// listed twice (review). Once now, at the body's offset.
  func testAMIMEWrappedBase64StreamIsReportedOnce() throws {
    let path = temporary.sub("mail.eml")
    try python(
      """
      import base64,gzip,json,sys
      body = base64.encodebytes(gzip.compress(json.dumps({'note': 'mime-canary-5 for ana', 'pad': 'x' * 300}).encode()))
      head = b'Content-Type: application/gzip\\r\\nContent-Transfer-Encoding: base64\\r\\n\\r\\n'
      open(sys.argv[1], 'wb').write(head + body.replace(b'\\n', b'\\r\\n') + b'\\r\\n')
      """, [path])
    let findings = try Scanner(canaries: ["mime-canary-5"]).scan([path]).findings
    XCTAssertEqual(findings.filter { $0.detector == "canary" }.map(\.encoding), ["inflated+utf8"])
    XCTAssertEqual(Set(findings.map(\.offset)), [69])
    XCTAssertEqual(findings.count, Set(findings).count)
  }

  /// Different canaries in one stream give findings equal in every field (a finding inside a
  /// stream does not name its canary): each is still listed, in a stream decoded once and in one
  /// decoded twice (second review: a set kept one of ten).
  func testDifferentCanariesInOneStreamAreEachListed() throws {
    try python(
      """
      import base64,gzip,sys
      body = b' '.join(b'canary-%02d-XYZ' % i for i in range(10)) + b' were all typed here'
      stream = gzip.compress(body)
      open(sys.argv[1] + '/ten.gz', 'wb').write(stream)
      wrapped = base64.encodebytes(stream).replace(b'\\n', b'\\r\\n')
      open(sys.argv[1] + '/ten.eml', 'wb').write(b'Content-Transfer-Encoding: base64\\r\\n\\r\\n' + wrapped)
      """, [temporary.path])
    let canaries = (0..<10).map { String(format: "canary-%02d-XYZ", $0) }
    for name in ["ten.gz", "ten.eml"] {
      let found = try Scanner(canaries: canaries).scan([temporary.sub(name)]).findings.filter {
        $0.detector == "canary"
      }
      XCTAssertEqual(found.count, 10, name)
    }
  }

  /// From the second outside review: shapes that were read as clean with a secret inside.
  func testShapesTheReviewFoundMissedAreFoundOrIncomplete() throws {
    try python(
      """
      import base64,gzip,io,lzma,os,random,sys,tarfile,zipfile,zlib
      d = sys.argv[1]; random.seed(11)
      secret = b'the note says review-canary-9 ' * 20
      # base64 of gzip in JSON, wrapped with \\n escapes; and in 64-character pieces split by spaces
      b = base64.encodebytes(gzip.compress(secret)).decode().replace('\\n', '\\\\n')
      open(d + '/escaped.json', 'w').write('{"blob": "' + b + '"}')
      b = base64.b64encode(gzip.compress(secret)).decode()
      open(d + '/spaced.txt', 'w').write('data: ' + ' '.join(b[i:i + 64] for i in range(0, len(b), 64)) + '\\n')
      # a 9-byte secret compressed with zlib: a stream that ends with its checksum is real
      open(d + '/short.bin', 'wb').write(random.randbytes(200) + zlib.compress(b'pw=tok-9Xq2') + random.randbytes(200))
      # a ZIP four deep
      data = b'inner ' + secret
      for level in range(4):
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, 'w', zipfile.ZIP_DEFLATED) as z: z.writestr('level%d' % level, data)
        data = buffer.getvalue()
      open(d + '/deep.zip', 'wb').write(data)
      # a ZIP entry whose data starts 60,000 bytes after its header (a long extra field), inside gzip
      buffer = io.BytesIO()
      with zipfile.ZipFile(buffer, 'w', zipfile.ZIP_DEFLATED) as z:
        z.writestr('pad.bin', random.randbytes(250000), compress_type=zipfile.ZIP_STORED)
        info = zipfile.ZipInfo('note.txt'); info.extra = b'\\xfe\\xca' + (59996).to_bytes(2, 'little') + bytes(59996)
        z.writestr(info, secret, compress_type=zipfile.ZIP_DEFLATED)
      open(d + '/extra.zip.gz', 'wb').write(gzip.compress(buffer.getvalue()))
      # MIME base64 whose block starts 10 bytes before the first chunk's edge
      encoded = base64.b64encode(b'A' * 53 + secret)
      block = b'\\n'.join(encoded[i:i + 76] for i in range(0, len(encoded), 76)) + b'\\n'
      head = b'x' * (int(sys.argv[2]) - 11) + b'\\n'
      open(d + '/edge.eml', 'wb').write(head + block)
      """, [temporary.path, String(Scanner.chunk)])
    let report = try Scanner(canaries: ["review-canary-9", "tok-9Xq2"]).scan([temporary.path])
    let found = Set(report.findings.filter { $0.detector == "canary" }.map { ($0.file as NSString).lastPathComponent })
    XCTAssertEqual(
      found, ["escaped.json", "spaced.txt", "short.bin", "deep.zip", "extra.zip.gz", "edge.eml"], "\(report.findings)")
  }

  /// What cannot be read inside decoded data makes the file incomplete as in the file itself: an
  /// encrypted ZIP inside gzip, a 7z member in a tar, gzip nested five deep; a file whose size is
  /// not its content (procfs) is not passed as clean either.
  func testWhatCannotBeReadInsideDecodedDataIsIncomplete() throws {
    try python(
      """
      import gzip,io,os,sys,tarfile
      d = sys.argv[1]
      # A local file header with the encryption flag (APPNOTE 4.3.7), method 8, a 9-byte name.
      entry = b'PK\\x03\\x04' + bytes([20, 0, 1, 0, 8, 0]) + bytes(16) + bytes([9, 0, 0, 0]) + b'notes.txt' + os.urandom(64)
      open(d + '/locked.zip.gz', 'wb').write(gzip.compress(entry))
      member = b'7z\\xbc\\xaf\\x27\\x1c' + os.urandom(200)
      with tarfile.open(d + '/archive.tar', 'w') as t:
        info = tarfile.TarInfo('backup.7z'); info.size = len(member); t.addfile(info, io.BytesIO(member))
      data = b'five layers ' * 100
      for _ in range(5): data = gzip.compress(data)
      open(d + '/five.gz', 'wb').write(data)
      # A fifth layer of base64 of gzip, or of zlib, inside four of gzip (an outside review: neither
      # was listed). Padding keeps each layer's inner stream from being stored raw.
      import base64,zlib
      def four(data):
        for _ in range(4): data = gzip.compress(b'A' * 4000 + data + b'B' * 4000)
        return data
      secret = b'k=v five-deep-canary end'
      open(d + '/five-base64.gz', 'wb').write(four(b'{"blob":"' + base64.b64encode(gzip.compress(secret)) + b'"}'))
      open(d + '/five-zlib.gz', 'wb').write(four(b'xx' + zlib.compress(secret * 3)))
      """, [temporary.path])
    let report = try Scanner(canaries: []).scan([temporary.path, "/proc/self/cmdline"])
    let incomplete = Dictionary(
      report.incomplete.map { (($0.path as NSString).lastPathComponent, $0.reason) }, uniquingKeysWith: { a, _ in a })
    XCTAssertEqual(
      Set(incomplete.keys),
      ["locked.zip.gz", "archive.tar", "five.gz", "five-base64.gz", "five-zlib.gz", "cmdline"], "\(report.incomplete)")
    for name in ["five.gz", "five-base64.gz", "five-zlib.gz"] {
      XCTAssertTrue(incomplete[name]?.contains("nested more than 4 layers") ?? false, "\(name): \(incomplete)")
    }
    XCTAssertTrue(incomplete["archive.tar"]?.contains("7z") ?? false, "\(incomplete)")
  }

  /// Random bytes behind copied ZIP headers decode to garbage as raw deflate: no heuristic finding
  /// comes of it (they wait until the entry ends valid); and a file of PEM-like header lines takes
  /// linear time (it was quadratic: 768 KB took over a minute).
  func testGarbageBehindMagicNumbersAndPEMLikeLinesCostNothing() throws {
    try python(
      """
      import random,sys
      random.seed(5)
      header = b'PK\\x03\\x04' + bytes([20, 0, 0, 0, 8, 0]) + bytes(16) + bytes([4, 0, 0, 0]) + b'a.tx'
      open(sys.argv[1] + '/junk.bin', 'wb').write(b''.join(header + random.randbytes(3000) for _ in range(300)))
      open(sys.argv[1] + '/armour.txt', 'wb').write(b'-----BEGIN A KEY-----\\n' + b'h:-----BEGIN A KEY-----\\n' * 32000 + b'!\\n')
      """, [temporary.path])
    let started = Date()
    let report = try Scanner(canaries: []).scan([temporary.path])
    XCTAssertLessThan(Date().timeIntervalSince(started), 20)
    XCTAssertEqual(report.findings, [], "\(report.findings)")
  }
}
