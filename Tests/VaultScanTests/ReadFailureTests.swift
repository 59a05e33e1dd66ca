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
}
