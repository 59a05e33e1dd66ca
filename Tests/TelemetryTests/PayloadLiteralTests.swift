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

  /// Telemetry that never sends, over a container of a vault whose keys are kept in memory, in
  /// `temporary`.
  private func unsentTelemetry(in temporary: TemporaryDirectory) throws -> (QueueContainer, Telemetry) {
    let vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(InMemoryKeyStore()))
    let container = try QueueContainer(path: temporary.sub("home/q.sqlite"), vault: vault)
    return (
      container, Telemetry(container: container, tokens: TokenFile(path: "/nonexistent"), sender: NoBatchSender())
    )
  }

  /// An event logged without an id gets a random one (version 4), never a time-ordered one: record
  /// ids outlive their records in a container's `inherited` and `merged` tables, so a version-7 id
  /// kept each delivered event's time on disk to the millisecond (a security review of 1823f2e).
  func testAnEventsOwnIdIsRandomAndSaysNothingOfItsTime() throws {
    let temporary = TemporaryDirectory()
    let (_, telemetry) = try unsentTelemetry(in: temporary)
    let ids = try (0..<50).map { _ in try telemetry.log(type: "a").uuidString }
    XCTAssertEqual(Set(ids).count, 50)
    XCTAssertTrue(ids.allSatisfy { Array($0)[14] == "4" && "89AB".contains(Array($0)[19]) }, "\(ids)")
    XCTAssertGreaterThan(Set(ids.map { $0.prefix(8) }).count, 45, "no shared time prefix")
  }

  func testAnEncodableIsLoggedAsItsJSONObject() throws {
    let temporary = TemporaryDirectory()
    let (container, telemetry) = try unsentTelemetry(in: temporary)
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

  /// A payload nested deeper than parsed JSON may be (64 levels, the payload object being level 1)
  /// is refused with nothing stored: writing it recursed once per level, and 10,000
  /// levels overflowed the stack (an outside review: the process died of SIGSEGV). 64 levels, in
  /// an array or in an object, are logged.
  func testAPayloadNestedTooDeeplyIsRefusedNotACrash() throws {
    let temporary = TemporaryDirectory()
    let (container, telemetry) = try unsentTelemetry(in: temporary)
    /// A payload whose innermost value sits `levels` levels deep (the payload itself is level 1).
    func nested(_ levels: Int, inObjects: Bool) -> [String: JSONValue] {
      var value: JSONValue = .number(1)
      for _ in 1..<levels { value = inObjects ? .object(["k": value]) : .array([.null, value]) }
      return ["deep": value]
    }
    for inObjects in [false, true] {
      XCTAssertNoThrow(try telemetry.log(type: "ok", payload: nested(64, inObjects: inObjects)))
      for levels in [65, 10_000] {
        XCTAssertThrowsError(try telemetry.log(type: "deep", payload: nested(levels, inObjects: inObjects))) {
          XCTAssertEqual($0 as? TelemetryError, .payloadTooDeep(limit: 64))
        }
      }
    }
    XCTAssertEqual(try container.count(queue: Telemetry.queueName, state: .pending), 2, "nothing too deep stored")
    XCTAssertTrue(JSONValue.nestsDeeper(["a": .array([.array([])])], than: 2))
    XCTAssertFalse(JSONValue.nestsDeeper(["a": .array([.array([])])], than: 3))
    XCTAssertFalse(JSONValue.nestsDeeper(["a": 1, "b": "x"], than: 1))
  }
}
