import Foundation
import Vault
import VaultKeys
import VaultQueue
import VaultTestSupport
import XCTest

@testable import Telemetry

/// Takes every batch and notes, at each send, how many events of the container are in flight (read
/// through a connection of its own), and the ids it took.
private final class InFlightCountingSender: BatchSender, @unchecked Sendable {
  private let lock = NSLock()
  private let observer: QueueContainer
  private var counts: [Int] = []
  private var ids: [UUID] = []
  var inFlightAtEachSend: [Int] { lock.withLock { counts } }
  var taken: [UUID] { lock.withLock { ids } }

  init(observer: QueueContainer) { self.observer = observer }

  func send(_ batch: TelemetryBatch, token: String) -> SendResult {
    let inFlight = (try? observer.count(queue: Telemetry.queueName, state: .inFlight)) ?? -1
    lock.withLock {
      counts.append(inFlight)
      ids += batch.ids
    }
    return .status(200, retryAfter: nil)
  }
}

/// A pass claims its events a round at a time, each round at most sixteen batches' worth of
/// envelope bytes (within 1–64 MiB): a round holds its events about four times over, and a fixed
/// 64 MiB made `vault telemetry flush` over large events peak at 360 MB (an outside review) to send
/// 256 KiB at a time.
final class TelemetryClaimBoundTests: XCTestCase {
  var temporary: TemporaryDirectory!
  var vault: Vault!
  var container: QueueContainer!
  var path: String { temporary.sub("home/queue.sqlite") }

  override func setUpWithError() throws {
    temporary = TemporaryDirectory()
    vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(InMemoryKeyStore()))
    container = try QueueContainer(path: path, vault: vault)
  }

  override func tearDown() {
    container = nil
    vault = nil
    temporary = nil
  }

  func testTheClaimBoundFollowsTheBatchLimitWithinOneAnd64MiB() {
    XCTAssertEqual(TelemetryConfiguration().claimBytes, 4 << 20, "256 KiB batches: 4 MiB a round")
    XCTAssertEqual(TelemetryConfiguration(batchLimit: 0).claimBytes, 1 << 20)
    XCTAssertEqual(TelemetryConfiguration(batchLimit: 1 << 20).claimBytes, 16 << 20)
    XCTAssertEqual(TelemetryConfiguration(batchLimit: .max).claimBytes, 64 << 20, "no overflow")
  }

  func testAPassOverLargeEventsHoldsOneBoundedRoundInFlightAndDeliversThemAll() throws {
    // 80 events of ~100 KB that do not compress (random hex): 8 MB, twice the 4 MiB round.
    let sender = InFlightCountingSender(observer: try QueueContainer(path: path, vault: vault))
    let telemetry = Telemetry(container: container, tokens: CountingTokens(), sender: sender, sessionID: "s1")
    var logged: Set<UUID> = []
    for _ in 0..<80 {
      let blob = (0..<3_125).map { _ in UUID().uuidString }.joined()  // 112,500 characters
      logged.insert(try telemetry.log(type: "large", payload: ["blob": .string(blob)]))
    }

    let report = try telemetry.flush()

    XCTAssertEqual(report.delivered, 80)
    XCTAssertEqual(Set(sender.taken), logged, "every event was sent")
    XCTAssertEqual(try container.count(queue: Telemetry.queueName, state: .pending), 0)
    let most = try XCTUnwrap(sender.inFlightAtEachSend.max())
    // Each envelope is over 112,500 bytes, so a 4 MiB round holds at most 38 of them (the first
    // event of a round is taken whatever its size); the whole backlog was 80.
    XCTAssertGreaterThan(most, 0)
    XCTAssertLessThanOrEqual(most, (4 << 20) / 112_500 + 1, "in flight at once: \(sender.inFlightAtEachSend)")
  }
}
