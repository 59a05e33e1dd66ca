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

  /// A review: a batch was 500 records whatever their size, so 500 records of 1 MB held about
  /// 1.5 GB at once (each envelope, its payload and its new envelope). A batch now also stops at
  /// 4 MiB of envelopes, a larger record going alone; every record is still re-sealed and opens.
  func testLargeRecordsAreResealedInBatchesOfAFewMebibytes() throws {
    let temporary = TemporaryDirectory()
    let vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(InMemoryKeyStore()))
    let configuration = QueueConfiguration(byteCap: 1 << 30)
    let path = temporary.sub("large.sqlite")
    let queue = try QueueContainer(path: path, vault: vault, configuration: configuration)
    let megabyte = 1 << 20
    // Nine records of 1 MiB, one of 6 MiB (larger than a batch), then three small ones.
    var sizes = Array(repeating: megabyte, count: 9) + [6 * megabyte] + [10, 20, 30]
    sizes.swapAt(4, 9)
    var ids: [UUID] = []
    for (index, size) in sizes.enumerated() {
      let id = UUID()
      ids.append(id)
      try queue.enqueue([UInt8](repeating: UInt8(index), count: size), queue: "outbox", id: id)
    }
    let steps = Steps()
    let report = try vault.rotate(
      containers: QueueContainerProvider(configuration: configuration),
      options: RotationOptions(progress: { steps.append($0) }))

    XCTAssertEqual(report.resealed[path], sizes.count)
    // Batches of whole records up to 4 MiB: 3 × 1 MiB (a fourth would pass the limit with the
    // envelopes' overhead), 1 MiB (the 6 MiB record next would pass it), the 6 MiB record alone,
    // 3 × 1 MiB, then 2 × 1 MiB with the small ones.
    let counts = steps.all.filter { $0.path == path }.map(\.resealed)
    XCTAssertEqual(counts, [0, 3, 4, 5, 8, 13])
    let claimed = try queue.claim(queue: "outbox", maxCount: 100, maxBytes: 1 << 30)
    XCTAssertEqual(claimed.count, sizes.count)
    for record in claimed {
      let index = try XCTUnwrap(ids.firstIndex(of: record.id))
      XCTAssertTrue(
        record.payloadBytes == [UInt8](repeating: UInt8(index), count: sizes[index]), "record \(index) changed")
    }
    XCTAssertEqual(Set(try queue.recordCounts().byVersion.keys), [vault.activeVersion])
  }
}

private final class Steps: @unchecked Sendable {
  private let lock = NSLock()
  private var steps: [RotationProgress] = []
  func append(_ step: RotationProgress) { lock.withLock { steps.append(step) } }
  var all: [RotationProgress] { lock.withLock { steps } }
}
