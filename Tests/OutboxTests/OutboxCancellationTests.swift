import Foundation
import Outbox
import Vault
import VaultKeys
import VaultQueue
import VaultTestSupport
import XCTest

/// Ending a pass early from the app: cancelling the task that runs `deliverDue`, or `stop()`.
/// Found by an outside review as an app developer: a `deliverDue` task cancelled after 0.5 s went
/// on for 8.2 s and delivered all 40 messages, and `stop()` waited for the whole pass (29 s for 10
/// messages to a server that never answered, with a 3 s timeout; about 12 minutes possible with
/// the defaults); only the process-wide, one-way `HTTPCancellation.cancelAll()` ended a pass.
final class OutboxCancellationTests: XCTestCase {
  var temporary: TemporaryDirectory!
  var container: QueueContainer!

  override func setUpWithError() throws {
    temporary = TemporaryDirectory()
    let vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(InMemoryKeyStore()))
    container = try QueueContainer(path: temporary.sub("q.sqlite"), vault: vault)
  }

  override func tearDown() {
    container = nil
    temporary = nil
  }

  private func send(_ count: Int, through outbox: Outbox) throws {
    for index in 0..<count { try outbox.send(Array("message \(index)".utf8)) }
  }

  func testCancellingTheTaskEndsThePassBeforeItsNextMessage() async throws {
    let transport = SlowTransport(seconds: 0.2)
    let outbox = Outbox(container: container, transport: transport)
    try send(40, through: outbox)
    let task = Task { try await outbox.deliverDue() }
    try await Task.sleep(nanoseconds: 500_000_000)
    let callsAtCancel = transport.calls
    task.cancel()
    let pass = try await task.value
    XCTAssertLessThanOrEqual(transport.calls, callsAtCancel + 1, "no message started after the one in flight")
    XCTAssertLessThan(pass.delivered, 40)
    XCTAssertEqual(try container.count(queue: "outbox", state: .inFlight), 0, "the rest given back")
    XCTAssertEqual(try container.count(queue: "outbox", state: .pending), 40 - pass.delivered)
    let rest = try await Outbox(container: container, transport: SlowTransport(seconds: 0)).deliverDue()
    XCTAssertEqual(rest.delivered, 40 - pass.delivered, "nothing lost, nothing left leased")
  }

  func testStopEndsTheLoopsPassBeforeItsNextMessage() throws {
    let transport = SlowTransport(seconds: 0.3)
    let outbox = Outbox(container: container, transport: transport)
    try send(10, through: outbox)
    try outbox.start()
    Thread.sleep(forTimeInterval: 0.5)
    let callsAtStop = transport.calls
    outbox.stop()
    XCTAssertLessThanOrEqual(transport.calls, callsAtStop + 1, "waited for the message in flight, not the pass")
    XCTAssertEqual(try container.count(queue: "outbox", state: .inFlight), 0)
    let left = try container.count(queue: "outbox", state: .pending)
    XCTAssertGreaterThan(left, 0)
  }

  /// A stop ends the passes under way, not later ones: a `deliverDue` after it delivers.
  func testAPassBegunAfterAStopRunsAsUsual() async throws {
    let outbox = Outbox(container: container, transport: SlowTransport(seconds: 0))
    try send(3, through: outbox)
    outbox.stop()
    let pass = try await outbox.deliverDue()
    XCTAssertEqual(pass.delivered, 3)
  }
}

/// Answers 200 after `seconds`, blocking its thread as a slow server would; counts the calls.
private final class SlowTransport: SynchronousTransport, @unchecked Sendable {
  let seconds: TimeInterval
  private let lock = NSLock()
  private var count = 0

  init(seconds: TimeInterval) { self.seconds = seconds }

  var calls: Int { lock.withLock { count } }

  func deliverSynchronously(id: UUID, payload: Data) -> DeliveryResult {
    lock.withLock { count += 1 }
    Thread.sleep(forTimeInterval: seconds)
    return .delivered
  }
}
