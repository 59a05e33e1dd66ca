import Foundation
import VaultTestSupport
import XCTest

/// Issue 13, item 6: `status` says, per kept version, why it is kept.
final class KeptVersionsTests: XCTestCase {
  func testStatusSaysWhyEachDecryptOnlyVersionIsKept() throws {
    let temporary = TemporaryDirectory()
    let home = temporary.sub("home")
    XCTAssertEqual(
      try vault(["--home", home, "init", "--store", "keyfile", "--keyfile", temporary.sub("k/v.keys")]).status, 0)
    XCTAssertEqual(try vault(["--home", home, "seal", "--context", "c"], input: Array("x".utf8)).status, 0)
    XCTAssertEqual(try vault(["--home", home, "rotate"]).status, 0)
    let other = temporary.sub("other.sqlite")
    XCTAssertEqual(
      try vault(["--home", home, "queue", "put", "--queue", "q", "--container", other], input: Array("y".utf8)).status,
      0)
    XCTAssertEqual(try vault(["--home", home, "rotate"]).status, 0)
    /// The status's kept reasons per version, and its `other` container's `state` and `records`.
    func status() throws -> (reasons: [Int: [String]], state: String?, records: Any?) {
      let status = try vault(["--home", home, "status", "--json"])
      let object = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(status.output)) as? [String: Any])
      let versions = try XCTUnwrap(object["versions"] as? [[String: Any]])
      let containers = try XCTUnwrap(object["containers"] as? [[String: Any]])
      let container = try XCTUnwrap(containers.first { $0["path"] as? String == other })
      return (
        Dictionary(
          uniqueKeysWithValues: versions.map { ($0["version"] as? Int ?? 0, $0["kept_because"] as? [String] ?? ["?"]) }
        ), container["state"] as? String, container["records"]
      )
    }
    XCTAssertEqual(try status().state, "ok")
    // There but not counted (refused: others may write it), which is not "missing" (an outside
    // reading of the JSON: both were null records, and the reason said "missing").
    XCTAssertEqual(chmod(other, 0o666), 0)
    let unreadable = try status()
    XCTAssertEqual(unreadable.state, "unreadable")
    XCTAssertTrue(unreadable.records is NSNull, "\(String(describing: unreadable.records))")
    XCTAssertTrue(
      unreadable.reasons[1]?.contains { $0.contains("container \(other) could not be read") } == true,
      "\(unreadable.reasons)")
    XCTAssertFalse(unreadable.reasons[1]?.contains { $0.contains("is missing") } == true, "\(unreadable.reasons)")
    try FileManager.default.removeItem(atPath: other)

    let (reasons, state, records) = try status()
    XCTAssertEqual(state, "missing")
    XCTAssertTrue(records is NSNull, "\(String(describing: records))")
    XCTAssertTrue(reasons[1]?.contains { $0.contains("outside any container") } == true, "\(reasons)")
    XCTAssertTrue(reasons[1]?.contains { $0.contains("container \(other) is missing") } == true, "\(reasons)")
    XCTAssertEqual(reasons[3], [], "the active version needs no reason")
    let text = try vault(["--home", home, "status"]).outputText
    XCTAssertTrue(text.contains("kept: it sealed records outside any container"), text)
  }
}
