import Foundation

/// Records one deliverer claimed together, kept leased while it works through them.
///
/// `claim` leases records for a fixed time; a deliverer that takes longer (a slow server, a large
/// batch) would see its lease run out and another deliverer send the same records again. Before
/// each send, `keep()` renews the leases of every record still held once half the lease has passed
/// (measured on CLOCK_BOOTTIME, so a wall-clock step neither hurries nor delays it, and a suspend
/// longer than the lease is noticed), and says
/// which records are still held: a record this claim lost (the process was suspended past its lease
/// and another deliverer took it) must not be sent. `releaseUnsettled()` gives back whatever is
/// still held, as when a pass is stopped.
///
/// Renewal, release, `ack`, `fail`, `reject` and `park` are fenced by the lease each record was
/// given: they never touch a record that was acked, failed, parked, released or claimed again since
/// (a late answer to a deliverer whose lease ran out, after a suspend or a wall-clock step, must not
/// delete or reschedule a record another deliverer holds, nor a new record sent since with the
/// same id). A lease must be longer than twice the longest single send, so that it cannot end
/// during one. Sendable: its calls take turns (each holds the claim while it writes to the
/// container), so a claim may be handed to another thread or settled from a task; each call
/// blocks its thread for one transaction and its fsync, so from async code make them off Swift's
/// concurrency pool (a dispatch queue of the app's) as the outbox does.
public final class Claim: @unchecked Sendable {
  /// The container the records were claimed from, where renewals and releases go.
  public let container: QueueContainer
  /// The records as claimed, oldest first.
  public let records: [ClaimedRecord]
  /// The lease each renewal grants, in seconds (at most the container's `maximumLease`).
  public let lease: TimeInterval
  /// Guards `held` and `renewedAt`, and makes the calls take turns.
  private let lock = NSLock()
  private var held: [UUID: Int64]
  private var renewedAt: UInt64

  /// Takes over records just returned by `QueueContainer.claim`, to keep them leased.
  ///
  /// - Parameters:
  ///   - container: the container they were claimed from.
  ///   - records: the claimed records; the oldest lease among them dates the first renewal.
  ///   - lease: the lease the claim asked for, in seconds; shortened to `maximumLease`.
  public init(container: QueueContainer, records: [ClaimedRecord], lease: TimeInterval) {
    self.container = container
    self.records = records
    self.lease = container.grantedLease(lease)
    held = Dictionary(records.map { ($0.id, $0.leaseToken) }, uniquingKeysWith: { first, _ in first })
    renewedAt = records.map(\.leasedAt).min() ?? BootClock.nanoseconds()
  }

  /// Renews the leases still held if half the lease has passed since they were taken or last
  /// renewed, and returns the ids still held (settled records drop out at the next renewal).
  ///
  /// - Returns: the ids this claim still holds: send only those.
  /// - Throws: `QueueError` when the renewal cannot be written.
  @discardableResult
  public func keep() throws -> Set<UUID> {
    try lock.withLock {
      let now = BootClock.nanoseconds()
      if Double(now &- renewedAt) / 1e9 >= lease / 2 {
        held = try container.renew(held, lease: lease)
        renewedAt = now
      }
      return Set(held.keys)
    }
  }

  /// Whether this claim still holds `id` (as of the last `keep()`).
  ///
  /// - Parameter id: a claimed record's id.
  /// - Returns: false for a record this claim never held or lost at its last renewal.
  public func holds(_ id: UUID) -> Bool { lock.withLock { held[id] != nil } }

  /// Deletes the records of `ids` that the receiver has and this claim still holds (in flight
  /// under its lease), fenced as renewal is: a record this claim never held, lost, or that was
  /// settled since is left as it is, whatever its state. Acked records are no longer held.
  ///
  /// - Parameter ids: the delivered records.
  /// - Returns: the ids deleted.
  /// - Throws: `QueueError` when the container cannot be written.
  @discardableResult
  public func ack(_ ids: [UUID]) throws -> Set<UUID> {
    try lock.withLock {
      let acked = try container.ack(held: leases(of: ids))
      for id in acked { held[id] = nil }
      return acked
    }
  }

  /// Records a failed delivery of the records of `ids` this claim still holds, fenced as `ack` is
  /// (a record whose lease ran out under this claim and that another deliverer took since is left
  /// to it): see `QueueContainer.fail` for the scheduling and parking. They are no longer held.
  ///
  /// - Parameters:
  ///   - ids: the records that failed.
  ///   - errorKind: what failed, by kind, never a content.
  ///   - retryAfter: the server's Retry-After, if it gave one.
  ///   - serverAnswered: false for network failures (never counted toward parking).
  ///   - sharedDelay: one jittered delay for all of them (a telemetry batch).
  /// - Returns: for each id still held, whether it was rescheduled (and when) or parked.
  /// - Throws: `QueueError` when the container cannot be written.
  @discardableResult
  public func fail(
    _ ids: [UUID], errorKind: String, retryAfter: TimeInterval? = nil, serverAnswered: Bool = true,
    sharedDelay: Bool = false
  ) throws -> [UUID: FailOutcome] {
    try lock.withLock {
      let outcomes = try container.fail(
        held: leases(of: ids), errorKind: errorKind, retryAfter: retryAfter,
        serverAnswered: serverAnswered, sharedDelay: sharedDelay)
      for id in outcomes.keys { held[id] = nil }
      return outcomes
    }
  }

  /// Moves the records of `ids` this claim still holds to review (refused for good), fenced as
  /// `ack` is; counted in the drop ledger as `rejected`. They are no longer held.
  ///
  /// - Parameters:
  ///   - ids: the refused records.
  ///   - errorKind: why, by kind, never a content.
  /// - Returns: the ids moved.
  /// - Throws: `QueueError` when the container cannot be written.
  @discardableResult
  public func reject(_ ids: [UUID], errorKind: String) throws -> Set<UUID> {
    try settle(ids, to: .review, errorKind: errorKind, counting: .rejected)
  }

  /// Parks the records of `ids` this claim still holds (kept, resendable, never retried
  /// automatically), fenced as `ack` is; counted in the drop ledger as `parked`. They are no
  /// longer held.
  ///
  /// - Parameters:
  ///   - ids: the records to park.
  ///   - errorKind: why, by kind, never a content.
  /// - Returns: the ids parked.
  /// - Throws: `QueueError` when the container cannot be written.
  @discardableResult
  public func park(_ ids: [UUID], errorKind: String) throws -> Set<UUID> {
    try settle(ids, to: .parked, errorKind: errorKind, counting: .parked)
  }

  /// The leases this claim holds for the records of `ids` (record id → lease token), looked up per
  /// id: a telemetry batch settles up to a claim's 2,000 events, and filtering the held records
  /// against the array cost their product. Called with `lock` held.
  private func leases(of ids: [UUID]) -> [UUID: Int64] {
    var leases: [UUID: Int64] = [:]
    for id in ids { if let token = held[id] { leases[id] = token } }
    return leases
  }

  private func settle(_ ids: [UUID], to state: RecordState, errorKind: String, counting reason: DropReason) throws
    -> Set<UUID>
  {
    try lock.withLock {
      let moved = try container.move(
        held: leases(of: ids), to: state, errorKind: errorKind, counting: reason)
      for id in moved { held[id] = nil }
      return moved
    }
  }

  /// Gives back every record this claim still holds and has not settled (pending again, the
  /// claim's attempt not counted). Afterwards the claim holds nothing. Each keeps its place, so
  /// the next claim takes it first again: for records that could not be sent, use `fail`, or
  /// they hold back the newer records of their queue.
  ///
  /// - Returns: how many records went back (a record already settled, or claimed by another
  ///   deliverer since, is not touched and not counted).
  /// - Throws: `QueueError` when the release cannot be written.
  @discardableResult
  public func releaseUnsettled() throws -> Int {
    try lock.withLock {
      let released = try container.release(held: held)
      held = [:]
      return released
    }
  }
}
