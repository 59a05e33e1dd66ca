import Foundation
import Vault
import VaultCrypto
import VaultKeys

/// Delivery: claiming due records under a lease and settling them (ack, retry, park, reject, resend), and the age clock that expires records.
extension QueueContainer {

  /// Claims due records of `queue`, oldest first, for delivery: at most `maxCount` records and
  /// about `maxBytes` of envelope (at least one record when any is due). Each claimed record is
  /// leased for `lease` seconds (at most `configuration.maximumLease`); if it is neither acked nor
  /// failed by then (a crash), it is due again. A deliverer that works longer keeps its lease with
  /// a `Claim`. Records that do not open are moved to review (counted as `undecryptable`), and the
  /// rest keep flowing.
  ///
  /// Clock steps strand nothing: a pending record due further ahead than `maximumDelay`, or a
  /// lease ending further ahead than `maximumLease`, was written by a clock that has since been set
  /// back, and is claimable now.
  ///
  /// With `dueBy`, only records due by then are claimed (a delivery pass uses its start time, so
  /// records it rescheduled with a near-zero jitter are not claimed again in the same pass). When
  /// a key cannot be read (locked keyring, timeout), the claimed records are released and the
  /// error is thrown: an unavailable key is not a broken record.
  ///
  /// Each claim counts one attempt for each record it returns (given back by `release`, it does
  /// not count). Records past `maximumAge` are expired first.
  ///
  /// - Parameters:
  ///   - queue: the queue to claim from.
  ///   - maxCount: the most records to claim (0 or less: none).
  ///   - maxBytes: the most envelope bytes to claim, except that the first due record is always
  ///     taken.
  ///   - lease: how long the records stay with this deliverer, in seconds (clamped to
  ///     0…`maximumLease`; NaN is `maximumLease`).
  ///   - dueBy: claim only records due before this time; nil for everything due now.
  /// - Returns: the claimed records that opened, oldest first; empty when nothing is due.
  /// - Throws: `QueueError` when the container cannot be read or written (`.outOfMemory` also when
  ///   the address space left, `ulimit -v`, is too little to copy and open a record of 1 MiB or
  ///   more, with nothing leased); `KeyStoreError` (or the vault's other errors) when a key cannot
  ///   be read right now, after every claimed record was given back.
  public func claim(
    queue: String, maxCount: Int = 100, maxBytes: Int = 1 << 20, lease: TimeInterval = 60, dueBy: Date? = nil
  ) throws -> [ClaimedRecord] {
    try claim(queue: queue, maxCount: maxCount, maxBytes: maxBytes, lease: lease, dueBy: dueBy, leastAttempted: false)
  }

  /// Claims the due record of `queue` with the fewest attempts counted (the oldest of those),
  /// wherever it is in the queue: what a delivery pass sends to tell a server that refuses some
  /// messages from one that refuses everything, once two records were refused in a row. A record
  /// never attempted comes first; with none, the one tried least, so that probes of an endpoint
  /// refusing everything go round the queue rather than trying one record again and again.
  /// Otherwise as `claim(queue:maxCount:maxBytes:lease:dueBy:)` with `maxCount` 1.
  ///
  /// - Returns: that record, opened; empty when none is due.
  package func claimLeastAttempted(queue: String, lease: TimeInterval, dueBy: Date?) throws -> [ClaimedRecord] {
    try claim(queue: queue, maxCount: 1, maxBytes: 0, lease: lease, dueBy: dueBy, leastAttempted: true)
  }

  private func claim(
    queue: String, maxCount: Int, maxBytes: Int, lease: TimeInterval, dueBy: Date?, leastAttempted: Bool
  ) throws -> [ClaimedRecord] {
    try withStorage { storage in
      var claimed: [(id: String, envelope: [UInt8], attempts: Int, createdAt: Int64, version: Int64)] = []
      var storedWhole: [(seq: Int64, index: Int)] = []
      var (leasedAt, now, leaseUntil) = (UInt64(0), Int64(0), Int64(0))
      try storage.transaction {
        // The lease starts once the write lock is this claim's: read before BEGIN waited for it
        // (behind a rotation's re-seal batch, about a second under load in an outside review), it
        // reached the deliverer partly spent.
        leasedAt = BootClock.nanoseconds()
        now = milliseconds(clock())
        leaseUntil = now + Self.span(grantedLease(lease))
        // Strictly before the pass began: a retry rescheduled in the same millisecond waits.
        let due = dueBy.map { min(milliseconds($0) - 1, now) } ?? now
        try expire(storage, now: now)
        var bytes = 0
        // The row is chosen first and read after, so that the sort holds no envelope.
        let select: StaticString =
          leastAttempted
          ? """
          SELECT id, envelope, attempts, size, created_at, key_version, seq, tail
          FROM records LEFT JOIN envelope_tails USING (seq) WHERE seq = (
            SELECT seq FROM records WHERE queue = ?1 AND (
              (state = 'pending' AND (next_attempt_at <= ?4 OR next_attempt_at > ?5))
              OR (state = 'in_flight' AND (lease_until <= ?2 OR lease_until > ?6)))
            ORDER BY attempts, seq LIMIT ?3)
          """
          : """
          SELECT id, envelope, attempts, size, created_at, key_version, seq, tail
          FROM records LEFT JOIN envelope_tails USING (seq) WHERE queue = ?1 AND (
            (state = 'pending' AND (next_attempt_at <= ?4 OR next_attempt_at > ?5))
            OR (state = 'in_flight' AND (lease_until <= ?2 OR lease_until > ?6)))
          ORDER BY seq LIMIT ?3
          """
        try storage.statement(select).query([
          .text(queue), .integer(now), .integer(Int64(max(maxCount, 0))), .integer(due),
          .integer(now + Self.span(configuration.maximumDelay)),
          .integer(now + Self.span(configuration.maximumLease)),
        ]) { row in
          let size = Int(row.int(3))
          guard claimed.isEmpty || bytes + size <= maxBytes else { return }
          bytes += size
          // A failed allocation traps: checked before the envelope is copied, a limit too tight
          // for this record (its envelope, the opened bytes and the caller's copy of them) rolls
          // the claim back, nothing leased.
          guard size < Self.checkedSize || MemoryHeadroom.available(3 * size + Self.allocationMargin) else {
            throw QueueError.outOfMemory(path: path)
          }
          if row.withBlob(1, { $0.count }) > Storage.inlineEnvelopeLimit {
            storedWhole.append((row.int(6), claimed.count))
          }
          claimed.append(
            (row.text(0) ?? "", row.envelope(inline: 1, tail: 7), Int(row.int(2)) + 1, row.int(4), row.int(5)))
        }
        // A long envelope a release before migration 7 stored whole in its row is split once, here
        // (its row is rewritten whole this once, as the claim would have), so that this attempt's
        // failure or release and every later one write the row's page alone.
        for (seq, index) in storedWhole {
          try claimed[index].envelope.withUnsafeBytes { try storage.splitStoredEnvelope($0, seq: seq) }
        }
        let markInFlight = try storage.statement(
          "UPDATE records SET state = 'in_flight', lease_until = ?, attempts = attempts + 1, changed = ? WHERE id = ?")
        for record in claimed { try markInFlight.run([.integer(leaseUntil), .integer(now), .text(record.id)]) }
      }
      var opened: [ClaimedRecord] = []
      var undecryptable: [(id: String, version: Int64)] = []
      for record in claimed {
        var (envelope, version) = (record.envelope, record.version)
        do {
          // Checked again now that the envelopes are held (and other threads may have taken
          // room): a trap here would leave every claimed record leased until its lease ends.
          guard
            envelope.count < Self.checkedSize || MemoryHeadroom.available(2 * envelope.count + Self.allocationMargin)
          else {
            throw QueueError.outOfMemory(path: path)
          }
          let payload: [UInt8]
          do {
            payload = try vault.open(envelope, context: context(queue: queue, id: record.id))
          } catch let error where Self.mayBeResealed(error) {
            // Opened outside the claim's transaction: a rotation may have re-sealed the record
            // and retired its old version in between (the crash campaign saw `keyMissing` for a
            // key deleted a moment after this process last read the manifest). The row, still
            // this claim's, holds the envelope to open; one that is not re-sealed fails as before.
            guard let fresh = try Self.heldEnvelope(storage, id: record.id, leaseUntil: leaseUntil) else {
              continue  // no longer this claim's: settled or claimed elsewhere meanwhile
            }
            guard fresh.version != version else { throw error }
            (envelope, version) = fresh
            payload = try vault.open(envelope, context: context(queue: queue, id: record.id))
          }
          opened.append(
            ClaimedRecord(
              id: UUID(uuidString: record.id)!, queue: queue, payload: Data(payload), attempts: record.attempts,
              createdAt: Date(timeIntervalSince1970: Double(record.createdAt) / 1000), leaseToken: leaseUntil,
              leasedAt: leasedAt))
        } catch is EnvelopeError {
          // The envelope itself is bad (tampered, moved, another keyring, retired key).
          undecryptable.append((record.id, version))
        } catch {
          // The key could not be read right now: give every claimed record back and report it.
          try storage.transaction {
            for record in claimed {
              try storage.statement(Self.releaseSQL).run([.text(record.id), .integer(now)])
            }
          }
          throw error
        }
      }
      if !undecryptable.isEmpty {
        try storage.transaction {
          var moved = 0
          for record in undecryptable {
            // Only if the row still holds the envelope that failed (a rotation may have re-sealed it).
            moved += try storage.statement(
              "UPDATE records SET state = 'review', error_kind = ?, lease_until = 0, changed = ? WHERE id = ? AND key_version = ?"
            ).run([.text("undecryptable"), .integer(now), .text(record.id), .integer(record.version)])
          }
          try storage.countDrop(.undecryptable, moved)
        }
      }
      return opened
    }
  }

  /// Whether `error`, opening a claimed envelope, may mean only that its key version was retired
  /// after a rotation re-sealed the record under a newer one.
  private static func mayBeResealed(_ error: any Error) -> Bool {
    switch error {
    case VaultError.keyMissing, EnvelopeError.retiredKeyVersion, EnvelopeError.unknownKeyVersion: true
    default: false
    }
  }

  /// The envelope and key version of record `id` while it is still in flight under the lease
  /// `leaseUntil`; nil when it is not (settled, given back or claimed by another deliverer).
  private static func heldEnvelope(_ storage: Storage, id: String, leaseUntil: Int64) throws
    -> (envelope: [UInt8], version: Int64)?
  {
    var found: (envelope: [UInt8], version: Int64)?
    try storage.statement(
      """
      SELECT envelope, key_version, tail
      FROM records LEFT JOIN envelope_tails USING (seq) WHERE id = ? AND state = 'in_flight' AND lease_until = ?
      """
    ).query([.text(id), .integer(leaseUntil)]) { found = ($0.envelope(inline: 0, tail: 2), $0.int(1)) }
    return found
  }

  /// Deletes delivered records, then checkpoints the WAL so their frames do not linger.
  ///
  /// Not fenced: it deletes the records with these ids whatever their state (pending, parked, in
  /// review, claimed by another deliverer), uncounted in the drop ledger. A deliverer that works
  /// from a `Claim` should settle through `Claim.ack(_:)`, which deletes only what the claim
  /// still holds.
  ///
  /// - Parameter ids: the records the receiver has; ids no longer in the container are ignored.
  /// - Throws: `QueueError` when the container cannot be written.
  public func ack(_ ids: [UUID]) throws {
    _ = try deleteDelivered(ids.map { ($0, nil) })
  }

  /// Deletes the delivered records of `held` (record id → lease token) that still hold that lease
  /// (in flight under this claim), then checkpoints; returns the ids deleted.
  func ack(held: [UUID: Int64]) throws -> Set<UUID> {
    try deleteDelivered(held.map { ($0.key, $0.value) })
  }

  /// Deletes delivered records in one transaction, then checkpoints the WAL so their frames do
  /// not linger; returns the ids deleted. A record given with a lease token is deleted only while
  /// it is in flight under that lease (fenced like `renew`: one settled, given back or claimed
  /// again since is left alone); one without, whatever its state.
  private func deleteDelivered(_ records: [(id: UUID, token: Int64?)]) throws -> Set<UUID> {
    guard !records.isEmpty else { return [] }
    return try withStorage { storage in
      let deleted: Set<UUID> = try storage.transaction {
        var deleted: Set<UUID> = []
        var freed = 0
        for (id, token) in records {
          let size =
            if let token {
              try storage.statement(
                "SELECT size FROM records WHERE id = ?1 AND state = 'in_flight' AND lease_until = ?2"
              ).scalar([.text(id.recordText), .integer(token)])
            } else {
              try storage.statement("SELECT size FROM records WHERE id = ?").scalar([.text(id.recordText)])
            }
          guard let size else { continue }
          try storage.statement("DELETE FROM records WHERE id = ?").run([.text(id.recordText)])
          freed += Int(size)
          deleted.insert(id)
        }
        try storage.addBytes(-freed)
        return deleted
      }
      storage.checkpoint()
      return deleted
    }
  }

  /// Records a failed delivery: schedules the next attempt (exponential backoff with full jitter
  /// over all attempts, or `retryAfter` when the server gave one, capped), or parks the record when
  /// the server has refused it `attemptCeiling` times and for `parkAfter` since its first refusal.
  ///
  /// - Parameters:
  ///   - ids: the claimed records that failed.
  ///   - errorKind: what failed, by kind (`http-503`, `connection-refused`), never a content:
  ///     stored in the clear, cut before its first character outside letters, digits, `-`, `.`
  ///     and `_` (and to 64 bytes).
  ///   - retryAfter: the server's Retry-After, if it gave one: the next attempt is then (within
  ///     the cap, `maximumRetryAfter`; 0 is at once).
  ///   - serverAnswered: false for network failures (no route, refused connection, timeout).
  ///     Those never count toward the ceiling: a record is not parked because the device was
  ///     offline for a day.
  ///   - sharedDelay: draw one jittered delay for all `ids` (from the highest attempt count among
  ///     them), so records sent together are retried together (a telemetry batch keeps its events
  ///     and its Idempotency-Key).
  /// - Returns: for each id, whether it was rescheduled (and when) or parked; an id that is no
  ///   longer in flight (already settled or given back) is left out and left alone.
  /// - Throws: `QueueError` when the container cannot be written.
  @discardableResult
  public func fail(
    _ ids: [UUID], errorKind: String, retryAfter: TimeInterval? = nil, serverAnswered: Bool = true,
    sharedDelay: Bool = false
  ) throws -> [UUID: FailOutcome] {
    try recordFailures(
      ids.map { ($0, nil) }, errorKind: errorKind, retryAfter: retryAfter, serverAnswered: serverAnswered,
      sharedDelay: sharedDelay)
  }

  /// `fail` for the records of `held` (record id → lease token) still in flight under that lease,
  /// fenced as `renew` is: a record claimed by another deliverer since (its lease ran out under
  /// this one) is left alone and left out.
  func fail(
    held: [UUID: Int64], errorKind: String, retryAfter: TimeInterval?, serverAnswered: Bool, sharedDelay: Bool
  ) throws -> [UUID: FailOutcome] {
    try recordFailures(
      held.map { ($0.key, $0.value) }, errorKind: errorKind, retryAfter: retryAfter, serverAnswered: serverAnswered,
      sharedDelay: sharedDelay)
  }

  /// Schedules or parks records in flight; one given with a lease token only while it still holds
  /// that lease, one without whatever lease it holds.
  private func recordFailures(
    _ records: [(id: UUID, token: Int64?)], errorKind: String, retryAfter: TimeInterval?, serverAnswered: Bool,
    sharedDelay: Bool
  ) throws -> [UUID: FailOutcome] {
    let errorKind = ErrorKindText.sanitized(errorKind)
    return try withStorage { storage in
      let attemptsOf = try storage.statement(
        """
        SELECT attempts, server_failures, refused_since FROM records
        WHERE id = ?1 AND state = 'in_flight' AND (?2 IS NULL OR lease_until = ?2)
        """)
      let now = clock()
      var outcomes: [UUID: FailOutcome] = [:]
      var shared: TimeInterval?
      if sharedDelay, retryAfter == nil {
        var most: Int64 = 0
        for (id, token) in records {
          try attemptsOf.query([.text(id.recordText), token.map { .integer($0) } ?? .null]) {
            most = max(most, $0.int(0))
          }
        }
        shared = configuration.backoff.delay(afterAttempts: Int(most), unit: random())
      }
      try storage.transaction {
        var parked = 0
        for (id, token) in records {
          let idText = id.recordText
          var attempts: Int64?
          var failures: Int64 = 0
          var refusedSince: Int64?
          try attemptsOf.query([.text(idText), token.map { .integer($0) } ?? .null]) { row in
            attempts = row.int(0)
            failures = row.int(1)
            refusedSince = row.isNull(2) ? nil : row.int(2)
          }
          guard let attempts else { continue }
          if serverAnswered {
            failures += 1
            // The first refusal (or the first since this column existed) starts the span.
            if refusedSince == nil { refusedSince = milliseconds(now) }
          }
          // Refused long enough, by the wall clock: a clock set back makes the span shorter (keeps
          // retrying), never longer.
          let refusedFor = Double(milliseconds(now) - (refusedSince ?? milliseconds(now))) / 1000
          let since: Statement.Value = refusedSince.map { .integer($0) } ?? .null
          if serverAnswered, failures >= configuration.attemptCeiling, refusedFor >= configuration.parkAfter {
            try storage.statement(
              """
              UPDATE records SET state = 'parked', error_kind = ?, server_failures = ?, refused_since = ?, lease_until = 0,
                changed = ?
              WHERE id = ?
              """
            ).run([.text(errorKind), .integer(failures), since, .integer(milliseconds(now)), .text(idText)])
            outcomes[id] = .parked
            parked += 1
          } else {
            let delay =
              retryAfter.flatMap { $0.isNaN ? nil : min(max($0, 0), configuration.maximumRetryAfter) } ?? shared
              ?? configuration.backoff.delay(afterAttempts: Int(attempts), unit: random())
            let due = now.addingTimeInterval(delay)
            try storage.statement(
              """
              UPDATE records SET state = 'pending', next_attempt_at = ?, error_kind = ?, server_failures = ?,
                refused_since = ?, lease_until = 0, changed = ?
              WHERE id = ?
              """
            ).run([
              .integer(milliseconds(due)), .text(errorKind), .integer(failures), since, .integer(milliseconds(now)),
              .text(idText),
            ])
            outcomes[id] = .retryAt(due)
          }
        }
        try storage.countDrop(.parked, parked)
      }
      return outcomes
    }
  }

  /// Parks records at once (for example after a refused token refresh): kept, listable,
  /// resendable, never retried automatically. Counted in the drop ledger as `parked`.
  ///
  /// - Parameters:
  ///   - ids: the records to park, whatever their state; unknown ids are ignored.
  ///   - errorKind: why, by kind (`http-401`), never a content: stored in the clear, cut before
  ///     its first character outside letters, digits, `-`, `.` and `_`.
  /// - Throws: `QueueError` when the container cannot be written.
  public func park(_ ids: [UUID], errorKind: String) throws {
    try move(ids, to: .parked, errorKind: errorKind, counting: .parked)
  }

  /// Gives a record in flight back: pending, the claim's attempt not counted. Not fenced by the
  /// lease (`releaseHeld` is); also what `claim` runs when a key cannot be read. Giving back is a
  /// state change (`changed`, ?2): a merge weighs it against the other copy's changes.
  /// Address space a claim wants free beyond a record's own copies before it takes one (the
  /// caller's threads and SQLite's cache also allocate meanwhile).
  static let allocationMargin = 16 << 20
  /// Records smaller than this are claimed without asking for address space first (a probe costs
  /// two system calls; the margin above covers them).
  static let checkedSize = 1 << 20

  static let releaseSQL: StaticString = """
    UPDATE records SET state = 'pending', lease_until = 0, attempts = max(attempts - 1, 0), changed = ?2
    WHERE id = ?1 AND state = 'in_flight'
    """

  /// Gives claimed records back (pending, the claim's attempt not counted), as when a delivery
  /// pass ends before sending them. A record given back keeps its place: the next claim takes it
  /// first again. For a record that could not be sent, use `fail` (backoff, counted), or it holds
  /// back every newer record of its queue.
  ///
  /// Unlike `Claim.releaseUnsettled()`, this is not fenced by the lease: any record of `ids` in
  /// flight goes back, even one another deliverer has claimed since.
  ///
  /// - Parameter ids: the records to give back; those not in flight are left alone.
  /// - Throws: `QueueError` when the container cannot be written.
  public func release(_ ids: [UUID]) throws {
    guard !ids.isEmpty else { return }
    let now = milliseconds(clock())
    try withStorage { storage in
      try storage.transaction {
        for id in ids { try storage.statement(Self.releaseSQL).run([.text(id.recordText), .integer(now)]) }
      }
    }
  }

  /// Moves records the server refused to review; they are kept and never retried automatically.
  /// Counted in the drop ledger as `rejected`.
  ///
  /// - Parameters:
  ///   - ids: the records to move, whatever their state; unknown ids are ignored.
  ///   - errorKind: why, by kind (`http-400`, `too-large`), never a content: stored in the clear,
  ///     cut before its first character outside letters, digits, `-`, `.` and `_`.
  /// - Throws: `QueueError` when the container cannot be written.
  public func reject(_ ids: [UUID], errorKind: String) throws {
    try move(ids, to: .review, errorKind: errorKind, counting: .rejected)
  }

  /// Moves records out of the delivery flow in one transaction and counts them in the ledger.
  func move(_ ids: [UUID], to state: RecordState, errorKind: String, counting reason: DropReason) throws {
    _ = try move(ids.map { ($0, nil) }, to: state, errorKind: errorKind, counting: reason)
  }

  /// Moves the records of `held` (record id → lease token) still in flight under that lease out of
  /// the delivery flow, fenced as `renew` is; returns the ids moved.
  func move(held: [UUID: Int64], to state: RecordState, errorKind: String, counting reason: DropReason) throws
    -> Set<UUID>
  {
    try move(held.map { ($0.key, $0.value) }, to: state, errorKind: errorKind, counting: reason)
  }

  /// Moves records in one transaction and counts them: one given with a lease token only while it
  /// is in flight under that lease, one without whatever its state. Returns the ids moved.
  private func move(
    _ records: [(id: UUID, token: Int64?)], to state: RecordState, errorKind: String, counting reason: DropReason
  ) throws -> Set<UUID> {
    let errorKind = ErrorKindText.sanitized(errorKind)
    return try withStorage { storage in
      let now = milliseconds(clock())
      return try storage.transaction {
        var moved: Set<UUID> = []
        let update = try storage.statement(
          """
          UPDATE records SET state = ?1, error_kind = ?2, lease_until = 0, changed = ?3
          WHERE id = ?4 AND (?5 IS NULL OR (state = 'in_flight' AND lease_until = ?5))
          """)
        for (id, token) in records
        where try update.run([
          .text(state.rawValue), .text(errorKind), .integer(now), .text(id.recordText),
          token.map { .integer($0) } ?? .null,
        ]) > 0 {
          moved.insert(id)
        }
        try storage.countDrop(reason, moved.count)
        return moved
      }
    }
  }

  /// Returns parked or review records to pending with a fresh attempt count, and records stranded
  /// by a clock step too (a lease that ended, or ends further ahead than `maximumLease`; a due time
  /// further ahead than `maximumDelay`). A record leased by a live deliverer is left alone, and so
  /// is a pending record due within `maximumDelay`.
  ///
  /// - Parameter ids: the records to send again.
  /// - Returns: how many records moved to pending.
  /// - Throws: `QueueError` when the container cannot be written.
  @discardableResult
  public func resend(_ ids: [UUID]) throws -> Int { try resendReporting(ids).moved }

  /// `resend(_:)`, also telling which of `ids` stayed where they were and in what state (nil: no
  /// record has that id), in the order given, so a person can be told which ids failed and why.
  package func resendReporting(_ ids: [UUID]) throws -> (moved: Int, left: [(id: UUID, state: RecordState?)]) {
    try withStorage { storage in
      let now = milliseconds(clock())
      let leaseLimit = now + Self.span(configuration.maximumLease)
      let dueLimit = now + Self.span(configuration.maximumDelay)
      return try storage.transaction {
        // Counted per state left, so `stats` can tell records still parked from those resent.
        var resent: [RecordState: Int] = [:]
        var moved = 0
        var left: [(id: UUID, state: RecordState?)] = []
        for id in ids {
          var state: RecordState?
          try storage.statement("SELECT state FROM records WHERE id = ?").query([.text(id.recordText)]) {
            state = RecordState(rawValue: $0.text(0) ?? "")
          }
          let count = try storage.statement(
            """
            UPDATE records SET state = 'pending', attempts = 0, server_failures = 0, refused_since = NULL,
              next_attempt_at = 0, error_kind = NULL, lease_until = 0, changed = ?2
            WHERE id = ?1 AND (state IN ('parked', 'review')
              OR (state = 'in_flight' AND (lease_until <= ?2 OR lease_until > ?3))
              OR (state = 'pending' AND next_attempt_at > ?4))
            """
          ).run([
            .text(id.recordText), .integer(now), .integer(leaseLimit), .integer(dueLimit),
          ])
          moved += count
          if count == 0 { left.append((id, state)) }
          if count > 0, let state, state == .parked || state == .review { resent[state, default: 0] += count }
        }
        for (state, count) in resent { try storage.countResend(from: state, count) }
        return (moved, left)
      }
    }
  }

  /// Extends the leases `held` (record id → lease token) to `lease` seconds from now, each only if
  /// that claim still holds it. Returns the new tokens of the records still held; a record acked,
  /// failed, released or claimed by another deliverer since is left out.
  func renew(_ held: [UUID: Int64], lease: TimeInterval) throws -> [UUID: Int64] {
    guard !held.isEmpty else { return [:] }
    return try withStorage { storage in
      try storage.transaction {
        // Read once the write lock is held, as `claim` reads its lease's start.
        var leaseUntil = milliseconds(clock()) + Self.span(grantedLease(lease))
        // The new token must differ from the old ones, or a renewal could not be told from them.
        while held.values.contains(leaseUntil) { leaseUntil += 1 }
        // Only the claim that set `lease_until` (?3) may extend or give back its lease.
        let renew = try storage.statement(
          "UPDATE records SET lease_until = ?1 WHERE id = ?2 AND state = 'in_flight' AND lease_until = ?3")
        var renewed: [UUID: Int64] = [:]
        for (id, token) in held
        where try renew.run([.integer(leaseUntil), .text(id.recordText), .integer(token)]) == 1 {
          renewed[id] = leaseUntil
        }
        return renewed
      }
    }
  }

  /// Gives back the records `held` (record id → lease token) that this claim still holds: pending,
  /// the claim's attempt not counted. Returns how many went back.
  @discardableResult
  func release(held: [UUID: Int64]) throws -> Int {
    guard !held.isEmpty else { return 0 }
    let now = milliseconds(clock())
    return try withStorage { storage in
      try storage.transaction {
        // Fenced like `renew`: only while the row still holds this claim's lease token (?2).
        let releaseHeld = try storage.statement(
          """
          UPDATE records SET state = 'pending', lease_until = 0, attempts = max(attempts - 1, 0), changed = ?3
          WHERE id = ?1 AND state = 'in_flight' AND lease_until = ?2
          """)
        return try held.reduce(0) {
          $0 + (try releaseHeld.run([.text($1.key.recordText), .integer($1.value), .integer(now)]))
        }
      }
    }
  }

  /// A length of time in the milliseconds the columns hold: NaN and negative times are 0, and
  /// times beyond `longestSpan` (infinity among them) are that, so no value traps or overflows.
  static func span(_ interval: TimeInterval) -> Int64 {
    guard interval > 0 else { return 0 }
    return Int64((min(interval, longestSpan) * 1000).rounded())
  }

  /// The longest time a container counts in, in seconds: about 31,700 years.
  static let longestSpan: TimeInterval = 1e12

  /// `lease` as `claim` grants it: 0 …`maximumLease`, NaN taken as `maximumLease` (a record a
  /// deliverer holds for no time would be claimed again at once by another).
  func grantedLease(_ lease: TimeInterval) -> TimeInterval {
    lease.isNaN ? configuration.maximumLease : min(max(lease, 0), configuration.maximumLease)
  }

  /// Makes the pending records of `queue` that last failed for want of a network due now (the
  /// network changed: their backoff restarts). Records a server answered (`http-…`: its
  /// Retry-After, backoff after a 5xx) keep their due time. Attempt counts are kept, so the
  /// attempt ceiling still parks what keeps failing.
  ///
  /// - Parameter queue: the queue whose records waited for the network.
  /// - Returns: how many pending records were made due (including some already due).
  /// - Throws: `QueueError` when the container cannot be written.
  @discardableResult
  public func makeDue(queue: String) throws -> Int {
    try withStorage { storage in
      try storage.transaction {
        // Only records whose last failure was the network's (no `http-…` answer): a server that asked
        // for a wait (Retry-After, backoff after a 5xx) is not hurried by a route change on our side.
        try storage.statement(
          """
          UPDATE records SET next_attempt_at = 0
          WHERE queue = ? AND state = 'pending' AND (error_kind IS NULL OR error_kind NOT LIKE 'http-%')
          """
        ).run([.text(queue)])
      }
    }
  }

  /// Deletes records not in flight (pending, parked and in review) older than the maximum age,
  /// counting them. Age is read on the container's age clock (advanced here), never straight from
  /// the wall clock.
  func expire(_ storage: Storage, now: Int64) throws {
    let ageClock = try observeAge(storage, wall: now, reading: monotonic())
    guard let age = configuration.maximumAge else { return }
    var freed = 0
    var count = 0
    let cutoff = ageClock - Self.span(age)
    try storage.statement(
      "SELECT seq, size FROM records WHERE coalesce(born, created_at) < ? AND state != 'in_flight'"
    ).query([.integer(cutoff)]) { row in
      freed += Int(row.int(1))
      count += 1
    }
    guard count > 0 else { return }
    try storage.statement(
      "DELETE FROM records WHERE coalesce(born, created_at) < ? AND state != 'in_flight'"
    ).run([.integer(cutoff)])
    storage.deletedInTransaction = true
    try storage.addBytes(-freed)
    try storage.countDrop(.age, count)
  }

  // MARK: - Age

  /// The age clock's value and the readings it was last advanced from, in the container's meta:
  /// the rows whose keys begin with `age_` (`age_clock`, `age_wall`, `age_boot`, `age_monotonic`;
  /// the backquote is the byte after the underscore). A range of the primary key, not
  /// `IN ('age_clock', …)`: for that list SQLite built and filled a temporary index on every
  /// call, which cost more than the rest of an enqueue's statements together (callgrind: about
  /// 41,000 of an enqueue's 145,000 instructions).
  static let readAgeClockSQL: StaticString = "SELECT key, value FROM meta WHERE key >= 'age_' AND key < 'age`'"

  /// Whether the age clock has been observed once (`init` starts it before any record is stamped).
  func ageClockStarted(_ storage: Storage) throws -> Bool {
    var started = false
    try storage.statement(Self.readAgeClockSQL).query { if $0.text(0) == "age_clock" { started = true } }
    return started
  }

  /// The container's age clock now, in milliseconds: the value it had at its last observation plus
  /// the time that really passed since, by the monotonic clock when the reading is of the same
  /// boot, else by the wall clock's advance (never negative). Before its first observation, the
  /// wall clock.
  func ageNow(_ storage: Storage, wall: Int64, reading: MonotonicReading) throws -> Int64 {
    var (last, lastWall, lastBoot, lastMonotonic): (Int64?, Int64?, String?, Int64?) = (nil, nil, nil, nil)
    try storage.statement(Self.readAgeClockSQL).query { row in
      switch row.text(0) {
      case "age_clock": last = row.text(1).flatMap { Int64($0) }
      case "age_wall": lastWall = row.text(1).flatMap { Int64($0) }
      case "age_boot": lastBoot = row.text(1)
      case "age_monotonic": lastMonotonic = row.text(1).flatMap { Int64($0) }
      default: break
      }
    }
    guard let last, let lastWall else { return wall }
    if !reading.boot.isEmpty, lastBoot == reading.boot, let lastMonotonic {
      return last + max(0, reading.milliseconds - lastMonotonic)
    }
    return last + max(0, wall - lastWall)
  }

  /// Advances the age clock to now and records the readings it was advanced from. Inside a
  /// transaction.
  @discardableResult
  func observeAge(_ storage: Storage, wall: Int64, reading: MonotonicReading) throws -> Int64 {
    let now = try ageNow(storage, wall: wall, reading: reading)
    for (key, value) in [
      ("age_clock", String(now)), ("age_wall", String(wall)), ("age_boot", reading.boot),
      ("age_monotonic", String(reading.milliseconds)),
    ] {
      try storage.statement(
        "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value"
      ).run([.text(key), .text(value)])
    }
    return now
  }
}
