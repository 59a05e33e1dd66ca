import Foundation
import VaultKeys
import VaultTestSupport
import XCTest

@testable import Vault
@testable import VaultQueue

/// Issue 13, item 13: rotation says how far it has come, container by container and batch by
/// batch, so a display can show progress on long work.
final class RotationProgressTests: XCTestCase {
  func testProgressCountsEveryBatchOfEveryContainerUpToTheReport() throws {
    let temporary = TemporaryDirectory()
    let store = InMemoryKeyStore()
    let vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(store))
    let configuration = QueueConfiguration(resealBatch: 4)
    let paths = [temporary.sub("a.sqlite"), temporary.sub("b.sqlite")]
    for (index, path) in paths.enumerated() {
      let queue = try QueueContainer(path: path, vault: vault, configuration: configuration)
      for i in 0..<(10 + index) { try queue.enqueue(Array("record \(i)".utf8), queue: "outbox", id: UUID()) }
    }
    let steps = Steps()
    let report = try vault.rotate(
      containers: QueueContainerProvider(configuration: configuration),
      options: RotationOptions(progress: { steps.append($0) }))

    let seen = steps.all
    XCTAssertEqual(Set(seen.map(\.containers)), [2])
    for (index, path) in paths.enumerated() {
      let mine = seen.filter { $0.path == path }
      XCTAssertEqual(Set(mine.map(\.container)), [index + 1])
      // A start at 0, then one step per batch of 4, rising to what the report counts.
      XCTAssertEqual(mine.map(\.resealed), [0] + stride(from: 4, to: 10 + index, by: 4) + [10 + index])
      XCTAssertEqual(mine.last?.resealed, report.resealed[path])
      // The count over every container goes on from where the one before ended.
      XCTAssertEqual(Set(mine.map(\.resealedBefore)), [index == 0 ? 0 : 10])
    }
    let inAll = seen.map(\.resealedInAll)
    XCTAssertEqual(inAll, inAll.sorted(), "the count over every container never goes back")
    XCTAssertEqual(inAll.last, report.resealed.values.reduce(0, +))
  }
}

private final class Steps: @unchecked Sendable {
  private let lock = NSLock()
  private var steps: [RotationProgress] = []
  func append(_ step: RotationProgress) { lock.withLock { steps.append(step) } }
  var all: [RotationProgress] { lock.withLock { steps } }
}
