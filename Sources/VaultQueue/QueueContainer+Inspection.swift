import Foundation
import Vault
import VaultCrypto
import VaultKeys

/// Inspection: counts and metadata for `vault queue stats` / `list`; never contents.
extension QueueContainer {
  /// The drops table's rows for the resend ledger are `resent-parked` and `resent-review`.
  static let resentPrefix = "resent-"

  /// Counts for `vault queue stats`: records per state, key version and queue, bytes, the drop
  /// ledger and the minimum seal version. Reads metadata and envelope headers only, no key.
  ///
  /// - Returns: the counts as of one read (one snapshot of the file, while others write).
  /// - Throws: `QueueError` when the container cannot be read.
  public func stats() throws -> QueueStats {
    try withStorage { storage in try storage.readSnapshot { try stats(storage) } }
  }

  /// The drop ledger alone, as `stats().dropped` gives it: records removed without delivery, by
  /// reason (`cap`, `age`, `parked`, `rejected`, …), counted since the container was made. Cheap
  /// (no record is read): compare it before and after an enqueue to learn whether the byte cap
  /// dropped older records.
  ///
  /// - Returns: the count per reason (every reason listed, zero when none).
  /// - Throws: `QueueError` when the container cannot be read.
  public func dropped() throws -> [String: Int] {
    try withStorage { try ledgers($0).dropped }
  }

  /// The drop ledger (every reason listed, zero when none) and the resend ledger, which the same
  /// table holds under `resent-<state>` (see `resend(_:)`).
  private func ledgers(_ storage: Storage) throws -> (dropped: [String: Int], resent: [String: Int]) {
    var dropped: [String: Int] = [:]
    var resent: [String: Int] = [:]
    for reason in DropReason.allCases { dropped[reason.rawValue] = 0 }
    try storage.statement("SELECT reason, count FROM drops").query {
      let reason = $0.text(0) ?? "?"
      if reason.hasPrefix(Self.resentPrefix) {
        resent[String(reason.dropFirst(Self.resentPrefix.count))] = Int($0.int(1))
      } else {
        dropped[reason] = Int($0.int(1))
      }
    }
    return (dropped, resent)
  }

  /// `stats()`'s counts, read with `storage` inside its read transaction.
  private func stats(_ storage: Storage) throws -> QueueStats {
    var stats = QueueStats(
      container: path, total: 0, bytes: 0, byState: [:], byVersion: [:], byQueue: [:], dropped: [:],
      minimumSealVersion: UInt32(try storage.minimumSealVersion()))
    for state in RecordState.allCases { stats.byState[state.rawValue] = 0 }
    try storage.statement("SELECT state, count(*) FROM records GROUP BY state").query {
      stats.byState[$0.text(0) ?? "?"] = Int($0.int(1))
    }
    // From the envelopes' own headers, as rotation counts them (not the plaintext column).
    let headers = try storage.statement(Self.headerCountsSQL)
    for (version, count) in try Self.headerCounts(headers, keyring: vault.keyringID).byVersion {
      stats.byVersion[String(version)] = count
    }
    try storage.statement("SELECT queue, count(*) FROM records GROUP BY queue").query {
      stats.byQueue[$0.text(0) ?? "?"] = Int($0.int(1))
    }
    let ledgers = try ledgers(storage)
    stats.dropped = ledgers.dropped
    stats.resent.merge(ledgers.resent) { $1 }
    stats.total = stats.byState.values.reduce(0, +)
    stats.bytes = try storage.totalBytes()
    return stats
  }

  /// Records (metadata only) of `queue` (all queues when nil) in `state` (all when nil), oldest first.
  ///
  /// - Parameters:
  ///   - queue: the queue to list; nil for every queue.
  ///   - state: the state to list; nil for every state.
  /// - Returns: one summary per record, never its contents; a row whose id is not a UUID is
  ///   listed with the nil UUID.
  /// - Throws: `QueueError` when the container cannot be read.
  public func list(queue: String? = nil, state: RecordState? = nil) throws -> [RecordSummary] {
    try withStorage { storage in
      var rows: [RecordSummary] = []
      let listAll = try storage.statement(
        """
        SELECT id, queue, state, attempts, error_kind, created_at, next_attempt_at, size, key_version
        FROM records WHERE (?1 IS NULL OR queue = ?1) AND (?2 IS NULL OR state = ?2) ORDER BY seq
        """)
      try listAll.query([queue.map { .text($0) } ?? .null, state.map { .text($0.rawValue) } ?? .null]) { row in
        rows.append(
          RecordSummary(
            id: UUID(uuidString: row.text(0) ?? "") ?? Self.unreadableID, queue: row.text(1) ?? "",
            state: RecordState(rawValue: row.text(2) ?? "") ?? .pending, attempts: Int(row.int(3)),
            errorKind: row.text(4), createdAt: Self.date(milliseconds: row.int(5)),
            nextAttemptAt: row.int(6) > 0 ? Self.date(milliseconds: row.int(6)) : nil,
            bytes: Int(row.int(7)), keyVersion: UInt32(clamping: row.int(8))))
      }
      return rows
    }
  }

  /// The pending records of `queue` taken together, read without loading them (listing a million
  /// pending records to take the earliest time or the largest size held 138 MB and took 2.1 s:
  /// an outside review of `Outbox.start` and `memo relay`).
  ///
  /// - Parameter queue: the queue.
  /// - Returns: how many are pending, the largest envelope among them (0 when none), and the
  ///   earliest time one waits for (nil when none waits: each is due now, or none is pending).
  /// - Throws: `QueueError` when the container cannot be read.
  public func pendingAggregate(queue: String) throws -> PendingAggregate {
    try withStorage { storage in
      var aggregate = PendingAggregate(count: 0, largestEnvelope: 0, earliestWait: nil)
      try storage.statement(
        """
        SELECT count(*), coalesce(max(size), 0), min(CASE WHEN next_attempt_at > 0 THEN next_attempt_at END)
        FROM records WHERE queue = ? AND state = 'pending'
        """
      ).query([.text(queue)]) { row in
        aggregate = PendingAggregate(
          count: Int(row.int(0)), largestEnvelope: Int(row.int(1)),
          earliestWait: row.isNull(2) ? nil : Self.date(milliseconds: row.int(2)))
      }
      return aggregate
    }
  }

  /// The container's clock (for a delivery pass that claims what is due by its start).
  public var now: Date { clock() }

  /// How many records of `queue` are in `state` (without loading them).
  ///
  /// - Parameters:
  ///   - queue: the queue to count.
  ///   - state: the state to count.
  /// - Returns: the number of records.
  /// - Throws: `QueueError` when the container cannot be read.
  public func count(queue: String, state: RecordState) throws -> Int {
    try withStorage { storage in
      let countInState = try storage.statement("SELECT count(*) FROM records WHERE queue = ? AND state = ?")
      return Int(try countInState.scalar([.text(queue), .text(state.rawValue)]) ?? 0)
    }
  }

  /// Writes the WAL back into the database and truncates it, so deleted or re-sealed rows leave no
  /// stale frames. Never waits: returns false (nothing lost; it runs again next time) when another
  /// connection is reading an older snapshot or writing.
  ///
  /// - Returns: true when the WAL was emptied; false when that could not be done now, or the
  ///   container was opened `.readOnly`.
  /// - Throws: nothing today (a checkpoint that fails returns false); the signature leaves room
  ///   for `QueueError`.
  @discardableResult
  public func checkpoint() throws -> Bool { try withStorage { $0.checkpoint() } }
}

/// The pending records of one queue taken together (`QueueContainer.pendingAggregate(queue:)`):
/// what a deliverer needs before it claims (when the next one is due, how much memory the largest
/// needs), without a summary of each.
public struct PendingAggregate: Sendable, Equatable {
  /// How many records are pending.
  public var count: Int
  /// The largest envelope among them, in bytes (0 when none is pending): about its payload's size
  /// plus `Envelope.overhead`.
  public var largestEnvelope: Int
  /// The earliest time one of them waits for; nil when none waits (each is due now, or none is pending).
  public var earliestWait: Date?

  /// Makes an aggregate (for tests and twins; `QueueContainer.pendingAggregate(queue:)` reads one).
  ///
  /// - Parameters:
  ///   - count: how many records are pending.
  ///   - largestEnvelope: the largest envelope among them, in bytes.
  ///   - earliestWait: the earliest time one of them waits for, if any.
  public init(count: Int, largestEnvelope: Int, earliestWait: Date?) {
    self.count = count
    self.largestEnvelope = largestEnvelope
    self.earliestWait = earliestWait
  }
}
