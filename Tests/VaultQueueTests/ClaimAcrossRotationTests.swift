import Foundation
import Vault
import VaultKeys
import VaultTestSupport
import XCTest

@testable import VaultQueue

/// A claim reads its records in one transaction and opens them after it. A rotation in another
/// process may re-seal a claimed record and retire its old version in between: the claim must
/// open the record's new envelope, not fail as if the key were lost (the crash campaign saw
/// `keyMissing` for a key deleted just after the worker last read the manifest).
final class ClaimAcrossRotationTests: XCTestCase {
  func testARecordReSealedAndItsVersionRetiredAfterTheClaimReadItIsDelivered() throws {
    let temporary = TemporaryDirectory()
    let home = temporary.sub("home")
    let path = temporary.sub("q.sqlite")
    let shared = InMemoryKeyStore()
    let rotator = try Vault.create(home: home, store: StoreDescriptor(kind: .memory), resolver: .fixed(shared))
    try QueueContainer(path: path, vault: rotator).enqueue(Array("the ledger".utf8), queue: "q")
    // The record stays under version 1 while version 2 becomes active: rotated with the container
    // forgotten, then registered again (raised to version 2, its record left as it was).
    XCTAssertEqual(rename(path, path + ".aside"), 0)
    _ = try rotator.forgetContainer(at: path)
    try rotator.rotate()
    XCTAssertEqual(rename(path + ".aside", path), 0)
    _ = try QueueContainer(path: path, vault: rotator)
    XCTAssertEqual(rotator.activeVersion, 2)

    // The deliverer's first read of key 1 comes after its claim's transaction: the rotation runs
    // there, re-seals the record under version 3 and deletes key 1; the read then finds it gone.
    let armed = LockedValue(true)
    let report = LockedValue<RotationReport?>(nil)
    let interposed = InterposedKeyStore(shared) { call in
      guard call == .loadKey(version: 1),
        armed.withLock({ armed in
          defer { armed = false }
          return armed
        })
      else { return .forward }
      let rotated = try rotator.rotate(containers: QueueContainerProvider())
      report.withLock { $0 = rotated }
      return .absent
    }
    let deliverer = try Vault.open(home: home, resolver: .fixed(interposed))
    let queue = try QueueContainer(path: path, vault: deliverer)
    let claimed = try queue.claim(queue: "q")
    XCTAssertEqual(report.withLock { $0?.retired }, [1, 2], "the rotation ran in between and retired version 1")
    XCTAssertEqual(claimed.map { Array($0.payload) }, [Array("the ledger".utf8)])
    XCTAssertEqual(try queue.count(queue: "q", state: .inFlight), 1)
    XCTAssertEqual(try queue.stats().dropped["undecryptable"], 0)
  }
}
