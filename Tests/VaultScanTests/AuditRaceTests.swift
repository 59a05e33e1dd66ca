import Foundation
import VaultTestSupport
import XCTest

@testable import VaultScan

/// A database scanned while no -wal or -shm file sat beside it is read `immutable` (no files
/// made); a writer that starts meanwhile can make that read see torn pages. The audit then reads
/// it again through the WAL instead of listing a healthy database as unreadable.
final class AuditRaceTests: XCTestCase {
  func testADatabaseTornUnderAnImmutableReadIsReadAgainThroughItsWAL() throws {
    let temporary = TemporaryDirectory()
    let path = temporary.sub("db.sqlite")
    // What an immutable reader sees when a writer has moved on: the WAL holds the current page 1,
    // the main file a page 1 scribbled over (as mid-checkpoint).
    try python(
      """
      import os,sqlite3,sys
      c = sqlite3.connect(sys.argv[1]); c.execute('pragma journal_mode=wal'); c.execute('pragma wal_autocheckpoint=0')
      c.execute('create table t(x)'); c.execute("insert into t values ('row')"); c.commit()
      with open(sys.argv[1], 'r+b') as f: f.seek(100); f.write(b'\\xff' * 400)
      os._exit(0)
      """, [path])
    XCTAssertTrue(FileManager.default.fileExists(atPath: path + "-wal"), "the writer left its WAL (no close)")
    let descriptor = open(path, O_RDONLY | O_CLOEXEC)
    XCTAssertGreaterThanOrEqual(descriptor, 0)
    defer { close(descriptor) }
    let link = "/proc/self/fd/\(descriptor)"
    let scanner = Scanner(canaries: [])

    var immutable = ScanReport()
    try scanner.audit(link: link, path: path, live: false, report: &immutable)
    XCTAssertEqual(immutable.incomplete.count, 1, "read without its WAL, the file is torn: \(immutable.incomplete)")

    var retried = ScanReport()
    try scanner.audit(link: link, path: path, live: false, sidecarsAppeared: { true }, report: &retried)
    XCTAssertEqual(retried.incomplete, [], "read again through the WAL that appeared")
  }
}
