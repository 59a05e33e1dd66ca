import Foundation
import Vault

extension QueueContainer: SealedContainer {
  /// The container's absolute path: how rotation reports name it.
  public var name: String { path }

  /// Stores `version` as the oldest key version any writer may seal under in this container; a
  /// writer holding an older active key reloads its manifest inside its next enqueue.
  ///
  /// - Parameter version: the rotation's new active version.
  /// - Throws: `QueueError` when the container cannot be written.
  public func raiseMinimumSealVersion(to version: UInt32) throws {
    try withStorage { storage in try storage.transaction { try storage.setMinimumSealVersion(version) } }
  }

  /// Records (after seq ?3, at most ?4) of this vault whose envelope is older than version ?2, for
  /// `reseal`; ?5 is the format-2 counterpart of ?1.
  ///
  /// Re-sealing and counting read the version from each envelope's authenticated header (bytes
  /// 14–17, big-endian, so blob order is numeric order), never from the plaintext key_version
  /// column, which anyone able to write the file could relabel. The value is cast to a BLOB first:
  /// substr() counts characters, not bytes, in a value someone retyped as TEXT. ?1 is the 13-byte header prefix
  /// "VLT", format, suite, keyring id of this vault. The header is in the row's own column
  /// (`envelope`), whole or as the head of a long envelope (`Storage.inlineEnvelopeLimit`), so the
  /// test reads no tail; it still reads the whole of an envelope a release before migration 7 stored
  /// whole in its row.
  static let olderThanVersionSQL: StaticString = """
    SELECT seq, id, queue, envelope, tail, length(envelope) + coalesce(length(tail), 0)
    FROM records LEFT JOIN envelope_tails USING (seq)
    WHERE substr(CAST(envelope AS BLOB), 1, 13) IN (?1, ?5) AND substr(CAST(envelope AS BLOB), 14, 4) < ?2 AND seq > ?3
    ORDER BY seq LIMIT ?4
    """

  /// Re-seals every record whose envelope header names a version older than `version` (pending,
  /// in flight, parked and in review alike) in transactions of `configuration.resealBatch` records
  /// and at most 4 MiB of envelopes (a larger record alone), then checkpoints the WAL. A record
  /// that does not open is left as it is and reported (its version then cannot be retired); a key
  /// that cannot be read right now stops the re-seal with that error, since an unavailable key is
  /// not a broken record.
  /// Idempotent: a record already at `version` is never touched, so a crash and a rerun finish the job.
  ///
  /// - Parameters:
  ///   - vault: the vault that opens the old records and seals the new ones.
  ///   - version: the version every record should end up under.
  /// - Returns: how many records were re-sealed, and those that did not open per version.
  /// - Throws: `QueueError` when the container cannot be read or written; `KeyStoreError` (or the
  ///   vault's other errors) when a key cannot be read right now. Batches committed before stay
  ///   re-sealed.
  public func reseal(with vault: Vault, to version: UInt32) throws -> ResealResult {
    try reseal(with: vault, to: version) { _ in }
  }

  /// The same as `reseal(with:to:)`, calling `progress` with the records re-sealed so far after
  /// each committed batch.
  ///
  /// - Parameters:
  ///   - vault: the vault that opens the old records and seals the new ones.
  ///   - version: the version every record should end up under.
  ///   - progress: called on this thread after each batch commits.
  /// - Returns: as `reseal(with:to:)`.
  /// - Throws: as `reseal(with:to:)`.
  public func reseal(with vault: Vault, to version: UInt32, progress: (Int) -> Void) throws -> ResealResult {
    let prefixes = Self.headerPrefixes(vault.keyringID)
    let target = Self.versionBytes(version)
    return try withStorage { storage in
      var result = ResealResult(resealed: 0)
      var after: Int64 = 0
      while true {
        let last = try storage.transaction { () -> Int64? in
          var rows: [(seq: Int64, id: String, queue: String, envelope: [UInt8])] = []
          var limit = BatchLimit(records: configuration.resealBatch)
          try prefixes[0].withUnsafeBytes { format1 in
            try prefixes[1].withUnsafeBytes { format2 in
              try target.withUnsafeBytes { target in
                try storage.statement(Self.olderThanVersionSQL).queryWhile([
                  .blob(format1), .blob(target), .integer(after), .integer(Int64(configuration.resealBatch)),
                  .blob(format2),
                ]) { row in
                  // The lengths come from the rows' headers: a record left for the next batch is not
                  // copied out or held (the header test in the WHERE reads each row's own column, the
                  // whole envelope only of one stored whole before migration 7).
                  guard limit.admit(bytes: Int(row.int(5))) else { return false }
                  rows.append((row.int(0), row.text(1) ?? "", row.text(2) ?? "", row.envelope(inline: 3, tail: 4)))
                  return true
                }
              }
            }
          }
          for row in rows {
            let recordContext = context(queue: row.queue, id: row.id)
            let payload: [UInt8]
            do {
              payload = try vault.open(row.envelope, context: recordContext)
            } catch is EnvelopeError {
              let version = (try? Envelope.header(of: row.envelope).version) ?? 0
              result.unopenable[version, default: 0] += 1
              continue
            }
            let envelope = try vault.seal(payload, context: recordContext)
            let sealedVersion = try Envelope.header(of: envelope).version
            let updated = try envelope.withUnsafeBytes { bytes in
              try target.withUnsafeBytes { target in
                // Only while the row's envelope header (not its key_version column) is still older.
                let updated = try storage.statement(
                  "UPDATE records SET envelope = ?, key_version = ?, size = ? WHERE seq = ? AND substr(CAST(envelope AS BLOB), 14, 4) < ?"
                ).run([
                  .blob(Storage.inlinePart(of: bytes)), .integer(Int64(sealedVersion)), .integer(Int64(envelope.count)),
                  .integer(row.seq), .blob(target),
                ])
                if updated > 0 { try storage.storeTail(of: bytes, seq: row.seq) }
                return updated
              }
            }
            result.resealed += updated
            // The row's size may have changed (format 1 into format 2 adds 44 bytes): this connection's
            // cached total, the cap's, is summed again next time, as another connection's is.
            if updated > 0 { storage.forgetCachedBytes() }
          }
          return rows.last?.seq
        }
        guard let last else { break }
        after = last
        progress(result.resealed)
      }
      storage.checkpoint()
      return result
    }
  }

  /// Records per key version, read from each envelope's header (every state included), without
  /// opening any.
  ///
  /// - Returns: the counts rotation uses to prove a version unused.
  /// - Throws: `QueueError` when the container cannot be read.
  public func recordCounts() throws -> RecordCounts {
    try withStorage { storage in
      try Self.headerCounts(storage.statement(Self.headerCountsSQL), keyring: vault.keyringID)
    }
  }

  /// The minimum seal version stored in the container's metadata (see `raiseMinimumSealVersion`).
  ///
  /// - Returns: the stored minimum (0 for a container made before it was kept).
  /// - Throws: `QueueError` when the container cannot be read.
  public func minimumSealVersion() throws -> UInt32? {
    try withStorage { storage in try storage.minimumSealVersion() }
  }

  /// Rotation's checkpoint: as `checkpoint()`, but waits at most a quarter of a second for a
  /// writer's transaction or a reader of an older snapshot to end, holding new writers off
  /// meanwhile.
  ///
  /// - Returns: false when that could not be done now: old envelopes may still be in the WAL.
  /// - Throws: nothing today; see `checkpoint()`.
  public func checkpointNow() throws -> Bool { try withStorage { $0.checkpoint(waitingUpTo: 250) } }

  /// How many records do not open with `vault` (tampered, moved, or sealed under a key that is
  /// gone), trying every record in batches of 256 records or 4 MiB.
  ///
  /// - Parameter vault: the vault whose keys are tried.
  /// - Returns: the number of records that do not open.
  /// - Throws: `QueueError` when the container cannot be read; `KeyStoreError` (or the vault's
  ///   other errors) when a key cannot be read right now.
  public func unopenableRecords(with vault: Vault) throws -> Int {
    try withStorage { storage in try Self.unopenable(storage, vault).count }
  }

  /// Deletes (or, with `keep`, moves to review) every record that does not open with `vault`; a
  /// rotation after a compromise uses it, after asking. Either way each record is counted as
  /// `undecryptable` in `stats().dropped` (it has left delivery).
  ///
  /// - Parameters:
  ///   - vault: the vault whose keys are tried.
  ///   - keep: move the records to review instead of deleting them.
  /// - Returns: how many records were deleted or moved.
  /// - Throws: `QueueError` when the container cannot be read or written; `KeyStoreError` (or the
  ///   vault's other errors) when a key cannot be read right now.
  public func removeUnopenableRecords(with vault: Vault, keep: Bool) throws -> Int {
    try withStorage { storage in
      let victims = try Self.unopenable(storage, vault)
      guard !victims.isEmpty else { return 0 }
      let now = milliseconds(clock())
      return try storage.transaction {
        var count = 0
        for seq in victims {
          count += try storage.statement(
            keep
              ? "UPDATE records SET state = 'review', error_kind = 'undecryptable', lease_until = 0, changed = ?2 WHERE seq = ?1"
              : "DELETE FROM records WHERE seq = ?"
          ).run(keep ? [.integer(seq), .integer(now)] : [.integer(seq)])
        }
        try storage.countDrop(.undecryptable, count)
        // Deleted sizes are not tracked row by row here: recompute the total next time.
        storage.forgetCachedBytes()
        return count
      }
    }
  }

  /// The rows (by seq) whose envelope does not open with `vault`, read in bounded batches.
  private static func unopenable(_ storage: Storage, _ vault: Vault) throws -> [Int64] {
    var victims: [Int64] = []
    var after: Int64 = 0
    while true {
      var rows: [(seq: Int64, id: String, queue: String, envelope: [UInt8])] = []
      var limit = BatchLimit(records: 256)
      try storage.statement(
        """
        SELECT seq, id, queue, envelope, tail, length(envelope) + coalesce(length(tail), 0)
        FROM records LEFT JOIN envelope_tails USING (seq) WHERE seq > ? ORDER BY seq LIMIT ?
        """
      ).queryWhile([.integer(after), .integer(256)]) { row in
        guard limit.admit(bytes: Int(row.int(5))) else { return false }
        rows.append((row.int(0), row.text(1) ?? "", row.text(2) ?? "", row.envelope(inline: 3, tail: 4)))
        return true
      }
      guard let last = rows.last?.seq else { return victims }
      for row in rows {
        do {
          _ = try vault.open(
            row.envelope, context: .queue(containerID: storage.containerID, queue: row.queue, id: row.id))
        } catch is EnvelopeError {
          victims.append(row.seq)
        }
      }
      after = last
    }
  }

  /// Rebuilds the file (`VACUUM`) so that no freed page keeps old ciphertext, then checkpoints
  /// the WAL.
  ///
  /// - Throws: `QueueError` when the file cannot be rebuilt (a full disk, a busy container).
  public func compact() throws {
    try withStorage { storage in
      try storage.connection.execute("VACUUM")
      storage.forgetCachedBytes()
      storage.checkpoint()
    }
  }
}

/// Opens the queue containers a vault registers, for rotation (`Vault.rotate(containers:)`).
public struct QueueContainerProvider: ContainerProvider {
  /// The configuration each container is opened with (its resealing batch size among others).
  public let configuration: QueueConfiguration

  /// Makes a provider that opens containers with `configuration`.
  ///
  /// - Parameter configuration: the settings for every container opened.
  public init(configuration: QueueConfiguration = QueueConfiguration()) {
    self.configuration = configuration
  }

  /// Looks at the file at `path` read-only, as `QueueContainer.probe(path:)`.
  ///
  /// - Parameter path: a registered container's absolute path.
  /// - Returns: what the file is.
  /// - Throws: `QueueError` when the file cannot be looked at.
  public func probe(path: String) throws -> ContainerProbe { try QueueContainer.probe(path: path) }

  /// Opens the existing container at `path` (mode `.existing`: never creates one).
  ///
  /// - Parameters:
  ///   - path: a registered container's absolute path.
  ///   - vault: the vault being rotated.
  /// - Returns: the opened `QueueContainer`.
  /// - Throws: the errors of `QueueContainer.init`.
  public func open(path: String, vault: Vault) throws -> any SealedContainer {
    try QueueContainer(path: path, vault: vault, configuration: configuration, mode: .existing)
  }

  /// Reads the container's minimum seal version through a read-only connection (nothing is
  /// changed), from a container of any schema this release opens: one written by the first release
  /// is upgraded by the rotation's own open after this check, not refused before it.
  ///
  /// - Parameters:
  ///   - path: a registered container's absolute path.
  ///   - vault: the vault being rotated.
  /// - Returns: the stored minimum.
  /// - Throws: `QueueError` when the file is not this vault's container, has a newer schema, or
  ///   cannot be read.
  public func minimumSealVersion(path: String, vault: Vault) throws -> UInt32? {
    let path = absolutePath(path)
    return try QueueContainer.translating(path) {
      try Storage.storedMinimumSealVersion(path: path, keyringID: vault.keyringID.hex)
    }
  }
}

extension Vault {
  /// What `vault rotate` does: makes a new key version active, opens every container registered
  /// with this vault (queue containers), re-seals their records under the new key, and retires
  /// (deletes the keys of) older versions only when this run proved nothing needs them.
  ///
  /// The report says, for each version kept, why: records sealed with `seal(_:context:)` outside
  /// containers, records left in a container, a container that could not be emptied. Nothing is
  /// retired when a registered container is missing or is not the one registered: the rotation
  /// refuses first and changes nothing.
  ///
  /// - Parameter options: `RotationOptions()` (the default) as `vault rotate`;
  ///   `RotationOptions(compromised: true, confirm:)` as `vault rotate --compromised`.
  /// - Returns: what was re-sealed, retired and kept, and why.
  /// - Throws: `RotationError` when a registered container is missing or replaced, `QueueError`
  ///   when a container cannot be read or written, `KeyStoreError` when the key store cannot take
  ///   a new key (a locked keyring), `VaultError` for a vault whose keys are not as recorded.
  @discardableResult
  public func rotate(options: RotationOptions = RotationOptions()) throws -> RotationReport {
    try rotate(containers: QueueContainerProvider(), options: options)
  }
}

extension Vault {
  /// What `vault recover` does: writes a lost or damaged manifest back into `home` from the copy
  /// its key store keeps, the home's queue containers deciding which vault's copy it is. See
  /// `recoverManifest(home:search:containers:resolver:clock:)`.
  ///
  /// - Parameters:
  ///   - home: the vault's home directory.
  ///   - search: where to look (default: the Secret Service's items for `home`, and every
  ///     `<vault id>.keys` in the default keyfile directory).
  ///   - resolver: builds the Secret Service store searched, and the store the recovered manifest names.
  ///   - clock: the time source for the damaged file's name and the open.
  /// - Returns: what was found and done.
  /// - Throws: as `recoverManifest(home:search:containers:resolver:clock:)`.
  public static func recoverManifest(
    home: String, search: ManifestSearch = ManifestSearch(), resolver: KeyStoreResolver = .system(),
    clock: @escaping @Sendable () -> Date = Date.init
  ) throws -> ManifestRecovery {
    try recoverManifest(
      home: home, search: search, containers: QueueContainerProvider(), resolver: resolver, clock: clock)
  }
}

/// What one transaction of a long job over a container's records (re-sealing, merging, the search
/// for records that do not open) takes in: at most `records` records and 4 MiB of envelopes,
/// always at least one record. A batch holds its envelopes at once (and one record's payload and
/// new envelope at a time): counted in records alone, 500 records of 1 MB held about 500 MB.
struct BatchLimit {
  static let bytes = 4 << 20
  let records: Int
  private var taken = 0
  private var takenBytes = 0

  init(records: Int) { self.records = records }

  /// Whether a record of `bytes` envelope bytes joins the batch (and counts it when it does).
  mutating func admit(bytes: Int) -> Bool {
    guard taken == 0 || (taken < records && takenBytes + bytes <= Self.bytes) else { return false }
    taken += 1
    takenBytes += bytes
    return true
  }
}
