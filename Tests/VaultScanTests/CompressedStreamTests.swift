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
      XCTAssertEqual(report.findings.map(\.encoding), ["inflated+utf8"], "windowBits \(bits): \(report.findings)")
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
      """, [temporary.path])
    let canaries = (1...6).map { "nested-canary-\($0)" }
    let report = try Scanner(canaries: canaries).scan([temporary.path])
    let found = Set(
      report.findings.filter { $0.encoding == "inflated+utf8" }.map { ($0.file as NSString).lastPathComponent })
    XCTAssertEqual(
      found, ["backup.tar.gz", "export.zip", "blob.xz", "debug.log", "event.json", "mail.eml", "rotated.log.gz"],
      "\(report.findings)")
    XCTAssertTrue(report.complete, "\(report.incomplete)")
  }

  /// Base64 decoding stops at the first byte that is not base64, and short final groups decode
  /// (2 characters are 1 byte, 3 are 2), unpadded or padded, in either alphabet.
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
    for text in ["aGVsbG8gd29ybGQ=", "aGVsbG8gd29ybGQ", "aGVs\nbG8g\r\nd29y bGQ", "-_-_"] {
      let collector = Collector()
      let layer = Base64Layer(collector)
      // Pushed a byte at a time, as a stream would arrive.
      var alive = true
      for byte in Array(text.utf8) where alive { alive = [byte].withUnsafeBytes { layer.push($0) } }
      layer.finish()
      XCTAssertTrue(collector.finished)
      let expected: [UInt8] =
        text == "-_-_" ? [0xfb, 0xff, 0xbf] : text.contains(" ") ? Array("hello wor".utf8) : Array("hello world".utf8)
      XCTAssertEqual(collector.bytes, expected, text)
    }
  }
}
