import Foundation
import Outbox
import Vault
import VaultKeys
import VaultQueue
import VaultTestSupport
import XCTest

@testable import Telemetry

/// Issue 12 items 5 and 6 for telemetry: events with ids, logging without contents, the shared
/// loop's network wake, errors with codes.
final class TelemetryEventsTests: XCTestCase {
  var temporary: TemporaryDirectory!
  var container: QueueContainer!

  override func setUpWithError() throws {
    temporary = TemporaryDirectory()
    let vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(InMemoryKeyStore()))
    container = try QueueContainer(path: temporary.sub("home/q.sqlite"), vault: vault)
  }

  override func tearDown() {
    container = nil
    temporary = nil
  }

  func testEventsCarryTheBatchIdsAndTheLogNoPayloadOrToken() throws {
    let sender = ScriptedSender([.status(429, retryAfter: "30")])
    let handler = InMemoryLogHandler()
    let telemetry = Telemetry(
      container: container, tokens: FixedToken(), sender: sender,
      logger: DeliveryLogger(label: "test.telemetry", logLevel: .trace, handler: handler))
    let events = TelemetryEventLog(telemetry.events())
    let ids = try (0..<3).map { _ in try telemetry.log(type: "tap", payload: ["secret": .string("PAYLOAD-TEXT")]) }
    XCTAssertEqual(try telemetry.flush().retried, 3)
    XCTAssertEqual(try Set(container.list(queue: Telemetry.queueName).map(\.errorKind)), ["http-429"])
    telemetry.stop()
    try waitFor { events.finished }
    guard case .retried(let retried, "http-429", let next)? = events.all.first else { return XCTFail("\(events.all)") }
    XCTAssertEqual(Set(retried), Set(ids), "one event for the batch, with every id")
    XCTAssertEqual(next.timeIntervalSinceNow, 30, accuracy: 5)
    let text = handler.entries.map { "\($0.message) \($0.metadata)" }.joined(separator: "\n")
    XCTAssertTrue(text.contains("http-429"), text)
    XCTAssertFalse(text.contains("PAYLOAD-TEXT"), text)
    XCTAssertFalse(text.contains("SECRET-TOKEN"), text)
  }

  func testDeliveredAndRejectedEventsNameTheirEvents() throws {
    let sender = ScriptedSender([.status(200, retryAfter: nil)], otherwise: .status(400, retryAfter: nil))
    let telemetry = Telemetry(container: container, tokens: FixedToken(), sender: sender)
    let events = TelemetryEventLog(telemetry.events())
    let first = try telemetry.log(type: "one")
    XCTAssertEqual(try telemetry.flush().delivered, 1)
    let second = try telemetry.log(type: "two")
    XCTAssertEqual(try telemetry.flush().rejected, 1)
    telemetry.stop()
    try waitFor { events.finished }
    XCTAssertEqual(events.all, [.delivered(ids: [first]), .rejected(ids: [second], errorKind: "http-400")])
  }

  /// A loop pass that fails (here the token file is missing) is published with the error's code.
  func testAFailingLoopPassIsPublishedWithItsCode() throws {
    let telemetry = Telemetry(
      container: container, configuration: TelemetryConfiguration(interval: 3600),
      tokens: TokenFile(path: temporary.sub("missing-token")), sender: ScriptedSender())
    let events = TelemetryEventLog(telemetry.events())
    try telemetry.log(type: "tap")
    try telemetry.start(power: PowerMonitor(sysRoot: "/nonexistent"), watchConnectivity: false)
    defer { telemetry.stop() }
    try waitFor { !events.all.isEmpty }
    XCTAssertEqual(events.all.first, .loopError(errorCode: "telemetry.token-unavailable"))
  }

  /// The loop telemetry shares with the outbox wakes on a change from any `NetworkChangeSource`.
  func testANetworkChangeWakesTheTelemetryLoop() throws {
    let sender = ScriptedSender([.transport(kind: "connect")])
    let network = ManualNetworkChanges()
    let telemetry = Telemetry(
      container: container, configuration: TelemetryConfiguration(interval: 3600), tokens: FixedToken(),
      sender: sender)
    try telemetry.log(type: "offline")
    let passes = PassCounter()
    try telemetry.start(power: PowerMonitor(sysRoot: "/nonexistent"), network: network) { _ in passes.add() }
    defer { telemetry.stop() }
    try waitFor { passes.value == 1 }
    XCTAssertEqual(try container.count(queue: Telemetry.queueName, state: .pending), 1)
    network.announceChange()
    try waitFor { passes.value == 2 }
    XCTAssertEqual(try container.count(queue: Telemetry.queueName, state: .pending), 0, "backoff restarted, delivered")
    telemetry.stop()
    XCTAssertEqual(network.watchCount, 0)
  }

  func testErrorsHaveStableCodesAndTheirDescriptionAsText() {
    let errors: [any CodedError] = [
      TelemetryError.tokenUnavailable(path: "/x"), TelemetryError.invalidType, TelemetryError.invalidPayload,
      TelemetryError.payloadTooDeep(limit: 64), TelemetryError.netlink(errno: EPERM),
      JSONParseError(reason: .duplicateKey, offset: 3),
      GzipError(code: -4, call: "deflate"),
    ]
    XCTAssertEqual(
      errors.map(\.code),
      [
        "telemetry.token-unavailable", "telemetry.invalid-type", "telemetry.invalid-payload",
        "telemetry.payload-too-deep", "telemetry.netlink",
        "json.duplicate-key", "gzip.failed",
      ])
    for error in errors {
      XCTAssertEqual(error.errorDescription, String(describing: error))
      XCTAssertEqual((error as any Error).localizedDescription, String(describing: error))
      XCTAssertFalse(String(describing: error).contains("run `"), "no command-line advice: \(error)")
    }
  }

  private func waitFor(_ condition: () -> Bool) throws {
    let deadline = Date() + 10
    while !condition() {
      guard Date() < deadline else { return XCTFail("not reached within 10 s") }
      Thread.sleep(forTimeInterval: 0.02)
    }
  }
}

struct FixedToken: TokenProvider {
  func token(refresh: Bool) throws -> String { "SECRET-TOKEN" }
}

typealias TelemetryEventLog = StreamLog<DeliveryEvent>

/// Printing what an app holds while delivering (`print`, interpolation, `dump`) shows metadata,
/// never a payload, a header value, a URL or a body: an outside review found all three printed.
final class RedactedDescriptionTests: XCTestCase {
  func testEventsRequestsAndClaimedRecordsPrintNoContent() {
    let canary = "canary-7Qz-secret"
    let event = TelemetryEvent(
      id: UUID(), date: Date(), type: "note_added", payload: ["text": .string(canary)], sessionID: "s")
    let request = HTTPRequest(
      url: URL(string: "https://collector.example/v1?key=\(canary)")!,
      headers: [(name: "Authorization", value: "Bearer \(canary)")], body: Array(canary.utf8))
    for value in [event as Any, request as Any] {
      var dumped = ""
      dump(value, to: &dumped)
      let printed = ["\(value)", String(reflecting: value), dumped]
      for text in printed { XCTAssertFalse(text.contains(canary), text) }
    }
    XCTAssertTrue("\(event)".contains("note_added"))
    XCTAssertEqual("\(request)", "HTTPRequest(POST, headers: [Authorization], body: 17 bytes)")
  }
}
