import Foundation
import VaultTestSupport
import XCTest

@testable import VaultScan

/// A file the scan could not read as it is must never come out clean (an outside review of the
/// scan: a file cut short under the scan was reported scanned, with no findings and exit 0).
final class ReadFailureTests: XCTestCase {
  /// A log emptied while it is scanned (logrotate's `copytruncate`), after its size was taken:
  /// `SEEK_DATA` finds nothing from the first offset on, nothing reads short, and the scan used
  /// to stop there clean. Its size now differs from the size scanned: incomplete.
  func testAFileCutShortUnderTheScanIsIncomplete() throws {
    let temporary = TemporaryDirectory()
    let path = temporary.sub("app.log")
    let canary = "canary-7f3Q-cut-short"
    var content = [UInt8](repeating: UInt8(ascii: "x"), count: 2 << 20)
    content.replaceSubrange(1_500_000..<(1_500_000 + canary.utf8.count), with: Array(canary.utf8))
    try Data(content).write(to: URL(fileURLWithPath: path))
    let fd = open(path, O_RDONLY)
    XCTAssertGreaterThanOrEqual(fd, 0)
    defer { close(fd) }
    XCTAssertEqual(truncate(path, 0), 0, "cut short after its size was taken")
    var report = ScanReport()
    _ = Scanner(canaries: [canary]).scanFile(
      fd, size: content.count, path: path, name: "app.log", scratch: ScanScratch(), report: &report)
    XCTAssertEqual(report.findings, [])
    XCTAssertEqual(report.incomplete.map(\.path), [path], "\(report.incomplete)")
    XCTAssertTrue(report.incomplete.first?.reason.contains("changed size") == true, "\(report.incomplete)")
  }

  /// A canary written over bytes the scan had read, at the same size (an outside review: "no
  /// findings", exit 0, with the canary in the file as the scan ended). The file's times moved
  /// while it was read: incomplete. Here the write comes after the first chunk.
  func testAFileWrittenInPlaceUnderTheScanIsIncomplete() throws {
    let temporary = TemporaryDirectory()
    let path = temporary.sub("data.bin")
    let canary = "canary-7f3Q-in-place"
    let size = 3 * Scanner.chunk
    try Data(repeating: UInt8(ascii: "x"), count: size).write(to: URL(fileURLWithPath: path))
    let fd = open(path, O_RDONLY)
    XCTAssertGreaterThanOrEqual(fd, 0)
    defer { close(fd) }
    let writer = open(path, O_WRONLY)
    defer { close(writer) }
    var written = false
    var report = ScanReport()
    _ = Scanner(canaries: [canary]).scanFile(
      fd, size: size, path: path, name: "data.bin", scratch: ScanScratch(), report: &report,
      progress: { _ in
        guard !written else { return }
        written = true
        // A later time than the file was written with, on a file system with coarse times too.
        usleep(20_000)
        XCTAssertEqual(pwrite(writer, canary, canary.utf8.count, 100), canary.utf8.count)
      })
    XCTAssertTrue(written)
    XCTAssertEqual(report.findings, [], "read before the write")
    XCTAssertEqual(report.incomplete.map(\.path), [path], "\(report.incomplete)")
    XCTAssertTrue(
      report.incomplete.first?.reason.contains("was written to or changed while being scanned") == true,
      "\(report.incomplete)")
  }
}

/// A database's freelist is taken only for pages the file has.
final class FreelistBoundTests: XCTestCase {
  /// A crafted freelist naming 16,382 leaf pages per trunk page, all past the file's end, grew the
  /// scanner's set of free pages to six times the file's size in memory (an outside review: 426 MB
  /// for a 65 MB file). Only pages the file has are taken now: the trunks themselves.
  func testFreelistPagesPastTheEndOfTheFileAreNotHeld() throws {
    let temporary = TemporaryDirectory()
    let path = temporary.sub("crafted.db")
    let script = #"""
      import struct, sys
      trunks, size = 20, 65536
      header = bytearray(100); header[0:16] = b"SQLite format 3\x00"; header[16:18] = struct.pack('>H', 1)
      header[18] = 1; header[19] = 1; header[21] = 64; header[22] = 32; header[23] = 32
      header[28:32] = struct.pack('>I', trunks + 1); header[32:36] = struct.pack('>I', 2)
      with open(sys.argv[1], 'wb') as f:
        first = bytearray(size); first[0:100] = header; first[100] = 0x0d; f.write(first)
        leaf = 10_000_000
        for t in range(trunks):
          page = bytearray(size)
          page[0:4] = struct.pack('>I', t + 3 if t < trunks - 1 else 0); page[4:8] = struct.pack('>I', 16382)
          page[8:8 + 4 * 16382] = b''.join(struct.pack('>I', leaf + i) for i in range(16382)); leaf += 16382
          f.write(page)
      """#
    XCTAssertEqual(try Spawn.run("/usr/bin/env", ["python3", "-c", script, path]).status, 0)
    let fd = open(path, O_RDONLY)
    XCTAssertGreaterThanOrEqual(fd, 0)
    defer { close(fd) }
    var info = stat()
    XCTAssertEqual(fstat(fd, &info), 0)
    let regions = RegionMap(fd: fd, size: Int(info.st_size), name: "crafted.db")
    XCTAssertEqual(regions.freelistCount, 20, "the 20 trunk pages, none of the 327,640 leaves past the end")
    XCTAssertEqual(try Scanner(canaries: []).scan([path]).findings, [])
  }
}
