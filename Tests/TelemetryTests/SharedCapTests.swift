import Foundation
import Outbox
import Vault
import VaultKeys
import VaultQueue
import VaultTestSupport
import XCTest

@testable import Telemetry

/// Telemetry beside an app's messages in one container with the default `capVictims`
/// (`.anyQueue`): events make room only from older events, never from the messages. Found by an
/// outside review as an app developer: 30 events logged while 5 confirmed messages waited for the
/// network deleted all 5 (`dropped["cap"] = 20`), and the outbox's events said only "retried".
final class SharedCapTests: XCTestCase {
  var temporary: TemporaryDirectory!
  var container: QueueContainer!

  override func setUpWithError() throws {
    temporary = TemporaryDirectory()
    let vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(InMemoryKeyStore()))
    container = try QueueContainer(
      path: temporary.sub("home/queue.sqlite"), vault: vault, configuration: QueueConfiguration(byteCap: 4000))
  }

  override func tearDown() {
    container = nil
    temporary = nil
  }

  func testEventsNeverPushOutMessagesWithTheDefaultCapVictims() throws {
    let outbox = Outbox(container: container, queue: "outbox", transport: UnreachableTransport())
    var sent: [UUID] = []
    for index in 0..<5 { sent.append(try outbox.send(Array("confirmed message \(index)".utf8)).id) }
    let telemetry = Telemetry(container: container, tokens: CountingTokens(), sender: ScriptedSender())
    for index in 0..<30 { try telemetry.log(type: "screen_view", payload: ["i": .number(Double(index))]) }
    let kept = try container.list(queue: "outbox").map(\.id)
    XCTAssertEqual(Set(kept), Set(sent), "every confirmed message is still queued")
    let dropped = try container.stats().dropped["cap"] ?? 0
    XCTAssertGreaterThan(dropped, 0, "the cap did make room, from events")
    XCTAssertEqual(try container.count(queue: Telemetry.queueName, state: .pending), 30 - dropped)
  }

  /// With nothing but messages to drop, an event is refused and stores nothing; the messages stay.
  func testAnEventWithNoOlderEventToDropIsRefused() throws {
    let outbox = Outbox(container: container, queue: "outbox", transport: UnreachableTransport())
    // Messages up to the cap: the first one the cap drops is another message.
    while try container.stats().dropped["cap"] ?? 0 == 0 {
      try outbox.send(Array(repeating: UInt8(ascii: "m"), count: 200))
    }
    let messages = try container.count(queue: "outbox", state: .pending)
    let telemetry = Telemetry(container: container, tokens: CountingTokens(), sender: ScriptedSender())
    XCTAssertThrowsError(try telemetry.log(type: "t", payload: ["pad": .string(String(repeating: "x", count: 300))])) {
      XCTAssertEqual($0 as? QueueError, .capExceeded(cap: 4000))
      // The messages are pending, not in flight: the error must not say they all are (docs review).
      XCTAssertFalse("\($0)".contains("every older record is in flight"), "\($0)")
      XCTAssertTrue("\($0)".contains("queues the cap may not drop from"), "\($0)")
    }
    XCTAssertEqual(try container.count(queue: "outbox", state: .pending), messages, "no message dropped for an event")
    XCTAssertEqual(try container.count(queue: Telemetry.queueName, state: .pending), 0)
  }
}

private struct UnreachableTransport: SynchronousTransport {
  func deliverSynchronously(id: UUID, payload: Data) -> DeliveryResult { .unreachable(kind: "connection-refused") }
}
