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
/// Renewal, release and `ack` are fenced by the lease each record was given: they never touch a record
/// that was acked, failed, parked, released or claimed again since. A lease must be longer than
/// twice the longest single send, so that it cannot end during one. Not thread-safe: one pass uses
/// it at a time.
public final class Claim {
  /// The container the records were claimed from, where renewals and releases go.
  public let container: QueueContainer
  /// The records as claimed, oldest first.
  public let records: [ClaimedRecord]
  /// The lease each renewal grants, in seconds (at most the container's `maximumLease`).
  public let lease: TimeInterval
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
    self.lease = min(lease, container.configuration.maximumLease)
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
    let now = BootClock.nanoseconds()
    if Double(now &- renewedAt) / 1e9 >= lease / 2 {
      held = try container.renew(held, lease: lease)
      renewedAt = now
    }
    return Set(held.keys)
  }

  /// Whether this claim still holds `id` (as of the last `keep()`).
  ///
  /// - Parameter id: a claimed record's id.
  /// - Returns: false for a record this claim never held or lost at its last renewal.
  public func holds(_ id: UUID) -> Bool { held[id] != nil }

  /// Deletes the records of `ids` that the receiver has and this claim still holds (in flight
  /// under its lease), fenced as renewal is: a record this claim never held, lost, or that was
  /// settled since is left as it is, whatever its state. Acked records are no longer held.
  ///
  /// - Parameter ids: the delivered records.
  /// - Returns: the ids deleted.
  /// - Throws: `QueueError` when the container cannot be written.
  @discardableResult
  public func ack(_ ids: [UUID]) throws -> Set<UUID> {
    let mine = held.filter { ids.contains($0.key) }
    let acked = try container.ack(held: mine)
    for id in acked { held[id] = nil }
    return acked
  }

  /// Gives back every record this claim still holds and has not settled (pending again, the
  /// claim's attempt not counted). Afterwards the claim holds nothing.
  ///
  /// - Returns: how many records went back (a record already settled, or claimed by another
  ///   deliverer since, is not touched and not counted).
  /// - Throws: `QueueError` when the release cannot be written.
  @discardableResult
  public func releaseUnsettled() throws -> Int {
    let released = try container.release(held: held)
    held = [:]
    return released
  }
}
