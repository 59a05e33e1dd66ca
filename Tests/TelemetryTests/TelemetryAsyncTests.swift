import Foundation
import VaultCrypto
import VaultKeys
import VaultQueue
import VaultTestSupport
import XCTest

@testable import Telemetry
@testable import Vault

/// A sender that notes whether it was called on a `BlockingWork` queue and answers 200.
final class ObservedSender: BatchSender {
  let offPool = LockedValue<[Bool]>([])
  func send(_ batch: TelemetryBatch, token: String) -> SendResult {
    offPool.withLock { $0.append(BlockingWork.isCurrent) }
    return .status(200, retryAfter: nil)
  }
}

/// The async `log` and `flush` against a real container: the events are stored and delivered as
/// with the synchronous calls, and the work (the event clock, the sender) runs off Swift's pool.
final class TelemetryAsyncTests: XCTestCase {
  var temporary: TemporaryDirectory!

  override func setUp() { temporary = TemporaryDirectory() }
  override func tearDown() { temporary = nil }

  func testAsyncLogAndFlushDeliverOffThePool() async throws {
    let vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(InMemoryKeyStore()))
    let container = try await QueueContainer.open(path: temporary.sub("home/queue.sqlite"), vault: vault)
    let clockReads = LockedValue<[Bool]>([])
    let sender = ObservedSender()
    let telemetry = Telemetry(
      container: container, tokens: CountingTokens(), sender: sender, sessionID: "s1",
      clock: {
        clockReads.withLock { $0.append(BlockingWork.isCurrent) }
        return Date()
      })
    let id = try await telemetry.log(type: "screen_view", payload: ["screen": .string("home")])
    struct Added: Encodable { let words: Int }
    let second = try await telemetry.log(type: "note_added", encoding: Added(words: 3))
    let pending = try await container.list(queue: Telemetry.queueName)
    XCTAssertEqual(Set(pending.map(\.id)), [id, second])
    let report = try await telemetry.flush()
    XCTAssertEqual(report.delivered, 2)
    XCTAssertEqual(report.pending, 0)
    let reads = clockReads.withLock { $0 }
    XCTAssertGreaterThanOrEqual(reads.count, 2)
    XCTAssertEqual(reads.filter { !$0 }.count, 0, "the event clock was read on the pool")
    XCTAssertEqual(sender.offPool.withLock { $0 }, [true])
  }
}
