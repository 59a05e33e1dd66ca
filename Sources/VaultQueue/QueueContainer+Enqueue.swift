import Foundation
import Vault
import VaultCrypto
import VaultKeys

/// Enqueue: sealing records and storing them durably, within the byte cap.
extension QueueContainer {

  /// Seals `payload` and stores it durably in `queue` under `id` (a random id when nil); returns
  /// after the transaction commits. Past the byte cap the oldest records the cap may drop are
  /// deleted (and counted), never this one.
  ///
  /// - Parameters:
  ///   - payload: the record, up to the container's byte cap less 89 bytes of envelope.
  ///   - queue: the queue within the container (1–128 bytes of UTF-8, no NUL).
  ///   - id: the record's id; a random one when nil. An id already in the container, in any queue,
  ///     is not stored again.
  /// - Returns: `.stored`, or `.duplicate` (storing nothing) when a record with `id` is already in
  ///   the container.
  /// - Throws: as `enqueue(contentsOf:queue:)`; also `CryptoError.randomUnavailable` when no random
  ///   id can be drawn.
  @discardableResult
  public func enqueue(_ payload: [UInt8], queue: String, id: UUID? = nil) throws -> EnqueueOutcome {
    try enqueue(contentsOf: [(try id ?? SecureRandom.uuid(), payload)], queue: queue)[0]
  }

  /// Seals `payload` and stores it durably in `queue`; the same as the `[UInt8]` form.
  ///
  /// - Parameters:
  ///   - payload: the record, up to the container's byte cap less 89 bytes of envelope.
  ///   - queue: the queue within the container (1–128 bytes of UTF-8, no NUL).
  ///   - id: the record's id; a random one when nil. An id already in the container, in any queue,
  ///     is not stored again.
  /// - Returns: `.stored`, or `.duplicate` (storing nothing) when a record with `id` exists.
  /// - Throws: as the `[UInt8]` form: `QueueError` (too large, the cap reached with every older
  ///   record in flight, a full or read-only disk, a corrupt file); `KeyStoreError` when the key
  ///   cannot be read right now.
  @discardableResult
  public func enqueue(_ payload: Data, queue: String, id: UUID? = nil) throws -> EnqueueOutcome {
    try enqueue([UInt8](payload), queue: queue, id: id)
  }

  /// Seals and stores several records in one transaction (one fsync for all of them): all are
  /// stored, or none. Past the byte cap the oldest records the cap may drop are deleted (and
  /// counted), never one of these.
  ///
  /// - Parameters:
  ///   - records: ids and payloads, each payload up to the byte cap less 89 bytes of envelope.
  ///   - queue: the queue within the container (1–128 bytes of UTF-8, no NUL).
  /// - Returns: one outcome per record, in order: `.stored`, or `.duplicate` when its id was
  ///   already in the container.
  /// - Throws: `QueueError.invalidQueueName`; `.recordTooLarge` (checked before anything is
  ///   written); `.capExceeded` when the cap cannot make room (never when every record was a
  ///   duplicate: such a call stores and drops nothing); `.storage` when the vault's active
  ///   key is older than the container's minimum even after a reload; the other `QueueError` kinds
  ///   for a full, read-only or corrupt file; `KeyStoreError` when the key cannot be read right
  ///   now; the vault's errors (`VaultError`, the manifest's) when its reload or seal fails.
  @discardableResult
  public func enqueue(contentsOf records: [(id: UUID, payload: [UInt8])], queue: String) throws -> [EnqueueOutcome] {
    try Self.validate(queue)
    for record in records where record.payload.count + Envelope.overhead > largestEnvelope {
      throw QueueError.recordTooLarge(bytes: record.payload.count + Envelope.overhead, cap: largestEnvelope)
    }
    return try groupCommit.submit(try sealedRequest(records, queue: queue, victims: nil)) { self.commit($0) }
  }

  /// A request of one record is sealed now, on the caller's thread, under the vault's active
  /// version (the commit seals it again if the transaction finds another active). A batch is sealed
  /// record by record in the commit, as before: sealed ahead, all its envelopes would be held at
  /// once beside its payloads (11 MB more for a batch of 10,000 records of 1 KiB).
  ///
  /// Outside the transaction, a rotation in another process may retire the version this seal just
  /// reloaded before its key was read: that fails as a key gone (`keyMissing`, a retired or unknown
  /// version, no active key), which would read as a lost key. The commit then seals the record
  /// itself: inside its transaction no version at or above the container's minimum can be
  /// retired, and if the key is really gone it fails there with the same error. Any other failure
  /// (a locked key store, a manifest that does not verify) is the caller's at once, before the
  /// container's write lock is taken.
  private func sealedRequest(
    _ records: [(id: UUID, payload: [UInt8])], queue: String, victims: Set<String>?
  ) throws -> GroupCommit.Request {
    guard records.count == 1, let record = records.first else {
      return GroupCommit.Request(records: records, queue: queue, victims: victims)
    }
    do {
      let envelope = try vault.seal(record.payload, context: context(queue: queue, id: record.id.recordText))
      return GroupCommit.Request(records: records, queue: queue, victims: victims, envelopes: [envelope])
    } catch VaultError.keyMissing, VaultError.noActiveKey, EnvelopeError.retiredKeyVersion,
      EnvelopeError.unknownKeyVersion
    {
      return GroupCommit.Request(records: records, queue: queue, victims: victims)
    }
  }

  /// The largest envelope a row may hold: SQLite refuses a row longer than SQLITE_MAX_LENGTH
  /// (1,000,000,000 bytes by default, sqlite.org/limits.html), and the row's other columns (id,
  /// queue name, times, counters) take less than a kilobyte. Checked before sealing: a larger record
  /// was sealed (twice its size in memory) and then refused by SQLite with a generic error.
  static let rowEnvelopeLimit = 1_000_000_000 - 1024

  /// The largest envelope an enqueue accepts: the byte cap, or the most a row may hold.
  var largestEnvelope: Int { min(configuration.byteCap, Self.rowEnvelopeLimit) }

  /// The envelope bytes the container holds now: what its byte cap is measured against.
  ///
  /// - Throws: `QueueError` when the container cannot be read.
  package func storedBytes() throws -> Int {
    try withStorage { try $0.totalBytes() }
  }

  /// `enqueue(_:queue:id:)` that may make room only by dropping records of `victims` (within what
  /// the container's `capVictims` allows): for a writer whose records must never push out another
  /// writer's, whatever the container's configuration (telemetry beside an app's messages).
  ///
  /// - Parameters:
  ///   - payload: the record.
  ///   - queue: the queue within the container.
  ///   - id: the record's id; a random one when nil.
  ///   - victims: the only queues the cap may drop records of for this one.
  /// - Returns: as `enqueue(_:queue:id:)`.
  /// - Throws: as `enqueue(_:queue:id:)`; `.capExceeded` when those queues hold nothing to drop.
  @discardableResult
  package func enqueue(_ payload: [UInt8], queue: String, id: UUID?, droppingOnly victims: Set<String>) throws
    -> EnqueueOutcome
  {
    try Self.validate(queue)
    if payload.count + Envelope.overhead > largestEnvelope {
      throw QueueError.recordTooLarge(bytes: payload.count + Envelope.overhead, cap: largestEnvelope)
    }
    let request = try sealedRequest([(try id ?? SecureRandom.uuid(), payload)], queue: queue, victims: victims)
    return try groupCommit.submit(request) { self.commit($0) }[0]
  }

  /// Stores a group of enqueues in one transaction, each in its own savepoint (one that fails is
  /// undone alone and gets its own error), then commits once: one fsync for the whole group.
  /// Returns each request's result, in order; a request succeeds only once the commit that holds
  /// it returned.
  func commit(_ group: [GroupCommit.Request]) -> [Result<[EnqueueOutcome], any Error>] {
    var results: [Result<[EnqueueOutcome], any Error>?] = Array(repeating: nil, count: group.count)
    do {
      try withStorage { storage in
        try storage.transaction {
          // Rotation raises this before re-sealing. A writer still holding an older active key
          // reloads the manifest here, inside the write transaction: the rotator needs this same
          // write lock to raise it again, and it activates a version in the manifest before raising
          // the minimum to it, so one reload is always enough.
          let minimum = try storage.minimumSealVersion()
          if vault.activeVersion < minimum { try vault.reload() }
          guard vault.activeVersion >= minimum else {
            throw QueueError.storage(
              path: path, detail: "the vault's active key is older than the container's minimum")
          }
          let now = milliseconds(clock())
          let born = try ageNow(storage, wall: now, reading: monotonic())
          // Rows inserted by this transaction, for any request of the group, are never the cap's
          // victims: each request is told `.stored` only if its rows are still there at the commit.
          let lastExisting = try storage.statement("SELECT coalesce(max(seq), 0) FROM records").scalar() ?? 0
          // A group of one needs no savepoint: the transaction is its own (a lone caller pays
          // nothing for grouping), and its failure rolls the transaction back below.
          if group.count == 1 {
            results[0] = .success(
              try insert(group[0], into: storage, now: now, born: born, victimsUpTo: lastExisting))
            return
          }
          for (index, request) in group.enumerated() {
            do {
              results[index] = .success(
                try Self.translating(path) {
                  try storage.savepoint {
                    try insert(request, into: storage, now: now, born: born, victimsUpTo: lastExisting)
                  }
                })
            } catch let failure as SavepointFailure {
              throw failure.error
            } catch {
              results[index] = .failure(error)
            }
          }
        }
      }
    } catch {
      // Nothing of the group was stored: every request gets this error, except one that already
      // failed on its own (nothing of it was stored either, and its own error says more). A lone
      // request's own failure arrives here too.
      return results.map { result in
        if case .failure(let own)? = result { return .failure(own) }
        return .failure(error)
      }
    }
    return results.map { $0 ?? .success([]) }
  }

  /// One request's records: sealed under the active key (or, sealed by the caller, stored as they
  /// are when that key is still the active one) and inserted, duplicates reported, then (when one
  /// was stored) the cap enforced on records older than the group.
  private func insert(
    _ request: GroupCommit.Request, into storage: Storage, now: Int64, born: Int64, victimsUpTo lastExisting: Int64
  ) throws -> [EnqueueOutcome] {
    var outcomes: [EnqueueOutcome] = []
    var added = 0
    for (index, record) in request.records.enumerated() {
      let idText = record.id.recordText
      let envelope: [UInt8]
      let version: UInt32
      if let sealed = request.envelopes?[index], let header = try? Envelope.header(of: sealed),
        header.version == vault.activeVersion
      {
        (envelope, version) = (sealed, header.version)
      } else {
        envelope = try vault.seal(record.payload, context: context(queue: request.queue, id: idText))
        version = try Envelope.header(of: envelope).version
      }
      // The unique id decides: an existing record is kept as it is and reported as a duplicate.
      let inserted = try envelope.withUnsafeBytes { bytes in
        let inserted = try storage.statement(
          """
          INSERT INTO records (id, queue, created_at, size, key_version, envelope, born) VALUES (?, ?, ?, ?, ?, ?, ?)
          ON CONFLICT (id) DO NOTHING
          """
        ).run([
          .text(idText), .text(request.queue), .integer(now), .integer(Int64(envelope.count)),
          .integer(Int64(version)), .blob(Storage.inlinePart(of: bytes)), .integer(born),
        ])
        if inserted == 1 { try storage.recordInserted(envelope: bytes) }
        return inserted
      }
      guard inserted == 1 else {
        outcomes.append(.duplicate)
        continue
      }
      added += envelope.count
      outcomes.append(.stored)
    }
    // A request that stored nothing removes nothing and cannot fail on the cap: its records are
    // already in the container, and an error would have the caller retry one that is safe.
    guard added > 0 else { return outcomes }
    try storage.addBytes(added)
    try enforceCap(storage, victimsUpTo: lastExisting, only: request.victims)
    return outcomes
  }

  /// Deletes the oldest records (not in flight, not added by this transaction) until the container
  /// is under its cap, counting them. Throws (rolling the enqueue back) when that cannot be done,
  /// so a record reported as stored is never one the cap removed.
  func enforceCap(_ storage: Storage, victimsUpTo lastExisting: Int64, only request: Set<String>? = nil) throws {
    guard try storage.mayExceed(configuration.byteCap) else { return }
    var total = try storage.totalBytes()
    guard total > configuration.byteCap else { return }
    // This writer's limit, else the one a writer stored in the container, else any queue; then
    // narrowed to the request's own limit, if it has one (a stored limit that does not read as a
    // list of names narrows nothing further: the request's own is the tighter then).
    let stored = try Self.storedCapVictims(storage)
    var queues: Statement.Value =
      switch configuration.capVictims {
      case .anyQueue: stored.map { .text($0) } ?? .null
      case .only(let names): .text(try Self.capVictimsText(names))
      }
    if let request {
      let limit: Set<String>? =
        switch configuration.capVictims {
        case .anyQueue: stored.flatMap { try? JSONDecoder().decode([String].self, from: Data($0.utf8)) }.map(Set.init)
        case .only(let names): names
        }
      queues = .text(try Self.capVictimsText(limit.map { $0.intersection(request) } ?? request))
    }
    var dropped = 0
    // The search starts where the last one on this connection found the first record of these
    // queues, when nothing since can have put one before it: from the oldest record, it read every
    // record of the other queues ahead on every enqueue (an outside review: telemetry events
    // behind 100,000 memos, with only events droppable, took 22 ms each instead of 0.3).
    let key: String? = if case .text(let text) = queues { text } else { nil }
    var from = try storage.capSearchStart(for: key)
    var first = true
    while total > configuration.byteCap {
      var rows: [(seq: Int64, size: Int, inFlight: Bool)] = []
      // ?2 is NULL (any queue) or a JSON array of the queues whose records the cap may drop.
      // Records in flight are read too (and not dropped), so the first row read is the first
      // record of these queues from ?3 on, whatever its state.
      try storage.statement(
        """
        SELECT seq, size, state = 'in_flight' FROM records WHERE seq >= ?3 AND seq <= ?1
          AND (?2 IS NULL OR queue IN (SELECT value FROM json_each(?2))) ORDER BY seq LIMIT 64
        """
      ).query([.integer(lastExisting), queues, .integer(from)]) { row in
        rows.append((row.int(0), Int(row.int(1)), row.int(2) != 0))
      }
      guard let last = rows.last else {
        throw QueueError.capExceeded(cap: configuration.byteCap)
      }
      if first {
        try storage.setCapSearchStart(rows[0].seq, for: key)
        first = false
      }
      for row in rows
      where !row.inFlight && !storage.insertedInTransaction.contains(row.seq) && total > configuration.byteCap {
        try storage.statement("DELETE FROM records WHERE seq = ?").run([.integer(row.seq)])
        total -= row.size
        dropped += 1
        try storage.addBytes(-row.size)
      }
      guard total > configuration.byteCap else { break }
      // A row numbered Int64.max (SQLite never gives that number, an edited file may hold it) is
      // the last there can be: past it, nothing is left to drop.
      guard last.seq < Int64.max else { throw QueueError.capExceeded(cap: configuration.byteCap) }
      from = last.seq + 1
    }
    try storage.countDrop(.cap, dropped)
  }
}
