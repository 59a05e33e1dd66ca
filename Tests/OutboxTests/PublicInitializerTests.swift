import Foundation
import Outbox
import Vault
import VaultKeys
import VaultQueue
import VaultTestSupport
import XCTest

/// An app's test doubles need the values the library returns: `Outbox.Receipt`, `ClaimedRecord`,
/// `QueueStats` and `RotationReport` had no public initializer (found by an outside review as an
/// app developer). Imported without @testable, as an app would.
final class PublicInitializerTests: XCTestCase {
  func testTheReturnedValuesCanBeMadeByAnApp() {
    let id = UUID()
    XCTAssertEqual(Outbox.Receipt(id: id).duplicate, false)
    XCTAssertEqual(Outbox.Receipt(id: id, duplicate: true).id, id)

    let created = Date(timeIntervalSince1970: 1_800_000_000)
    let record = ClaimedRecord(id: id, queue: "q", payload: Data("secret".utf8), attempts: 2, createdAt: created)
    XCTAssertEqual(
      [record.id, record.queue, record.payload, record.attempts, record.createdAt] as [AnyHashable],
      [id, "q", Data("secret".utf8), 2, created])
    XCTAssertFalse(String(describing: record).contains("secret"), "printed without its payload")

    let stats = QueueStats(
      container: "/c.sqlite", total: 3, bytes: 300, byState: ["pending": 3], byVersion: ["1": 3], byQueue: ["q": 3],
      dropped: [:], minimumSealVersion: 1)
    XCTAssertEqual(stats.resent, ["parked": 0, "review": 0])
    XCTAssertEqual(stats.total, 3)

    let report = RotationReport(previousVersion: 1, newVersion: 2, resealed: ["/c.sqlite": 3])
    XCTAssertEqual([report.retired, report.keptVersions], [[], []])
    XCTAssertFalse(report.compromised)
    XCTAssertEqual(report.resealed, ["/c.sqlite": 3])
  }

  /// A hand-made record belongs to no claim the container made: a `Claim` built on it settles
  /// nothing, so a test double cannot delete a real record by its id.
  func testAHandMadeRecordSettlesNothingThroughAClaim() throws {
    let temporary = TemporaryDirectory()
    let vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(InMemoryKeyStore()))
    let container = try QueueContainer(path: temporary.sub("q.sqlite"), vault: vault)
    let id = UUID()
    XCTAssertEqual(try container.enqueue(Array("m".utf8), queue: "q", id: id), .stored)
    let claim = Claim(
      container: container, records: [ClaimedRecord(id: id, queue: "q", payload: Data("m".utf8))], lease: 60)
    XCTAssertEqual(try claim.ack([id]), [])
    XCTAssertEqual(try container.stats().byState["pending"], 1, "the real record is still there")
    // The real claim settles it.
    let real = try container.claim(queue: "q")
    XCTAssertEqual(real.map(\.id), [id])
    XCTAssertEqual(try Claim(container: container, records: real, lease: 60).ack([id]), [id])
    XCTAssertEqual(try container.stats().total, 0)
  }
}
