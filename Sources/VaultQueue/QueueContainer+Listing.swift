import Foundation
import VaultCrypto

/// Listing a large container without holding it in memory: `vault queue list` streams its rows
/// and pages with `--limit` and `--after`. Metadata only, never contents.
extension QueueContainer {

  /// Calls `body` with each record (metadata only) of `queue` in `state`, oldest first (storage
  /// order), one row at a time as SQLite reads it: memory stays flat however many records match.
  ///
  /// - Parameters:
  ///   - queue: the queue to list; nil for every queue.
  ///   - state: the state to list; nil for every state.
  ///   - after: start after the record with this id in storage order (whatever its queue and
  ///     state), so the last id of one page starts the next; nil to start at the oldest.
  ///   - limit: at most this many records (0 lists none); nil for all.
  ///   - body: called once per record, in order. It runs while the container is locked for this
  ///     thread: it must not call back into this container. What it throws stops the listing.
  /// - Returns: how many records `body` was given.
  /// - Throws: `ListingError.negativeLimit` for a `limit` below 0; `ListingError.unknownRecord`
  ///   when no record has the id `after` (it may have been delivered since the previous page);
  ///   `QueueError` when the container cannot be read; what `body` throws.
  @discardableResult
  public func forEachRecord(
    queue: String? = nil, state: RecordState? = nil, after: UUID? = nil, limit: Int? = nil,
    _ body: (RecordSummary) throws -> Void
  ) throws -> Int {
    if let limit, limit < 0 { throw ListingError.negativeLimit }
    return try withStorage { storage in
      var afterSeq: Int64 = 0
      if let after {
        let seqOfID = try storage.statement("SELECT seq FROM records WHERE id = ?")
        guard let seq = try seqOfID.scalar([.text(after.recordText)]) else {
          throw ListingError.unknownRecord(after)
        }
        afterSeq = seq
      }
      // A negative LIMIT is SQLite's "no limit".
      let page = try storage.statement(
        """
        SELECT id, queue, state, attempts, error_kind, created_at, next_attempt_at, size, key_version
        FROM records WHERE (?1 IS NULL OR queue = ?1) AND (?2 IS NULL OR state = ?2) AND seq > ?3
        ORDER BY seq LIMIT ?4
        """)
      var count = 0
      try page.query([
        queue.map { .text($0) } ?? .null, state.map { .text($0.rawValue) } ?? .null, .integer(afterSeq),
        .integer(Int64(limit ?? -1)),
      ]) { row in
        try body(
          RecordSummary(
            id: UUID(uuidString: row.text(0) ?? "") ?? Self.unreadableID, queue: row.text(1) ?? "",
            state: RecordState(rawValue: row.text(2) ?? "") ?? .pending, attempts: Int(row.int(3)),
            errorKind: row.text(4), createdAt: Self.date(milliseconds: row.int(5)),
            nextAttemptAt: row.int(6) > 0 ? Self.date(milliseconds: row.int(6)) : nil,
            bytes: Int(row.int(7)), keyVersion: UInt32(clamping: row.int(8))))
        count += 1
      }
      return count
    }
  }

  /// One page of records (metadata only): at most `limit` of `queue` in `state` after the record
  /// `after`, oldest first. For pages of a size the caller can hold; `forEachRecord` streams.
  ///
  /// - Parameters:
  ///   - queue: the queue to list; nil for every queue.
  ///   - state: the state to list; nil for every state.
  ///   - limit: at most this many records; nil for all.
  ///   - after: start after the record with this id in storage order; nil to start at the oldest.
  /// - Returns: the page, oldest first; the last record's id starts the next page.
  /// - Throws: as `forEachRecord`.
  public func list(queue: String? = nil, state: RecordState? = nil, limit: Int?, after: UUID?) throws
    -> [RecordSummary]
  {
    var rows: [RecordSummary] = []
    try forEachRecord(queue: queue, state: state, after: after, limit: limit) { rows.append($0) }
    return rows
  }
}

/// Why a listing could not start.
public enum ListingError: Error, Equatable, Sendable, CodedError {
  /// No record has the id a page was to start after (delivered or removed since, or never there).
  case unknownRecord(UUID)
  /// A negative limit.
  case negativeLimit

  /// What went wrong and what to do, for people.
  public var description: String {
    switch self {
    case .unknownRecord(let id):
      "no record \(id.recordText) in the container to list after (it may have been delivered since); "
        + "list from the start or after a later id"
    case .negativeLimit: "the limit must not be negative"
    }
  }

  /// A stable code: `listing.unknown-record` or `listing.negative-limit`.
  public var code: String {
    switch self {
    case .unknownRecord: "listing.unknown-record"
    case .negativeLimit: "listing.negative-limit"
    }
  }
}
