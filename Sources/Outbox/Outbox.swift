import Foundation
import Vault
import VaultCrypto
import VaultQueue

/// Send-then-deliver: `send` returns once the message is sealed and committed to disk; delivery
/// happens in the background through a `Transport`, with retries, backoff and parking owned here
/// (and only here).
///
/// The background loop (`start`) runs a pass at start (leftovers from an earlier run), after each
/// send, when the earliest retry it scheduled is due (a `Retry-After: 1` is retried about a second
/// later), at least every `interval` seconds, and at once on a network change. What it does is
/// published as `events()` and logged through `logger`; nothing is swallowed silently.
/// Thread-safe.
public final class Outbox: @unchecked Sendable {
  /// The queue container that holds the messages, sealed, until they are delivered.
  public let container: QueueContainer
  /// The queue within the container this outbox sends from (one container can hold several).
  public let queue: String
  let transport: any Transport
  let interval: TimeInterval
  let lease: TimeInterval
  let logger: DeliveryLogger
  private let hub = DeliveryEventHub()
  private let lock = NSLock()
  private var loop: DeliveryLoop?
  /// The earliest due time (container clock) of a record this process scheduled and has not
  /// attempted since: the loop wakes for it rather than wait out `interval`.
  private var earliestDue: Date?
  private let drops = DropWatch()
  /// Counts `stop()` calls: a pass that began under another count ends before its next record
  /// (passes begun after a stop, by a new `start` or a `deliverDue` call, run as usual).
  private var stops = 0

  /// What one delivery pass did.
  public struct Pass: Sendable, Equatable, Codable {
    /// Records the receiver took (2xx) and this pass deleted. A 2xx that came after this
    /// deliverer's lease on the record ended (another deliverer claimed it since, or the app sent
    /// a new message under the same id) deletes nothing and is not counted here, nor published:
    /// whoever deletes the record says so.
    public var delivered = 0
    /// Records rescheduled for another attempt (a retryable answer or no answer at all), or left
    /// to whoever claimed them since when this deliverer's lease had ended.
    public var retrying = 0
    /// Records parked because the server refused them `attemptCeiling` times over `parkAfter`.
    public var parked = 0
    /// Records moved to review because the receiver refused them for good.
    public var rejected = 0
    /// Records still waiting (not yet due, or left for a later pass) after this pass. Records
    /// in flight are not counted: another deliverer's, or a killed one's until its lease ends
    /// (then they are due again); `QueueContainer.stats()` counts them (`in_flight`).
    public var pending = 0

    /// An empty report, every count 0; a pass adds to it.
    public init() {}
  }

  /// The moment a message is safe: it is sealed and on disk.
  public struct Receipt: Sendable, Equatable {
    /// The message's record id: the `Idempotency-Key` the receiver sees, and the id events carry.
    public let id: UUID
    /// True when a record with this id was already queued: nothing new was stored.
    public let duplicate: Bool

    /// A receipt as `send` returns it, for an app's test doubles of its outbox.
    ///
    /// - Parameters:
    ///   - id: the message's record id.
    ///   - duplicate: whether the id was already queued.
    public init(id: UUID, duplicate: Bool = false) {
      self.id = id
      self.duplicate = duplicate
    }
  }

  /// Makes an outbox over `queue` of `container`; nothing is delivered until `start` or
  /// `deliverDue`.
  ///
  /// - Parameters:
  ///   - container: the queue container that holds the messages, sealed, until they are delivered.
  ///   - queue: the queue within the container (so one container can hold several outboxes).
  ///   - transport: how a message reaches its server (`HTTPBodyTransport`, `HTTPJSONTransport`, or
  ///     the app's own).
  ///   - interval: the longest the background loop waits between passes, in seconds: at least
  ///     0.01 and at most a week (604,800; infinity too); NaN is 60.
  ///   - lease: how long a claimed record stays with this deliverer, in seconds (renewed as a pass
  ///     goes, before each send); make it more than twice the transport's timeout, or a message
  ///     still being sent when the lease ends may be sent again by another deliverer. Less than 1
  ///     is 1, NaN is 120: a lease of 0 had two deliverers take each other's messages without end
  ///     (an outside review: one message sent 16 times, none deleted).
  ///   - logger: where the loop logs ids, counts and error kinds (never payloads); silent by default.
  public init(
    container: QueueContainer, queue: String = "outbox", transport: any Transport, interval: TimeInterval = 30,
    lease: TimeInterval = 120, logger: DeliveryLogger = .disabled
  ) {
    self.container = container
    self.queue = queue
    self.transport = transport
    self.interval = interval
    self.lease = lease.isNaN ? 120 : max(lease, 1)
    self.logger = logger
  }

  /// Saves `message` durably (the "saved" moment an app uses to clear its editor) and asks the
  /// background loop, if started, to deliver it. Never waits for the network; it blocks its caller
  /// for the commit's fsync, and while a rotation in another process holds the container (seconds
  /// on a large one). It has no async form: from async code, call it where blocking is allowed.
  ///
  /// The container's byte cap (20 MB by default) still applies to a saved message: a later send
  /// past it deletes the oldest records the cap may drop, by default of any queue, this outbox's
  /// too, counted in `stats().dropped["cap"]` and logged by the next delivery pass. Telemetry's
  /// events in the same container only ever make room from other events. With
  /// `QueueConfiguration(capVictims: .only([Telemetry.queueName]))` no message is ever dropped:
  /// a send that finds no event to drop throws `QueueError.capExceeded` instead.
  ///
  /// - Parameters:
  ///   - message: the message's bytes, exactly as the transport will get them.
  ///   - id: the message's id; a random one when nil. Sending an id again stores nothing new. Ids
  ///     are unique per container, across its queues: outboxes sharing a container must not reuse
  ///     an app's own entity ids between them (a send whose id another queue holds is a duplicate
  ///     and stores nothing; check the receipt).
  /// - Returns: the receipt: the id, and whether it was a duplicate (nothing was stored).
  /// - Throws: `CryptoError.randomUnavailable` when no random id can be drawn; the errors of
  ///   `QueueContainer.enqueue` (`QueueError` such as `.capExceeded` or `.diskFull`,
  ///   `KeyStoreError` when the key cannot be read right now): the message was then not saved.
  @discardableResult
  public func send(_ message: [UInt8], id: UUID? = nil) throws -> Receipt {
    // Random ids come from the DRBG: Foundation's UUID() repeats itself without /dev/urandom.
    let id = try id ?? SecureRandom.uuid()
    let outcome = try container.enqueue(message, queue: queue, id: id)
    trigger()
    return Receipt(id: id, duplicate: outcome == .duplicate)
  }

  /// Saves `message` durably; the same as the `[UInt8]` form.
  ///
  /// - Parameters:
  ///   - message: the message's bytes.
  ///   - id: the message's id; a random one when nil.
  /// - Returns: the receipt: the id, and whether it was a duplicate.
  /// - Throws: as the `[UInt8]` form.
  @discardableResult
  public func send(_ message: Data, id: UUID? = nil) throws -> Receipt { try send([UInt8](message), id: id) }

  /// A stream of what delivery does from now on (passes run by the loop or by `deliverDue`).
  ///
  /// Each stream buffers at most `limit` events its reader has not taken yet and drops the oldest
  /// beyond that (`AsyncStream`'s `bufferingNewest`), so a stream that is never read costs bounded
  /// memory; `droppedEventCount` counts what was dropped. Streams end when `stop()` is called, or
  /// when the object is released without it.
  ///
  /// - Parameter limit: the most unread events kept (at least 1).
  /// - Returns: a stream of one event per record settled (`.delivered`, `.retried`, `.parked`,
  ///   `.rejected`) and a `.loopError` per failed pass of the loop.
  public func events(bufferingNewest limit: Int = 256) -> AsyncStream<DeliveryEvent> {
    hub.stream(bufferingNewest: limit)
  }

  /// Events dropped so far because a stream's buffer was full.
  public var droppedEventCount: Int { hub.droppedCount }

  /// Starts background delivery: a pass now (leftovers from a previous run), then on every send
  /// and trigger, when the earliest retry scheduled is due, at least every `interval` seconds, and
  /// on every change `network` reports (which also restarts the backoff of records that waited for
  /// the network; pass `RouteChangeSource()` from module Telemetry for the rtnetlink monitor).
  /// Calling it again while running does nothing.
  ///
  /// A pass that fails (storage, a key that cannot be read) is logged and published as
  /// `.loopError`; the loop goes on.
  ///
  /// - Parameter network: where network changes come from; nil (the default) for none.
  /// - Throws: what `network.watch` throws; the loop is then not started.
  public func start(network: (any NetworkChangeSource)? = nil) throws {
    let loop = lock.withLock { () -> DeliveryLoop? in
      guard self.loop == nil else { return nil }
      let loop = DeliveryLoop(name: "vault.outbox.delivery", period: { [interval] in interval }) {
        [weak self] reset in
        guard let self else { return .finish }
        return self.runScheduledPass(resetBackoff: reset)
      }
      self.loop = loop
      return loop
    }
    guard let loop else { return }
    seedEarliestDue()
    do {
      try loop.start(network: network)
    } catch {
      lock.withLock { self.loop = nil }
      throw error
    }
  }

  /// Records left waiting by an earlier run are due at their own time, not at the next period: the
  /// loop learns the earliest once, at start (metadata only; a failure leaves the period to it).
  private func seedEarliestDue() {
    guard let first = (try? container.pendingAggregate(queue: queue))?.earliestWait else { return }
    lock.withLock { earliestDue = min(earliestDue ?? first, first) }
  }

  /// Stops the loop: no pass starts after it returns, and every event stream ends. A pass under
  /// way (the loop's, or a `deliverDue` call's) ends before its next message, giving back what it
  /// claimed and did not settle. `stop` waits for the loop's pass, so at most for the message
  /// being sent (the transport's timeout), and blocks its caller that long: from async code, call
  /// it off Swift's concurrency pool. A `deliverDue` call of your own is not waited for: await it
  /// (or cancel its task) to know it has returned.
  public func stop() {
    let loop = lock.withLock { () -> DeliveryLoop? in
      stops += 1
      defer { self.loop = nil }
      return self.loop
    }
    loop?.stop()
    hub.finishAll()
  }

  /// Asks for a delivery pass soon (after a send, or when connectivity returns). Passes do not pile
  /// up. With `resetBackoff`, records that waited for the network become due at once. Does
  /// nothing when the loop is not running.
  ///
  /// - Parameter resetBackoff: also make due now the records whose last failure was the network's
  ///   (see `QueueContainer.makeDue(queue:)`).
  public func trigger(resetBackoff: Bool = false) {
    lock.withLock { loop }?.trigger(resetBackoff: resetBackoff)
  }

  /// One pass of the loop, on the loop's thread: it waits for the async pass (the transport runs
  /// elsewhere) and tells the loop when the earliest scheduled retry is due.
  private func runScheduledPass(resetBackoff: Bool) -> DeliveryLoop.Step {
    if resetBackoff {
      do {
        try container.makeDue(queue: queue)
      } catch {
        report(error)
      }
    }
    let done = DispatchSemaphore(value: 0)
    Task {
      do {
        _ = try await self.deliverDue()
      } catch {
        self.report(error)
      }
      done.signal()
    }
    done.wait()
    let due = lock.withLock { earliestDue }
    return .wait(dueIn: due.map { $0.timeIntervalSince(container.now) })
  }

  private func report(_ error: any Error) {
    let code = errorCode(of: error)
    logger.error("delivery pass failed", metadata: ["queue": queue, "error_code": code])
    hub.publish(.loopError(errorCode: code))
  }

  /// One delivery pass: every record that is due is attempted at most once, until the server
  /// refuses the credentials (401, 403), or asks to wait (429, 503) or does not answer for two
  /// records in a row: those wait, and the rest of what the pass claimed goes back untouched
  /// (when both had been attempted before, one more record is sent first, alone, and the pass
  /// goes on if the server takes it: see `deliver`).
  ///
  /// Each record is acked as soon as the server has it, and the leases of the records still
  /// waiting are renewed as the pass goes (see `Claim`), so a slow server cannot make them due
  /// again under another deliverer. When the task running it is cancelled, or `stop()` is called,
  /// the pass ends before its next record: the request in flight is finished (up to the
  /// transport's timeout), every record claimed and not settled is given back, and the pass
  /// returns what it did (it does not throw `CancellationError`). Once
  /// `HTTPCancellation.cancelAll()` is called (process-wide, for good: a process that is exiting)
  /// the pass also cuts the request in flight short; that record stays queued (it may or may not
  /// have arrived).
  ///
  /// - Parameter batch: the most records claimed at a time (and at most 4 MiB of envelopes); less
  ///   than 1 is 1 (0 sent nothing, and said nothing).
  /// - Returns: what the pass did, and how many records are still pending.
  /// - Throws: storage errors (`QueueError`), and `KeyStoreError` (or the vault's other errors)
  ///   when a key cannot be read right now; what the pass claimed and did not settle is given
  ///   back first.
  public func deliverDue(batch: Int = 50) async throws -> Pass {
    var pass = Pass()
    var attempted = Set<UUID>()
    let start = container.now
    // What this pass may attempt no longer needs a wake; what it schedules is added back.
    lock.withLock { if let due = earliestDue, due <= start { earliestDue = nil } }
    logger.trace("delivery pass starts", metadata: ["queue": queue])
    let stopsAtStart = lock.withLock { stops }
    // Across claims: a claim may hold one message (4 MiB of envelopes, or `batch`), and a run that
    // began again with each claim sent a whole backlog to an endpoint refusing everything (a
    // security review: ten messages of 2.2 MB, ten requests in one pass).
    var refusals = Refusals()
    while !passShouldEnd(stopsAtStart) {
      let records = try await storage { [container, queue, lease] in
        try container.claim(queue: queue, maxCount: max(batch, 1), maxBytes: 4 << 20, lease: lease, dueBy: start)
      }
      if records.isEmpty { break }
      let claim = Claim(container: container, records: records, lease: lease)
      // Only records this pass already attempted (a retry due again at once): they go back, and
      // the pass is over.
      let fresh = records.contains { !attempted.contains($0.id) }
      var goOn = true
      do {
        if fresh {
          goOn = try await deliver(
            claim, attempted: &attempted, refusals: &refusals, pass: &pass, stops: stopsAtStart, dueBy: start)
        }
        try claim.releaseUnsettled()
      } catch {
        _ = try? claim.releaseUnsettled()
        throw error
      }
      if !fresh || !goOn { break }
    }
    pass.pending = try await storage { [container, queue] in try container.count(queue: queue, state: .pending) }
    try await storage { [container, drops, logger] in drops.logDrops(of: container, to: logger) }
    logger.debug(
      "delivery pass done",
      metadata: [
        "queue": queue, "delivered": "\(pass.delivered)", "retrying": "\(pass.retrying)", "parked": "\(pass.parked)",
        "rejected": "\(pass.rejected)", "pending": "\(pass.pending)",
      ])
    return pass
  }

  /// Whether a pass that began when `stop()` had been called `stops` times ends before its next
  /// record: the process is stopping deliveries (`HTTPCancellation`), the task running it was
  /// cancelled, or `stop()` was called since it began.
  private func passShouldEnd(_ stops: Int) -> Bool {
    HTTPCancellation.isCancelled || Task.isCancelled || lock.withLock { self.stops != stops }
  }

  /// Delivers the claim's records not attempted yet, one at a time; returns false when the pass
  /// must end: the server refused the credentials (401, 403), or asked to wait (429, 503) or did
  /// not answer for two records in a row. The rest of the claim then goes back untouched, its
  /// attempts not counted.
  ///
  /// When both records had been attempted before, they may be the messages and not the
  /// endpoint (a server that answers 429 to one body): what the claim still holds goes back, one
  /// record is sent alone first, the due record of the queue tried least (never, if there is one;
  /// the oldest of those), and the pass goes on with a new claim only if the server takes it (or
  /// answers about it alone). Without that, two such messages, first in every claim, held back
  /// every other for as long as parking took (a day by default); with the probe looked for only
  /// among records never attempted in the claim at hand, they still did with claims of one message
  /// (over 2 MiB each, or `batch: 1`), and once every message had failed once (an outside review:
  /// a server answering 500 for a second). Against an endpoint that refuses everything, a pass
  /// costs one request more, and its probes go round the queue.
  private func deliver(
    _ claim: Claim, attempted: inout Set<UUID>, refusals run: inout Refusals, pass: inout Pass, stops: Int,
    dueBy start: Date
  ) async throws -> Bool {
    for record in claim.records where !attempted.contains(record.id) {
      if passShouldEnd(stops) { return true }
      var outcome = try await attempt(record, claim, &attempted, &pass)
      if case .endpointRefused = outcome {
        run.count += 1
        run.onlyRepeats = run.onlyRepeats && record.attempts > 1
        if run.count >= 2, run.onlyRepeats {
          // Every due record may be the probe: what this claim holds goes back first.
          try claim.releaseUnsettled()
          while !passShouldEnd(stops) {
            // None left to probe with: the outcome stands, and the pass ends.
            guard let answer = try await probe(attempted: &attempted, pass: &pass, dueBy: start) else { break }
            if case .lost = answer { continue }  // passed over, and not tried again
            outcome = answer
            break
          }
          if case .answered = outcome {
            run = Refusals()
            return true  // on with a new claim
          }
          if passShouldEnd(stops) { return true }
        }
      }
      switch outcome {
      case .lost:
        // Not ours any more: says nothing of the endpoint, and breaks no run of refusals.
        continue
      case .answered:
        run = Refusals()
      case .endpointRefused(let kind, let unanswered):
        guard run.count < 2 else {
          logger.notice(
            unanswered ? "endpoint unreachable, pass ended" : "endpoint asked to wait, pass ended",
            metadata: ["queue": queue, "error_kind": kind])
          return false
        }
      case .credentialsRefused:
        return false
      case .cutShort:
        return true
      }
    }
    return true
  }

  /// Sends the due record of the queue tried least, claimed for it alone; nil when there is none
  /// (or only one this pass attempted already, given back since by another deliverer). What the
  /// attempt did not settle goes back.
  private func probe(attempted: inout Set<UUID>, pass: inout Pass, dueBy start: Date) async throws -> Attempt? {
    let records = try await storage { [container, queue, lease] in
      try container.claimLeastAttempted(queue: queue, lease: lease, dueBy: start)
    }
    guard let probe = records.first else { return nil }
    let claim = Claim(container: container, records: records, lease: lease)
    do {
      let answer = attempted.contains(probe.id) ? nil : try await attempt(probe, claim, &attempted, &pass)
      try claim.releaseUnsettled()
      return answer
    } catch {
      _ = try? claim.releaseUnsettled()
      throw error
    }
  }

  /// Answers that speak of the endpoint (429, 503, no answer) in a row, in one pass: two end it.
  /// One alone may be the message's: ending the pass on it kept that message, first in every
  /// claim, ahead of all the others for a day (a review).
  private struct Refusals {
    /// How many in a row.
    var count = 0
    /// Whether every one of them went to a message attempted before (refused, failed, or left in
    /// flight, in an earlier pass).
    var onlyRepeats = true
  }

  /// What one attempt said of the pass.
  private enum Attempt {
    /// The server answered about this record alone (delivered, rejected, another retry).
    case answered
    /// The record was no longer this claim's (another deliverer took it, or it was acked): not sent.
    case lost
    /// The server asked to wait (429, 503), or did not answer (`unanswered`).
    case endpointRefused(kind: String, unanswered: Bool)
    /// The server refused the credentials (401, 403): the pass ends.
    case credentialsRefused
    /// A stop cut the request short: the record goes back with the rest of the claim.
    case cutShort
  }

  /// Sends one record and settles it through the claim.
  private func attempt(_ record: ClaimedRecord, _ claim: Claim, _ attempted: inout Set<UUID>, _ pass: inout Pass)
    async throws -> Attempt
  {
    attempted.insert(record.id)
    // Lost (the process was suspended past the lease and another deliverer took it): not ours.
    guard try claim.keep().contains(record.id) else { return .lost }
    let id = record.id
    let result = await transport.deliver(id: id, payload: record.payload).withNamedKind
    // Settled through the claim, fenced by the record's lease: a late answer (this process was
    // suspended, or the wall clock stepped, past the lease and another deliverer took the
    // record) must not delete or reschedule what that deliverer holds, nor a new message sent
    // since under the same id (the container's own `ack` deleted it unsent).
    switch result {
    case .delivered:
      // Counted and told once, by the deliverer whose ack deletes the record: when this lease
      // passed to another deliverer during the exchange, that one says so; when the app sent a
      // new message under the same id since, "delivered" would have been said of it, unsent.
      guard try await storage({ try claim.ack([id]) }).contains(id) else { return .answered }
      pass.delivered += 1
      logger.debug("delivered", metadata: ["queue": queue, "id": id.uuidString.lowercased()])
      hub.publish(.delivered(ids: [id]))
      return .answered
    case .unreachable(let kind) where kind == "cancelled" && HTTPCancellation.isCancelled:
      // Cut short by a stop: given back with the rest of the claim, not counted as a failure.
      return .cutShort
    case .retry(let kind, let after):
      let outcome = try await storage { try claim.fail([id], errorKind: kind, retryAfter: after)[id] }
      if outcome == .parked { pass.parked += 1 } else { pass.retrying += 1 }
      settled(id, kind: kind, outcome: outcome)
      // Credentials refused (401 after a token refresh, 403): a configuration to fix, not these
      // messages. The rest of the claim goes back untouched and the pass ends, so a revoked token
      // costs one message's requests per pass, not two requests for every message queued.
      if kind == "http-401" || kind == "http-403" {
        logger.warning("credentials refused, pass ended", metadata: ["queue": queue, "error_kind": kind])
        return .credentialsRefused
      }
      // The server asked every sender to wait (429) or is down (503): twice in a row, it says so
      // of the endpoint. Sending the rest anyway made a backlog of 20 twenty requests in one
      // pass against a Retry-After (an outside review).
      return kind == "http-429" || kind == "http-503" ? .endpointRefused(kind: kind, unanswered: false) : .answered
    case .unreachable(let kind):
      let outcome = try await storage { try claim.fail([id], errorKind: kind, serverAnswered: false)[id] }
      pass.retrying += 1
      settled(id, kind: kind, outcome: outcome)
      // No answer (refused, timed out, no route) twice in a row: the endpoint, not a message.
      // Trying each message of the backlog made a hung server cost a timeout per message in one
      // pass (an outside review: 50 messages behind a 15 s deadline, a pass of 12.5 minutes).
      return .endpointRefused(kind: kind, unanswered: true)
    case .reject(let kind):
      // Not ours any more (another deliverer took it meanwhile): nothing to report.
      guard try await storage({ try claim.reject([id], errorKind: kind) }).contains(id) else { return .answered }
      pass.rejected += 1
      logger.warning(
        "rejected, kept for review", metadata: ["queue": queue, "id": id.uuidString.lowercased(), "error_kind": kind])
      hub.publish(.rejected(ids: [id], errorKind: kind))
      return .answered
    }
  }

  /// Runs one of the pass's container calls (a transaction and its fsync) off Swift's concurrency
  /// pool. Task cancellation does not cut it short: a pass stops on `HTTPCancellation`, as it
  /// always has, and a record the server has is acked even if the task was cancelled meanwhile.
  private func storage<Value: Sendable>(_ call: @escaping @Sendable () throws -> Value) async throws -> Value {
    try await BlockingWork.run { Result { try call() } }.get()
  }

  /// Reports a failed attempt and remembers its due time for the loop's next wake.
  private func settled(_ id: UUID, kind: String, outcome: FailOutcome?) {
    switch outcome {
    case .parked:
      logger.warning("parked", metadata: ["queue": queue, "id": id.uuidString.lowercased(), "error_kind": kind])
      hub.publish(.parked(ids: [id], errorKind: kind))
    case .retryAt(let date):
      lock.withLock { earliestDue = min(earliestDue ?? date, date) }
      logger.notice(
        "retry scheduled",
        metadata: [
          "queue": queue, "id": id.uuidString.lowercased(), "error_kind": kind,
          "next_attempt": date.formatted(.iso8601),
        ])
      hub.publish(.retried(ids: [id], errorKind: kind, nextAttempt: date))
    case nil:
      // Not ours any more (another deliverer took it meanwhile): nothing to report.
      break
    }
  }
}
