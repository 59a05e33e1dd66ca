import Foundation
import Outbox
import VaultCrypto
import VaultQueue

/// How telemetry is delivered.
public struct TelemetryConfiguration: Sendable {
  /// The largest gzip-compressed batch body.
  public var batchLimit: Int
  /// The period of the background flush loop (stretched by the power policy).
  public var interval: TimeInterval
  /// Events claimed per round of a flush pass.
  public var claimCount: Int
  /// Requests one pass may spend re-sending the halves of batches refused with 413, on top of the
  /// first send of each batch (and the one resend after a token refresh), so a large healthy
  /// backlog is never held back. Once spent, the pass ends: the events the server refused wait
  /// with backoff and the rest of the claim goes back to pending, for the next pass. The search
  /// for the events of a batch refused with 400 or 422 does not spend it (it has a limit of its
  /// own, 64 requests a batch); 0 or less turns that search off, and such a batch goes to review
  /// whole.
  public var requestBudget: Int

  /// Makes a configuration; the defaults are what `vault telemetry` uses.
  ///
  /// - Parameters:
  ///   - batchLimit: the largest compressed batch body, in bytes (256 KiB by default; less than
  ///     512 bytes is 512: a limit of 0 sent every event to review as `too-large`).
  ///   - interval: the loop's period, in seconds (60 by default): at least 0.01 and at most a
  ///     week (604,800; infinity too), after the power policy's stretch; NaN is 60.
  ///   - claimCount: events claimed per round of a pass (2000 by default; less than 1 is 1). A round
  ///     also stops at sixteen batches' worth of envelope bytes (within 1–64 MiB).
  ///   - requestBudget: requests a pass may spend on split halves after a 413 (16 by default; 0 or
  ///     less also sends a batch refused with 400 or 422 to review whole, unsearched).
  public init(
    batchLimit: Int = 256 * 1024, interval: TimeInterval = 60, claimCount: Int = 2000, requestBudget: Int = 16
  ) {
    self.batchLimit = batchLimit
    self.interval = interval
    self.claimCount = claimCount
    self.requestBudget = requestBudget
  }

  /// `batchLimit`, at least 512 bytes: below that, small events alone did not fit, and every event
  /// was moved to review as `too-large`, for good (an outside review, with a limit of 0 or 60).
  var effectiveBatchLimit: Int { max(batchLimit, 512) }

  /// The most envelope bytes one round of a pass claims (one event alone may be larger): sixteen
  /// batches' worth, within 1–64 MiB. A round holds its events about four times over (envelopes,
  /// payloads, their JSON, a batch being packed), so a fixed 64 MiB made a pass over large events
  /// peak at hundreds of megabytes to send 256 KiB at a time.
  var claimBytes: Int { min(max(effectiveBatchLimit, 64 << 10), 4 << 20) * 16 }
}

/// What one flush pass did, in events.
public struct FlushReport: Codable, Sendable, Equatable {
  /// Events the collector took (2xx) and this pass deleted. A 2xx that came after this pass's
  /// lease on an event ended (another deliverer claimed it since, or the app logged a new event
  /// under its id) deletes nothing and is not counted: whoever deletes the event says so.
  public var delivered = 0
  /// Events rescheduled for another attempt (a retryable answer or no answer at all).
  public var retried = 0
  /// Events parked: refused `attemptCeiling` times over `parkAfter`.
  public var parked = 0
  /// Events moved to review: refused for good, or too large to send.
  public var rejected = 0
  /// Events still pending (not yet due, or waiting for a later pass) after the pass. Events in
  /// flight are not counted: another deliverer's, or a killed one's until its lease (300 s) ends.
  public var pending = 0
  /// Batch requests made (a batch re-sent after a token refresh counts once; each split half
  /// counts, after a 413 or while a batch refused for what it holds is narrowed down).
  public var batches = 0
  /// Fresh tokens asked for after a 401 (at most one per pass).
  public var tokenRefreshes = 0
  /// Events in batches the server refused for their credentials: 401 again after a token refresh,
  /// or 403. They wait with backoff (counted in `retried`; the refusal counts toward parking like
  /// any other) and the pass ends; once the credentials are fixed, a pass sends them.
  public var authFailures = 0
  /// Events in a batch answered 404: the endpoint is wrong. They went back to pending, due at
  /// once and their attempt not counted (never parked or sent to review), and the pass ended.
  public var notFound = 0
  /// The kind of the last answer that refused a batch for its configuration (`http-401`,
  /// `http-403`, `http-404`); nil when there was none.
  public var errorKind: String?
  /// The kind of the last failure in the pass that left events to retry: an answer (`http-503`)
  /// or, with `retryUnreachable`, no answer (`connection-refused`, `dns`, `timed-out`…); nil when no
  /// event was rescheduled. Said by `vault telemetry flush`; not part of the JSON form.
  public var retryKind: String?
  /// Whether `retryKind` is a failure to reach the server rather than its answer.
  public var retryUnreachable = false

  enum CodingKeys: String, CodingKey {
    case delivered, retried, parked, rejected, pending, batches
    case tokenRefreshes = "token_refreshes"
    case authFailures = "auth_failures"
    case notFound = "not_found"
    case errorKind = "error_kind"
  }

  /// An empty report, every count 0; a pass adds to it.
  public init() {}

  /// Whether the pass delivered nothing because the server refused the credentials (401, 403) or
  /// does not know the endpoint (404): a configuration to fix, not a network to wait for.
  public var refusedByConfiguration: Bool { delivered == 0 && (authFailures > 0 || notFound > 0) }

  /// Encodes every key, `error_kind` as null when there was none (never omitted).
  ///
  /// - Parameter encoder: the encoder to write to.
  /// - Throws: the encoder's errors.
  public func encode(to encoder: any Encoder) throws {
    var container = encoder.container(keyedBy: CodingKeys.self)
    try container.encode(delivered, forKey: .delivered)
    try container.encode(retried, forKey: .retried)
    try container.encode(parked, forKey: .parked)
    try container.encode(rejected, forKey: .rejected)
    try container.encode(pending, forKey: .pending)
    try container.encode(batches, forKey: .batches)
    try container.encode(tokenRefreshes, forKey: .tokenRefreshes)
    try container.encode(authFailures, forKey: .authFailures)
    try container.encode(notFound, forKey: .notFound)
    try container.encode(errorKind, forKey: .errorKind)
  }
}

/// The telemetry SDK: `log` seals an event durably into the container's `telemetry` queue and
/// returns; `flush` (or the background loop) packs due events into gzip JSON batches and sends
/// them. Thread-safe: `log` may be called from any thread at once.
public final class Telemetry: @unchecked Sendable {
  /// The queue within the container that holds events (`vault telemetry` uses the same name).
  public static let queueName = "telemetry"

  /// The queue container events are sealed into until they are delivered.
  public let container: QueueContainer
  /// Batch size, loop period, claim size and request budget.
  public let configuration: TelemetryConfiguration
  let tokens: any TokenProvider
  let sender: any BatchSender
  let clock: @Sendable () -> Date
  private let lock = NSLock()
  private var session: String
  private let flushLock = NSLock()
  let logger: DeliveryLogger
  private let hub = DeliveryEventHub()
  private let drops = DropWatch()
  private var loop: DeliveryLoop?
  private var onPass: (@Sendable (FlushReport) -> Void)?
  /// Counts `stop()` calls; `passStops` is the count when the pass under way began (passes run one
  /// at a time): a stop since ends that pass before its next batch.
  private var stops = 0
  /// The events whose outcome the pass under way could not store (see `settle`); used under
  /// `flushLock`, which a pass holds throughout.
  private var unstoredOutcomes = Set<UUID>()
  private var passStops = 0

  /// Makes the telemetry SDK over `container`; nothing is sent until `flush` or `start`.
  ///
  /// - Parameters:
  ///   - container: the queue container events are sealed into until they are delivered (its
  ///     `QueueConfiguration` holds the retry policy).
  ///   - configuration: batch limits, the delivery interval, the claim size and the request budget.
  ///   - tokens: where the bearer token comes from (read on each pass, refreshed once on a 401).
  ///   - sender: what posts a batch (`HTTPBatchSender` to a collector; a test's own twin).
  ///   - sessionID: the session stamped on every event until `startSession` starts another.
  ///   - clock: the wall clock events are stamped with (tests replace it).
  ///   - logger: where the loop logs ids, counts and error kinds (never payloads or the token);
  ///     silent by default.
  public init(
    container: QueueContainer, configuration: TelemetryConfiguration = TelemetryConfiguration(),
    tokens: any TokenProvider, sender: any BatchSender, sessionID: String = UUID().uuidString.lowercased(),
    clock: @escaping @Sendable () -> Date = Date.init, logger: DeliveryLogger = .disabled
  ) {
    self.container = container
    self.configuration = configuration
    self.tokens = tokens
    self.sender = sender
    self.clock = clock
    self.logger = logger
    session = sessionID
  }

  /// The current session id, stamped on every event.
  public var sessionID: String { lock.withLock { session } }

  /// Starts a new session: events logged from now on carry its id.
  ///
  /// - Parameter id: the new session's id; a random lowercase UUID by default.
  /// - Returns: the id.
  @discardableResult
  public func startSession(_ id: String = UUID().uuidString.lowercased()) -> String {
    lock.withLock { session = id }
    return id
  }

  /// Whether `type` is an event type `log` takes: 1–128 characters, none a control character
  /// (NUL or a newline has no place in a type and could split a collector's log lines). Package
  /// access: `vault telemetry log` checks it before anything else, as a usage error.
  package static func isValidType(_ type: String) -> Bool {
    // Printable ASCII, as types almost always are, is one character per byte and never a control
    // character: that answer needs neither grapheme breaking nor Unicode properties, which cost
    // a `log` about 5,000 instructions (callgrind).
    let utf8 = type.utf8
    if utf8.count <= 128, utf8.allSatisfy({ (0x20...0x7e).contains($0) }) { return !utf8.isEmpty }
    return (1...128).contains(type.count)
      && !type.unicodeScalars.contains(where: { $0.properties.generalCategory == .control })
  }

  /// Seals the event and commits it to disk; returns its id. Blocks only for the durable enqueue
  /// (never for the network). Past the container's byte cap the oldest events are deleted and
  /// counted, never this one and never a record of another queue (an app's messages in the same
  /// container), whatever the container's `capVictims`: with no older event to drop (or a
  /// `capVictims` of `.only` queues without telemetry), the log throws `QueueError.capExceeded`. An event too large for a batch even alone (more than the
  /// batch limit, 256 KiB, once compressed) is stored but moved to review as `too-large` by the
  /// first flush. May be called from any thread.
  ///
  /// - Parameters:
  ///   - type: the event's type, 1–128 characters, none a control character (`"screen_view"`).
  ///   - payload: the event's JSON object; empty by default.
  ///   - id: the event's id; a random one when nil. An id already queued is not stored again,
  ///     and ids are one set for the whole container: an id an outbox message in the same
  ///     container has is taken too, and the event is not stored (the id is returned all the same).
  /// - Returns: the event's id.
  /// - Throws: `TelemetryError.invalidType`; `.payloadTooDeep` when the payload nests deeper than
  ///   `JSONLimits`' default depth (64, the payload object being level 1), as parsed JSON may not;
  ///   `CryptoError.randomUnavailable` when no random id can be drawn; the errors of
  ///   `QueueContainer.enqueue` (`QueueError` such as `.capExceeded` or
  ///   `.diskFull`, `KeyStoreError` when the key cannot be read right now): the event was then
  ///   not stored.
  @discardableResult
  public func log(type: String, payload: [String: JSONValue] = [:], id: UUID? = nil) throws -> UUID {
    // Random ids come from getrandom: Foundation's UUID() repeats itself without /dev/urandom.
    let id = try id ?? SecureRandom.uuid()
    guard Self.isValidType(type) else { throw TelemetryError.invalidType }
    // Writing the event recurses once per level: a payload built deep enough overflowed the stack
    // (an outside review: 10,000 levels killed the process), where parsed JSON stops at 64.
    let limit = JSONLimits().maxDepth
    guard !JSONValue.nestsDeeper(payload, than: limit) else { throw TelemetryError.payloadTooDeep(limit: limit) }
    let event = TelemetryEvent(id: id, date: clock(), type: type, payload: payload, sessionID: sessionID)
    // The cap makes room for an event only from other events: telemetry never pushes out the
    // records of another queue in the same container (an app's messages), whatever its
    // configuration. With no event to drop, the log throws `.capExceeded`, storing nothing.
    try container.enqueue(try event.encoded(), queue: Self.queueName, id: id, droppingOnly: [Self.queueName])
    return id
  }

  /// Logs an event whose payload is an app's own `Encodable` value (encoded to a JSON object).
  /// - Parameters:
  ///   - type: the event's type, 1–128 characters (`"note_added"`).
  ///   - payload: a value that encodes to a JSON object (a struct with stored properties).
  ///   - id: the event's id; a random one when nil.
  /// - Returns: the event's id.
  /// - Throws: `TelemetryError.invalidPayload` when it does not encode to an object, the encoder's
  ///   or parser's error when it does not encode at all, and what `log(type:payload:id:)` throws.
  @discardableResult
  public func log(type: String, encoding payload: some Encodable, id: UUID? = nil) throws -> UUID {
    guard case .object(let fields) = try JSONValue(encoding: payload) else { throw TelemetryError.invalidPayload }
    return try log(type: type, payload: fields, id: id)
  }

  // MARK: - Background delivery

  /// A stream of what delivery does from now on (loop passes and `flush` alike), with the ids of
  /// the events concerned.
  ///
  /// Each stream buffers at most `limit` events its reader has not taken yet and drops the oldest
  /// beyond that (`AsyncStream`'s `bufferingNewest`), so a stream that is never read costs bounded
  /// memory; `droppedEventCount` counts what was dropped. Streams end when `stop()` is called, or
  /// when the object is released without it.
  ///
  /// - Parameter limit: the most unread events kept (at least 1).
  /// - Returns: a stream of one event per batch settled (with every event id of the batch) and a
  ///   `.loopError` per failed pass or step.
  public func events(bufferingNewest limit: Int = 256) -> AsyncStream<DeliveryEvent> {
    hub.stream(bufferingNewest: limit)
  }

  /// Events dropped so far because a stream's buffer was full.
  public var droppedEventCount: Int { hub.droppedCount }

  /// Starts the flush loop: a pass now, then every `configuration.interval` seconds (stretched by
  /// `policy` in power-saver or on a low battery, re-read before each wait), and at once whenever a
  /// network change may let delivery through (`network`, by default the rtnetlink monitor
  /// `RouteChangeSource` when `watchConnectivity`), which also restarts the backoff. `onPass` sees
  /// each pass's counts; a pass that fails is published as `.loopError` and logged. The loop is
  /// `DeliveryLoop`, the outbox's too. Calling it again while running starts nothing, but
  /// replaces `onPass`.
  ///
  /// - Parameters:
  ///   - power: where the power state is read before each wait (sysfs by default).
  ///   - policy: how power stretches the period (four times in power-saver or on a battery at 20 %
  ///     or less, by default).
  ///   - watchConnectivity: when `network` is nil, watch rtnetlink (`RouteChangeSource()`); false
  ///     for no network watch.
  ///   - network: where network changes come from; overrides `watchConnectivity`.
  ///   - onPass: called on the loop's thread with each successful pass's counts.
  /// - Throws: what starting the network watch throws (`TelemetryError.netlink`); the loop is
  ///   then not started.
  public func start(
    power: PowerMonitor = PowerMonitor(), policy: PowerPolicy = PowerPolicy(), watchConnectivity: Bool = true,
    network: (any NetworkChangeSource)? = nil, onPass: (@Sendable (FlushReport) -> Void)? = nil
  ) throws {
    let interval = configuration.interval
    let loop = lock.withLock { () -> DeliveryLoop? in
      self.onPass = onPass
      guard self.loop == nil else { return nil }
      let loop = DeliveryLoop(
        name: "vault.telemetry.delivery", period: { policy.interval(base: interval, state: power.read()) }
      ) { [weak self] reset in
        guard let self else { return .finish }
        self.runPass(resetBackoff: reset)
        return .wait(dueIn: nil)
      }
      self.loop = loop
      return loop
    }
    guard let loop else { return }
    do {
      try loop.start(network: network ?? (watchConnectivity ? RouteChangeSource() : nil))
    } catch {
      lock.withLock { self.loop = nil }
      throw error
    }
  }

  /// Asks for a pass now (never delayed by the power policy). With `resetBackoff`, events that
  /// waited for the network become due at once, as when the network changes (events a server
  /// answered keep their due time; see `QueueContainer.makeDue`). Does nothing when the loop is not
  /// running.
  ///
  /// - Parameter resetBackoff: also make due now the events whose last failure was the network's.
  public func trigger(resetBackoff: Bool = false) {
    lock.withLock { loop }?.trigger(resetBackoff: resetBackoff)
  }

  /// Stops the loop: no pass starts after it returns, and every event stream ends. A pass under
  /// way (the loop's, or a `flush` call's) ends before its next batch, giving back what it claimed
  /// and did not settle. `stop` waits for the loop's pass, so at most for the batch being sent
  /// (its request's deadline); a `flush` call on another thread is not waited for (it returns
  /// when its batch in flight is answered). Passes begun after it run as usual. Called from `onPass` (the loop's own thread),
  /// it returns at once.
  public func stop() {
    let loop = lock.withLock { () -> DeliveryLoop? in
      stops += 1
      defer { self.loop = nil }
      return self.loop
    }
    loop?.stop()
    hub.finishAll()
  }

  private func runPass(resetBackoff: Bool) {
    do {
      if resetBackoff { try container.makeDue(queue: Self.queueName) }
      let report = try flush()
      lock.withLock { onPass }?(report)
    } catch {
      let code = errorCode(of: error)
      logger.error("telemetry pass failed", metadata: ["error_code": code])
      hub.publish(.loopError(errorCode: code))
    }
  }

  /// One delivery pass: every due event is attempted at most once. Leaves retries scheduled.
  ///
  /// The leases of claimed events not yet sent are renewed as the pass goes (see `Claim`). Once
  /// `HTTPCancellation.cancelAll()` or `stop()` is called the pass sends no further batch, gives
  /// back every event it claimed and did not settle (those of a batch cut short too), and returns. Passes run
  /// one at a time; a second caller waits for the first.
  ///
  /// The token is read first; 401, 413 and the other answers are handled as the README's
  /// "Telemetry" section says. A batch refused again after a token refresh, or with 403, waits
  /// with backoff and ends the pass; so does a second batch in a row the server asked to wait
  /// (429, 503, after `Retry-After`) or did not answer; a 404 (a wrong endpoint) gives the batch back, unparked and
  /// due at once, and ends it; a spent request budget ends it too. Either way the rest of the claim
  /// goes back.
  ///
  /// - Returns: what the pass did, and how many events are still pending.
  /// - Throws: what the token provider throws (before anything is claimed, or on refresh after a
  ///   401); `QueueError` when events cannot be claimed or read, and `KeyStoreError` (or the
  ///   vault's other errors) when a key cannot be read right now; `GzipError` when packing fails.
  ///   The claim is given back first. A failure to record a batch's outcome (its ack, retry or
  ///   review) does not throw: it is logged and published as `.loopError`, the pass goes on, and
  ///   the batch's events are given back to pending at the end and sent again by a later pass,
  ///   never by this one (a batch the collector took is then sent again: delivery is at least
  ///   once).
  public func flush() throws -> FlushReport {
    flushLock.lock()
    defer { flushLock.unlock() }
    lock.withLock { passStops = stops }
    var report = FlushReport()
    // The token first: if the provider fails, nothing has been claimed and nothing is stranded.
    var token = try tokens.token(refresh: false)
    var refreshed = false
    var budget = configuration.requestBudget
    // Batches in a row the server asked to wait for (429, 503) or did not answer: two end the pass.
    var refusals = 0
    let start = container.now
    unstoredOutcomes = []
    // Claims holding events whose outcome could not be stored: kept until the pass ends, so the
    // next claim reaches the other due events instead of those again (given back first, they were
    // the oldest due and ended the pass before anything else was sent).
    var heldBack: [Claim] = []
    defer { giveBack(heldBack) }
    pass: while !passShouldEnd {
      let claimed = try container.claim(
        queue: Self.queueName, maxCount: max(configuration.claimCount, 1), maxBytes: configuration.claimBytes,
        lease: 300, dueBy: start)
      if claimed.isEmpty { break }
      let claim = Claim(container: container, records: claimed, lease: 300)
      // An event whose outcome this pass could not store was given back, due at once: it is not
      // sent again in this pass, and once only such events are left the pass ends. Before, the
      // pass claimed and sent the same batch again at once, without end, for as long as the
      // outcome could not be stored (a flush ran for ten minutes against a collector answering
      // 500, 190,000 requests, on a container missing a column).
      let fresh = claimed.filter { !unstoredOutcomes.contains($0.id) }
      if fresh.isEmpty {
        try claim.releaseUnsettled()
        break pass
      }
      do {
        try deliverAll(
          fresh.map { (id: $0.id, json: [UInt8]($0.payload)) }, claim: claim, token: &token, report: &report,
          refreshed: &refreshed, budget: &budget, refusals: &refusals)
        if fresh.contains(where: { unstoredOutcomes.contains($0.id) }) {
          heldBack.append(claim)
        } else {
          try claim.releaseUnsettled()
        }
      } catch let spent as RequestBudgetSpent {
        // 413 after 413: what the server refused waits with backoff, the rest of the claim goes
        // back untouched, and the pass ends rather than storm the server.
        settle(.retry(kind: "http-413", after: nil), spent.refused, claim, &report)
        try claim.releaseUnsettled()
        break pass
      } catch is AuthenticationRefused {
        // The server refused a fresh token: stop here and give back what was not sent, rather
        // than have the whole backlog refused one batch at a time. (Release touches only records this
        // claim still holds: settled ones are acked, rescheduled, parked or in review already.)
        try claim.releaseUnsettled()
        break pass
      } catch is EndpointUnavailable {
        try claim.releaseUnsettled()
        break pass
      } catch is EndpointNotFound {
        // A 404 is a wrong endpoint, not a bad event: every event of the claim (the refused batch
        // too) goes back to pending, due at once, its attempt not counted, so a flush to the right
        // endpoint sends them; the rest of the backlog is not sent to the same wrong place.
        try claim.releaseUnsettled()
        break pass
      } catch is Stopped {
        try claim.releaseUnsettled()
        break pass
      } catch {
        // Anything else (the token provider failing on refresh, storage): give back the claim.
        _ = try? claim.releaseUnsettled()
        throw error
      }
    }
    giveBack(heldBack)
    heldBack = []
    report.pending = try container.count(queue: Self.queueName, state: .pending)
    drops.logDrops(of: container, to: logger)
    logger.debug(
      "telemetry pass done",
      metadata: [
        "delivered": "\(report.delivered)", "retried": "\(report.retried)", "parked": "\(report.parked)",
        "rejected": "\(report.rejected)", "pending": "\(report.pending)", "batches": "\(report.batches)",
      ])
    return report
  }

  /// Thrown inside a pass when a refreshed token is refused too; the pass then ends and gives back
  /// the claimed events that were not settled.
  private struct AuthenticationRefused: Error {}

  /// Thrown inside a pass when the server answered 404: the endpoint is wrong, so the pass ends and
  /// gives back every event it claimed and did not settle, the refused batch's too.
  private struct EndpointNotFound: Error {}

  /// Thrown inside a pass once a second batch in a row is settled after the server asked to wait
  /// (429, 503) or did not answer: that is the endpoint's state, not a batch's, so the pass ends
  /// and gives back the rest of what it claimed, untouched (an outside review: the outbox sent
  /// every message of a backlog against a Retry-After, and waited a timeout per message on a hung
  /// server). One alone may be the batch's: ending on it kept that batch ahead of all the others.
  private struct EndpointUnavailable: Error {}

  /// Whether the pass under way ends before its next batch: the process is stopping deliveries
  /// (`HTTPCancellation`) or `stop()` was called since the pass began.
  private var passShouldEnd: Bool {
    HTTPCancellation.isCancelled || lock.withLock { stops != passStops }
  }

  /// Thrown inside a pass once `HTTPCancellation.cancelAll()` or `stop()` was called: the pass
  /// gives back what it did not settle and ends.
  private struct Stopped: Error {}

  /// Thrown inside a pass when the request budget is spent while splitting: `refused` are the
  /// unsettled events of batches the server refused with 413.
  private struct RequestBudgetSpent: Error {
    var refused: [UUID]
  }

  /// Packs `events` into batches and delivers them in order. `splitting`: these are part of a
  /// batch refused with 413, and each send spends one request of `budget`.
  ///
  /// Every event is settled through `claim`, fenced by its lease: a late answer (the pass was
  /// suspended, or the wall clock stepped, past the lease and another deliverer took the events)
  /// must not delete or reschedule what that deliverer holds, nor a new event logged since under
  /// the same id.
  private func deliverAll(
    _ events: [(id: UUID, json: [UInt8])], splitting: Bool = false, claim: Claim, token: inout String,
    report: inout FlushReport, refreshed: inout Bool, budget: inout Int, refusals: inout Int
  ) throws {
    var remaining = events
    while !remaining.isEmpty {
      if passShouldEnd { throw Stopped() }
      // Renewed before each batch; an event this pass no longer holds (it was suspended past the
      // lease and another deliverer took it) is not sent.
      let held = try claim.keep()
      remaining.removeAll { !held.contains($0.id) }
      if remaining.isEmpty { return }
      let packed = try BatchPacker.pack(remaining, limit: configuration.effectiveBatchLimit)
      if !packed.oversized.isEmpty { settle(.reject(kind: "too-large"), packed.oversized, claim, &report) }
      guard let batch = packed.batch else { return }
      if splitting {
        guard budget > 0 else { throw RequestBudgetSpent(refused: batch.ids + packed.rest.map(\.id)) }
        budget -= 1
      }
      let byID = Dictionary(remaining.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
      try deliver(
        batch, events: batch.ids.compactMap { byID[$0] }, claim: claim, token: &token, report: &report,
        refreshed: &refreshed, budget: &budget, refusals: &refusals)
      remaining = packed.rest
    }
  }

  /// Sends one batch and settles its events. 401: the token is refreshed once per pass and the
  /// batch retried; a second 401, or a 403, makes the batch wait with backoff and ends the pass. 413: more than one event, split in
  /// halves (each half packed again, each send spending the pass's request budget); one event
  /// whose batch is at most a quarter of the batch limit, the server's fault: retried with
  /// backoff; one larger event, too large for this server: review. Another 4xx for more than one
  /// event: `isolateRefused`. Everything else by
  /// `HTTPStatusPolicy`, with one due time for the whole batch so that a retry sends those events
  /// together (a retry may pack more events with them, and a killed pass's events come back
  /// regrouped, so the `Idempotency-Key` is not the same on every retry: servers deduplicate by
  /// event id, as the README says).
  private func deliver(
    _ batch: TelemetryBatch, events: [(id: UUID, json: [UInt8])], claim: Claim, token: inout String,
    report: inout FlushReport, refreshed: inout Bool, budget: inout Int, refusals: inout Int
  ) throws {
    let result = try send(batch, token: &token, report: &report, refreshed: &refreshed)
    if case .status(let status, _) = result, events.count > 1, Self.refusesContent(status) {
      refusals = 0  // an answer about what the batch holds, not about the endpoint
      var search = Search()
      try isolateRefused(
        events, kind: "http-\(status)", search: &search, claim: claim, token: &token, report: &report,
        refreshed: &refreshed, budget: &budget, refusals: &refusals)
      return
    }
    try settleAnswer(
      result, batch, events: events, claim: claim, token: &token, report: &report, refreshed: &refreshed,
      budget: &budget, refusals: &refusals)
  }

  /// Sends `batch` once, and once more with a fresh token after a 401 (once per pass).
  private func send(_ batch: TelemetryBatch, token: inout String, report: inout FlushReport, refreshed: inout Bool)
    throws -> SendResult
  {
    report.batches += 1
    var result = sender.send(batch, token: token)
    if case .status(401, _) = result, !refreshed {
      refreshed = true
      report.tokenRefreshes += 1
      token = try tokens.token(refresh: true)
      result = sender.send(batch, token: token)
    }
    return result
  }

  /// Whether `status` refuses a batch for what it holds, so that one event may be the cause: 400
  /// and 422. Other 4xx speak of the endpoint or the request (a method, a proxy's credentials, a
  /// content type, a collector gone), which every batch would get alike.
  static func refusesContent(_ status: Int) -> Bool {
    status == 400 || status == 422
  }

  /// One batch's search for the events a collector refuses (`isolateRefused`).
  private struct Search {
    /// Requests sent for it so far (at most `limit`).
    var requests = 0
    /// Whether the collector took some part of the batch: then it does not refuse everything,
    /// and two refused halves are both searched.
    var taken = false
    /// The most requests one batch's search sends; past it, what is still refused goes to review.
    static let limit = 64
  }

  /// Finds the events of a batch the collector refused for what it holds (`refusesContent`),
  /// rather than send them all to review with the one that caused it (an outside review: one bad
  /// event sent its 2,000 neighbours to review, never to be retried by themselves). Each half is
  /// sent whole (re-sent once with a fresh token after a 401, as any batch); a refused half is
  /// halved again, down to single events, which go to review; a half answered otherwise is settled
  /// by that answer. When both halves are refused and the collector has taken nothing of the
  /// batch yet, it may refuse everything: the first half is searched one level down, and only if
  /// the collector takes something there are both halves searched on; otherwise both go to review,
  /// as the whole batch did before (a collector refusing everything gets five requests a batch
  /// instead of one). A search sends at most `Search.limit` requests (64; one bad event among
  /// 2,000 takes 23, and k of them about 2k·log₂(2,000/k)); past it, what is still refused goes to
  /// review. It does not spend the pass's request budget: a search cut short by it began again
  /// from the whole batch each pass and never reached the event. With a `requestBudget` of 0, the
  /// batch goes to review whole, as before. Cut short by the pass's end (a stop, a 403, a second
  /// 429), the events not settled go back, and the next pass searches again from their batch.
  private func isolateRefused(
    _ events: [(id: UUID, json: [UInt8])], kind: String, search: inout Search, exploring: Bool = true,
    claim: Claim, token: inout String, report: inout FlushReport, refreshed: inout Bool, budget: inout Int,
    refusals: inout Int
  ) throws {
    // One event, no request to spend on halving (`requestBudget` 0), or none left: to review.
    guard events.count > 1, configuration.requestBudget > 0, search.requests < Search.limit else {
      return settle(.reject(kind: kind), events.map(\.id), claim, &report)
    }
    let parts = Self.halves(events)
    var refused: [(events: [(id: UUID, json: [UInt8])], kind: String)] = []
    for whole in parts {
      if passShouldEnd { throw Stopped() }
      // An event this pass no longer holds is not sent (as in `deliverAll`).
      let held = try claim.keep()
      let part = whole.filter { held.contains($0.id) }
      if part.isEmpty { continue }
      let packed = try BatchPacker.pack(part, limit: configuration.effectiveBatchLimit)
      // Half of a batch that was sent packs alone; were it not to, or with no request left, it is
      // judged with the batch.
      guard let batch = packed.batch, packed.rest.isEmpty, packed.oversized.isEmpty, search.requests < Search.limit
      else {
        refused.append((part, kind))
        continue
      }
      search.requests += 1
      let result = try send(batch, token: &token, report: &report, refreshed: &refreshed)
      if case .status(let status, _) = result, Self.refusesContent(status) {
        refused.append((part, "http-\(status)"))
        continue
      }
      if case .status(200..<300, _) = result { search.taken = true }
      try settleAnswer(
        result, batch, events: part, claim: claim, token: &token, report: &report, refreshed: &refreshed,
        budget: &budget, refusals: &refusals)
    }
    for (index, part) in refused.enumerated() {
      // Both refused, nothing taken: the first is searched only when exploring (once, at the
      // top), the second only if that found the collector taking something.
      if refused.count == 2, !search.taken, index == 1 || !exploring {
        settle(.reject(kind: part.kind), part.events.map(\.id), claim, &report)
        continue
      }
      try isolateRefused(
        part.events, kind: part.kind, search: &search, exploring: refused.count == 2 ? false : exploring,
        claim: claim, token: &token, report: &report, refreshed: &refreshed, budget: &budget, refusals: &refusals)
    }
  }

  /// The two halves a refused batch's events are sent in (after a 413, or while searching).
  private static func halves(_ events: [(id: UUID, json: [UInt8])]) -> [[(id: UUID, json: [UInt8])]] {
    let half = events.count / 2
    return [Array(events[..<half]), Array(events[half...])]
  }

  /// Settles the events of `batch` by the answer to it (`deliver`'s rules).
  private func settleAnswer(
    _ result: SendResult, _ batch: TelemetryBatch, events: [(id: UUID, json: [UInt8])], claim: Claim,
    token: inout String, report: inout FlushReport, refreshed: inout Bool, budget: inout Int, refusals: inout Int
  ) throws {
    // 401 after a refresh, or 403: the credentials are refused. The batch waits with backoff,
    // counting toward parking like any refusal, and the pass ends, so the rest of the backlog is
    // not sent to the same refusal; once the token is fixed, everything goes out by itself.
    // (Parking the batch at once made every pass of a revoked token park another batch, and each
    // one then waited for a manual resend while exposed to the cap and the age limit.)
    if case .status(let status, let retryAfter) = result, status == 401 || status == 403 {
      report.authFailures += batch.ids.count
      report.errorKind = "http-\(status)"
      settle(HTTPStatusPolicy.result(status: status, retryAfter: retryAfter, now: clock()), batch.ids, claim, &report)
      throw AuthenticationRefused()
    }
    switch result {
    case .status(404, _):
      // Not `HTTPStatusPolicy`'s reject: every batch to a wrong endpoint would go to review.
      report.notFound += batch.ids.count
      report.errorKind = "http-404"
      logger.warning("endpoint not found (404); events kept pending", metadata: ["events": "\(batch.ids.count)"])
      throw EndpointNotFound()
    case .status(413, let retryAfter) where events.count <= 1:
      // A small event cannot be "too large": a server refusing it has a fault (a 413 storm from
      // a misconfigured proxy moved thousands of ~200-byte events to review for good).
      if batch.body.count * 4 <= configuration.effectiveBatchLimit {
        settle(
          .retry(kind: "http-413", after: HTTPStatusPolicy.parseRetryAfter(retryAfter, now: clock())), batch.ids,
          claim, &report)
      } else {
        settle(.reject(kind: "http-413"), batch.ids, claim, &report)
      }
    case .status(413, _):
      let parts = Self.halves(events)
      for (index, part) in parts.enumerated() {
        do {
          try deliverAll(
            part, splitting: true, claim: claim, token: &token, report: &report, refreshed: &refreshed,
            budget: &budget, refusals: &refusals)
        } catch var spent as RequestBudgetSpent {
          spent.refused += parts[(index + 1)...].flatMap { $0.map(\.id) }
          throw spent
        }
      }
    case .status(let status, let retryAfter):
      settle(
        HTTPStatusPolicy.result(status: status, retryAfter: retryAfter, now: clock()), batch.ids, claim, &report)
      if status == 429 || status == 503 {
        refusals += 1
        if refusals >= 2 { throw EndpointUnavailable() }
      } else {
        refusals = 0
      }
    case .transport(let kind):
      settle(.unreachable(kind: kind), batch.ids, claim, &report)
      if !(kind == "cancelled" && HTTPCancellation.isCancelled) {
        refusals += 1
        if refusals >= 2 { throw EndpointUnavailable() }
      }
    }
  }

  /// Settles `ids` by `result` through `claim`, counts them in `report` and publishes what became
  /// of them: the one place a pass acks, reschedules or moves events to review. A failure to record
  /// an outcome does not end the pass: it is logged and published, and the events go back to
  /// pending with the rest of the claim.
  private func settle(_ result: DeliveryResult, _ ids: [UUID], _ claim: Claim, _ report: inout FlushReport) {
    do {
      switch result.withNamedKind {
      case .delivered:
        // Counted and told only for what this pass deleted: a late 200 (the lease passed to
        // another deliverer, or the app logged a new event under the same id since) said
        // "delivered" of events it never sent.
        let acked = try claim.ack(ids)
        report.delivered += acked.count
        if !acked.isEmpty { published(.delivered(ids: ids.filter(acked.contains))) }
      case .retry(let kind, let after):
        let outcomes = try claim.fail(ids, errorKind: kind, retryAfter: after, sharedDelay: true)
        let parked = outcomes.values.filter { $0 == .parked }.count
        report.parked += parked
        report.retried += outcomes.count - parked
        if outcomes.count > parked { (report.retryKind, report.retryUnreachable) = (kind, false) }
        published(outcomes, ids: ids, kind: kind)
      case .unreachable(let kind) where kind == "cancelled" && HTTPCancellation.isCancelled:
        // Cut short by a stop: the pass gives these back with the rest of its claim.
        break
      case .unreachable(let kind):
        let outcomes = try claim.fail(ids, errorKind: kind, serverAnswered: false, sharedDelay: true)
        report.retried += outcomes.count
        if !outcomes.isEmpty { (report.retryKind, report.retryUnreachable) = (kind, true) }
        published(outcomes, ids: ids, kind: kind)
      case .reject(let kind):
        let moved = try claim.reject(ids, errorKind: kind)
        report.rejected += moved.count
        if !moved.isEmpty { published(.rejected(ids: ids.filter(moved.contains), errorKind: kind)) }
      }
    } catch {
      // The records stay in this pass's claim and go back to pending at its end (a batch the
      // collector took is sent again); nothing is lost, and the app hears of it.
      unstoredOutcomes.formUnion(ids)
      let code = errorCode(of: error)
      logger.error("settling a batch failed", metadata: ["error_code": code, "events": "\(ids.count)"])
      hub.publish(.loopError(errorCode: code))
    }
  }

  /// Gives back what a pass held because the outcome could not be stored: those events go back to
  /// pending, due at once, for a later pass. If that cannot be written either, they come back when
  /// the pass's lease on them ends (300 seconds); nothing is lost.
  private func giveBack(_ claims: [Claim]) {
    for claim in claims {
      do {
        try claim.releaseUnsettled()
      } catch {
        logger.error("giving back a batch failed", metadata: ["error_code": errorCode(of: error)])
      }
    }
  }

  /// Publishes and logs what happened to a batch's events (ids, kinds and times only).
  private func published(_ event: DeliveryEvent) {
    switch event {
    case .delivered(let ids): logger.debug("batch delivered", metadata: ["events": "\(ids.count)"])
    case .retried(let ids, let kind, let next):
      logger.notice(
        "batch retry scheduled",
        metadata: ["events": "\(ids.count)", "error_kind": kind, "next_attempt": next.formatted(.iso8601)])
    case .parked(let ids, let kind):
      logger.warning("events parked", metadata: ["events": "\(ids.count)", "error_kind": kind])
    case .rejected(let ids, let kind):
      logger.warning("events rejected, kept for review", metadata: ["events": "\(ids.count)", "error_kind": kind])
    case .loopError(let code): logger.error("telemetry step failed", metadata: ["error_code": code])
    }
    hub.publish(event)
  }

  /// Publishes the outcomes of `fail` for `ids`: one `.retried` per due time, one `.parked`.
  private func published(_ outcomes: [UUID: FailOutcome], ids: [UUID], kind: String) {
    var due: [Date: [UUID]] = [:]
    var parked: [UUID] = []
    for id in ids {
      switch outcomes[id] {
      case .retryAt(let date): due[date, default: []].append(id)
      case .parked: parked.append(id)
      case nil: continue
      }
    }
    for (date, group) in due.sorted(by: { $0.key < $1.key }) {
      published(.retried(ids: group, errorKind: kind, nextAttempt: date))
    }
    if !parked.isEmpty { published(.parked(ids: parked, errorKind: kind)) }
  }
}
