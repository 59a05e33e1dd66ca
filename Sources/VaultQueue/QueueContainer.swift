import CSQLite
import Foundation
import Vault
import VaultCrypto

/// A durable, sealed record queue in one SQLite file: the storage engine behind the outbox and
/// telemetry.
///
/// Every record's payload is sealed by the vault with the queue name and record id as context,
/// so a ciphertext cannot be moved between rows or queues. Plaintext columns hold only ids, queue
/// names, times, sizes, attempts, state, key version and error kinds.
///
/// Durability: WAL with `synchronous=FULL`; `enqueue` returns only after its transaction commits.
/// Thread-safe (calls are serialised on one connection) and multi-process-safe (each process opens
/// its own connection; writers take SQLite's write lock with `BEGIN IMMEDIATE`).
public final class QueueContainer: @unchecked Sendable {
  public let path: String
  public let configuration: QueueConfiguration
  let vault: Vault
  let clock: @Sendable () -> Date
  let random: @Sendable () -> Double
  private let lock = NSLock()
  private let storage: Storage

  /// Opens (creating if needed) the container at `path` for `vault`.
  /// - Throws: `QueueError.foreignContainer` when it was created by another vault, and the other
  ///   `QueueError` kinds for unreadable, read-only, full or corrupt files.
  public init(
    path: String, vault: Vault, configuration: QueueConfiguration = QueueConfiguration(),
    clock: @escaping @Sendable () -> Date = Date.init,
    random: @escaping @Sendable () -> Double = { Double.random(in: 0..<1) }
  ) throws {
    let path = absolutePath(path)
    self.path = path
    self.vault = vault
    self.configuration = configuration
    self.clock = clock
    self.random = random
    storage = try Self.translating(path) { try Storage(path: path, keyringID: vault.keyringID.hex) }
    // A container that can hold records must be known to rotation, or its keys could be retired.
    try vault.registerContainer(path)
  }

  /// Calls `body` with every record's id, queue, key version and envelope in the container at
  /// `path`, read-only and without any key (for `vault scan --verify`). Returns false, calling
  /// nothing, when the file is not a vault queue container.
  /// The keyring id recorded in the container at `path` (nil when it is not a vault container).
  public static func keyringID(path: String) throws -> String? {
    try translating(path) {
      let connection = try Connection(path: path, readOnly: true)
      try connection.execute("PRAGMA busy_timeout = 10000")
      var hasMeta = false
      try connection.prepare("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'")
        .query { hasMeta = $0.int(0) == 1 }
      guard hasMeta else { return nil }
      var found: String?
      try connection.prepare("SELECT value FROM meta WHERE key = 'keyring_id'").query { found = $0.text(0) }
      return found
    }
  }

  public static func forEachEnvelope(
    path: String, _ body: (_ id: String, _ queue: String, _ version: UInt32, _ envelope: [UInt8]) throws -> Void
  ) throws -> Bool {
    try translating(path) {
      let connection = try Connection(path: path, readOnly: true)
      try connection.execute("PRAGMA busy_timeout = 10000")
      var isContainer = false
      try connection.prepare("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('records', 'meta')")
        .query { isContainer = $0.int(0) == 2 }
      guard isContainer else { return false }
      try connection.prepare("SELECT id, queue, key_version, envelope FROM records ORDER BY seq").query { row in
        try body(row.text(0) ?? "", row.text(1) ?? "", UInt32(row.int(2)), row.blob(3))
      }
      return true
    }
  }

  /// Records per key version in the container at `path`, read without any key (for `vault status`,
  /// which must work while the keyring is locked). Nil when the file does not exist.
  public static func recordCounts(path: String) throws -> [UInt32: Int]? {
    guard FileManager.default.fileExists(atPath: path) else { return nil }
    return try translating(path) {
      let connection = try Connection(path: path, readOnly: true)
      try connection.execute("PRAGMA busy_timeout = 10000")
      var counts: [UInt32: Int] = [:]
      try connection.prepare("SELECT key_version, count(*) FROM records GROUP BY key_version").query {
        counts[UInt32($0.int(0))] = Int($0.int(1))
      }
      return counts
    }
  }

  // MARK: - Enqueue

  /// Seals `payload` and stores it durably in `queue` under `id`.
  /// - Returns: `.duplicate` (storing nothing) when a record with `id` is already in the container.
  @discardableResult
  public func enqueue(_ payload: [UInt8], queue: String, id: UUID = UUID()) throws -> EnqueueOutcome {
    try enqueue(contentsOf: [(id, payload)], queue: queue)[0]
  }

  /// Seals and stores several records in one transaction (one fsync for all of them).
  @discardableResult
  public func enqueue(contentsOf records: [(id: UUID, payload: [UInt8])], queue: String) throws -> [EnqueueOutcome] {
    try Self.validate(queue)
    for record in records where record.payload.count + Envelope.overhead > configuration.byteCap {
      throw QueueError.recordTooLarge(bytes: record.payload.count + Envelope.overhead, cap: configuration.byteCap)
    }
    return try withStorage { storage in
      try storage.transaction {
        // Rotation raises this before re-sealing. A writer still holding an older active key
        // reloads the manifest here, inside the write transaction: the rotator needs this same
        // write lock to raise it again, and it activates a version in the manifest before raising
        // the minimum to it, so one reload is always enough.
        let minimum = try storage.minimumSealVersion()
        if vault.activeVersion < minimum { try vault.reload() }
        guard vault.activeVersion >= minimum else {
          throw QueueError.storage(path: path, detail: "the vault's active key is older than the container's minimum")
        }
        let now = milliseconds(clock())
        // Rows inserted by this transaction are never the cap's victims.
        let lastExisting = try storage.maxSeq.scalar() ?? 0
        var outcomes: [EnqueueOutcome] = []
        var added = 0
        for record in records {
          let idText = record.id.uuidString.lowercased()
          let envelope = try vault.seal(record.payload, context: Self.context(queue: queue, id: idText))
          // The unique id decides: an existing record is kept as it is and reported as a duplicate.
          let inserted = try envelope.withUnsafeBytes { bytes in
            try storage.insert.run([
              .text(idText), .text(queue), .integer(now), .integer(Int64(envelope.count)),
              .integer(Int64(try Envelope.header(of: bytes).version)), .blob(bytes),
            ])
          }
          guard inserted == 1 else {
            outcomes.append(.duplicate)
            continue
          }
          added += envelope.count
          outcomes.append(.stored)
        }
        try storage.addBytes(added)
        try enforceCap(storage, victimsUpTo: lastExisting)
        return outcomes
      }
    }
  }

  /// Deletes the oldest records (not in flight, not added by this transaction) until the container
  /// is under its cap, counting them. Throws (rolling the enqueue back) when that cannot be done,
  /// so a record reported as stored is never one the cap removed.
  private func enforceCap(_ storage: Storage, victimsUpTo lastExisting: Int64) throws {
    var total = try storage.totalBytes()
    guard total > configuration.byteCap else { return }
    var dropped = 0
    while total > configuration.byteCap {
      var victims: [(Int64, Int)] = []
      try storage.oldestDroppable.query([.integer(lastExisting)]) { row in victims.append((row.int(0), Int(row.int(1))))
      }
      guard !victims.isEmpty else {
        throw QueueError.capExceeded(cap: configuration.byteCap)
      }
      for (seq, size) in victims where total > configuration.byteCap {
        try storage.deleteBySeq.run([.integer(seq)])
        total -= size
        dropped += 1
        try storage.addBytes(-size)
      }
    }
    try storage.countDrop(.cap, dropped)
  }

  // MARK: - Delivery

  /// Claims due records of `queue`, oldest first, for delivery: at most `maxCount` records and
  /// about `maxBytes` of envelope (at least one record when any is due). Each claimed record is
  /// leased for `lease` seconds; if it is neither acked nor failed by then (a crash), it is due
  /// again. Records that do not open are moved to review (counted as `undecryptable`), and the
  /// rest keep flowing.
  ///
  /// With `dueBy`, only records due by then are claimed (a delivery pass uses its start time, so
  /// records it rescheduled with a near-zero jitter are not claimed again in the same pass). When
  /// a key cannot be read (locked keyring, timeout), the claimed records are released and the
  /// error is thrown: an unavailable key is not a broken record.
  public func claim(
    queue: String, maxCount: Int = 100, maxBytes: Int = 1 << 20, lease: TimeInterval = 60, dueBy: Date? = nil
  ) throws -> [ClaimedRecord] {
    try withStorage { storage in
      let now = milliseconds(clock())
      // Strictly before the pass began: a retry rescheduled in the same millisecond waits.
      let due = dueBy.map { min(milliseconds($0) - 1, now) } ?? now
      var claimed: [(id: String, envelope: [UInt8], attempts: Int, createdAt: Int64, version: Int64)] = []
      try storage.transaction {
        try expire(storage, now: now)
        var bytes = 0
        try storage.due.query([.text(queue), .integer(now), .integer(Int64(maxCount)), .integer(due)]) { row in
          let size = Int(row.int(3))
          guard claimed.isEmpty || bytes + size <= maxBytes else { return }
          bytes += size
          claimed.append((row.text(0) ?? "", row.blob(1), Int(row.int(2)) + 1, row.int(4), row.int(5)))
        }
        let leaseUntil = now + Int64(lease * 1000)
        for record in claimed { try storage.markInFlight.run([.integer(leaseUntil), .text(record.id)]) }
      }
      var opened: [ClaimedRecord] = []
      var undecryptable: [(id: String, version: Int64)] = []
      for record in claimed {
        do {
          let payload = try vault.open(record.envelope, context: Self.context(queue: queue, id: record.id))
          opened.append(
            ClaimedRecord(
              id: UUID(uuidString: record.id)!, queue: queue, payload: payload, attempts: record.attempts,
              createdAt: Date(timeIntervalSince1970: Double(record.createdAt) / 1000)))
        } catch is EnvelopeError {
          // The envelope itself is bad (tampered, moved, another keyring, retired key).
          undecryptable.append((record.id, record.version))
        } catch {
          // The key could not be read right now: give every claimed record back and report it.
          try storage.transaction { for record in claimed { try storage.release.run([.text(record.id)]) } }
          throw error
        }
      }
      if !undecryptable.isEmpty {
        try storage.transaction {
          var moved = 0
          for record in undecryptable {
            // Only if the row still holds the envelope that failed (a rotation may have re-sealed it).
            moved += try storage.quarantine.run([.text("undecryptable"), .text(record.id), .integer(record.version)])
          }
          try storage.countDrop(.undecryptable, moved)
        }
      }
      return opened
    }
  }

  /// Deletes delivered records, then checkpoints the WAL so their frames do not linger.
  public func ack(_ ids: [UUID]) throws {
    guard !ids.isEmpty else { return }
    try withStorage { storage in
      try storage.transaction {
        var freed = 0
        for id in ids {
          if let size = try storage.sizeOf.scalar([.text(id.uuidString.lowercased())]) {
            try storage.deleteByID.run([.text(id.uuidString.lowercased())])
            freed += Int(size)
          }
        }
        try storage.addBytes(-freed)
      }
      storage.checkpoint()
    }
  }

  /// Records a failed delivery: schedules the next attempt (exponential backoff with full jitter
  /// over all attempts, or `retryAfter` when the server gave one, capped), or parks the record when
  /// the server has refused it `attemptCeiling` times.
  ///
  /// - Parameter serverAnswered: false for network failures (no route, refused connection,
  ///   timeout). Those never count toward the ceiling: a record is not parked because the device
  ///   was offline for a day.
  ///   - sharedDelay: draw one jittered delay for all `ids` (from the highest attempt count among
  ///     them), so records sent together are retried together (a telemetry batch keeps its events
  ///     and its Idempotency-Key).
  @discardableResult
  public func fail(
    _ ids: [UUID], errorKind: String, retryAfter: TimeInterval? = nil, serverAnswered: Bool = true,
    sharedDelay: Bool = false
  ) throws -> [UUID: FailOutcome] {
    try withStorage { storage in
      let now = clock()
      var outcomes: [UUID: FailOutcome] = [:]
      var shared: TimeInterval?
      if sharedDelay, retryAfter == nil {
        var most: Int64 = 0
        for id in ids {
          try storage.attemptsOf.query([.text(id.uuidString.lowercased())]) { most = max(most, $0.int(0)) }
        }
        shared = configuration.backoff.delay(afterAttempts: Int(most), unit: random())
      }
      try storage.transaction {
        var parked = 0
        for id in ids {
          let idText = id.uuidString.lowercased()
          var attempts: Int64?
          var failures: Int64 = 0
          try storage.attemptsOf.query([.text(idText)]) { row in
            attempts = row.int(0)
            failures = row.int(1)
          }
          guard let attempts else { continue }
          if serverAnswered { failures += 1 }
          if serverAnswered, failures >= configuration.attemptCeiling {
            try storage.park.run([.text(errorKind), .integer(failures), .text(idText)])
            outcomes[id] = .parked
            parked += 1
          } else {
            let delay =
              retryAfter.map { min(max($0, 0), configuration.maximumRetryAfter) } ?? shared
              ?? configuration.backoff.delay(afterAttempts: Int(attempts), unit: random())
            let due = now.addingTimeInterval(delay)
            try storage.reschedule.run([
              .integer(milliseconds(due)), .text(errorKind), .integer(failures), .text(idText),
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
  /// resendable, never retried automatically.
  public func park(_ ids: [UUID], errorKind: String) throws {
    try move(ids, to: .parked, errorKind: errorKind, counting: .parked)
  }

  /// Gives claimed records back (pending, the claim's attempt not counted), as when a delivery
  /// pass ends before sending them.
  public func release(_ ids: [UUID]) throws {
    guard !ids.isEmpty else { return }
    try withStorage { storage in
      try storage.transaction { for id in ids { try storage.release.run([.text(id.uuidString.lowercased())]) } }
    }
  }

  /// Moves records the server refused to review; they are kept and never retried automatically.
  public func reject(_ ids: [UUID], errorKind: String) throws {
    try move(ids, to: .review, errorKind: errorKind, counting: .rejected)
  }

  /// Moves records out of the delivery flow in one transaction and counts them in the ledger.
  private func move(_ ids: [UUID], to state: RecordState, errorKind: String, counting reason: DropReason) throws {
    try withStorage { storage in
      try storage.transaction {
        var moved = 0
        for id in ids {
          moved += try storage.setState.run([
            .text(state.rawValue), .text(errorKind), .text(id.uuidString.lowercased()),
          ])
        }
        try storage.countDrop(reason, moved)
      }
    }
  }

  /// Returns parked or review records to pending with a fresh attempt count. Returns how many moved.
  @discardableResult
  public func resend(_ ids: [UUID]) throws -> Int {
    try withStorage { storage in
      try storage.transaction {
        try ids.reduce(0) { $0 + (try storage.resend.run([.text($1.uuidString.lowercased())])) }
      }
    }
  }

  /// Makes every pending record of `queue` due now (connectivity came back: the backoff restarts).
  /// Attempt counts are kept, so the attempt ceiling still parks what keeps failing.
  @discardableResult
  public func makeDue(queue: String) throws -> Int {
    try withStorage { storage in try storage.transaction { try storage.makeDue.run([.text(queue)]) } }
  }

  /// Deletes pending and parked records older than the maximum age, counting them.
  private func expire(_ storage: Storage, now: Int64) throws {
    guard let age = configuration.maximumAge else { return }
    var freed = 0
    var count = 0
    let cutoff = now - Int64(age * 1000)
    try storage.expired.query([.integer(cutoff)]) { row in
      freed += Int(row.int(1))
      count += 1
    }
    guard count > 0 else { return }
    try storage.deleteExpired.run([.integer(cutoff)])
    try storage.addBytes(-freed)
    try storage.countDrop(.age, count)
  }

  // MARK: - Inspection

  public func stats() throws -> QueueStats {
    try withStorage { storage in
      var stats = QueueStats(
        container: path, total: 0, bytes: 0, byState: [:], byVersion: [:], byQueue: [:], dropped: [:],
        minimumSealVersion: UInt32(try storage.minimumSealVersion()))
      for state in RecordState.allCases { stats.byState[state.rawValue] = 0 }
      for reason in DropReason.allCases { stats.dropped[reason.rawValue] = 0 }
      try storage.countByState.query { stats.byState[$0.text(0) ?? "?"] = Int($0.int(1)) }
      try storage.countByVersion.query { stats.byVersion[String($0.int(0))] = Int($0.int(1)) }
      try storage.countByQueue.query { stats.byQueue[$0.text(0) ?? "?"] = Int($0.int(1)) }
      try storage.drops.query { stats.dropped[$0.text(0) ?? "?"] = Int($0.int(1)) }
      stats.total = stats.byState.values.reduce(0, +)
      stats.bytes = try storage.totalBytes()
      return stats
    }
  }

  /// Records (metadata only) of `queue` (all queues when nil) in `state` (all when nil), oldest first.
  public func list(queue: String? = nil, state: RecordState? = nil) throws -> [RecordSummary] {
    try withStorage { storage in
      var rows: [RecordSummary] = []
      try storage.listAll.query([queue.map { .text($0) } ?? .null, state.map { .text($0.rawValue) } ?? .null]) { row in
        rows.append(
          RecordSummary(
            id: row.text(0) ?? "", queue: row.text(1) ?? "",
            state: RecordState(rawValue: row.text(2) ?? "") ?? .pending, attempts: Int(row.int(3)),
            errorKind: row.text(4), createdAt: Self.timestamp(milliseconds: row.int(5)),
            nextAttemptAt: row.int(6) > 0 ? Self.timestamp(milliseconds: row.int(6)) : nil,
            bytes: Int(row.int(7)), keyVersion: UInt32(row.int(8))))
      }
      return rows
    }
  }

  /// The container's clock (for a delivery pass that claims what is due by its start).
  public var now: Date { clock() }

  /// How many records of `queue` are in `state` (without loading them).
  public func count(queue: String, state: RecordState) throws -> Int {
    try withStorage { Int(try $0.countInState.scalar([.text(queue), .text(state.rawValue)]) ?? 0) }
  }

  /// Writes the WAL back into the database and truncates it, so deleted or re-sealed rows leave no
  /// stale frames. Skipped silently when another process is reading (it runs again next time).
  public func checkpoint() throws { try withStorage { $0.checkpoint() } }

  // MARK: - Plumbing

  /// The AAD context binding a record to its place: "vault.queue.v1", NUL, queue name, NUL, record id.
  static func context(queue: String, id: String) -> [UInt8] {
    Array("vault.queue.v1".utf8) + [0] + Array(queue.utf8) + [0] + Array(id.utf8)
  }

  /// ISO 8601 UTC with milliseconds, as `queue list` shows times.
  static func timestamp(milliseconds: Int64) -> String {
    let formatter = ISO8601DateFormatter()
    formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
    formatter.timeZone = TimeZone(identifier: "UTC")
    return formatter.string(from: Date(timeIntervalSince1970: Double(milliseconds) / 1000))
  }

  static func validate(_ queue: String) throws {
    let bytes = Array(queue.utf8)
    guard !bytes.isEmpty, bytes.count <= 128, !bytes.contains(0) else { throw QueueError.invalidQueueName }
  }

  func withStorage<T>(_ body: (Storage) throws -> T) throws -> T {
    lock.lock()
    defer { lock.unlock() }
    return try Self.translating(path) { try body(storage) }
  }

  /// Turns SQLite's codes into the queue's error kinds.
  static func translating<T>(_ path: String, _ body: () throws -> T) throws -> T {
    do {
      return try body()
    } catch let error as SQLiteError {
      if error.isFull { throw QueueError.diskFull(path: path) }
      if error.isReadOnly { throw QueueError.readOnly(path: path) }
      if error.isCorrupt { throw QueueError.corrupt(path: path) }
      if error.isBusy { throw QueueError.busy(path: path) }
      throw QueueError.storage(path: path, detail: error.description)
    }
  }
}

func milliseconds(_ date: Date) -> Int64 { Int64((date.timeIntervalSince1970 * 1000).rounded()) }
