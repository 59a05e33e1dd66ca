import Foundation
import Outbox
import Vault
import VaultKeys
import VaultQueue
import VaultTestSupport
import XCTest

@testable import Telemetry

/// Payloads an app writes as it would write JSON: literals, or its own Encodable types.
final class PayloadLiteralTests: XCTestCase {
  func testLiteralsAreJSONValues() throws {
    let payload: [String: JSONValue] = [
      "screen": "home", "taps": 3, "ratio": 0.25, "ok": true, "tags": ["a", "b"], "none": nil,
      "nested": ["depth": 2],
    ]
    XCTAssertEqual(payload["screen"], .string("home"))
    XCTAssertEqual(payload["taps"], .number(3))
    XCTAssertEqual(payload["ratio"], .number(0.25))
    XCTAssertEqual(payload["ok"], .bool(true))
    XCTAssertEqual(payload["tags"], .array([.string("a"), .string("b")]))
    XCTAssertEqual(payload["none"], .null)
    XCTAssertEqual(payload["nested"], .object(["depth": .number(2)]))
  }

  struct NoteAdded: Encodable {
    let words: Int
    let pinned: Bool
    let folder: String
  }

  func testAnEncodableIsLoggedAsItsJSONObject() throws {
    let temporary = TemporaryDirectory()
    let vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(InMemoryKeyStore()))
    let container = try QueueContainer(path: temporary.sub("home/q.sqlite"), vault: vault)
    let telemetry = Telemetry(container: container, tokens: TokenFile(path: "/nonexistent"), sender: NoBatchSender())
    let id = try telemetry.log(type: "note_added", encoding: NoteAdded(words: 12, pinned: false, folder: "work"))
    let claimed = try XCTUnwrap(try container.claim(queue: Telemetry.queueName).first)
    XCTAssertEqual(claimed.id, id)
    let event = try JSONValue(parsing: claimed.payloadBytes)
    guard case .object(let fields) = event, case .object(let payload)? = fields["payload"] else {
      return XCTFail("not an event object")
    }
    XCTAssertEqual(payload, ["words": 12, "pinned": false, "folder": "work"])
    XCTAssertThrowsError(try telemetry.log(type: "bad", encoding: [1, 2, 3])) {
      XCTAssertEqual($0 as? TelemetryError, .invalidPayload)
    }
  }
}
