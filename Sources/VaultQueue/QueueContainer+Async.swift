import Foundation
import Vault

/// Async forms of the container calls that block on the disk (an fsync per transaction), on
/// SQLite's write lock held by another process, on the connection held by another call, or on the
/// vault's lock during a rotation. Each runs the synchronous call on a thread of its own, never on
/// one of Swift's concurrency pool, and means exactly what the synchronous call means.
///
/// In async code these forms are the ones Swift picks, so a call there needs `await`.
/// Cancellation never interrupts a call that has started: a transaction that began commits (its
/// fsync is not undone) and its result is returned. A task cancelled before the call started gets
/// `CancellationError` and nothing was written.
extension QueueContainer {
  /// Opens the container at `path` for `vault`, without holding a thread of Swift's concurrency
  /// pool while the file is probed, created or registered with the vault (registering waits for
  /// the vault's lock while a rotation runs).
  ///
  /// The same as `init(path:vault:configuration:mode:clock:random:monotonic:)`, run on a thread
  /// of its own. A factory rather than an async initializer: an initializer cannot hand over an
  /// object made on another thread, and an async `init` of the same shape would make every
  /// `QueueContainer(path:vault:)` in async code need `await`.
  ///
  /// - Parameters:
  ///   - path: the container file; made absolute against the working directory.
  ///   - vault: the vault whose keys seal and open the records.
  ///   - configuration: cap, age, retry and lease settings for this connection.
  ///   - mode: whether a missing container may be created (the default), must exist, or is only
  ///     read.
  ///   - clock: the wall clock; `Date.init` by default.
  ///   - random: uniform numbers in [0, 1) for the backoff's jitter.
  ///   - monotonic: the clock that measures age; CLOCK_BOOTTIME by default.
  /// - Returns: the open container.
  /// - Throws: `CancellationError` when the task was cancelled before the open started (nothing
  ///   was created or registered); otherwise what the initializer throws (`QueueError`,
  ///   `VaultError.containerBesideKeyfile`, `RotationError`, the manifest's errors).
  public static func open(
    path: String, vault: Vault, configuration: QueueConfiguration = QueueConfiguration(),
    mode: OpenMode = .createIfNeeded, clock: @escaping @Sendable () -> Date = Date.init,
    random: @escaping @Sendable () -> Double = { Double.random(in: 0..<1) },
    monotonic: @escaping @Sendable () -> MonotonicReading = MonotonicReading.system
  ) async throws -> QueueContainer {
    try await BlockingWork.run {
      try QueueContainer(
        path: path, vault: vault, configuration: configuration, mode: mode, clock: clock, random: random,
        monotonic: monotonic)
    }
  }

  /// Seals `payload` and stores it durably in `queue`, without holding a thread of Swift's
  /// concurrency pool during the transaction's fsync; returns after the transaction commits.
  ///
  /// - Parameters:
  ///   - payload: the record, up to the container's byte cap less 89 bytes of envelope.
  ///   - queue: the queue within the container (1–128 bytes of UTF-8, no NUL).
  ///   - id: the record's id; a random one when nil. An id already in the container is not stored again.
  /// - Returns: `.stored`, or `.duplicate` (storing nothing) when a record with `id` is already in
  ///   the container.
  /// - Throws: `CancellationError` when the task was cancelled before the enqueue started (nothing
  ///   was stored; once started, the record is stored and its outcome returned); otherwise what
  ///   the synchronous `enqueue(_:queue:id:)` throws.
  @discardableResult
  public func enqueue(_ payload: [UInt8], queue: String, id: UUID? = nil) async throws -> EnqueueOutcome {
    try await BlockingWork.run { try self.enqueue(payload, queue: queue, id: id) }
  }

  /// Seals `payload` and stores it durably in `queue`, without holding a thread of Swift's
  /// concurrency pool; the same as the `[UInt8]` form.
  ///
  /// - Parameters:
  ///   - payload: the record, up to the container's byte cap less 89 bytes of envelope.
  ///   - queue: the queue within the container (1–128 bytes of UTF-8, no NUL).
  ///   - id: the record's id; a random one when nil. An id already in the container is not stored again.
  /// - Returns: `.stored`, or `.duplicate` (storing nothing) when a record with `id` exists.
  /// - Throws: `CancellationError` when the task was cancelled before the enqueue started (nothing
  ///   was stored); otherwise what the synchronous `enqueue(_:queue:id:)` throws (`QueueError`,
  ///   `KeyStoreError`).
  @discardableResult
  public func enqueue(_ payload: Data, queue: String, id: UUID? = nil) async throws -> EnqueueOutcome {
    try await BlockingWork.run { try self.enqueue(payload, queue: queue, id: id) }
  }

  /// Seals and stores several records in one transaction (one fsync for all of them), without
  /// holding a thread of Swift's concurrency pool: all are stored, or none.
  ///
  /// - Parameters:
  ///   - records: ids and payloads, each payload up to the byte cap less 89 bytes of envelope.
  ///   - queue: the queue within the container (1–128 bytes of UTF-8, no NUL).
  /// - Returns: one outcome per record, in order: `.stored`, or `.duplicate` when its id was
  ///   already in the container.
  /// - Throws: `CancellationError` when the task was cancelled before the enqueue started (none
  ///   was stored; once started, all are stored or none, as the synchronous call); otherwise what
  ///   the synchronous `enqueue(contentsOf:queue:)` throws.
  @discardableResult
  public func enqueue(contentsOf records: [(id: UUID, payload: [UInt8])], queue: String) async throws
    -> [EnqueueOutcome]
  {
    // A tuple array is not Sendable by inference; its elements (UUID, [UInt8]) are.
    let ids = records.map(\.id)
    let payloads = records.map(\.payload)
    return try await BlockingWork.run {
      try self.enqueue(contentsOf: Array(zip(ids, payloads).map { (id: $0, payload: $1) }), queue: queue)
    }
  }

  /// Claims due records of `queue`, oldest first, under a lease, without holding a thread of
  /// Swift's concurrency pool while the records are read, opened and leased.
  ///
  /// The same as the synchronous `claim(queue:maxCount:maxBytes:lease:dueBy:)`.
  ///
  /// - Parameters:
  ///   - queue: the queue to claim from.
  ///   - maxCount: the most records to claim.
  ///   - maxBytes: the most envelope bytes to claim, except that the first due record is always
  ///     taken.
  ///   - lease: how long the records stay with this deliverer, in seconds (clamped to
  ///     0…`maximumLease`).
  ///   - dueBy: claim only records due before this time; nil for everything due now.
  /// - Returns: the claimed records that opened, oldest first; empty when nothing is due.
  /// - Throws: `CancellationError` when the task was cancelled before the claim started (nothing
  ///   was claimed; a claim that started returns its records, which are then the caller's to
  ///   settle or give back); otherwise what the synchronous `claim` throws.
  public func claim(
    queue: String, maxCount: Int = 100, maxBytes: Int = 1 << 20, lease: TimeInterval = 60, dueBy: Date? = nil
  ) async throws -> [ClaimedRecord] {
    try await BlockingWork.run {
      try self.claim(queue: queue, maxCount: maxCount, maxBytes: maxBytes, lease: lease, dueBy: dueBy)
    }
  }

  /// Deletes delivered records, without holding a thread of Swift's concurrency pool during the
  /// transaction's fsync and the WAL checkpoint.
  ///
  /// - Parameter ids: the records the receiver has; ids no longer in the container are ignored.
  /// - Throws: `CancellationError` when the task was cancelled before the ack started (nothing was
  ///   deleted: the records stay in flight until their lease ends and are then delivered again);
  ///   otherwise what the synchronous `ack(_:)` throws.
  public func ack(_ ids: [UUID]) async throws {
    try await BlockingWork.run { try self.ack(ids) }
  }

  /// Records a failed delivery (schedules the next attempt, or parks the record), without holding
  /// a thread of Swift's concurrency pool during the transaction's fsync.
  ///
  /// The same as the synchronous `fail(_:errorKind:retryAfter:serverAnswered:sharedDelay:)`.
  ///
  /// - Parameters:
  ///   - ids: the claimed records that failed.
  ///   - errorKind: what failed, by kind (`http-503`, `connection-refused`), never a content.
  ///   - retryAfter: the server's Retry-After, if it gave one.
  ///   - serverAnswered: false for network failures, which never count toward the ceiling.
  ///   - sharedDelay: draw one jittered delay for all `ids`, so they are retried together.
  /// - Returns: for each id, whether it was rescheduled (and when) or parked; an id no longer in
  ///   flight is left out.
  /// - Throws: `CancellationError` when the task was cancelled before the call started (nothing was
  ///   recorded: the records stay in flight until their lease ends); otherwise what the
  ///   synchronous `fail` throws.
  @discardableResult
  public func fail(
    _ ids: [UUID], errorKind: String, retryAfter: TimeInterval? = nil, serverAnswered: Bool = true,
    sharedDelay: Bool = false
  ) async throws -> [UUID: FailOutcome] {
    try await BlockingWork.run {
      try self.fail(
        ids, errorKind: errorKind, retryAfter: retryAfter, serverAnswered: serverAnswered, sharedDelay: sharedDelay)
    }
  }

  /// Gives claimed records back (pending, the claim's attempt not counted), without holding a
  /// thread of Swift's concurrency pool during the transaction's fsync.
  ///
  /// - Parameter ids: the records to give back; those not in flight are left alone.
  /// - Throws: `CancellationError` when the task was cancelled before the call started (the records
  ///   stay in flight until their lease ends); otherwise what the synchronous `release(_:)` throws.
  public func release(_ ids: [UUID]) async throws {
    try await BlockingWork.run { try self.release(ids) }
  }

  /// Moves records the server refused to review, without holding a thread of Swift's concurrency
  /// pool during the transaction's fsync.
  ///
  /// - Parameters:
  ///   - ids: the records to move, whatever their state; unknown ids are ignored.
  ///   - errorKind: why, by kind (`http-400`, `too-large`), never a content.
  /// - Throws: `CancellationError` when the task was cancelled before the call started (nothing was
  ///   moved); otherwise what the synchronous `reject(_:errorKind:)` throws.
  public func reject(_ ids: [UUID], errorKind: String) async throws {
    try await BlockingWork.run { try self.reject(ids, errorKind: errorKind) }
  }

  /// Counts for `vault queue stats`, without holding a thread of Swift's concurrency pool while
  /// every envelope header is read (a scan of the whole container) or while another call holds
  /// the connection.
  ///
  /// - Returns: the counts as of one read.
  /// - Throws: `CancellationError` when the task was cancelled before the read started; otherwise
  ///   what the synchronous `stats()` throws.
  public func stats() async throws -> QueueStats {
    try await BlockingWork.run { try self.stats() }
  }

  /// Records (metadata only) of `queue` in `state`, oldest first, without holding a thread of
  /// Swift's concurrency pool while the container is read.
  ///
  /// - Parameters:
  ///   - queue: the queue to list; nil for every queue.
  ///   - state: the state to list; nil for every state.
  /// - Returns: one summary per record, never its contents.
  /// - Throws: `CancellationError` when the task was cancelled before the read started; otherwise
  ///   what the synchronous `list(queue:state:)` throws.
  public func list(queue: String? = nil, state: RecordState? = nil) async throws -> [RecordSummary] {
    try await BlockingWork.run { try self.list(queue: queue, state: state) }
  }
}

extension Vault {
  /// What `vault rotate` does (a new active key, every registered container re-sealed, unused
  /// versions retired), without holding a thread of Swift's concurrency pool for the minutes a
  /// big container's re-seal can take.
  ///
  /// The same as the synchronous `rotate(options:)`, run on a thread of its own.
  ///
  /// - Parameter options: `RotationOptions()` (the default) as `vault rotate`;
  ///   `RotationOptions(compromised: true, confirm:)` as `vault rotate --compromised`. `confirm` is
  ///   called on the rotation's thread, not the caller's.
  /// - Returns: what was re-sealed, retired and kept, and why.
  /// - Throws: `CancellationError` when the task was cancelled before the rotation started (nothing
  ///   was changed). A rotation that has started is never interrupted by cancellation: it runs to
  ///   its end and its report is returned. Otherwise what the synchronous `rotate(options:)`
  ///   throws (`RotationError`, `QueueError`, `KeyStoreError`, `VaultError`); a rerun resumes.
  @discardableResult
  public func rotate(options: RotationOptions = RotationOptions()) async throws -> RotationReport {
    try await BlockingWork.run { try self.rotate(options: options) }
  }
}
