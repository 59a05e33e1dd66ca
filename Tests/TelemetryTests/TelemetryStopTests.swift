import Foundation
import Outbox
import Vault
import VaultKeys
import VaultQueue
import VaultTestSupport
import XCTest

@testable import Telemetry

/// `stop()` ends a telemetry pass under way before its next batch (it used to wait for the whole
/// pass: with a large backlog and a slow collector, many requests, each up to its deadline).
final class TelemetryStopTests: XCTestCase {
  func testStopEndsThePassBeforeItsNextBatch() throws {
    let temporary = TemporaryDirectory()
    let vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(InMemoryKeyStore()))
    let container = try QueueContainer(path: temporary.sub("q.sqlite"), vault: vault)
    let sender = SlowSender(seconds: 0.3)
    let telemetry = Telemetry(
      container: container, configuration: TelemetryConfiguration(batchLimit: 600), tokens: CountingTokens(),
      sender: sender)
    for index in 0..<30 {
      try telemetry.log(type: "tap", payload: ["n": .number(Double(index)), "pad": .string(UUID().uuidString)])
    }
    try telemetry.start(watchConnectivity: false)
    Thread.sleep(forTimeInterval: 0.5)
    let sentAtStop = sender.calls
    telemetry.stop()
    XCTAssertLessThanOrEqual(sender.calls, sentAtStop + 1, "waited for the batch in flight, not the pass")
    XCTAssertEqual(try container.count(queue: Telemetry.queueName, state: .inFlight), 0, "the rest given back")
    XCTAssertGreaterThan(try container.count(queue: Telemetry.queueName, state: .pending), 0)
    // A pass begun after the stop runs as usual.
    let report = try Telemetry(container: container, tokens: CountingTokens(), sender: ScriptedSender()).flush()
    XCTAssertEqual(report.pending, 0)
  }
}

/// Answers 200 after `seconds`; counts the batches.
private final class SlowSender: BatchSender, @unchecked Sendable {
  let seconds: TimeInterval
  private let lock = NSLock()
  private var count = 0

  init(seconds: TimeInterval) { self.seconds = seconds }

  var calls: Int { lock.withLock { count } }

  func send(_ batch: TelemetryBatch, token: String) -> SendResult {
    lock.withLock { count += 1 }
    Thread.sleep(forTimeInterval: seconds)
    return .status(200, retryAfter: nil)
  }
}

/// Event types and claim sizes a caller can get wrong. Found by an outside review as an app
/// developer: a type holding NUL and a newline was stored (it could split a collector's log
/// lines), and a negative `claimCount` claimed without any limit.
final class TelemetryInputTests: XCTestCase {
  func testTypesAreOneTo128CharactersWithoutControlCharacters() throws {
    let temporary = TemporaryDirectory()
    let vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(InMemoryKeyStore()))
    let container = try QueueContainer(path: temporary.sub("q.sqlite"), vault: vault)
    let telemetry = Telemetry(container: container, tokens: CountingTokens(), sender: ScriptedSender())
    for type in ["", String(repeating: "t", count: 129), "a\u{0}b", "a\nb", "tab\there", "del\u{7F}", "c1\u{85}"] {
      XCTAssertThrowsError(try telemetry.log(type: type), type.debugDescription) {
        XCTAssertEqual($0 as? TelemetryError, .invalidType)
      }
    }
    for type in ["screen_view", "écran.vu", String(repeating: "t", count: 128), "with space"] {
      XCTAssertNoThrow(try telemetry.log(type: type), type)
    }
    XCTAssertEqual(try container.count(queue: Telemetry.queueName, state: .pending), 4)
  }

  func testAClaimCountBelowOneStillDelivers() throws {
    let temporary = TemporaryDirectory()
    let vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(InMemoryKeyStore()))
    let container = try QueueContainer(path: temporary.sub("q.sqlite"), vault: vault)
    for claimCount in [0, -5] {
      let telemetry = Telemetry(
        container: container, configuration: TelemetryConfiguration(claimCount: claimCount), tokens: CountingTokens(),
        sender: ScriptedSender())
      for _ in 0..<3 { try telemetry.log(type: "tap") }
      XCTAssertEqual(try telemetry.flush().delivered, 3, "claimCount \(claimCount)")
    }
  }
}
