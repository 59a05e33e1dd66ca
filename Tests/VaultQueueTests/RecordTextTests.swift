import Foundation
import XCTest

@testable import VaultQueue

/// The text a container stores for a record id is exactly `uuidString.lowercased()`, which every
/// container written before `recordText` holds: a different text would no longer find those rows.
final class RecordTextTests: XCTestCase {
  func testRecordTextIsTheLowercasedUUIDString() {
    var ids = (0..<2000).map { _ in UUID() }
    ids.append(UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)))
    ids.append(
      UUID(uuid: (255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255)))
    ids.append(UUID(uuidString: "0A1B2C3D-4E5F-6071-8293-A4B5C6D7E8F9")!)
    for id in ids {
      XCTAssertEqual(id.recordText, id.uuidString.lowercased())
    }
    XCTAssertEqual(ids.last?.recordText, "0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9")
  }
}
