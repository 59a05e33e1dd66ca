import Foundation
import Vault
import VaultCrypto
import VaultKeys

/// Where a record is in its life. Stored as text in the container's `state` column.
public enum RecordState: String, Codable, Sendable, CaseIterable {
  /// Waiting for delivery (possibly not before `next_attempt_at`).
  case pending
  /// Claimed by a deliverer under a lease; returns to pending if the lease runs out.
  case inFlight = "in_flight"
  /// Refused by the server `attemptCeiling` times over at least `parkAfter` (network failures never
  /// count), or parked at once by `park`; kept, listable, resendable, never retried automatically.
  case parked
  /// Refused by the server, or undecryptable; kept for a person to review, never retried automatically.
  case review
}

/// Why records left the delivery flow; persisted per container and shown by `queue stats`.
public enum DropReason: String, Codable, Sendable, CaseIterable {
  /// Deleted, oldest first, to keep the container under its byte cap.
  case cap
  /// Deleted for being older than the maximum age.
  case age
  /// Moved to review because the server refused it.
  case rejected
  /// Moved to parked after the attempt ceiling.
  case parked
  /// Moved to review because its envelope did not open (tampered, moved, or sealed under a key this
  /// vault no longer has), or deleted for that reason by a rotation after a compromise (when asked
  /// to); a key that cannot be read right now (a locked keyring) never counts here. A record moved
  /// to review and later deleted counts twice.
  case undecryptable
}

/// Exponential backoff with full jitter: the delay before attempt n+1 is uniform in
/// [0, min(cap, base × 2ⁿ⁻¹)] (n = attempts so far, from 1).
public struct BackoffPolicy: Sendable, Equatable {
  /// The ceiling after the first failure, in seconds; it doubles with each further failure.
  public var base: TimeInterval
  /// The longest delay, in seconds, whatever the number of failures.
  public var cap: TimeInterval

  /// Makes a policy whose ceiling starts at `base` and doubles up to `cap`.
  ///
  /// - Parameters:
  ///   - base: the ceiling after the first failure, in seconds (1 by default).
  ///   - cap: the longest delay, in seconds (300 by default).
  public init(base: TimeInterval = 1, cap: TimeInterval = 300) {
    self.base = base
    self.cap = cap
  }

  /// The ceiling of the delay after `attempts` failures (before jitter).
  ///
  /// - Parameter attempts: failures so far; 1 or less gives `base`.
  /// - Returns: `min(cap, base × 2^(attempts − 1))` seconds (the exponent stops growing at 30),
  ///   never less than 0: a negative or NaN `base` or `cap` gives 0 (a container takes a NaN one
  ///   as its default first).
  public func ceiling(afterAttempts attempts: Int) -> TimeInterval {
    // Clamped before subtracting: `Int.min - 1` would trap (an outside review).
    let exponent = Double(min(max(attempts, 1), 31) - 1)
    // `min` keeps a NaN only as its first argument: checked here, not left to it.
    guard !base.isNaN, !cap.isNaN else { return 0 }
    // A negative delay was returned (an outside review).
    return max(min(cap, base * pow(2, exponent)), 0)
  }

  /// The delay after `attempts` failures: the ceiling scaled by `unit` (full jitter).
  ///
  /// - Parameters:
  ///   - attempts: failures so far.
  ///   - unit: a uniform random number in [0, 1) (clamped to [0, 1]).
  /// - Returns: a delay in seconds between 0 and `ceiling(afterAttempts:)`.
  public func delay(afterAttempts attempts: Int, unit: Double) -> TimeInterval {
    ceiling(afterAttempts: attempts) * min(max(unit, 0), 1)
  }
}

/// How a queue container behaves.
public struct QueueConfiguration: Sendable {
  /// Which records the byte cap may drop to make room.
  public enum CapVictims: Sendable, Equatable {
    /// The oldest records of any queue.
    case anyQueue
    /// Only records of these queues (say, telemetry), so that they can never push out records of
    /// the others (say, messages a user wrote). An enqueue that cannot make room from them fails
    /// with `QueueError.capExceeded`, storing nothing.
    case only(Set<String>)
  }

  /// Envelope bytes the container may hold; enqueue drops the oldest records `capVictims` allows
  /// (none in flight) past it.
  public var byteCap: Int
  /// Which records the cap may drop (default: the oldest of any queue).
  public var capVictims: CapVictims
  /// Records older than this are dropped, by the next claim (nil: no limit). Age is time that really passed since
  /// the enqueue, measured by the container's age clock: within a boot it advances with the
  /// monotonic clock only, so a wall clock that steps (fast for one pass, or slow and then set
  /// right by NTP) drops nothing; across a reboot it advances by the wall clock's advance (never
  /// backwards).
  public var maximumAge: TimeInterval?
  /// Server refusals (`fail` with `serverAnswered`) before a record is parked; network failures
  /// never count, so a device offline for days parks nothing.
  public var attemptCeiling: Int
  /// The least time, in seconds, from a record's first server refusal to its parking: a record is
  /// parked once refused `attemptCeiling` times **and** for this long, so a server that answers
  /// 5xx or 503 through an outage of minutes or hours parks nothing (backoff spaces the retries).
  public var parkAfter: TimeInterval
  /// The delay before a retry; `backoff.cap` is the longest backoff.
  public var backoff: BackoffPolicy
  /// The longest `Retry-After` honoured.
  public var maximumRetryAfter: TimeInterval
  /// The longest lease `claim` grants (longer requests are shortened to it). Deliverers renew
  /// their leases while they work, so this bounds only how long a dead deliverer's records wait.
  public var maximumLease: TimeInterval
  /// Records re-sealed per transaction during rotation (a transaction also stops at 4 MiB of
  /// envelopes).
  public var resealBatch: Int

  /// Makes a configuration; the defaults are what `vault` itself uses. Times are in seconds; a
  /// container takes a time that is not a number (NaN) as its default (no limit for
  /// `maximumAge`), a `maximumLease` of 0 or less as its default too, another negative time as
  /// 0 (except `maximumAge`, refused), and one beyond about 31,700 years (infinity) as that.
  ///
  /// Processes sharing a container should share these settings: due times and leases are judged
  /// by each reader's `maximumDelay` and `maximumLease`.
  ///
  /// - Parameters:
  ///   - byteCap: envelope bytes the container may hold (20 MB by default); less than 89 (the
  ///     envelope of an empty record) is refused when a container is opened for writing
  ///     (`QueueError.invalidConfiguration`). One record's envelope may hold at most 999,998,976
  ///     bytes whatever the cap (SQLite's row limit; `QueueError.recordTooLarge` past it).
  ///   - maximumAge: records older than this, on the age clock, are dropped (by the next claim of
  ///     any queue of the container, not by an enqueue); nil (the default) for no limit; less than 1 ms is refused when a container is opened for writing (it would
  ///     drop every record, each as soon as it was stored).
  ///   - attemptCeiling: server refusals before a record is parked (10 by default).
  ///   - parkAfter: the least time from a record's first server refusal to its parking, in
  ///     seconds (24 hours by default; 0 parks on the `attemptCeiling`th refusal alone).
  ///   - backoff: the retry delays (1 s doubling, capped at 300 s, by default).
  ///   - maximumRetryAfter: the longest `Retry-After` honoured, in seconds (an hour by default).
  ///   - resealBatch: records re-sealed per transaction during rotation (500 by default; 0 or less
  ///     is taken as the default). A transaction also stops at 4 MiB of envelopes (a larger
  ///     record goes alone), so that large records do not hold hundreds of megabytes at once.
  ///   - capVictims: which records the cap may drop (the oldest of any queue by default); an
  ///     `.only` limit is also stored in the container for every writer.
  ///   - maximumLease: the longest lease `claim` grants, in seconds (300 by default; 0 or less,
  ///     or NaN, is the default; less than 1 is 1).
  public init(
    byteCap: Int = 20_000_000, maximumAge: TimeInterval? = nil, attemptCeiling: Int = 10,
    backoff: BackoffPolicy = BackoffPolicy(), maximumRetryAfter: TimeInterval = 3600, resealBatch: Int = 500,
    capVictims: CapVictims = .anyQueue, maximumLease: TimeInterval = 300, parkAfter: TimeInterval = 86_400
  ) {
    self.byteCap = byteCap
    self.parkAfter = parkAfter
    self.capVictims = capVictims
    self.maximumAge = maximumAge
    self.attemptCeiling = attemptCeiling
    self.backoff = backoff
    self.maximumRetryAfter = maximumRetryAfter
    self.resealBatch = resealBatch
    self.maximumLease = maximumLease
  }

  /// This configuration with each time that is not a number (NaN) replaced by its default, as a
  /// container takes it: NaN passes every comparison and `min`/`max` unchanged, and would make
  /// due times and leases NaN.
  var withNumericTimes: QueueConfiguration {
    let defaults = QueueConfiguration()
    var copy = self
    if copy.parkAfter.isNaN { copy.parkAfter = defaults.parkAfter }
    if copy.maximumRetryAfter.isNaN { copy.maximumRetryAfter = defaults.maximumRetryAfter }
    // A lease of no time would let every claim be taken again at once (a duplicate delivery).
    if copy.maximumLease.isNaN || copy.maximumLease <= 0 { copy.maximumLease = defaults.maximumLease }
    // Nor of 1 ms: it cut every deliverer's lease to it (an outside review: the outbox's own floor
    // of 1 s undone, another deliverer took a message while it was being sent).
    copy.maximumLease = max(copy.maximumLease, 1)
    if copy.backoff.base.isNaN { copy.backoff.base = defaults.backoff.base }
    if copy.backoff.cap.isNaN { copy.backoff.cap = defaults.backoff.cap }
    if copy.maximumAge?.isNaN == true { copy.maximumAge = nil }
    // A batch of 0 re-sealed nothing and a rotation never finished; a negative one (SQLite's
    // LIMIT -1) re-sealed every record in one transaction, all of them in memory at once.
    if copy.resealBatch < 1 { copy.resealBatch = defaults.resealBatch }
    return copy
  }

  /// Throws for a value that would lose records: a `byteCap` below the envelope of an empty
  /// record, 89 bytes (every enqueue refused), or a `maximumAge` under 1 ms (every record dropped
  /// as soon as it was stored, each enqueue said `.stored`: an outside review).
  func checkKeepsRecords() throws {
    // The envelope of an empty record: a smaller cap refused every enqueue as too large.
    if byteCap < Envelope.overhead {
      throw QueueError.invalidConfiguration(
        parameter: "byteCap", reason: "is \(byteCap) bytes, less than the \(Envelope.overhead) of any record's envelope"
      )
    }
    // Under a millisecond, the container's unit, an age limit is 0.
    if let maximumAge, maximumAge < 0.001 {
      throw QueueError.invalidConfiguration(
        parameter: "maximumAge", reason: "is \(maximumAge) s, so every record would be dropped as soon as it was stored"
      )
    }
  }

  /// The furthest ahead `fail` can schedule a retry: the longer of the backoff cap and the
  /// Retry-After cap. A due time further ahead than this was written by a clock that has since
  /// been set back, and counts as due.
  public var maximumDelay: TimeInterval { max(backoff.cap, maximumRetryAfter) }
}

/// A reading of a clock that counts only time that really passes (never a wall-clock step), with
/// the boot it belongs to: the clock restarts at each boot, so readings of different boots cannot
/// be compared. The queue measures records' age with it (see `QueueConfiguration.maximumAge`).
public struct MonotonicReading: Sendable, Equatable {
  /// The kernel's boot id (empty when unknown: then only the wall clock can measure).
  public var boot: String
  /// Milliseconds since that boot, suspended time included; comparable only within one boot.
  public var milliseconds: Int64

  /// Makes a reading (tests make their own; the queue takes `system()`).
  ///
  /// - Parameters:
  ///   - boot: the boot the reading belongs to; empty when unknown.
  ///   - milliseconds: the clock's value within that boot.
  public init(boot: String, milliseconds: Int64) {
    self.boot = boot
    self.milliseconds = milliseconds
  }

  private static let bootID =
    (try? String(contentsOfFile: "/proc/sys/kernel/random/boot_id", encoding: .utf8))?
    .trimmingCharacters(in: .whitespacesAndNewlines) ?? ""

  /// CLOCK_BOOTTIME (which keeps counting while the machine is suspended) and this boot's id.
  ///
  /// - Returns: the reading now, with the id from `/proc/sys/kernel/random/boot_id` (empty when
  ///   that cannot be read).
  public static func system() -> MonotonicReading {
    var time = timespec()
    clock_gettime(CLOCK_BOOTTIME, &time)
    return MonotonicReading(boot: bootID, milliseconds: Int64(time.tv_sec) * 1000 + Int64(time.tv_nsec) / 1_000_000)
  }
}

/// CLOCK_BOOTTIME in nanoseconds: monotonic, and it keeps counting while the machine is suspended,
/// so a lease measured with it is known to have run out after a suspend (CLOCK_MONOTONIC, behind
/// DispatchTime, stops during one).
enum BootClock {
  static func nanoseconds() -> UInt64 {
    var time = timespec()
    clock_gettime(CLOCK_BOOTTIME, &time)
    return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
  }
}

/// A record handed to a deliverer by `claim`, opened.
public struct ClaimedRecord: Sendable, Equatable {
  /// The record's id, to settle it with (`ack`, `fail`, `reject`…) and to send as an idempotency key.
  public let id: UUID
  /// The queue it was claimed from.
  public let queue: String
  /// The record as it was enqueued, opened: plaintext, so never log it.
  public let payload: Data
  /// The payload as bytes (what the package's own tests and tools compare).
  package var payloadBytes: [UInt8] { [UInt8](payload) }
  /// Attempts including this one.
  public let attempts: Int
  /// When it was enqueued, by the container's clock (to the millisecond).
  public let createdAt: Date
  /// The claim's lease end in milliseconds, as stored: it identifies this claim, so a renewal or
  /// release never touches a record another deliverer has claimed since.
  let leaseToken: Int64
  /// When the lease was taken, on CLOCK_BOOTTIME (nanoseconds; see `BootClock`).
  let leasedAt: UInt64

  /// A record as `claim` hands it out, for an app's test doubles of its own deliverer. It belongs
  /// to no claim: a `Claim` settles only the records it handed out, so its `ack` or `fail` of
  /// this id changes nothing (the unfenced `QueueContainer.ack(_:)` acts on any id, as always).
  ///
  /// - Parameters:
  ///   - id: the record's id.
  ///   - queue: the queue it came from.
  ///   - payload: its plaintext.
  ///   - attempts: attempts including this one (1 for a first delivery).
  ///   - createdAt: when it was enqueued.
  public init(id: UUID, queue: String, payload: Data, attempts: Int = 1, createdAt: Date = Date()) {
    self.init(
      id: id, queue: queue, payload: payload, attempts: attempts, createdAt: createdAt, leaseToken: -1, leasedAt: 0)
  }

  init(id: UUID, queue: String, payload: Data, attempts: Int, createdAt: Date, leaseToken: Int64, leasedAt: UInt64) {
    self.id = id
    self.queue = queue
    self.payload = payload
    self.attempts = attempts
    self.createdAt = createdAt
    self.leaseToken = leaseToken
    self.leasedAt = leasedAt
  }
}

/// Printing a claimed record (`print`, string interpolation, `dump`, a debugger) shows its id,
/// queue, attempts and payload size, never the payload: an app that logs the record it is
/// delivering must not write the plaintext it holds.
extension ClaimedRecord: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
  /// `ClaimedRecord(ID, queue: Q, attempts: N, payload: B bytes)`, without the payload.
  public var description: String {
    "ClaimedRecord(\(id.recordText), queue: \(queue), attempts: \(attempts), payload: \(payload.count) bytes)"
  }

  /// The same as `description`.
  public var debugDescription: String { description }

  /// What `dump` and debuggers show: the metadata and the payload's size only.
  public var customMirror: Mirror {
    Mirror(
      self,
      children: [
        "id": id, "queue": queue, "attempts": attempts, "createdAt": createdAt, "payloadBytes": payload.count,
      ],
      displayStyle: .struct)
  }
}

/// What `enqueue` did with a record.
public enum EnqueueOutcome: Sendable, Equatable {
  /// The record was sealed and committed: it survives a crash from now on.
  case stored
  /// A record with this id is already in the container; it was not stored twice.
  case duplicate
}

/// What `fail` did with a record.
public enum FailOutcome: Sendable, Equatable {
  /// Pending again, due at this time (the container's clock).
  case retryAt(Date)
  /// Parked: the server refused it `attemptCeiling` times over `parkAfter`; it waits for `resend`.
  case parked
}

/// A record as `queue list` shows it: metadata only, never contents.
///
/// Its JSON form (`vault queue list --json`) writes the id as 36 lowercase characters and times as
/// ISO 8601 in UTC with milliseconds; a time that is absent is `null`.
public struct RecordSummary: Codable, Sendable, Equatable {
  /// The record's id, as given to `enqueue` or drawn for it.
  public var id: UUID
  /// The queue within the container.
  public var queue: String
  /// Where the record is in its life: pending, in flight, parked or in review.
  public var state: RecordState
  /// Delivery attempts so far (a claim counts one; a claim given back does not).
  public var attempts: Int
  /// Why the last attempt failed, by kind (`http-503`, `undecryptable`), never a content.
  public var errorKind: String?
  /// When it was stored, by the container's clock (to the millisecond).
  public var createdAt: Date
  /// When a pending record is next due; nil when it is due now or not pending.
  public var nextAttemptAt: Date?
  /// The envelope's size on disk (the record plus 89 bytes in format 2).
  public var bytes: Int
  /// The key version named in the envelope's header.
  public var keyVersion: UInt32

  enum CodingKeys: String, CodingKey {
    case id, queue, state, attempts, bytes
    case errorKind = "error_kind"
    case createdAt = "created_at"
    case nextAttemptAt = "next_attempt_at"
    case keyVersion = "key_version"
  }

  /// Makes a summary (`list` makes them from the container; tests and tools decode them).
  ///
  /// - Parameters:
  ///   - id: the record's id.
  ///   - queue: the queue within the container.
  ///   - state: where the record is in its life.
  ///   - attempts: delivery attempts so far.
  ///   - errorKind: why the last attempt failed, by kind; nil when none did.
  ///   - createdAt: when it was stored.
  ///   - nextAttemptAt: when a pending record is next due; nil when due now or not pending.
  ///   - bytes: the envelope's size.
  ///   - keyVersion: the key version named in the envelope's header.
  public init(
    id: UUID, queue: String, state: RecordState, attempts: Int, errorKind: String?, createdAt: Date,
    nextAttemptAt: Date?, bytes: Int, keyVersion: UInt32
  ) {
    self.id = id
    self.queue = queue
    self.state = state
    self.attempts = attempts
    self.errorKind = errorKind
    self.createdAt = createdAt
    self.nextAttemptAt = nextAttemptAt
    self.bytes = bytes
    self.keyVersion = keyVersion
  }

  /// Reads a summary from its JSON form (`vault queue list --json`).
  ///
  /// - Parameter decoder: the decoder holding the object.
  /// - Throws: `DecodingError` when a field is missing or of the wrong type, the id is not a
  ///   UUID, or a time is not ISO 8601 with milliseconds.
  public init(from decoder: any Decoder) throws {
    let values = try decoder.container(keyedBy: CodingKeys.self)
    let idText = try values.decode(String.self, forKey: .id)
    guard let id = UUID(uuidString: idText) else {
      throw DecodingError.dataCorruptedError(forKey: .id, in: values, debugDescription: "not a UUID")
    }
    func date(_ key: CodingKeys) throws -> Date? {
      guard let text = try values.decodeIfPresent(String.self, forKey: key) else { return nil }
      guard let date = QueueContainer.date(timestamp: text) else {
        throw DecodingError.dataCorruptedError(forKey: key, in: values, debugDescription: "not an ISO 8601 time")
      }
      return date
    }
    self.init(
      id: id, queue: try values.decode(String.self, forKey: .queue),
      state: try values.decode(RecordState.self, forKey: .state),
      attempts: try values.decode(Int.self, forKey: .attempts),
      errorKind: try values.decodeIfPresent(String.self, forKey: .errorKind),
      createdAt: try date(.createdAt) ?? Date(timeIntervalSince1970: 0), nextAttemptAt: try date(.nextAttemptAt),
      bytes: try values.decode(Int.self, forKey: .bytes),
      keyVersion: try values.decode(UInt32.self, forKey: .keyVersion))
  }

  /// Writes the JSON form: the id in lowercase, times as ISO 8601 in UTC with milliseconds, an
  /// absent time or error kind as `null`.
  ///
  /// - Parameter encoder: the encoder to write to.
  /// - Throws: what the encoder throws.
  public func encode(to encoder: any Encoder) throws {
    var values = encoder.container(keyedBy: CodingKeys.self)
    try values.encode(id.recordText, forKey: .id)
    try values.encode(queue, forKey: .queue)
    try values.encode(state, forKey: .state)
    try values.encode(attempts, forKey: .attempts)
    try values.encode(errorKind, forKey: .errorKind)
    try values.encode(QueueContainer.timestamp(createdAt), forKey: .createdAt)
    try values.encode(nextAttemptAt.map(QueueContainer.timestamp), forKey: .nextAttemptAt)
    try values.encode(bytes, forKey: .bytes)
    try values.encode(keyVersion, forKey: .keyVersion)
  }
}

/// Counts for `queue stats`.
public struct QueueStats: Codable, Sendable, Equatable {
  /// The container's absolute path, to tell reports of several containers apart.
  public var container: String
  /// Records in the container, in every state.
  public var total: Int
  /// Envelope bytes the container holds: what the byte cap is measured against.
  public var bytes: Int
  /// Records per state (`RecordState` raw values, every state present, 0 when empty).
  public var byState: [String: Int]
  /// Records per key version (in decimal), read from each envelope's header: what rotation
  /// must keep a key for. Rows that are not this vault's envelopes are not counted here.
  public var byVersion: [String: Int]
  /// Records per queue name.
  public var byQueue: [String: Int]
  /// Records that left the delivery flow since the container was made, per `DropReason` raw
  /// value (every reason present, 0 when none). A ledger: a record parked and resent later stays
  /// counted here (see `resent`; `byState` says what is parked now).
  public var dropped: [String: Int]
  /// Records `resend` returned to the delivery flow since the container was made, per state they
  /// left (`parked`, `review`; both present, 0 when none): of `dropped`'s parked records, those
  /// resent, whether delivered since or pending again.
  public var resent: [String: Int] = ["parked": 0, "review": 0]
  /// The oldest key version writers may seal under; rotation raises it before re-sealing.
  public var minimumSealVersion: UInt32

  /// Counts as `stats()` reports them, for an app's test doubles and its own reports.
  ///
  /// `byState`, `dropped` and `resent` are kept as given (`stats()` lists every state and reason,
  /// with 0 for none).
  ///
  /// - Parameters:
  ///   - container: the container's absolute path.
  ///   - total: records in every state.
  ///   - bytes: envelope bytes held.
  ///   - byState: records per `RecordState` raw value.
  ///   - byVersion: records per key version, in decimal.
  ///   - byQueue: records per queue name.
  ///   - dropped: records that left the delivery flow, per `DropReason` raw value.
  ///   - resent: records `resend` returned, per state they left.
  ///   - minimumSealVersion: the oldest key version writers may seal under.
  public init(
    container: String, total: Int, bytes: Int, byState: [String: Int], byVersion: [String: Int],
    byQueue: [String: Int], dropped: [String: Int], resent: [String: Int] = ["parked": 0, "review": 0],
    minimumSealVersion: UInt32
  ) {
    self.container = container
    self.total = total
    self.bytes = bytes
    self.byState = byState
    self.byVersion = byVersion
    self.byQueue = byQueue
    self.dropped = dropped
    self.resent = resent
    self.minimumSealVersion = minimumSealVersion
  }

  enum CodingKeys: String, CodingKey {
    case container, total, bytes, dropped, resent
    case byState = "by_state"
    case byVersion = "by_version"
    case byQueue = "by_queue"
    case minimumSealVersion = "minimum_seal_version"
  }
}

/// Queue failures, by kind, with what to do. No record contents ever appear in them.
public enum QueueError: Error, Equatable, Sendable, CustomStringConvertible {
  /// The container belongs to another vault (`found` is its keyring id, `expected` this vault's):
  /// open it with its own vault home.
  case foreignContainer(path: String, found: String, expected: String)
  /// The file is a SQLite database without the container's tables or keyring id; left unchanged.
  case notAQueueContainer(path: String)
  /// The container's schema is newer than this build understands: upgrade vault.
  case newerSchema(path: String, version: Int)
  /// The container has a schema an earlier release wrote (`version`), which a read-only open
  /// cannot read; the first open for writing upgrades it in place, with nothing lost.
  case olderSchema(path: String, version: Int)
  /// A record whose envelope (`bytes`, payload plus envelope overhead) could never fit under the
  /// byte cap, or in one SQLite row (`cap` is then 999,998,976: SQLite's 1,000,000,000-byte limit
  /// less room for the row's other columns); nothing was stored and nothing dropped.
  case recordTooLarge(bytes: Int, cap: Int)
  /// The cap could not make room: every record it may drop is in flight (or, with
  /// `CapVictims.only`, none of those queues has any); nothing was stored. Retry after delivery.
  case capExceeded(cap: Int)
  /// A queue name that is empty, longer than 128 bytes of UTF-8, or holds a NUL.
  case invalidQueueName
  /// The disk (or the user's quota) is full; the change was rolled back.
  case diskFull(path: String)
  /// The file or its directory is read-only (permissions, a read-only mount).
  case readOnly(path: String)
  /// The file is not a readable SQLite database (damaged bytes): restore it from a backup.
  case corrupt(path: String)
  /// Another process held the container's lock past the 10 s busy timeout: retry.
  case busy(path: String)
  /// Any other SQLite failure; `detail` is SQLite's message and code, never record contents.
  case storage(path: String, detail: String)
  /// The path is registered with the vault, but no container (or an empty file) is there.
  case registeredContainerMissing(path: String)
  /// The file at a registered path is another container (or a copy of another one).
  case registeredContainerReplaced(path: String, expected: String, found: String?)
  /// A command that only reads was pointed at a path with no container.
  case noContainer(path: String)
  /// The process ran out of file descriptors (`ulimit -n`) opening the file.
  case tooManyOpenFiles(path: String)
  /// The file or its directory may not be read or written by this user.
  case permissionDenied(path: String)
  /// The file could not be opened for another reason (`reason`, the system's words for it).
  case cannotOpen(path: String, reason: String)
  /// The path is a directory, FIFO, socket, device or symlink, not a container file.
  case notAFile(path: String)
  /// The container's file, or its -wal, -shm or -journal file, has a mode that lets group or
  /// others write it (`modes`: each such file's path and mode): they could change, roll back or
  /// delete records. Nothing was opened; vault makes these files 0600.
  case openToOthers(path: String, modes: [String: UInt32])
  /// The container's directory (`directory`, mode `mode`, owned by `owner`) lets group or others
  /// write it, or belongs to another user than you or root: whoever may write it can delete or
  /// replace the container's files, or plant its -wal before SQLite makes it (between any check
  /// and SQLite's own open). Nothing was opened.
  case unsafeDirectory(path: String, directory: String, mode: UInt32, owner: UInt32)
  /// The container's file, or its -wal, -shm or -journal file (`file`), belongs to another user
  /// (`owner`), who may change, roll back or delete records whatever its mode. Nothing was opened.
  case ownedByOther(path: String, file: String, owner: UInt32)
  /// A write would pass the process's file-size limit (ulimit -f).
  case fileTooLarge(path: String)
  /// SQLite could not allocate memory, or a claim found too little address space left to copy and
  /// open a record (an address-space limit, `ulimit -v`); nothing was changed (a claim leases nothing).
  case outOfMemory(path: String)
  /// A `QueueConfiguration` value (`parameter`) that would lose records (`reason` says how):
  /// a `byteCap` below 89 bytes or a `maximumAge` under 1 ms. Nothing was opened.
  case invalidConfiguration(parameter: String, reason: String)

  /// A sentence naming the path, what happened and what to do; never record contents.
  public var description: String {
    switch self {
    case .foreignContainer(let path, let found, let expected):
      "\(path) belongs to vault \(found), not \(expected); open it with its own vault home"
    case .notAQueueContainer(let path): "\(path) is a SQLite database but not a vault queue container"
    case .newerSchema(let path, let version):
      "\(path) has schema version \(version), newer than this vault understands; upgrade vault"
    case .olderSchema(let path, let version):
      "\(path) has schema version \(version), written by an earlier release, which only an open for writing "
        + "upgrades (in place, nothing lost); nothing was changed"
    case .recordTooLarge(let bytes, let cap):
      "a \(bytes)-byte record cannot fit under the container's \(cap)-byte cap; nothing was stored"
    case .capExceeded(let cap):
      "the container is at its \(cap)-byte cap and holds no older record it may drop (the others are in flight, or in "
        + "queues the cap may not drop from); nothing was stored: retry after delivery"
    case .invalidQueueName: "queue names must be 1–128 bytes of UTF-8 without NUL"
    case .invalidConfiguration(let parameter, let reason):
      "the queue configuration's \(parameter) \(reason); nothing was opened: give a positive value (or nil for no "
        + "age limit)"
    case .outOfMemory(let path):
      "ran out of memory working on \(path): the address-space limit (ulimit -v) is too tight; nothing was "
        + "changed (the queue is as it was): raise the limit and retry"
    case .diskFull(let path):
      "the disk holding \(path) is full; nothing was changed (the queue is as it was): free space and retry"
    case .readOnly(let path):
      "\(path) (or its directory) is read-only; the queue cannot be changed: check permissions and mounts"
    case .corrupt(let path):
      "\(path) is corrupt (not a readable SQLite database); move it aside and restore it from a backup"
    case .busy(let path): "\(path) stayed locked by another process past the busy timeout; retry"
    case .storage(let path, let detail): "storage failure in \(path): \(detail)"
    case .registeredContainerMissing(let path):
      "registered container \(path) is missing or empty; restore it from a backup (nothing was created: "
        + "its records may still need their keys)"
    case .registeredContainerReplaced(let path, let expected, let found):
      "\(path) is registered as container \(expected) but holds container \(found ?? "without an id"); "
        + "restore the registered container (nothing was changed)"
    case .noContainer(let path):
      "there is no vault container at \(path); nothing was created (check the path; opening it for writing "
        + "creates one there)"
    case .tooManyOpenFiles(let path):
      "could not open \(path): the process has too many open files; raise the limit (ulimit -n) and retry"
    case .permissionDenied(let path):
      "permission denied opening \(path) (or its directory); check its owner and mode"
    case .cannotOpen(let path, let reason): "could not open \(path): \(reason)"
    case .fileTooLarge(let path):
      "\(path) would grow past the file-size limit (ulimit -f); the change was not made: raise the limit and retry"
    case .openToOthers, .ownedByOther, .unsafeDirectory: refusal(outcome: "nothing was opened or changed")
    case .notAFile(let path):
      "\(path) is not a regular file (a directory, FIFO, socket, device or symlink), so it is no vault container; "
        + "nothing was opened or changed"
    }
  }
}

extension QueueError {
  /// The sentence of a refusal for the container's files or directory (`openToOthers`,
  /// `ownedByOther`, `unsafeDirectory`), with what was done instead (`outcome`: `status` counts
  /// nothing rather than refusing); `description` for any other error.
  package func refusal(outcome: String) -> String {
    let me = geteuid()
    switch self {
    case .openToOthers(let path, let modes):
      return Self.openToOthers(path, modes, outcome)
    case .ownedByOther(let path, let file, let owner) where file == path:
      return "\(path) is owned by uid \(owner), not by you (uid \(me)), so they may change or delete its "
        + "records; \(outcome). If the container is uid \(owner)'s, run as uid \(owner). If it is this "
        + "vault's, uid \(owner) could have changed it: restore it from a backup, or take it back only if you "
        + "know nobody else wrote to it"
    case .ownedByOther(let path, let file, let owner):
      // Never "take it back": a -wal or -journal of someone else's would then be played into the
      // container (outside review: a chown of a planted -wal, as advised, deleted records).
      return "\(file), beside the container \(path), is owned by uid \(owner), not by you (uid \(me)): it may hold "
        + "writes that are not this vault's; \(outcome). Do not make it yours. Move it aside (mv "
        + "\(ShellWord.quoted(file)) \(ShellWord.quoted(file + ".untrusted"))): the container is then read "
        + "without it, as of its last checkpoint"
    case .unsafeDirectory(let path, let directory, let mode, let owner):
      let shared = mode & 0o022 != 0
      return "the container \(path) is in \(directory), which "
        + (shared ? "others may write (mode \(octal(mode)))" : "belongs to uid \(owner), not to you (uid \(me))")
        + ": they could delete or replace its files, or plant its -wal before SQLite makes it; \(outcome). "
        + (Self.chmodFixes(mode: mode, owner: owner)
          ? "Run: chmod go-w \(ShellWord.quoted(directory))" : "Keep containers in a directory only you may write")
    default:
      return description
    }
  }

  /// Whether `chmod go-w` is the fix for a container's directory: the user's own, and not a shared
  /// one by design (sticky, as /tmp: root would take it from every other user).
  package static func chmodFixes(mode: UInt32, owner: UInt32) -> Bool {
    owner == geteuid() && mode & 0o022 != 0 && mode & UInt32(S_ISVTX) == 0
  }

  /// The sentence of `openToOthers`, with what was done instead (`outcome`): one file, or several,
  /// each with its mode, then the chmod that makes every one of them private.
  static func openToOthers(_ path: String, _ modes: [String: UInt32], _ outcome: String) -> String {
    let files = modes.keys.sorted()
    let chmod = "Run: chmod 600 " + files.map(ShellWord.quoted).joined(separator: " ")
    if files == [path] {
      return "\(path) has mode \(octal(modes[path] ?? 0)), which lets others change or delete its records; "
        + "\(outcome). \(chmod)"
    }
    let listed = files.map { "\($0) has mode \(octal(modes[$0] ?? 0))" }.joined(separator: ", ")
    return "files of the container \(path) let others change or delete its records (\(listed)); \(outcome). \(chmod)"
  }
}

extension QueueError: CodedError {
  /// `queue.` and the case, in kebab case: stable across releases.
  public var code: String {
    switch self {
    case .foreignContainer: "queue.foreign-container"
    case .notAQueueContainer: "queue.not-a-queue-container"
    case .newerSchema: "queue.newer-schema"
    case .olderSchema: "queue.older-schema"
    case .recordTooLarge: "queue.record-too-large"
    case .capExceeded: "queue.cap-exceeded"
    case .invalidQueueName: "queue.invalid-queue-name"
    case .diskFull: "queue.disk-full"
    case .readOnly: "queue.read-only"
    case .corrupt: "queue.corrupt"
    case .busy: "queue.busy"
    case .storage: "queue.storage"
    case .registeredContainerMissing: "queue.registered-container-missing"
    case .registeredContainerReplaced: "queue.registered-container-replaced"
    case .noContainer: "queue.no-container"
    case .tooManyOpenFiles: "queue.too-many-open-files"
    case .permissionDenied: "queue.permission-denied"
    case .cannotOpen: "queue.cannot-open"
    case .notAFile: "queue.not-a-file"
    case .openToOthers: "queue.open-to-others"
    case .ownedByOther: "queue.owned-by-other"
    case .unsafeDirectory: "queue.unsafe-directory"
    case .fileTooLarge: "queue.file-too-large"
    case .outOfMemory: "queue.out-of-memory"
    case .invalidConfiguration: "queue.invalid-configuration"
    }
  }
}

extension UUID {
  /// The id as a container stores it: 36 characters, lowercase hex in groups of 8-4-4-4-12, the
  /// same text as `uuidString.lowercased()` (which cost about 7,000 instructions per enqueue,
  /// measured with callgrind, where this costs a few hundred).
  package var recordText: String {
    let bytes = uuid
    return withUnsafeBytes(of: bytes) { raw in
      String(unsafeUninitializedCapacity: 36) { out in
        let digits: StaticString = "0123456789abcdef"
        var index = 0
        for (offset, byte) in raw.enumerated() {
          if offset == 4 || offset == 6 || offset == 8 || offset == 10 {
            out[index] = UInt8(ascii: "-")
            index += 1
          }
          out[index] = digits.utf8Start[Int(byte >> 4)]
          out[index + 1] = digits.utf8Start[Int(byte & 0x0f)]
          index += 2
        }
        return index
      }
    }
  }
}
