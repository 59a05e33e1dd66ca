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
    try FileManager.default.removeItem(atPath: other)

    let status = try vault(["--home", home, "status", "--json"])
    let object = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(status.output)) as? [String: Any])
    let versions = try XCTUnwrap(object["versions"] as? [[String: Any]])
    let reasons = Dictionary(
      uniqueKeysWithValues: versions.map { ($0["version"] as? Int ?? 0, $0["kept_because"] as? [String] ?? ["?"]) })
    XCTAssertTrue(reasons[1]?.contains { $0.contains("outside any container") } == true, "\(reasons)")
    XCTAssertTrue(reasons[1]?.contains { $0.contains("container \(other) is missing") } == true, "\(reasons)")
    XCTAssertEqual(reasons[3], [], "the active version needs no reason")
    let text = try vault(["--home", home, "status"]).outputText
    XCTAssertTrue(text.contains("kept: it sealed records outside any container"), text)
  }
}
