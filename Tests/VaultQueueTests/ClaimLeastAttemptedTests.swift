import Foundation
import Vault
import VaultKeys
import VaultQueue
import VaultTestSupport
import XCTest

/// `claimLeastAttempted`: the record a delivery pass probes with after two refusals in a row of
/// records refused before: the due record of the queue with the fewest attempts counted, the
/// oldest of those, wherever it is in the queue.
final class ClaimLeastAttemptedTests: XCTestCase {
  func testTheDueRecordTriedLeastIsClaimedOldestFirst() throws {
    let temporary = TemporaryDirectory()
    let clock = TestClock()
    let vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(InMemoryKeyStore()))
    let container = try QueueContainer(
      path: temporary.sub("q.sqlite"), vault: vault,
      configuration: QueueConfiguration(backoff: BackoffPolicy(base: 1, cap: 10)), clock: clock.function)
    let ids = (0..<6).map { _ in UUID() }
    for (index, id) in ids.enumerated() { try container.enqueue(Array("record \(index)".utf8), queue: "q", id: id) }
    _ = try container.enqueue(Array("another queue".utf8), queue: "other")
    // 0: attempted twice and failed, due again; 1: attempted once, its lease left to run out;
    // 2 to 4: claimed and given back untouched (no attempt counted); 5: attempted once and failed
    // with a retry an hour ahead (not due).
    let all = try container.claim(queue: "q", maxCount: 6, lease: 5).map(\.id)
    XCTAssertEqual(all, ids)
    _ = try container.fail([ids[0]], errorKind: "http-500")
    try container.release(Array(ids[2...4]))
    _ = try container.fail([ids[5]], errorKind: "http-429", retryAfter: 3600)
    clock.advance(600)
    _ = try container.fail(try container.claim(queue: "q", maxCount: 1, lease: 60).map(\.id), errorKind: "http-500")
    clock.advance(600)

    // Never attempted first, oldest first, each claimed alone and opened.
    let probe = try container.claimLeastAttempted(queue: "q", lease: 60, dueBy: nil)
    XCTAssertEqual(probe.map(\.id), [ids[2]])
    XCTAssertEqual(probe.map(\.attempts), [1])
    XCTAssertEqual(probe.map(\.payload), [Data("record 2".utf8)])
    XCTAssertEqual(try container.claimLeastAttempted(queue: "q", lease: 60, dueBy: nil).map(\.id), [ids[3]])
    XCTAssertEqual(try container.claimLeastAttempted(queue: "q", lease: 60, dueBy: nil).map(\.id), [ids[4]])
    // Then the one tried least: 1 (its lease ran out after one attempt) before 0 (two); 5 is not due.
    XCTAssertEqual(try container.claimLeastAttempted(queue: "q", lease: 60, dueBy: nil).map(\.id), [ids[1]])
    let last = try container.claimLeastAttempted(queue: "q", lease: 60, dueBy: nil)
    XCTAssertEqual(last.map(\.id), [ids[0]])
    XCTAssertEqual(last.map(\.attempts), [3])
    XCTAssertEqual(try container.claimLeastAttempted(queue: "q", lease: 60, dueBy: nil), [], "every record held")
  }
}
