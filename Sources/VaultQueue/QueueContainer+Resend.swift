import Foundation

/// Resending in bulk: every parked or review record, or those of one state or one queue, back to
/// pending, as `resend(_:)` does for records named by id.
extension QueueContainer {
  /// The parked and review records of `queue` (every queue when nil) in one of `states`, oldest
  /// first. Other states in `states` are ignored: only records out of the delivery flow are resent.
  static let resendableSQL: StaticString = """
    SELECT id FROM records WHERE (?1 IS NULL OR queue = ?1) AND state IN (?2, ?3) ORDER BY seq
    """

  /// Returns every parked or review record of `queue` (all queues when nil) in `states` to pending,
  /// with a fresh attempt count, exactly as `resend(_:)` does for the same ids.
  ///
  /// The records are picked first, then moved in one transaction; a record that left parked or
  /// review in between (another process resent or purged it) is not counted.
  ///
  /// - Parameters:
  ///   - states: `.parked`, `.review` or both (the default); other states are ignored, so an empty
  ///     or pending-only set resends nothing.
  ///   - queue: the queue to resend from; nil for every queue.
  /// - Returns: how many records moved to pending.
  /// - Throws: `QueueError` when the container cannot be read or written.
  @discardableResult
  public func resendAll(in states: Set<RecordState> = [.parked, .review], queue: String? = nil) throws -> Int {
    let wanted = [RecordState.parked, .review].map { states.contains($0) ? Statement.Value.text($0.rawValue) : .null }
    let ids = try withStorage { storage in
      var ids: [UUID] = []
      try storage.statement(Self.resendableSQL).query([queue.map { .text($0) } ?? .null] + wanted) { row in
        // A row whose id is not a UUID cannot be named to `resend(_:)`; it stays where it is.
        if let id = UUID(uuidString: row.text(0) ?? "") { ids.append(id) }
      }
      return ids
    }
    return ids.isEmpty ? 0 : try resend(ids)
  }
}
