import Foundation
import Vault
import VaultKeys
import VaultQueue
import VaultTestSupport
import XCTest

/// A `Claim` handed to other threads, as an app settling from async code must (its calls block for
/// a transaction, so they belong off Swift's concurrency pool). Found by an outside review as an
/// app developer: `Claim` was not `Sendable`, so `DispatchQueue.global().async { try claim.ack(ids) }`
/// did not compile under Swift 6, and the container's own `ack` skips the lease check.
final class ClaimConcurrencyTests: XCTestCase {
  func testAClaimSettledFromManyThreadsAtOnceSettlesEachRecordOnce() throws {
    let temporary = TemporaryDirectory()
    let vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(InMemoryKeyStore()))
    let container = try QueueContainer(path: temporary.sub("q.sqlite"), vault: vault)
    for index in 0..<40 { try container.enqueue(Array("record \(index)".utf8), queue: "q") }
    let claim = Claim(container: container, records: try container.claim(queue: "q", maxCount: 40), lease: 60)
    let ids = claim.records.map(\.id)
    XCTAssertEqual(ids.count, 40)
    let acked = LockedSet()
    let group = DispatchGroup()
    for (index, id) in ids.enumerated() {
      DispatchQueue.global().async(group: group) {
        if index % 2 == 0 {
          if let done = try? claim.ack([id]) { acked.insert(done) }
        } else {
          _ = try? claim.fail([id], errorKind: "http-503")
        }
      }
    }
    XCTAssertEqual(group.wait(timeout: .now() + 60), .success)
    XCTAssertEqual(acked.count, 20)
    XCTAssertEqual(try claim.releaseUnsettled(), 0, "every record settled, none still held")
    XCTAssertEqual(try container.count(queue: "q", state: .pending), 20)
    XCTAssertEqual(try container.count(queue: "q", state: .inFlight), 0)
  }
}

private final class LockedSet: @unchecked Sendable {
  private let lock = NSLock()
  private var ids = Set<UUID>()
  func insert(_ more: Set<UUID>) { lock.withLock { ids.formUnion(more) } }
  var count: Int { lock.withLock { ids.count } }
}
