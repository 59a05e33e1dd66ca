import XCTest

@testable import VaultQueue

/// What one transaction of a long job over a container's records takes in (re-sealing, merging,
/// the search for records that do not open): a record count and 4 MiB of envelopes, and always
/// one record, however large, so that the job moves on.
final class BatchLimitTests: XCTestCase {
  func testAdmitsUpToTheRecordCount() {
    var limit = BatchLimit(records: 3)
    XCTAssertEqual((0..<5).map { _ in limit.admit(bytes: 10) }, [true, true, true, false, false])
  }

  func testAdmitsUpToFourMebibytesAndNoFurther() {
    var limit = BatchLimit(records: 500)
    XCTAssertTrue(limit.admit(bytes: 3 << 20))
    XCTAssertTrue(limit.admit(bytes: 1 << 20), "exactly 4 MiB in all")
    XCTAssertFalse(limit.admit(bytes: 1))
  }

  func testARecordLargerThanTheLimitGoesAlone() {
    var limit = BatchLimit(records: 500)
    XCTAssertTrue(limit.admit(bytes: 64 << 20))
    XCTAssertFalse(limit.admit(bytes: 1))

    var after = BatchLimit(records: 500)
    XCTAssertTrue(after.admit(bytes: 100))
    XCTAssertFalse(after.admit(bytes: 64 << 20), "not beside another record")
  }
}
