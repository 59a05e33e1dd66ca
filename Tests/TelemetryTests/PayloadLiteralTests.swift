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
  private func unsentTelemetry(
    in temporary: TemporaryDirectory, clock: @escaping @Sendable () -> Date = Date.init
  ) throws -> (QueueContainer, Telemetry) {
    let vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(InMemoryKeyStore()))
    let container = try QueueContainer(path: temporary.sub("home/q.sqlite"), vault: vault)
    let telemetry = Telemetry(
      container: container, tokens: TokenFile(path: "/nonexistent"), sender: NoBatchSender(), clock: clock)
    return (container, telemetry)
  }

  /// An event logged without an id gets a version-7 UUID (RFC 9562) whose time is its `ts`, to the
  /// millisecond, so events logged one after another take the id index's last page; one given an
  /// id keeps it.
  func testAnEventsOwnIdIsTimeOrderedAndSaysNoMoreThanItsTimestamp() throws {
    let temporary = TemporaryDirectory()
    let clock = TestClock(Date(timeIntervalSince1970: 1_800_000_000.1234))
    let (container, telemetry) = try unsentTelemetry(in: temporary, clock: clock.function)
    let first = try telemetry.log(type: "a")
    clock.advance(0.001)
    let second = try telemetry.log(type: "b")
    let given = UUID(uuidString: "4f6b3c1e-0d2a-4b8e-9c71-2a5d8e0f1b3c")!
    XCTAssertEqual(try telemetry.log(type: "c", id: given), given)
    // 1,800,000,000,123 ms is 0x01A3185C507B.
    XCTAssertTrue(first.uuidString.hasPrefix("01A3185C-507B-7"), first.uuidString)
    XCTAssertTrue(second.uuidString.hasPrefix("01A3185C-507C-7"), second.uuidString)
    XCTAssertLessThan(first.uuidString, second.uuidString)
    let claimed = try container.claim(queue: Telemetry.queueName, maxCount: 3)
    let stamps = try claimed.map { record -> String in
      guard case .object(let fields) = try JSONValue(parsing: record.payloadBytes), case .string(let ts)? = fields["ts"]
      else { throw TelemetryError.invalidPayload }
      return ts
    }
    XCTAssertEqual(claimed.map(\.id), [first, second, given])
    XCTAssertEqual(stamps, ["2027-01-15T08:00:00.123Z", "2027-01-15T08:00:00.124Z", "2027-01-15T08:00:00.124Z"])
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
