import Foundation
import VaultCrypto
import VaultKeys
import VaultTestSupport
import XCTest

@testable import Vault
@testable import VaultQueue

/// The async forms of the container's calls and of `rotate()`, against a real SQLite file: the
/// same results as the synchronous calls, and the work (seen through the container's clock, read
/// inside every call) never on a thread of Swift's pool.
final class Reads: Sendable {
  let list = LockedValue<[Bool]>([])
}

final class QueueContainerAsyncTests: XCTestCase {
  var temporary: TemporaryDirectory!
  var vault: Vault!
  var path: String { temporary.sub("data/queue.sqlite") }
  /// For every read of the container's clock, whether it ran on a `BlockingWork` queue.
  let offPool = Reads()

  override func setUpWithError() throws {
    temporary = TemporaryDirectory()
    vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(InMemoryKeyStore()))
    try FileManager.default.createDirectory(atPath: temporary.sub("data"), withIntermediateDirectories: true)
  }

  override func tearDown() {
    vault = nil
    temporary = nil
  }

  private func open() async throws -> QueueContainer {
    let clock: @Sendable () -> Date = { [offPool] in
      offPool.list.withLock { $0.append(BlockingWork.isCurrent) }
      return Date()
    }
    return try await QueueContainer.open(path: path, vault: vault, clock: clock)
  }

  private func assertAllOffPool(file: StaticString = #filePath, line: UInt = #line) {
    let reads = offPool.list.withLock { $0 }
    XCTAssertFalse(reads.isEmpty, file: file, line: line)
    XCTAssertEqual(reads.filter { !$0 }.count, 0, "a call read the clock on the pool", file: file, line: line)
  }

  func testAsyncEnqueueClaimAckFailStatsListMatchTheSynchronousCalls() async throws {
    let queue = try await open()
    let first = UUID()
    let second = UUID()
    let outcome = try await queue.enqueue(Data("one".utf8), queue: "q", id: first)
    XCTAssertEqual(outcome, .stored)
    let again = try await queue.enqueue(Array("one".utf8), queue: "q", id: first)
    XCTAssertEqual(again, .duplicate)
    let batch = try await queue.enqueue(contentsOf: [(id: second, payload: Array("two".utf8))], queue: "q")
    XCTAssertEqual(batch, [.stored])
    let claimed = try await queue.claim(queue: "q", maxCount: 10)
    XCTAssertEqual(claimed.map(\.id), [first, second])
    XCTAssertEqual(claimed.map(\.payload), [Data("one".utf8), Data("two".utf8)])
    try await queue.ack([first])
    let failed = try await queue.fail([second], errorKind: "http-503")
    XCTAssertNotNil(failed[second])
    let stats = try await queue.stats()
    XCTAssertEqual(stats.total, 1)
    XCTAssertEqual(stats.byState[RecordState.pending.rawValue], 1)
    let listed = try await queue.list(queue: "q")
    XCTAssertEqual(listed.map(\.id), [second])
    XCTAssertEqual(listed.first?.errorKind, "http-503")
    try await queue.reject([second], errorKind: "http-400")
    let review = try await queue.list(state: .review)
    XCTAssertEqual(review.map(\.id), [second])
    assertAllOffPool()
  }

  /// Two hundred async enqueues at once, through group commit (its leader gathering the callers
  /// the last commit saw): every one returns `.stored`, and every record is there once.
  func testManyConcurrentAsyncEnqueuesAllReturnStored() async throws {
    let container = try QueueContainer(path: path, vault: vault)
    let ids = (0..<200).map { _ in UUID() }
    let outcomes = try await withThrowingTaskGroup(of: EnqueueOutcome.self) { group in
      for (index, id) in ids.enumerated() {
        group.addTask { try await container.enqueue(Array("record \(index)".utf8), queue: "q", id: id) }
      }
      return try await group.reduce(into: [EnqueueOutcome]()) { $0.append($1) }
    }
    XCTAssertEqual(outcomes, Array(repeating: .stored, count: ids.count))
    let total = try await container.stats().total
    XCTAssertEqual(total, ids.count)
    let claimed = try await container.claim(queue: "q", maxCount: ids.count)
    XCTAssertEqual(Set(claimed.map(\.id)), Set(ids))
  }

  func testAsyncReleaseGivesClaimedRecordsBack() async throws {
    let queue = try await open()
    let id = UUID()
    try await queue.enqueue(Data("x".utf8), queue: "q", id: id)
    _ = try await queue.claim(queue: "q")
    try await queue.release([id])
    let claimed = try await queue.claim(queue: "q")
    XCTAssertEqual(claimed.map(\.id), [id])
    assertAllOffPool()
  }

  func testAsyncRotateReseals() async throws {
    let queue = try await open()
    try await queue.enqueue(Data("kept".utf8), queue: "q")
    let before = vault.activeVersion
    let report = try await vault.rotate()
    XCTAssertEqual(report.previousVersion, before)
    XCTAssertEqual(vault.activeVersion, report.newVersion)
    XCTAssertEqual(report.resealed[queue.path], 1)
    let claimed = try await queue.claim(queue: "q")
    XCTAssertEqual(claimed.map(\.payload), [Data("kept".utf8)])
  }

  func testEnqueueCancelledBeforeStartStoresNothing() async throws {
    let queue = try await open()
    let task = Task {
      withUnsafeCurrentTask { $0?.cancel() }
      return try await queue.enqueue(Data("x".utf8), queue: "q")
    }
    do {
      _ = try await task.value
      XCTFail("enqueued although cancelled")
    } catch is CancellationError {}
    let stats = try await queue.stats()
    XCTAssertEqual(stats.total, 0)
  }

  /// Cancelled while its transaction runs, the enqueue commits and says so: a started fsync is not
  /// undone, and the caller is not told otherwise.
  func testEnqueueCancelledAfterStartIsStored() async throws {
    let started = LockedValue(false)
    let clock: @Sendable () -> Date = {
      if BlockingWork.isCurrent, !started.withLock({ $0 }) {
        started.withLock { $0 = true }
        usleep(300_000)
      }
      return Date()
    }
    // Opening reads the clock too: let it, then arm the slow read for the enqueue.
    let queue = try await QueueContainer.open(path: path, vault: vault, clock: clock)
    started.withLock { $0 = false }
    let task = Task { try await queue.enqueue(Data("x".utf8), queue: "q") }
    while !started.withLock({ $0 }) { try await Task.sleep(nanoseconds: 10_000_000) }
    task.cancel()
    let outcome = try await task.value
    XCTAssertEqual(outcome, .stored)
    let stats = try await queue.stats()
    XCTAssertEqual(stats.total, 1)
  }
}
