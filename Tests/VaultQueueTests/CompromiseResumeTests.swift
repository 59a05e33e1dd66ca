import Foundation
import VaultKeys
import VaultTestSupport
import XCTest

@testable import Vault
@testable import VaultQueue

/// A rotation after a compromise that stops part-way can only be finished as one: an ordinary
/// rotation would finish it while keeping the compromised key (found by the operator review).
final class CompromiseResumeTests: XCTestCase {
  func testAnAbortedCompromiseRotationBlocksOrdinaryOnesUntilOneAfterACompromiseFinishes() throws {
    let temporary = TemporaryDirectory()
    let store = InMemoryKeyStore()
    let vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(store))
    let queue = try QueueContainer(path: temporary.sub("q.sqlite"), vault: vault)
    try queue.enqueue(Array("record".utf8), queue: "outbox", id: UUID())
    _ = try vault.seal(Array("outside".utf8), context: "file")

    let stop = RotationOptions(compromised: true, confirm: { _ in .abort })
    XCTAssertThrowsError(try vault.rotate(containers: QueueContainerProvider(), options: stop)) {
      XCTAssertEqual($0 as? RotationError, .aborted)
    }
    XCTAssertEqual(vault.manifest.unfinishedCompromise, 2)
    XCTAssertEqual(Vault.statusWarnings(vault.manifest), [.unfinishedCompromise(version: 2)])
    // Run again, a rotation after a compromise makes a fresh key (the last one may have leaked too).
    XCTAssertThrowsError(try vault.rotate(containers: QueueContainerProvider(), options: stop))
    XCTAssertEqual(vault.manifest.activeVersion, 3)
    XCTAssertEqual(vault.manifest.unfinishedCompromise, 3)

    XCTAssertThrowsError(try vault.rotate(containers: QueueContainerProvider())) {
      XCTAssertEqual($0 as? RotationError, .compromiseUnfinished(version: 3))
    }
    XCTAssertEqual(vault.manifest.activeVersion, 3, "the ordinary rotation changed nothing")

    let report = try vault.rotate(
      containers: QueueContainerProvider(), options: RotationOptions(compromised: true, confirm: { _ in .purge }))
    XCTAssertEqual(report.newVersion, 4)
    XCTAssertEqual(report.retired, [1, 2, 3])
    XCTAssertNil(vault.manifest.unfinishedCompromise)
    XCTAssertEqual(try queue.claim(queue: "outbox").map(\.payloadBytes), [Array("record".utf8)])
    XCTAssertEqual(try vault.rotate(containers: QueueContainerProvider()).newVersion, 5)
  }
}
