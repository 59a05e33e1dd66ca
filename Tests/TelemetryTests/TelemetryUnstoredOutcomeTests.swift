import Foundation
import Vault
import VaultKeys
import VaultQueue
import VaultTestSupport
import XCTest

@testable import Telemetry

/// Answers 500 to every batch; after `limit` batches it calls `atLimit` (which stops the pass), so
/// a pass that would send without end is cut short and counted instead of hanging the test.
private final class CountingFailingSender: BatchSender, @unchecked Sendable {
  private let lock = NSLock()
  private let limit: Int
  var atLimit: () -> Void = {}
  private(set) var sent = 0

  init(limit: Int) { self.limit = limit }

  func send(_ batch: TelemetryBatch, token: String) -> SendResult {
    let count = lock.withLock { () -> Int in
      sent += 1
      return sent
    }
    if count == limit { atLimit() }
    return .status(500, retryAfter: nil)
  }
}

/// Answers 500 to every batch and notes the ids it was sent.
private final class RecordingFailingSender: BatchSender, @unchecked Sendable {
  private let lock = NSLock()
  private var ids: [UUID] = []
  var sent: [UUID] { lock.withLock { ids } }

  func send(_ batch: TelemetryBatch, token: String) -> SendResult {
    lock.withLock { ids += batch.ids }
    return .status(500, retryAfter: nil)
  }
}

/// A flush is one pass in which each due event is attempted at most once. When the outcome of a
/// batch cannot be stored (here a trigger refuses it; in the field, a container of a build whose
/// schema lacked a column), the batch goes back to pending, due at once, and the pass used to
/// claim and send it again immediately, without end: `vault telemetry flush` against a collector
/// answering 500 sent one batch 190,000 times in ten minutes at full CPU.
final class TelemetryUnstoredOutcomeTests: XCTestCase {
  var temporary: TemporaryDirectory!
  var vault: Vault!
  var clock: TestClock!
  var container: QueueContainer!
  var path: String { temporary.sub("home/queue.sqlite") }

  override func setUpWithError() throws {
    temporary = TemporaryDirectory()
    clock = TestClock()
    vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(InMemoryKeyStore()))
    container = try QueueContainer(path: path, vault: vault, clock: clock.function)
  }

  override func tearDown() {
    container = nil
    vault = nil
    temporary = nil
  }

  private func sql(_ statement: String) throws {
    let script = "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute(sys.argv[2]); c.commit(); c.close()"
    let run = try Spawn.run("/usr/bin/env", ["python3", "-c", script, path, statement])
    XCTAssertEqual(run.status, 0, run.error)
  }

  func testABatchWhoseOutcomeCannotBeStoredIsSentOnceAndKept() throws {
    let sender = CountingFailingSender(limit: 20)
    let telemetry = Telemetry(
      container: container, tokens: CountingTokens(), sender: sender, sessionID: "s1", clock: clock.function)
    // Weak: the sender is the telemetry's, and a strong capture made a cycle that leaked both (LeakSanitizer).
    sender.atLimit = { [weak telemetry] in telemetry?.stop() }
    let id = try telemetry.log(type: "tap")
    // A retry's outcome (error_kind set) cannot be stored; claiming and giving back still work.
    try sql(
      """
      CREATE TRIGGER refuse_outcomes BEFORE UPDATE OF error_kind ON records
      WHEN NEW.error_kind IS NOT NULL BEGIN SELECT RAISE(ABORT, 'outcome refused'); END
      """)

    _ = try telemetry.flush()
    XCTAssertEqual(sender.sent, 1, "the pass sent its one event once, not again and again")
    let kept = try container.list(queue: "telemetry")
    XCTAssertEqual(kept.map(\.id), [id])
    XCTAssertEqual(kept.map(\.state), [.pending], "given back, not lost")

    try sql("DROP TRIGGER refuse_outcomes")
    _ = try Telemetry(container: container, tokens: CountingTokens(), sender: sender, clock: clock.function).flush()
    XCTAssertEqual(sender.sent, 2, "the next pass sends it again")
    XCTAssertNotNil(try container.list(queue: "telemetry").first?.nextAttemptAt, "and now its retry is stored")
  }

  /// The oldest due event's outcome cannot be stored: the pass still sends the other due events.
  /// Before, the event went back to pending at once, the next claim (oldest first) held only it,
  /// and the pass ended having sent nothing else, every pass, for as long as that outcome could
  /// not be stored.
  func testAnUnstoredOutcomeDoesNotHoldBackTheOtherDueEvents() throws {
    let sender = RecordingFailingSender()
    let telemetry = Telemetry(
      container: container, configuration: TelemetryConfiguration(claimCount: 1), tokens: CountingTokens(),
      sender: sender, sessionID: "s1", clock: clock.function)
    let first = try telemetry.log(type: "tap")
    let second = try telemetry.log(type: "tap")
    try sql(
      """
      CREATE TRIGGER refuse_outcomes BEFORE UPDATE OF error_kind ON records
      WHEN NEW.error_kind IS NOT NULL AND OLD.id = '\(first.uuidString.lowercased())'
      BEGIN SELECT RAISE(ABORT, 'outcome refused'); END
      """)

    let report = try telemetry.flush()
    XCTAssertEqual(sender.sent, [first, second], "each due event sent once, the second too")
    XCTAssertEqual(report.retried, 1, "the second's retry is stored")
    let kept = try container.list(queue: "telemetry")
    XCTAssertEqual(Set(kept.map(\.id)), [first, second], "nothing lost")
    XCTAssertEqual(kept.first { $0.id == first }?.state, .pending, "the first given back at the pass's end")
    XCTAssertEqual(report.pending, 2, "counted after it was given back")
  }
}
