import Foundation
import Outbox
import Vault
import VaultCrypto
import VaultKeys
import VaultQueue
import VaultTestSupport
import XCTest

@testable import Telemetry

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif

/// A sender twin that answers from a script and keeps every batch it was given.
final class ScriptedSender: BatchSender, @unchecked Sendable {
  private let lock = NSLock()
  private var script: [SendResult]
  private var otherwise: SendResult
  private(set) var sent: [(batch: TelemetryBatch, token: String)] = []

  init(_ script: [SendResult] = [], otherwise: SendResult = .status(200, retryAfter: nil)) {
    self.script = script
    self.otherwise = otherwise
  }

  /// From now on, answers `result` once the script is spent.
  func answer(_ result: SendResult) {
    lock.withLock { otherwise = result }
  }

  func send(_ batch: TelemetryBatch, token: String) -> SendResult {
    lock.withLock {
      sent.append((batch, token))
      return script.isEmpty ? otherwise : script.removeFirst()
    }
  }
}

/// Counts refreshes; hands out "token-N" where N is the refresh count.
final class CountingTokens: TokenProvider, @unchecked Sendable {
  private let lock = NSLock()
  private(set) var refreshes = 0
  func token(refresh: Bool) throws -> String {
    lock.withLock {
      if refresh { refreshes += 1 }
      return "token-\(refreshes)"
    }
  }
}

func gunzip(_ bytes: [UInt8]) throws -> [UInt8] {
  let script = "import gzip,sys; sys.stdout.buffer.write(gzip.decompress(sys.stdin.buffer.read()))"
  let result = try Spawn.run("/usr/bin/env", ["python3", "-c", script], input: bytes)
  XCTAssertEqual(result.status, 0, result.error)
  return result.output
}

final class BatchPackerTests: XCTestCase {
  private func events(_ count: Int, payloadBytes: Int, random: Bool) -> [(id: UUID, json: [UInt8])] {
    let alphabet = Array("abcdefghijklmnopqrstuvwxyz0123456789")
    return (0..<count).map { index in
      let text =
        random
        ? String((0..<payloadBytes).map { _ in alphabet.randomElement()! })
        : String(repeating: "x", count: payloadBytes)
      let event = TelemetryEvent(
        id: UUID(), date: Date(), type: "t", payload: ["n": .number(Double(index)), "s": .string(text)], sessionID: "s")
      return (event.id, try! event.encoded())
    }
  }

  func testEveryBatchFitsTheCompressedLimitAndEveryEventIsSentOnceInOrder() throws {
    let all = events(600, payloadBytes: 300, random: true)
    var rest = all
    var seen: [UUID] = []
    var batches = 0
    while !rest.isEmpty {
      let packed = try BatchPacker.pack(rest, limit: 16 * 1024)
      XCTAssertEqual(packed.oversized, [])
      let batch = try XCTUnwrap(packed.batch)
      XCTAssertLessThanOrEqual(batch.body.count, 16 * 1024)
      if !packed.rest.isEmpty {
        XCTAssertGreaterThan(batch.body.count, 12 * 1024, "packed close to the limit, not split early")
      }
      let json = try JSONSerialization.jsonObject(with: Data(try gunzip(batch.body))) as! [String: Any]
      let ids = (json["events"] as! [[String: Any]]).map { $0["id"] as! String }
      XCTAssertEqual(ids, batch.ids.map { $0.uuidString.lowercased() })
      seen += batch.ids
      rest = packed.rest
      batches += 1
    }
    XCTAssertEqual(seen, all.map(\.id))
    XCTAssertGreaterThan(batches, 3)
  }

  func testCompressibleEventsPackManyMoreThanTheirRawSize() throws {
    let all = events(2000, payloadBytes: 300, random: false)
    let packed = try BatchPacker.pack(all, limit: 8 * 1024)
    let batch = try XCTUnwrap(packed.batch)
    XCTAssertLessThanOrEqual(batch.body.count, 8 * 1024)
    let raw = all.prefix(batch.ids.count).reduce(0) { $0 + $1.json.count }
    XCTAssertGreaterThan(raw, 8 * 1024 * 4, "judged by compressed size, so far more than the limit in raw JSON")
  }

  func testAnEventTooLargeAloneIsReportedAndTheRestStillPack() throws {
    let small = events(3, payloadBytes: 50, random: true)
    let huge = events(1, payloadBytes: 20_000, random: true)
    // The huge event ends the first batch; on its own at the head of the next, it is reported.
    let first = try BatchPacker.pack([small[0], huge[0], small[1], small[2]], limit: 2048)
    XCTAssertEqual(first.batch?.ids, [small[0].id])
    XCTAssertEqual(first.oversized, [])
    let second = try BatchPacker.pack(first.rest, limit: 2048)
    XCTAssertEqual(second.oversized, [huge[0].id])
    XCTAssertEqual(second.batch?.ids, [small[1].id, small[2].id])
    XCTAssertEqual(second.rest.count, 0)
  }

  func testIdempotencyKeyIsStableForTheSameEventsAndDiffersOtherwise() {
    let a = UUID()
    let b = UUID()
    let key = TelemetryBatch(ids: [a, b], body: []).idempotencyKey
    XCTAssertEqual(key, TelemetryBatch(ids: [b, a], body: [1]).idempotencyKey)
    XCTAssertNotEqual(key, TelemetryBatch(ids: [a], body: []).idempotencyKey)
    XCTAssertEqual(key.count, 64)
  }
}

final class TelemetryDeliveryTests: XCTestCase {
  var temporary: TemporaryDirectory!
  var vault: Vault!
  var clock: TestClock!
  var container: QueueContainer!

  override func setUpWithError() throws {
    temporary = TemporaryDirectory()
    clock = TestClock()
    vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(InMemoryKeyStore()))
    container = try QueueContainer(
      path: temporary.sub("home/queue.sqlite"), vault: vault,
      configuration: QueueConfiguration(attemptCeiling: 20, backoff: BackoffPolicy(base: 1, cap: 120)),
      clock: clock.function, random: { 0.999 })
  }

  override func tearDown() {
    container = nil
    vault = nil
    temporary = nil
  }

  private func client(_ sender: any BatchSender, tokens: any TokenProvider = CountingTokens()) -> Telemetry {
    Telemetry(container: container, tokens: tokens, sender: sender, sessionID: "s1", clock: clock.function)
  }

  func testServerErrorsAreRetriedWithGrowingDelays() throws {
    let sender = ScriptedSender(otherwise: .status(500, retryAfter: nil))
    let telemetry = client(sender)
    try telemetry.log(type: "tap")
    var delays: [TimeInterval] = []
    for _ in 0..<5 {
      let report = try telemetry.flush()
      XCTAssertEqual(report.retried, 1)
      let due = try XCTUnwrap(try container.list(queue: "telemetry").first?.nextAttemptAt)
      delays.append(due.timeIntervalSince(clock.now))
      XCTAssertEqual(try telemetry.flush().batches, 0, "nothing is sent before it is due")
      clock.advance(due.timeIntervalSince(clock.now) + 1)
    }
    XCTAssertEqual(sender.sent.count, 5)
    XCTAssertEqual(delays.map { $0.rounded() }, [1, 2, 4, 8, 16], "exponential (full jitter drawn at its top here)")
  }

  func testRetryAfterIsHonouredFor429And503() throws {
    for status in [429, 503] {
      let sender = ScriptedSender([.status(status, retryAfter: "45")])
      let telemetry = client(sender)
      try telemetry.log(type: "tap")
      XCTAssertEqual(try telemetry.flush().retried, 1)
      clock.advance(44)
      XCTAssertEqual(try telemetry.flush().batches, 0)
      clock.advance(2)
      XCTAssertEqual(try telemetry.flush().delivered, 1)
    }
  }

  func testRefusedBatchesAreNeverRetried() throws {
    // 404 and 403 are not among them: a wrong endpoint keeps its events, refused credentials park
    // them (see the tests after this one).
    for status in [400, 422] {
      let sender = ScriptedSender([.status(status, retryAfter: nil)])
      let telemetry = client(sender)
      let id = try telemetry.log(type: "tap")
      XCTAssertEqual(try telemetry.flush().rejected, 1)
      clock.advance(86_400)
      XCTAssertEqual(try telemetry.flush().batches, 0)
      XCTAssertEqual(sender.sent.count, 1, "status \(status) was sent once")
      let review = try container.list(queue: "telemetry", state: .review)
      XCTAssertEqual(review.map(\.id), [id])
      XCTAssertEqual(review.first?.errorKind, "http-\(status)")
      try container.ack([id])
    }
  }

  /// A 404 is a wrong endpoint, not a bad event: nothing is parked or sent to review, no attempt
  /// counts, the rest of the backlog is not sent to the same place, and the right endpoint (here:
  /// the next answer) gets everything at once, without waiting for a backoff.
  func testA404KeepsEveryEventPendingAndDueAndEndsThePass() throws {
    let sender = ScriptedSender([.status(404, retryAfter: nil)])
    let telemetry = try backlogOfThirty(sender: sender)
    let report = try telemetry.flush()
    XCTAssertEqual(sender.sent.count, 1, "the pass ends at the first 404")
    XCTAssertEqual(report.notFound, sender.sent[0].batch.ids.count)
    XCTAssertEqual(report.errorKind, "http-404")
    XCTAssertTrue(report.refusedByConfiguration)
    XCTAssertEqual([report.delivered, report.parked, report.rejected, report.retried], [0, 0, 0, 0])
    XCTAssertEqual(report.pending, 30)
    let records = try container.list(queue: "telemetry")
    XCTAssertEqual(records.map(\.state), Array(repeating: .pending, count: 30))
    XCTAssertEqual(records.map(\.attempts), Array(repeating: 0, count: 30), "a 404 counts no attempt")
    XCTAssertEqual(try container.stats().dropped.values.reduce(0, +), 0, "nothing left the delivery flow")
    let next = try telemetry.flush()
    XCTAssertEqual(next.delivered, 30, "due at once: no backoff after a wrong endpoint")
    XCTAssertNil(next.errorKind)
    XCTAssertFalse(next.refusedByConfiguration)
  }

  /// Telemetry sending through `sender`, in batches of at most 600 bytes, with 30 events logged:
  /// a backlog of several batches.
  private func backlogOfThirty(sender: ScriptedSender, tokens: CountingTokens = CountingTokens()) throws -> Telemetry {
    let telemetry = Telemetry(
      container: container, configuration: TelemetryConfiguration(batchLimit: 600), tokens: tokens, sender: sender,
      clock: clock.function)
    for i in 0..<30 {
      try telemetry.log(type: "tap", payload: ["n": .number(Double(i)), "pad": .string(UUID().uuidString)])
    }
    return telemetry
  }

  /// A batch limit below 512 bytes is 512: with 0, -1 or 60 every event went to review as
  /// `too-large`, for good (an outside review).
  func testABatchLimitTooSmallForAnyEventIsRaised() throws {
    for limit in [0, -1, Int.min, 60] {
      let sender = ScriptedSender()
      let telemetry = Telemetry(
        container: container, configuration: TelemetryConfiguration(batchLimit: limit), tokens: CountingTokens(),
        sender: sender, clock: clock.function)
      for i in 0..<5 { try telemetry.log(type: "tap", payload: ["n": .number(Double(i))]) }
      let report = try telemetry.flush()
      XCTAssertEqual([report.delivered, report.rejected], [5, 0], "batch limit \(limit)")
      XCTAssertEqual(try container.list(queue: "telemetry"), [], "batch limit \(limit)")
    }
  }

  /// A 403 is refused credentials: the batch waits with backoff (its attempt counted, as for any
  /// refusal) and the pass ends, so a wrong token sends no other batch to the same refusal and
  /// moves nothing to parking or review.
  func test403MakesTheBatchWaitAndEndsThePass() throws {
    let sender = ScriptedSender([.status(403, retryAfter: nil)])
    let telemetry = try backlogOfThirty(sender: sender)
    let report = try telemetry.flush()
    XCTAssertEqual(sender.sent.count, 1, "the pass ends at the first 403")
    let refused = Set(sender.sent[0].batch.ids)
    XCTAssertEqual(
      [report.authFailures, report.retried, report.parked, report.rejected, report.delivered],
      [refused.count, refused.count, 0, 0, 0])
    XCTAssertEqual(report.errorKind, "http-403")
    XCTAssertTrue(report.refusedByConfiguration)
    let records = try container.list(queue: "telemetry")
    XCTAssertEqual(records.map(\.state), Array(repeating: .pending, count: 30), "none parked, none in review")
    for record in records {
      XCTAssertEqual(record.attempts, refused.contains(record.id) ? 1 : 0)
      XCTAssertEqual(record.errorKind, refused.contains(record.id) ? "http-403" : nil)
    }
  }

  /// A revoked token for a whole day of passes parks nothing with the default configuration, and
  /// once the server takes the token again one pass sends every event, no resend needed. (Before:
  /// each pass parked the batch it sent, so the backlog ended parked batch by batch, waiting for a
  /// manual `queue resend` while exposed to the cap and the age limit.)
  func testARevokedTokenParksNothingAndTheFixedOneSendsEverything() throws {
    let sender = ScriptedSender(otherwise: .status(401, retryAfter: nil))
    let telemetry = try backlogOfThirty(sender: sender)
    for _ in 0..<40 {
      let report = try telemetry.flush()
      XCTAssertEqual(report.parked, 0)
      XCTAssertTrue(report.refusedByConfiguration || report.batches == 0)
      clock.advance(600)
    }
    XCTAssertEqual(try container.count(queue: "telemetry", state: .parked), 0)
    XCTAssertEqual(try container.count(queue: "telemetry", state: .review), 0)
    sender.answer(.status(200, retryAfter: nil))
    clock.advance(600)
    let fixed = try telemetry.flush()
    XCTAssertEqual(fixed.delivered, 30)
    XCTAssertEqual(fixed.pending, 0)
  }

  func testTheFlushReportWritesEveryKeyAbsentOnesAsNull() throws {
    let object = try XCTUnwrap(
      try JSONSerialization.jsonObject(with: JSONEncoder().encode(FlushReport())) as? [String: Any])
    XCTAssertEqual(
      Set(object.keys),
      [
        "delivered", "retried", "parked", "rejected", "pending", "batches", "token_refreshes", "auth_failures",
        "not_found", "error_kind",
      ])
    XCTAssertTrue(object["error_kind"] is NSNull)
  }

  func test401RefreshesTheTokenExactlyOnceThenSucceeds() throws {
    let tokens = CountingTokens()
    let sender = ScriptedSender([.status(401, retryAfter: nil)])
    let telemetry = client(sender, tokens: tokens)
    try telemetry.log(type: "tap")
    let report = try telemetry.flush()
    XCTAssertEqual(report.delivered, 1)
    XCTAssertEqual(tokens.refreshes, 1)
    XCTAssertEqual(sender.sent.map(\.token), ["token-0", "token-1"])
  }

  func test401AfterARefreshMakesTheBatchWait() throws {
    let tokens = CountingTokens()
    let sender = ScriptedSender(otherwise: .status(401, retryAfter: nil))
    let telemetry = client(sender, tokens: tokens)
    try telemetry.log(type: "tap")
    try telemetry.log(type: "tap")
    let report = try telemetry.flush()
    XCTAssertEqual([report.retried, report.parked, report.authFailures], [2, 0, 2])
    XCTAssertEqual(report.errorKind, "http-401")
    XCTAssertTrue(report.refusedByConfiguration)
    XCTAssertEqual(tokens.refreshes, 1, "exactly one refresh")
    let records = try container.list(queue: "telemetry")
    XCTAssertEqual(records.map(\.state), [.pending, .pending])
    XCTAssertEqual(records.map(\.attempts), [1, 1])
    XCTAssertTrue(records.allSatisfy { ($0.nextAttemptAt ?? .distantPast) > clock.now }, "with backoff")
  }

  /// After a refused refresh only the batch that met it waits with backoff; the rest go back to
  /// pending, their attempt not counted.
  func testARefusedRefreshEndsThePassAndGivesTheBacklogBack() throws {
    let tokens = CountingTokens()
    let sender = ScriptedSender(otherwise: .status(401, retryAfter: nil))
    let telemetry = try backlogOfThirty(sender: sender, tokens: tokens)
    let report = try telemetry.flush()
    XCTAssertEqual(tokens.refreshes, 1)
    XCTAssertEqual(sender.sent.count, 2, "one batch, sent with the old and the fresh token")
    let refused = Set(sender.sent[0].batch.ids)
    XCTAssertEqual(report.retried, refused.count)
    XCTAssertEqual(try container.count(queue: Telemetry.queueName, state: .pending), 30)
    XCTAssertEqual(try container.count(queue: Telemetry.queueName, state: .inFlight), 0)
    XCTAssertTrue(
      try container.list(state: .pending).allSatisfy { $0.attempts == (refused.contains($0.id) ? 1 : 0) },
      "the rest released, not counted")
  }

  /// A server that asks to wait (429, 503) or does not answer for two batches in a row says so of
  /// the endpoint: the pass ends after them, they wait, and the rest of the backlog goes back
  /// untouched (an outside review: every batch of a backlog was sent against a Retry-After). One
  /// such answer alone may be the batch's: the pass goes on (a security review of the first
  /// version, which ended at one and kept that batch ahead of the others).
  func testAnEndpointThatAsksToWaitOrDoesNotAnswerEndsThePass() throws {
    let answers: [SendResult] = [
      .status(429, retryAfter: "2"), .status(503, retryAfter: nil), .transport(kind: "timed-out"),
    ]
    for answer in answers {
      let sender = ScriptedSender(otherwise: answer)
      let telemetry = try backlogOfThirty(sender: sender)
      let report = try telemetry.flush()
      XCTAssertEqual(sender.sent.count, 2, "\(answer): two requests, then the pass ends")
      let waiting = Set(sender.sent.flatMap(\.batch.ids))
      XCTAssertEqual(report.retried, waiting.count, "\(answer)")
      XCTAssertEqual(try container.count(queue: Telemetry.queueName, state: .pending), 30, "\(answer)")
      XCTAssertTrue(
        try container.list(state: .pending).allSatisfy { $0.attempts == (waiting.contains($0.id) ? 1 : 0) },
        "\(answer): the rest released, not counted")
      clock.advance(3600)
      XCTAssertEqual(
        try Telemetry(container: container, tokens: CountingTokens(), sender: ScriptedSender(), clock: clock.function)
          .flush().delivered, 30, "\(answer)")
      // One refused batch, then answers: the pass goes on and delivers the rest.
      let once = ScriptedSender([answer])
      _ = try backlogOfThirty(sender: once)
      let report2 = try Telemetry(
        container: container, configuration: TelemetryConfiguration(batchLimit: 600), tokens: CountingTokens(),
        sender: once, clock: clock.function
      ).flush()
      XCTAssertEqual(report2.delivered, 30 - Set(once.sent[0].batch.ids).count, "\(answer)")
      clock.advance(3600)
      _ = try Telemetry(container: container, tokens: CountingTokens(), sender: ScriptedSender(), clock: clock.function)
        .flush()
    }
  }

  func testATokenProviderFailureClaimsNothing() throws {
    struct Broken: TokenProvider {
      func token(refresh: Bool) throws -> String { throw TelemetryError.tokenUnavailable(path: "/nonexistent") }
    }
    let telemetry = Telemetry(container: container, tokens: Broken(), sender: ScriptedSender(), clock: clock.function)
    try telemetry.log(type: "tap")
    XCTAssertThrowsError(try telemetry.flush())
    XCTAssertEqual(try container.count(queue: Telemetry.queueName, state: .pending), 1)
  }

  /// The provider failing on the refresh (after a 401) must give the claim back, not strand it.
  func testARefreshThatThrowsGivesTheClaimBack() throws {
    final class FailsOnRefresh: TokenProvider, @unchecked Sendable {
      func token(refresh: Bool) throws -> String {
        if refresh { throw TelemetryError.tokenUnavailable(path: "/nonexistent") }
        return "old"
      }
    }
    let telemetry = Telemetry(
      container: container, configuration: TelemetryConfiguration(batchLimit: 600), tokens: FailsOnRefresh(),
      sender: ScriptedSender([.status(401, retryAfter: nil)]), clock: clock.function)
    for i in 0..<30 {
      try telemetry.log(type: "tap", payload: ["n": .number(Double(i)), "pad": .string(UUID().uuidString)])
    }
    XCTAssertThrowsError(try telemetry.flush())
    XCTAssertEqual(try container.count(queue: Telemetry.queueName, state: .inFlight), 0)
    XCTAssertEqual(try container.count(queue: Telemetry.queueName, state: .pending), 30)
  }

  /// A failed batch is retried as the same batch: same events, same Idempotency-Key.
  func testARetriedBatchKeepsItsEventsAndKey() throws {
    let sender = ScriptedSender([.status(500, retryAfter: nil), .transport(kind: "transport-timeout")])
    let telemetry = Telemetry(
      container: container, configuration: TelemetryConfiguration(batchLimit: 4096), tokens: CountingTokens(),
      sender: sender, clock: clock.function)
    for i in 0..<20 { try telemetry.log(type: "tap", payload: ["n": .number(Double(i))]) }
    for _ in 0..<3 {
      _ = try telemetry.flush()
      clock.advance(600)
    }
    let keys = sender.sent.map(\.batch.idempotencyKey)
    XCTAssertEqual(sender.sent.count, 3)
    XCTAssertEqual(Set(keys).count, 1, "the same 20 events every time")
    XCTAssertEqual(try container.count(queue: Telemetry.queueName, state: .pending), 0)
  }

  func test413SplitsTheBatchUntilItFits() throws {
    let sender = ScriptedSender([.status(413, retryAfter: nil), .status(413, retryAfter: nil)])
    let telemetry = client(sender)
    for i in 0..<8 { try telemetry.log(type: "tap", payload: ["i": .number(Double(i))]) }
    let report = try telemetry.flush()
    XCTAssertEqual(report.delivered, 8)
    XCTAssertEqual(sender.sent.map(\.batch.ids.count), [8, 4, 2, 2, 4])
  }

  /// The request budget counts only the re-sent halves of 413 splits: a large healthy backlog
  /// still goes out in one pass.
  func testTheRequestBudgetNeverHoldsBackAHealthyBacklog() throws {
    let sender = ScriptedSender()
    let telemetry = Telemetry(
      container: container, configuration: TelemetryConfiguration(batchLimit: 600, requestBudget: 0),
      tokens: CountingTokens(), sender: sender, clock: clock.function)
    for i in 0..<60 {
      try telemetry.log(type: "tap", payload: ["n": .number(i), "pad": .string(UUID().uuidString)])
    }
    XCTAssertEqual(try telemetry.flush().delivered, 60)
    XCTAssertGreaterThan(sender.sent.count, 5)
  }

  /// Budget spent mid-split: the events the server refused wait with backoff, the rest of the
  /// claim goes back untouched, and the pass ends.
  func testASpentBudgetEndsThePassAndOnlyRefusedEventsWait() throws {
    let sender = ScriptedSender(otherwise: .status(413, retryAfter: nil))
    let telemetry = Telemetry(
      container: container, configuration: TelemetryConfiguration(batchLimit: 600, requestBudget: 1),
      tokens: CountingTokens(), sender: sender, clock: clock.function)
    for i in 0..<30 {
      try telemetry.log(type: "tap", payload: ["n": .number(i), "pad": .string(UUID().uuidString)])
    }
    let report = try telemetry.flush()
    XCTAssertEqual(sender.sent.count, 2, "the first batch and one half")
    let refused = sender.sent[0].batch.ids.count
    XCTAssertEqual(sender.sent[1].batch.ids.count, refused / 2)
    XCTAssertEqual(report.retried, refused)
    XCTAssertEqual(report.rejected, 0)
    XCTAssertEqual(try container.count(queue: Telemetry.queueName, state: .pending), 30)
    let records = try container.list(queue: Telemetry.queueName)
    XCTAssertEqual(records.filter { $0.attempts == 0 }.count, 30 - refused, "given back, not counted")
    XCTAssertEqual(records.filter { $0.errorKind == "http-413" }.count, refused)
    _ = try telemetry.flush()
    XCTAssertFalse(
      sender.sent[2...].contains { !Set($0.batch.ids).isDisjoint(with: sender.sent[0].batch.ids) },
      "refused events wait for their backoff")
  }

  func testALargeSingleEventRefusedWith413GoesToReview() throws {
    let sender = ScriptedSender(otherwise: .status(413, retryAfter: nil))
    let telemetry = Telemetry(
      container: container, configuration: TelemetryConfiguration(batchLimit: 4096), tokens: CountingTokens(),
      sender: sender, clock: clock.function)
    let noise = (0..<80).map { _ in UUID().uuidString }.joined()
    try telemetry.log(type: "big", payload: ["noise": .string(noise)])
    XCTAssertGreaterThan(try telemetry.flush().rejected, 0)
    XCTAssertGreaterThan(try XCTUnwrap(sender.sent.first).batch.body.count, 1024, "over a quarter of the limit")
    XCTAssertEqual(try container.list(queue: Telemetry.queueName, state: .review).map(\.errorKind), ["http-413"])
  }

  func testTransportFailuresKeepEverything() throws {
    let sender = ScriptedSender([.transport(kind: "transport-connection-refused")])
    let telemetry = client(sender)
    for _ in 0..<3 { try telemetry.log(type: "tap") }
    XCTAssertEqual(try telemetry.flush().retried, 3)
    clock.advance(10)
    XCTAssertEqual(try telemetry.flush().delivered, 3)
  }

  func testLoggingPastTheCapDropsTheOldestAndCountsThem() throws {
    let telemetry = client(ScriptedSender())
    let payload: [String: JSONValue] = ["blob": .string(String(repeating: "q", count: 10_000))]
    var ids: [UUID] = []
    let started = Date()
    for _ in 0..<2_300 { ids.append(try telemetry.log(type: "big", payload: payload)) }  // ~23 MB sealed
    let elapsed = Date().timeIntervalSince(started)
    let stats = try container.stats()
    XCTAssertLessThanOrEqual(stats.bytes, 20_000_000)
    XCTAssertGreaterThan(stats.dropped["cap"] ?? 0, 0)
    XCTAssertEqual(stats.total + (stats.dropped["cap"] ?? 0), 2_300)
    let kept = Set(try container.list(queue: "telemetry").map(\.id))
    XCTAssertTrue(kept.contains(ids.last!), "the newest are kept")
    XCTAssertFalse(kept.contains(ids.first!), "the oldest went first")
    XCTAssertLessThan(elapsed, 120, "logging never stalled")
  }
}

/// Against the real mock server on loopback, with events logged from several threads.
final class TelemetryServerTests: XCTestCase {
  func testEventsFromManyThreadsReachTheServerOnceAndLeaveNoPlaintext() throws {
    let temporary = TemporaryDirectory()
    let vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(InMemoryKeyStore()))
    let container = try QueueContainer(path: temporary.sub("home/queue.sqlite"), vault: vault)
    let server = try TelemetryServer(directory: temporary.path, root: packageRoot())
    defer { server.stop() }
    let telemetry = Telemetry(
      container: container, configuration: TelemetryConfiguration(batchLimit: 4096), tokens: StaticTokens(),
      sender: try HTTPBatchSender(endpoint: server.endpoint, timeout: 5))
    let logged = Collected()
    DispatchQueue.concurrentPerform(iterations: 4) { worker in
      for i in 0..<50 {
        if let id = try? telemetry.log(
          type: "screen_view", payload: ["worker": .number(Double(worker)), "secret": .string("tele-canary-\(i)")])
        {
          logged.add(id.uuidString.lowercased())
        }
      }
    }
    XCTAssertEqual(logged.all.count, 200)
    XCTAssertFalse(directoryContains(temporary.sub("home"), "tele-canary"), "events are sealed at rest")
    let report = try telemetry.flush()
    XCTAssertEqual(report.delivered, 200)
    XCTAssertGreaterThan(report.batches, 1)
    let received = server.received
    XCTAssertTrue(
      received.allSatisfy { $0.malformed == nil && $0.status == 200 }, "gzip, JSON shape and headers accepted")
    XCTAssertEqual(received.flatMap(\.ids).sorted(), logged.all.sorted(), "each event exactly once")
  }
}

struct StaticTokens: TokenProvider {
  func token(refresh: Bool) throws -> String { "test-token" }
}

final class Collected: @unchecked Sendable {
  private let lock = NSLock()
  private var items: [String] = []
  func add(_ item: String) { lock.withLock { items.append(item) } }
  var all: [String] { lock.withLock { items } }
}

/// Status handling against the real mock server: the uploader, headers and retries together.
final class TelemetryServerStatusTests: XCTestCase {
  var temporary: TemporaryDirectory!
  var container: QueueContainer!
  var clock: TestClock!

  override func setUpWithError() throws {
    temporary = TemporaryDirectory()
    clock = TestClock(Date())
    let vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(InMemoryKeyStore()))
    container = try QueueContainer(path: temporary.sub("home/q.sqlite"), vault: vault, clock: clock.function)
  }

  override func tearDown() {
    container = nil
    temporary = nil
  }

  // postControl, not URLSession: FoundationNetworking leaks libcurl's URL handle per request.
  private func control(_ server: TelemetryServer, _ json: String) {
    postControl("http://127.0.0.1:\(server.port)/control", json)
  }

  func testWrongTokenIsRefreshedOnceThenWaits() throws {
    let server = try TelemetryServer(directory: temporary.path, token: "the-right-one", root: packageRoot())
    defer { server.stop() }
    let tokens = CountingTokens()
    let telemetry = Telemetry(
      container: container, tokens: tokens, sender: try HTTPBatchSender(endpoint: server.endpoint, timeout: 5),
      clock: clock.function)
    try telemetry.log(type: "tap")
    let report = try telemetry.flush()
    XCTAssertEqual([report.retried, report.parked], [1, 0])
    XCTAssertEqual(report.tokenRefreshes, 1)
    XCTAssertEqual(server.received.map(\.status), [401, 401], "one refresh, one retry, then backoff")
  }

  func testRetryAfterFromTheServerIsHonoured() throws {
    let server = try TelemetryServer(directory: temporary.path, mode: "429", root: packageRoot())
    defer { server.stop() }
    control(server, #"{"retry_after": 30}"#)
    let telemetry = Telemetry(
      container: container, tokens: StaticTokens(), sender: try HTTPBatchSender(endpoint: server.endpoint, timeout: 5),
      clock: clock.function)
    try telemetry.log(type: "tap")
    XCTAssertEqual(try telemetry.flush().retried, 1)
    control(server, #"{"mode": "ok"}"#)
    clock.advance(29)
    XCTAssertEqual(try telemetry.flush().batches, 0, "not before Retry-After")
    clock.advance(2)
    XCTAssertEqual(try telemetry.flush().delivered, 1)
    XCTAssertEqual(server.received.map(\.status), [429, 200])
  }

  /// Issue 9 item 8: a server answering 413 to everything once turned one pass into ~20,000
  /// requests and moved every small event to review. Now a pass stays within its request budget,
  /// and a small event refused with 413 waits with backoff instead of going to review.
  func testA413EverythingServerGetsAFewRequestsPerPassAndRejectsNothing() throws {
    let server = try TelemetryServer(directory: temporary.path, mode: "413", root: packageRoot())
    defer { server.stop() }
    let count = 10_000
    let records = try (0..<count).map { index -> (id: UUID, payload: [UInt8]) in
      let event = TelemetryEvent(
        id: UUID(), date: clock.now, type: "tap",
        payload: ["n": .number(Double(index)), "pad": .string(String(repeating: "p", count: 60))],
        sessionID: "s1")
      return (event.id, try event.encoded())
    }
    _ = try container.enqueue(contentsOf: records, queue: Telemetry.queueName)
    let telemetry = Telemetry(
      container: container, tokens: StaticTokens(), sender: try HTTPBatchSender(endpoint: server.endpoint, timeout: 5),
      clock: clock.function)
    let started = Date()
    let report = try telemetry.flush()
    let requests = server.received.count
    print(
      "413 everywhere: \(count) events, \(requests) requests in \(String(format: "%.1f", Date().timeIntervalSince(started))) s"
    )
    XCTAssertLessThanOrEqual(requests, 17, "one batch plus the split budget")
    XCTAssertEqual(report.rejected, 0)
    XCTAssertEqual(try container.count(queue: Telemetry.queueName, state: .review), 0, "nothing to review for good")
    XCTAssertEqual(try container.count(queue: Telemetry.queueName, state: .pending), count, "all pending or retrying")
  }

  /// A single small event refused with 413 is the server's fault: retried later, with backoff.
  func testASmallEventRefusedWith413WaitsAndIsRetried() throws {
    let server = try TelemetryServer(directory: temporary.path, mode: "413", root: packageRoot())
    defer { server.stop() }
    let telemetry = Telemetry(
      container: container, tokens: StaticTokens(), sender: try HTTPBatchSender(endpoint: server.endpoint, timeout: 5),
      clock: clock.function)
    try telemetry.log(type: "tap", payload: ["n": .number(1)])
    let report = try telemetry.flush()
    XCTAssertEqual(report.retried, 1)
    XCTAssertEqual(report.rejected, 0)
    XCTAssertEqual(try telemetry.flush().batches, 0, "it waits for its backoff")
    control(server, #"{"mode": "ok"}"#)
    clock.advance(3600)
    XCTAssertEqual(try telemetry.flush().delivered, 1)
    XCTAssertEqual(server.received.map(\.status), [413, 200])
  }

  func testAHungOrDroppingServerIsATransportFailureAndNothingIsLost() throws {
    let server = try TelemetryServer(directory: temporary.path, mode: "hang", root: packageRoot())
    defer { server.stop() }
    let telemetry = Telemetry(
      container: container, tokens: StaticTokens(), sender: try HTTPBatchSender(endpoint: server.endpoint, timeout: 1),
      clock: clock.function)
    try telemetry.log(type: "tap")
    let started = Date()
    XCTAssertEqual(try telemetry.flush().retried, 1)
    XCTAssertLessThan(Date().timeIntervalSince(started), 10, "a hung server costs the timeout, not forever")
    control(server, #"{"mode": "drop"}"#)
    clock.advance(5)
    XCTAssertEqual(try telemetry.flush().retried, 1)
    control(server, #"{"mode": "ok"}"#)
    clock.advance(10)
    XCTAssertEqual(try telemetry.flush().delivered, 1)
  }
}

/// A sender twin whose answer is decided by a closure run while the batch is under way.
final class LateAnswerSender: BatchSender, @unchecked Sendable {
  private let answer: @Sendable (TelemetryBatch) -> SendResult

  init(_ answer: @escaping @Sendable (TelemetryBatch) -> SendResult) { self.answer = answer }

  func send(_ batch: TelemetryBatch, token: String) -> SendResult { answer(batch) }
}

extension TelemetryDeliveryTests {
  /// A pass whose lease ran out while its batch was under way (suspended, or the wall clock stepped
  /// forward past it) must not settle events another deliverer took meanwhile. Before, its late 200
  /// deleted the event the app had logged since under an id the other deliverer had delivered and
  /// acked: it was never sent, and lost.
  func testALateAnswerNeverSettlesEventsThatAreNoLongerThePasss() throws {
    let other = try QueueContainer(path: container.path, vault: vault, clock: clock.function)
    let reused = UUID()
    let kept = UUID()
    let logger = Telemetry(container: container, tokens: CountingTokens(), sender: NoBatchSender())
    try logger.log(type: "tap", id: reused)
    try logger.log(type: "tap", id: kept)
    let batches = LockedValue<[[UUID]]>([])
    let sender = LateAnswerSender { [clock] batch in
      let count = batches.withLock {
        $0.append(batch.ids)
        return $0.count
      }
      guard count == 1 else { return .status(200, retryAfter: nil) }
      do {
        // The lease runs out under this pass; another deliverer takes both events, its server
        // takes the first, and the app logs the first's id again.
        clock!.step(301)
        let records = try other.claim(queue: Telemetry.queueName, lease: 300)
        XCTAssertEqual(Set(records.map(\.id)), [reused, kept])
        XCTAssertEqual(try Claim(container: other, records: records, lease: 300).ack([reused]), [reused])
        try logger.log(type: "tap again", id: reused)
      } catch {
        XCTFail("\(error)")
      }
      return .status(200, retryAfter: nil)
    }
    let telemetry = Telemetry(container: container, tokens: CountingTokens(), sender: sender, clock: clock.function)
    let report = try telemetry.flush()
    // Nor is the late 200 counted: it deleted nothing (it said 3 delivered, of 2 sent and 1 unsent).
    XCTAssertEqual(report.delivered, 1, "only the event logged again, sent and deleted")
    let sent = batches.withLock { $0 }
    XCTAssertEqual(sent.count, 2, "the event logged again is sent, not deleted by the late answer")
    XCTAssertEqual(sent.last, [reused])
    XCTAssertEqual(try container.list(queue: Telemetry.queueName).map(\.state), [.inFlight], "the other's event")
  }
}

extension TelemetryDeliveryTests {
  /// Logs `count` events and returns their ids, in order.
  private func logged(_ count: Int) throws -> [UUID] {
    let logger = Telemetry(container: container, tokens: CountingTokens(), sender: NoBatchSender())
    return try (0..<count).map { index in
      let id = UUID()
      try logger.log(type: "tap", payload: ["n": .number(Double(index))], id: id)
      return id
    }
  }

  /// A sender answering `refusal` to any batch holding one of `refused`, 200 to the rest, keeping
  /// the ids of every batch it was given.
  private func refusing(_ refused: Set<UUID>, with refusal: Int = 400) -> (LateAnswerSender, LockedValue<[[UUID]]>) {
    let batches = LockedValue<[[UUID]]>([])
    let sender = LateAnswerSender { batch in
      batches.withLock { $0.append(batch.ids) }
      return .status(batch.ids.contains(where: refused.contains) ? refusal : 200, retryAfter: nil)
    }
    return (sender, batches)
  }

  /// One event the collector refuses for what it holds (400, 422) no longer sends its whole batch
  /// to review (an outside review: good events shared the bad one's fate, in review for good):
  /// each half is sent, and the refused half split again, down to that event.
  func testOneRefusedEventGoesToReviewAloneAndTheRestOfItsBatchIsDelivered() throws {
    for refusal in [400, 422] {
      let ids = try logged(9)
      let bad = ids[6]
      let (sender, batches) = refusing([bad], with: refusal)
      let telemetry = Telemetry(container: container, tokens: CountingTokens(), sender: sender, clock: clock.function)
      let report = try telemetry.flush()
      XCTAssertEqual([report.delivered, report.rejected], [8, 1], "\(refusal)")
      let left = try container.list(queue: Telemetry.queueName)
      XCTAssertEqual(left.map(\.id), [bad])
      XCTAssertEqual(left.map(\.state), [.review])
      XCTAssertEqual(left.map(\.errorKind), ["http-\(refusal)"])
      let sent = batches.withLock { $0 }
      XCTAssertEqual(sent.first?.count, 9, "the whole batch first")
      XCTAssertLessThanOrEqual(sent.count, 1 + 2 * 4, "two requests a halving")
      XCTAssertEqual(Set(sent.filter { !$0.contains(bad) }.joined()), Set(ids).subtracting([bad]), "each good one sent")
      try container.ack([bad])
    }
  }

  /// A collector that refuses every batch for what it holds costs four requests more than before
  /// (both halves refused, and both quarters of the first: nothing taken, so perhaps everything
  /// refused), and the events go to review as they did.
  func testACollectorRefusingEverythingCostsFourMoreRequests() throws {
    let ids = try logged(30)
    let (sender, batches) = refusing(Set(ids))
    let report = try Telemetry(container: container, tokens: CountingTokens(), sender: sender, clock: clock.function)
      .flush()
    XCTAssertEqual([report.delivered, report.rejected], [0, 30])
    XCTAssertEqual(batches.withLock { $0.map(\.count) }, [30, 15, 15, 7, 8])
    XCTAssertEqual(Set(try container.list(queue: Telemetry.queueName).map(\.state)), [.review])
  }

  /// Several bad events are found too, wherever they are (a review: two bad events at both ends,
  /// or side by side in the middle, sent the whole batch to review; 0 and 1 sent a good one with
  /// them): once the collector took some part of the batch, both refused halves are searched.
  func testSeveralRefusedEventsAreFoundWhereverTheyAre() throws {
    for positions in [[0, 63], [31, 32], [0, 1], [10, 20, 30], [0, 5, 40]] {
      let ids = try logged(64)
      let bad = Set(positions.map { ids[$0] })
      let (sender, batches) = refusing(bad)
      let report = try Telemetry(container: container, tokens: CountingTokens(), sender: sender, clock: clock.function)
        .flush()
      XCTAssertEqual([report.delivered, report.rejected], [64 - bad.count, bad.count], "\(positions)")
      let left = try container.list(queue: Telemetry.queueName)
      XCTAssertEqual(Set(left.map(\.id)), bad, "\(positions)")
      XCTAssertLessThanOrEqual(batches.withLock { $0.count }, 1 + 64, "\(positions): the search's limit")
      try container.ack(left.map(\.id))
    }
    // The limit the README gives: a bad event in every quarter, and nothing taken in the first
    // half's quarters, looks like a collector refusing everything: the batch goes to review whole.
    let ids = try logged(64)
    let (sender, _) = refusing(Set([0, 21, 42, 63].map { ids[$0] }))
    let report = try Telemetry(container: container, tokens: CountingTokens(), sender: sender, clock: clock.function)
      .flush()
    XCTAssertEqual([report.delivered, report.rejected], [0, 64])
  }

  /// Only 400 and 422 are searched: other 4xx speak of the endpoint or the request (a review:
  /// 405, 407, 410, 415 … cost three requests a batch and went to review anyway).
  func testOnlyFourHundredAndFourTwentyTwoAreSearched() throws {
    for status in [405, 407, 410, 415] {
      let ids = try logged(8)
      let (sender, batches) = refusing(Set(ids), with: status)
      let report = try Telemetry(container: container, tokens: CountingTokens(), sender: sender, clock: clock.function)
        .flush()
      XCTAssertEqual(batches.withLock { $0.count }, 1, "\(status): one request, as before")
      XCTAssertEqual(report.rejected, 8, "\(status)")
      try container.ack(ids)
    }
  }

  /// The halving does not spend the pass's request budget (for 413 splits): cut short by it, the
  /// search began again from the whole batch each pass and never got deeper than the budget
  /// allowed, so the bad event was never found. With a budget of 0, the batch goes to review
  /// whole, as before.
  func testNarrowingDownARefusedEventDoesNotSpendTheRequestBudget() throws {
    for budget in [1, 0] {
      let ids = try logged(9)
      let bad = ids[0]
      let (sender, batches) = refusing([bad])
      let report = try Telemetry(
        container: container, configuration: TelemetryConfiguration(requestBudget: budget), tokens: CountingTokens(),
        sender: sender, clock: clock.function
      ).flush()
      let left = try container.list(queue: Telemetry.queueName)
      if budget == 0 {
        XCTAssertEqual([report.delivered, report.rejected, batches.withLock { $0.count }], [0, 9, 1])
        XCTAssertEqual(Set(left.map(\.state)), [.review])
      } else {
        XCTAssertEqual([report.delivered, report.rejected], [8, 1])
        XCTAssertGreaterThan(batches.withLock { $0.count }, 2, "more sends than the budget of 1")
        XCTAssertEqual(left.map(\.id), [bad])
      }
      try container.ack(left.map(\.id))
    }
  }
}
