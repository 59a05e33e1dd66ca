import Foundation
import Vault
import VaultKeys
import VaultQueue
import VaultTestSupport
import XCTest

@testable import Outbox

/// Times that are not numbers, or infinite, reaching the queue through public API. Found by an
/// outside review as an app developer: a transport answering `.retry(after: Double("nan"))` (a
/// naive parse of `Retry-After: nan`) trapped converting the due time to an integer, and left the
/// record in flight, so every restart trapped again once its lease ended; an infinite
/// `maximumRetryAfter`, `BackoffPolicy.cap` or `maximumLease`, or a NaN lease, trapped at the
/// first claim; a NaN HTTP timeout trapped at the first send; a NaN loop interval busy-looped.
final class NonNumberTimeTests: XCTestCase {
  var temporary: TemporaryDirectory!
  var vault: Vault!

  override func setUpWithError() throws {
    temporary = TemporaryDirectory()
    vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(InMemoryKeyStore()))
  }

  override func tearDown() {
    vault = nil
    temporary = nil
  }

  private func container(_ configuration: QueueConfiguration = QueueConfiguration(), name: String = "q.sqlite")
    throws -> QueueContainer
  {
    try QueueContainer(path: temporary.sub(name), vault: vault, configuration: configuration)
  }

  func testARetryAfterThatIsNotANumberFallsBackToTheBackoffAndTheRecordIsDeliveredLater() async throws {
    let queue = try container()
    let transport = ScriptedTransport([.retry(kind: "http-503", after: .nan)])
    let outbox = Outbox(container: queue, transport: transport)
    let id = try outbox.send(Array("hello".utf8)).id
    _ = try await outbox.deliverDue()
    let records = try await queue.list(queue: "outbox")
    let record = try XCTUnwrap(records.first)
    XCTAssertEqual(record.id, id)
    XCTAssertEqual(record.state, .pending, "rescheduled, not left in flight")
    let due = try XCTUnwrap(record.nextAttemptAt)
    XCTAssertLessThanOrEqual(due.timeIntervalSinceNow, 1.5, "the backoff's first delay (1 s at most)")
    // A new process (a new container object) reads the record without trapping and delivers it.
    try await Task.sleep(nanoseconds: UInt64((max(due.timeIntervalSinceNow, 0) + 0.05) * 1e9))
    let again = Outbox(container: try container(), transport: ScriptedTransport())
    let report = try await again.deliverDue()
    XCTAssertEqual(report.delivered, 1)
  }

  func testFailWithATimeThatIsNotANumberOrInfiniteSchedulesARetry() throws {
    let queue = try container()
    for after in [TimeInterval.nan, .infinity, -.infinity, -5] {
      let id = try XCTUnwrap(UUID())
      try queue.enqueue(Array("x".utf8), queue: "q", id: id)
      let claimed = try queue.claim(queue: "q", maxCount: 1, lease: 60)
      XCTAssertEqual(claimed.map(\.id), [id])
      let outcome = try queue.fail([id], errorKind: "http-503", retryAfter: after)
      guard case .retryAt(let due)? = outcome[id] else { return XCTFail("\(after): \(outcome)") }
      XCTAssertTrue(due.timeIntervalSinceNow.isFinite, "\(after)")
      XCTAssertLessThanOrEqual(due.timeIntervalSinceNow, 3601, "\(after): at most maximumRetryAfter")
      try queue.ack([id])
    }
  }

  func testConfigurationsWithTimesThatAreNotNumbersOrInfiniteStillClaim() throws {
    let configurations = [
      QueueConfiguration(maximumRetryAfter: .infinity), QueueConfiguration(backoff: BackoffPolicy(cap: .infinity)),
      QueueConfiguration(maximumLease: .infinity), QueueConfiguration(maximumLease: .nan),
      QueueConfiguration(maximumAge: .nan), QueueConfiguration(backoff: BackoffPolicy(base: .nan, cap: .nan)),
      QueueConfiguration(maximumRetryAfter: .nan, parkAfter: .nan), QueueConfiguration(maximumLease: 0),
      QueueConfiguration(maximumLease: -1),
    ]
    for (index, configuration) in configurations.enumerated() {
      let queue = try container(configuration, name: "c\(index).sqlite")
      try queue.enqueue(Array("x".utf8), queue: "q")
      let claimed = try queue.claim(queue: "q", maxCount: 10, lease: .nan)
      XCTAssertEqual(claimed.count, 1, "configuration \(index)")
      let id = try XCTUnwrap(claimed.first?.id)
      XCTAssertEqual(try queue.claim(queue: "q", maxCount: 10).count, 0, "configuration \(index): leased, not free")
      let outcome = try queue.fail([id], errorKind: "http-500")
      guard case .retryAt(let due)? = outcome[id] else { return XCTFail("configuration \(index): \(outcome)") }
      XCTAssertTrue(due.timeIntervalSinceNow.isFinite)
    }
  }

  /// A NaN lease is the longest lease, never none: a record held for no time would be claimed
  /// again at once by another deliverer (a duplicate delivery).
  func testALeaseThatIsNotANumberIsTheLongestLease() throws {
    let queue = try container(QueueConfiguration(maximumLease: 300))
    try queue.enqueue(Array("x".utf8), queue: "q")
    XCTAssertEqual(try queue.claim(queue: "q", lease: .nan).count, 1)
    XCTAssertEqual(try queue.claim(queue: "q").count, 0)
    let claim = Claim(container: queue, records: [], lease: .nan)
    XCTAssertEqual(claim.lease, 300)
  }

  func testABatchOfZeroOrLessClaimsNothing() throws {
    let queue = try container()
    try queue.enqueue(Array("x".utf8), queue: "q")
    XCTAssertEqual(try queue.claim(queue: "q", maxCount: -1).count, 0, "a negative limit is no limit in SQL")
    XCTAssertEqual(try queue.claim(queue: "q", maxCount: 0).count, 0)
    XCTAssertEqual(try queue.claim(queue: "q", maxCount: 1).count, 1)
  }

  func testAnHTTPTimeoutThatIsNotANumberIsThirtySeconds() throws {
    let server = try LoopbackHTTPServer([.init(status: 204)])
    defer { server.stop() }
    let client = HTTPClient(timeout: .nan)
    XCTAssertEqual(
      client.send(HTTPRequest(url: server.url(), method: "POST", headers: [], body: [])), .status(204, retryAfter: nil))
  }

  /// A loop period that is not a number waits 60 s between passes instead of not waiting at all.
  func testALoopPeriodThatIsNotANumberDoesNotSpin() throws {
    let passes = Counter()
    let loop = DeliveryLoop(
      name: "test.nan-period", period: { .nan },
      pass: { _ in
        passes.add()
        return .wait(dueIn: nil)
      })
    try loop.start(network: nil)
    Thread.sleep(forTimeInterval: 0.5)
    loop.stop()
    XCTAssertEqual(passes.value, 1, "one pass at start, then a wait")
  }
}

private final class Counter: @unchecked Sendable {
  private let lock = NSLock()
  private var count = 0
  func add() { lock.withLock { count += 1 } }
  var value: Int { lock.withLock { count } }
}
