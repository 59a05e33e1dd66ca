import Foundation
import Vault
import VaultCrypto

/// Merging a snapshot of this container (from a backup bundle) into it: VaultBackup's restore into
/// a home that already holds the vault. SECURITY.md, "Merging a bundle into a home", states the rules.
extension QueueContainer {

  /// What a merge did to one container.
  package struct MergeOutcome: Sendable, Equatable {
    /// Records the home did not hold, added in the state the snapshot had them in.
    package var restored = 0
    /// Records whose snapshot copy had changed later: the home's record now holds that copy.
    package var updated = 0
    /// Records the home holds as they were, or changed later (the snapshot's copy adds nothing).
    package var unchanged = 0
    /// Records the home held and removed since (delivered, or dropped by its limits): not brought back.
    package var goneHere = 0
    /// Records waiting for delivery in the snapshot the home does not hold, where it cannot be
    /// told whether the home delivered them: added in review (`merge-maybe-delivered`), not sent.
    package var undetermined = 0
    /// Copies that lost to a newer one with another payload or queue, kept in review under a new id.
    package var keptForReview: [KeptCopy] = []

    package init() {}
  }

  /// A losing copy kept for review: the record's id, the id it is kept under, and whose copy it was.
  package struct KeptCopy: Sendable, Equatable {
    package var id: String
    package var keptAs: String
    /// `bundle` (the snapshot's copy lost) or `home` (the home's copy lost).
    package var from: String
  }

  /// The error kind of a losing copy kept for review.
  package static let supersededKind = "merge-superseded"
  /// The error kind of a record added in review because it may have been delivered already.
  package static let maybeDeliveredKind = "merge-maybe-delivered"

  /// This copy's lineage: its instance id, the instance it was restored from, and the ids it
  /// started with then.
  package func lineage() throws -> ContainerLineage {
    try withStorage { try ContainerLineage.read(from: $0.connection) }
  }

  /// Makes this container a new copy restored from `origin` (the snapshot's instance id): a new
  /// instance id, `origin` recorded, and the ids it holds now recorded as the ones it started with.
  /// With `snapshot`, the merge of that snapshot (its SHA-256) that made it is recorded as
  /// finished in the same transaction (`endMerge`).
  package func markRestored(from origin: String?, finishing snapshot: String? = nil) throws {
    try withStorage { try Self.markRestored($0, from: origin, finishing: snapshot) }
  }

  /// Records that a merge of `merge.snapshot` into this container begins: until `endMerge` a
  /// backup refuses the container and `status` warns (it may lack records of that snapshot). A
  /// mark of the same snapshot already there is kept as it is (one that made the container).
  package func beginMerge(_ merge: UnfinishedMerge) throws {
    try withStorage { storage in
      try storage.transaction {
        _ = try storage.statement(
          "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING"
        ).run([.text(merge.row.key), .text(merge.row.value)])
      }
    }
  }

  /// Records that the merge of the snapshot `snapshot` (its SHA-256) into this container finished.
  package func endMerge(snapshot: String) throws {
    try withStorage { storage in try storage.transaction { try Self.deleteMergeMark(snapshot: snapshot, in: storage) } }
  }

  /// Deletes the mark of the merge of `snapshot`, inside the open transaction.
  private static func deleteMergeMark(snapshot: String, in storage: Storage) throws {
    _ = try storage.statement("DELETE FROM meta WHERE key = ?").run([.text(UnfinishedMerge.key(snapshot: snapshot))])
  }

  /// Forgets every unfinished merge of this container (`vault container accept`): it is taken as
  /// it is, without what those merges had not added yet. Returns the marks it removed.
  package func acceptUnfinishedMerges() throws -> [UnfinishedMerge] {
    try withStorage { storage in
      try storage.transaction {
        let marks = try ContainerLineage.read(from: storage.connection).unfinishedMerges.values.sorted {
          $0.bundle < $1.bundle
        }
        for mark in marks { try Self.deleteMergeMark(snapshot: mark.snapshot, in: storage) }
        return marks
      }
    }
  }

  /// `markRestored(from:)` on the container file at `path` of the vault `keyringID`, before any
  /// vault registers it (a restore marks each copy while its home is not a vault yet).
  ///
  /// - Throws: `QueueError` when the file is not such a container or cannot be written.
  package static func markRestored(path: String, keyringID: String, from origin: String?) throws {
    try translating(path) {
      try markRestored(Storage(path: path, keyringID: keyringID, mode: .existing), from: origin)
    }
  }

  private static func markRestored(_ storage: Storage, from origin: String?, finishing snapshot: String? = nil) throws {
    try storage.transaction {
      if let snapshot { try deleteMergeMark(snapshot: snapshot, in: storage) }
      try storage.statement("UPDATE meta SET value = ? WHERE key = 'instance_id'").run([
        .text(try Storage.newContainerID())
      ])
      try storage.statement("DELETE FROM meta WHERE key = 'restored_from'").run()
      if let origin {
        try storage.statement("INSERT INTO meta (key, value) VALUES ('restored_from', ?)").run([.text(origin)])
      }
      // A new copy has a history of its own: the original's snapshot marks are not its
      // (`ContainerLineage.passedMarks`, spelled out: cached statements take static text).
      try storage.statement(
        "DELETE FROM meta WHERE key = 'snapshot_token' OR (key >= 'passed_snapshot:' AND key < 'passed_snapshot;')"
      ).run()
      try storage.statement("DELETE FROM inherited").run()
      try storage.statement("INSERT INTO inherited (id) SELECT id FROM records").run()
    }
  }

  /// How a record of the snapshot that this container does not hold is merged.
  enum Absent {
    /// Added in its state: this container never held it (or is a fresh copy being restored).
    case restore
    /// Not added: this container held it and removed it since.
    case skip
    /// Cannot be told: added, but a record waiting for delivery goes to review.
    case undetermined
  }

  /// Merges every record `source` holds into this container, each re-sealed under the vault's
  /// active key: a record this container lacks is added (unless it held it and removed it since);
  /// of two copies of one record the one changed later wins (this container's copy on a tie, and
  /// always while it is in flight); a losing copy with another payload or queue is kept in review
  /// under a new id; nothing is deleted. Running it again with the same snapshot changes nothing.
  ///
  /// - Parameters:
  ///   - source: the snapshot, opened read-only; its container id must be this container's.
  ///   - fresh: this container was made empty for the merge (a lost container restored): every
  ///     record is added in its state, as a restore into a new home would.
  ///   - open: opens a snapshot record's envelope (with the bundle's keys) under the context given.
  /// - Returns: what was done.
  /// - Throws: `QueueError` for a container that cannot be written or a malformed snapshot record;
  ///   what `open` or sealing throws (nothing of the current batch is kept then).
  package func merge(
    from source: ContainerReader, fresh: Bool, open: (SnapshotRecord, EnvelopeContext) throws -> [UInt8]
  ) throws -> MergeOutcome {
    guard source.containerID == containerID else {
      throw QueueError.storage(path: path, detail: "the snapshot is of another container")
    }
    let theirs = try source.lineage()
    let mine = try lineage()
    let absent: (String) -> Absent = { id in
      if fresh { return .restore }
      // This copy started with it (a restore) and holds it no more: removed here, whatever the source.
      if mine.inherited.contains(id) { return .skip }
      // The source is this copy's own past (a snapshot it went on from): removed here since.
      if mine.hasPassed(theirs) { return .skip }
      // The same instance without that mark: this copy may be an older file-system copy put back
      // (a rollback), which never held what was stored after it; it cannot be told.
      if let instance = theirs.instance, instance == mine.instance { return .undetermined }
      // The source is this copy's origin: what it holds beyond what this copy started with is new here.
      if let instance = theirs.instance, mine.restoredFrom == instance { return .restore }
      // The source was restored from this copy: what it started with, this copy held.
      if let instance = mine.instance, theirs.restoredFrom == instance {
        return theirs.inherited.contains(id) ? .skip : .restore
      }
      return .undetermined
    }
    var outcome = MergeOutcome()
    var batch: [SnapshotRecord] = []
    var limit = BatchLimit(records: 256)
    try source.forEachRecord { record in
      if !limit.admit(bytes: record.envelope.count) {
        try mergeBatch(batch, absent: absent, open: open, into: &outcome)
        batch.removeAll(keepingCapacity: true)
        limit = BatchLimit(records: 256)
        _ = limit.admit(bytes: record.envelope.count)
      }
      batch.append(record)
    }
    try mergeBatch(batch, absent: absent, open: open, into: &outcome)
    return outcome
  }

  /// One transaction of a merge.
  private func mergeBatch(
    _ batch: [SnapshotRecord], absent: (String) -> Absent,
    open: (SnapshotRecord, EnvelopeContext) throws -> [UInt8], into outcome: inout MergeOutcome
  ) throws {
    guard !batch.isEmpty else { return }
    var result = outcome
    try withStorage { storage in
      try storage.transaction {
        // A record added is stamped on this container's age clock with the age it has by the wall
        // clock, as if it had been enqueued here then: left unstamped, its `created_at` (wall
        // clock, perhaps another machine's) would be compared with the age clock, which runs
        // ahead of the wall clock after the wall clock is set back, and the maximum age would
        // drop it early.
        let wall = milliseconds(clock())
        let ageClock = try ageNow(storage, wall: wall, reading: monotonic())
        let born: (Int64) -> Int64 = { createdAt in ageClock - max(0, wall - createdAt) }
        let minimum = try storage.minimumSealVersion()
        if vault.activeVersion < minimum { try vault.reload() }
        guard vault.activeVersion >= minimum else {
          throw QueueError.storage(path: path, detail: "the vault's active key is older than the container's minimum")
        }
        for record in batch {
          try mergeRecord(record, storage: storage, absent: absent, born: born, open: open, into: &result)
        }
      }
    }
    outcome = result
  }

  private struct HomeCopy {
    var seq: Int64
    var queue: String
    var state: String
    var lastChange: Int64
    var createdAt: Int64
    var envelope: [UInt8]
    var size: Int
    var born: Int64?
  }

  private func mergeRecord(
    _ record: SnapshotRecord, storage: Storage, absent: (String) -> Absent, born: (Int64) -> Int64,
    open: (SnapshotRecord, EnvelopeContext) throws -> [UInt8], into outcome: inout MergeOutcome
  ) throws {
    guard let uuid = UUID(uuidString: record.id), uuid.recordText == record.id,
      let state = RecordState(rawValue: record.state), (try? Self.validate(record.queue)) != nil
    else {
      throw QueueError.storage(path: path, detail: "a snapshot record is malformed")
    }
    var payload = try open(record, context(queue: record.queue, id: record.id))
    defer { payload.withUnsafeMutableBytes { zeroBytes($0) } }
    var home: HomeCopy?
    try storage.statement(
      """
      SELECT queue, state, coalesce(changed, created_at), created_at, envelope, size, born, seq, tail
      FROM records LEFT JOIN envelope_tails USING (seq) WHERE id = ?
      """
    ).query([.text(record.id)]) { row in
      home = HomeCopy(
        seq: row.int(7), queue: row.text(0) ?? "", state: row.text(1) ?? "", lastChange: row.int(2),
        createdAt: row.int(3), envelope: row.envelope(inline: 4, tail: 8), size: Int(row.int(5)),
        born: row.isNull(6) ? nil : row.int(6))
    }
    guard let home else {
      // Held here at an earlier merge (or stored by it), and delivered or dropped since.
      if try storage.statement("SELECT 1 FROM merged WHERE id = ?").scalar([.text(record.id)]) != nil {
        outcome.goneHere += 1
        return
      }
      switch absent(record.id) {
      case .skip:
        outcome.goneHere += 1
      case .restore:
        try insert(
          record, state: state == .inFlight ? .pending : state, errorKind: record.errorKind,
          id: record.id, payload: payload, born: born, storage: storage)
        outcome.restored += 1
      case .undetermined:
        if state == .pending || state == .inFlight {
          try insert(
            record, state: .review, errorKind: Self.maybeDeliveredKind, id: record.id, payload: payload,
            born: born, storage: storage)
          outcome.undetermined += 1
        } else {
          try insert(
            record, state: state, errorKind: record.errorKind, id: record.id, payload: payload, born: born,
            storage: storage)
          outcome.restored += 1
        }
      }
      return
    }
    // Held here at a merge: once delivered here, merging a copy of it again does not bring it back.
    try storage.statement("INSERT INTO merged (id) VALUES (?) ON CONFLICT (id) DO NOTHING").run([.text(record.id)])
    var homePayload: [UInt8]
    do {
      homePayload = try home.envelope.withUnsafeBytes {
        try vault.open($0, context: context(queue: home.queue, id: record.id))
      }
    } catch is EnvelopeError {
      // The home's copy does not open (kept in review as undecryptable): it stays as it is, and
      // the bundle's copy, which opens, is kept for review beside it.
      let keptAs = try Self.keptID(for: record.id, from: "bundle", changed: record.lastChange)
      if try insert(
        record, state: .review, errorKind: Self.supersededKind, id: keptAs, payload: payload, born: born,
        storage: storage)
      {
        outcome.keptForReview.append(KeptCopy(id: record.id, keptAs: keptAs, from: "bundle"))
      } else {
        outcome.unchanged += 1
      }
      return
    }
    defer { homePayload.withUnsafeMutableBytes { zeroBytes($0) } }
    let samePayload = home.queue == record.queue && homePayload == payload
    if home.state == RecordState.inFlight.rawValue || home.lastChange >= record.lastChange {
      if samePayload {
        outcome.unchanged += 1
      } else {
        let keptAs = try Self.keptID(for: record.id, from: "bundle", changed: record.lastChange)
        if try insert(
          record, state: .review, errorKind: Self.supersededKind, id: keptAs, payload: payload, born: born,
          storage: storage)
        {
          outcome.keptForReview.append(KeptCopy(id: record.id, keptAs: keptAs, from: "bundle"))
        } else {
          outcome.unchanged += 1  // kept by an earlier merge of this snapshot
        }
      }
      return
    }
    // The snapshot's copy changed later: the home's record takes it.
    var delta = 0
    var envelope = home.envelope
    if !samePayload {
      var loser = record
      loser.queue = home.queue
      loser.createdAt = home.createdAt
      loser.attempts = 0
      loser.changed = home.lastChange
      let keptAs = try Self.keptID(for: record.id, from: "home", changed: home.lastChange)
      if try insert(
        loser, state: .review, errorKind: Self.supersededKind, id: keptAs, payload: homePayload,
        born: { home.born ?? born($0) }, storage: storage)
      {
        outcome.keptForReview.append(KeptCopy(id: record.id, keptAs: keptAs, from: "home"))
      }
      envelope = try payload.withUnsafeBytes {
        try vault.seal($0, context: context(queue: record.queue, id: record.id))
      }
      delta = envelope.count - home.size
    }
    try envelope.withUnsafeBytes { bytes in
      _ = try storage.statement(
        """
        UPDATE records SET queue = ?, envelope = ?, key_version = ?, size = ?, state = ?, attempts = ?, error_kind = ?,
          next_attempt_at = ?, server_failures = ?, lease_until = 0, changed = ?
        WHERE seq = ?
        """
      ).run([
        .text(record.queue), .blob(Storage.inlinePart(of: bytes)),
        .integer(Int64(try Envelope.header(of: bytes).version)),
        .integer(Int64(envelope.count)), .text((state == .inFlight ? RecordState.pending : state).rawValue),
        .integer(record.attempts), record.errorKind.map { .text($0) } ?? .null, .integer(record.nextAttemptAt),
        .integer(record.serverFailures), .integer(record.lastChange), .integer(home.seq),
      ])
      try storage.storeTail(of: bytes, seq: home.seq)
    }
    // The row's queue may have changed: a record of the cap's victims may now be where its search
    // no longer looks.
    storage.forgetCapSearchStart()
    try storage.addBytes(delta)
    outcome.updated += 1
  }

  /// Seals `payload` under the active key as record `id` and inserts it with `record`'s delivery
  /// fields in `state`. Returns false (storing nothing) when `id` is already in the container.
  @discardableResult
  private func insert(
    _ record: SnapshotRecord, state: RecordState, errorKind: String?, id: String, payload: [UInt8],
    born: (Int64) -> Int64, storage: Storage
  ) throws -> Bool {
    // Stored by an earlier merge and removed since (delivered, dropped): not stored again.
    guard try storage.statement("SELECT 1 FROM merged WHERE id = ?").scalar([.text(id)]) == nil else {
      return false
    }
    let envelope = try payload.withUnsafeBytes { try vault.seal($0, context: context(queue: record.queue, id: id)) }
    let inserted = try envelope.withUnsafeBytes { bytes in
      let inserted = try storage.statement(
        """
        INSERT INTO records (id, queue, created_at, size, key_version, envelope, state, attempts, error_kind,
          next_attempt_at, server_failures, changed, born)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING
        """
      ).run([
        .text(id), .text(record.queue), .integer(record.createdAt), .integer(Int64(envelope.count)),
        .integer(Int64(try Envelope.header(of: bytes).version)), .blob(Storage.inlinePart(of: bytes)),
        .text(state.rawValue),
        .integer(record.attempts), errorKind.map { .text($0) } ?? .null,
        .integer(state == .pending ? record.nextAttemptAt : 0), .integer(record.serverFailures),
        record.changed.map { .integer($0) } ?? .null, .integer(born(record.createdAt)),
      ])
      if inserted == 1 { try storage.recordInserted(envelope: bytes) }
      return inserted
    }
    guard inserted == 1 else { return false }
    try storage.statement("INSERT INTO merged (id) VALUES (?) ON CONFLICT (id) DO NOTHING").run([.text(id)])
    try storage.addBytes(envelope.count)
    return true
  }

  /// The id a losing copy is kept under: derived from the record's id, whose copy lost and when
  /// it last changed, so merging the same snapshot again finds it instead of keeping it twice.
  /// Nothing of the payload goes into it (an id is stored in the clear).
  static func keptID(for id: String, from side: String, changed: Int64) throws -> String {
    var digest = try SHA256.hash(Array("vault merge kept copy\0\(id)\0\(side)\0\(changed)".utf8))
    digest[6] = (digest[6] & 0x0f) | 0x80  // version 8: a custom UUID (RFC 9562, section 5.8)
    digest[8] = (digest[8] & 0x3f) | 0x80  // the RFC 9562 variant
    let bytes = Array(digest.prefix(16))
    let uuid = UUID(
      uuid: (
        bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7], bytes[8], bytes[9],
        bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]
      ))
    return uuid.recordText
  }
}
