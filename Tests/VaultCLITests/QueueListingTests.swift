import Foundation
import VaultTestSupport
import XCTest

/// `vault queue list` streamed and paged (`--limit N`, `--after ID`), through the real binary.
final class QueueListingTests: XCTestCase {
  var temporary: TemporaryDirectory!
  var home: String { temporary.sub("home") }
  var ids: [String] = []

  override func setUpWithError() throws {
    temporary = TemporaryDirectory()
    try initKeyfileVault(home: home, keyfile: temporary.sub("keys/v.keys"))
    ids = (0..<5).map { String(format: "00000000-0000-4000-8000-%012d", $0) }
    for (index, id) in ids.enumerated() {
      let queue = index % 2 == 0 ? "even" : "odd"
      let put = try vault(
        ["--home", home, "queue", "put", "--queue", queue, "--id", id], input: Array("r\(index)".utf8))
      XCTAssertEqual(put.status, 0, put.error)
    }
  }

  override func tearDown() { temporary = nil }

  private func listed(_ arguments: [String]) throws -> [String] {
    let run = try vault(["--home", home, "queue", "list", "--json"] + arguments)
    XCTAssertEqual(run.status, 0, run.error)
    let rows = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(run.output)) as? [[String: Any]])
    return rows.map { $0["id"] as! String }
  }

  func testPagesFollowStorageOrderAndTheLastIdStartsTheNextPage() throws {
    XCTAssertEqual(try listed([]), ids)
    XCTAssertEqual(try listed(["--limit", "2"]), Array(ids[0..<2]))
    XCTAssertEqual(try listed(["--limit", "2", "--after", ids[1]]), Array(ids[2..<4]))
    XCTAssertEqual(try listed(["--limit", "2", "--after", ids[3]]), [ids[4]])
    XCTAssertEqual(try listed(["--after", ids[4]]), [])
    XCTAssertEqual(try listed(["--limit", "0"]), [])
    // --after counts from the record wherever it is; the filter picks among what follows.
    XCTAssertEqual(try listed(["--queue", "even", "--after", ids[1]]), [ids[2], ids[4]])
    let text = try vault(["--home", home, "queue", "list", "--limit", "1", "--after", ids[0]])
    XCTAssertEqual(text.status, 0, text.error)
    XCTAssertTrue(text.outputText.hasPrefix(ids[1] + "  odd  pending"), text.outputText)
    XCTAssertEqual(text.outputText.split(separator: "\n").count, 1)
  }

  func testStreamedJSONIsTheSameArrayAsBefore() throws {
    let run = try vault(["--home", home, "queue", "list", "--json"])
    // Pretty-printed, sorted keys, one element per record, null for an absent error kind.
    XCTAssertTrue(run.outputText.hasPrefix("[\n  {\n    \"attempts\" : 0,\n"), run.outputText)
    XCTAssertTrue(run.outputText.hasSuffix("\n  }\n]\n"), run.outputText)
    XCTAssertTrue(run.outputText.contains("\"error_kind\" : null"))
    let none = try vault(["--home", home, "queue", "list", "--json", "--queue", "absent"])
    XCTAssertEqual(none.outputText, "[\n\n]\n")
  }

  func testBadPagingValuesAreUsageErrorsAndAnUnknownIdIsAnError() throws {
    for (arguments, message) in [
      (["--limit", "-1"], "--limit must be a whole number, 0 or more (got '-1')"),
      (["--limit", "ten"], "--limit must be a whole number, 0 or more (got 'ten')"),
      (["--after", "nope"], "--after must be a record id (a UUID; got 'nope')"),
    ] {
      let run = try vault(["--home", home, "queue", "list"] + arguments)
      XCTAssertEqual(run.status, 64, "\(arguments)")
      XCTAssertTrue(run.error.hasPrefix("Error: \(message)\n"), run.error)
    }
    let put = try vault(["--home", home, "queue", "put", "--queue", "q", "--limit", "3"], input: [1])
    XCTAssertEqual(put.status, 64)
    XCTAssertTrue(put.error.hasPrefix("Error: '--limit' does not apply to 'queue put'"), put.error)
    let unknown = try vault(["--home", home, "queue", "list", "--after", "11111111-1111-4111-8111-111111111111"])
    XCTAssertEqual(unknown.status, 1)
    XCTAssertTrue(unknown.error.hasPrefix("Error: no record 11111111-1111-4111-8111-111111111111"), unknown.error)
    XCTAssertEqual(unknown.outputText, "")
  }
}
