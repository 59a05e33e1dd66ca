internal import CSQLite
import Foundation
import VaultCrypto

/// The container's connection, schema and prepared statements. Used under QueueContainer's lock.
final class Storage {
  let connection: Connection
  let path: String

  /// Append-only: each entry moves the schema from version n to n+1 and is never edited once shipped.
  static let migrations: [String] = [
    """
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
    CREATE TABLE records (
      seq INTEGER PRIMARY KEY,
      id TEXT NOT NULL UNIQUE,
      queue TEXT NOT NULL,
      created_at INTEGER NOT NULL,
      size INTEGER NOT NULL,
      key_version INTEGER NOT NULL,
      state TEXT NOT NULL DEFAULT 'pending',
      attempts INTEGER NOT NULL DEFAULT 0,
      next_attempt_at INTEGER NOT NULL DEFAULT 0,
      lease_until INTEGER NOT NULL DEFAULT 0,
      error_kind TEXT,
      envelope BLOB NOT NULL
    );
    CREATE INDEX records_due ON records (queue, state, next_attempt_at);
    CREATE TABLE drops (reason TEXT PRIMARY KEY, count INTEGER NOT NULL) WITHOUT ROWID;
    INSERT INTO meta (key, value) VALUES ('min_seal_version', '0');
    """,
    // Failures the server answered (as opposed to network failures); only these park a record.
    """
    ALTER TABLE records ADD COLUMN server_failures INTEGER NOT NULL DEFAULT 0;
    """,
    // Every index dirties one more page per commit. Claims scan in insertion order instead; the
    // due records of a queue are almost always at its head.
    """
    DROP INDEX records_due;
    """,
    // The container's age clock when the record was enqueued (NULL: enqueued before; its
    // created_at stands in). maximumAge compares it with the age clock, which counts time that
    // really passed, so a wall-clock step cannot make a record look old. No declared type: SQLite
    // appends the definition to the table's schema text, and one more word there would make
    // `vault scan` take that line for natural-language plaintext. Integers are stored as given.
    """
    ALTER TABLE records ADD COLUMN born;
    """,
  ]

  /// How a container file is opened.
  enum Mode: Equatable {
    /// Create the schema in an empty database (a new container, id made here); an existing
    /// container is opened as with `.existing`.
    case create(minimumSealVersion: UInt32)
    /// The file must already be a vault container; nothing is created.
    case existing
    /// Read-only: no schema change, no WAL switch, no files created when none exist.
    case readOnly
  }

  /// The random id this container keeps in its meta table (made at creation; assigned on the
  /// first writable open of a container made before ids existed).
  private(set) var containerID = ""
  let readOnly: Bool

  init(path: String, keyringID: String, mode: Mode) throws {
    self.path = path
    readOnly = mode == .readOnly
    var create = false
    if case .create = mode { create = true }
    connection = try Connection(path: path, readOnly: readOnly, create: create)
    // Settings are per connection and set explicitly, whatever the library's defaults.
    try connection.execute("PRAGMA busy_timeout = 10000")
    if readOnly {
      try inspect(keyringID: keyringID)
    } else {
      try connection.execute("PRAGMA secure_delete = ON")
      try connection.execute("PRAGMA foreign_keys = ON")
      try connection.execute("PRAGMA journal_mode = WAL")
      try connection.execute("PRAGMA synchronous = FULL")
      try migrate(keyringID: keyringID, mode: mode)
    }
    try prepareStatements()
  }

  /// The read-only counterpart of `migrate`: checks, changes nothing.
  private func inspect(keyringID: String) throws {
    let version = Int(try connection.prepare("PRAGMA user_version").scalar() ?? 0)
    guard version > 0 else { throw QueueError.notAQueueContainer(path: path) }
    guard version <= Self.migrations.count else { throw QueueError.newerSchema(path: path, version: version) }
    guard version == Self.migrations.count else {
      throw QueueError.storage(path: path, detail: "older schema \(version); open it once with a writing command")
    }
    try checkIdentity(keyringID: keyringID)
  }

  private func migrate(keyringID: String, mode: Mode) throws {
    try connection.transaction {
      let version = Int(try connection.prepare("PRAGMA user_version").scalar() ?? 0)
      if version == 0 {
        let tables = try connection.prepare("SELECT count(*) FROM sqlite_master").scalar() ?? 0
        guard tables == 0, case .create = mode else { throw QueueError.notAQueueContainer(path: path) }
      }
      guard version <= Self.migrations.count else { throw QueueError.newerSchema(path: path, version: version) }
      for index in version..<Self.migrations.count {
        try connection.execute(Self.migrations[index])
        try connection.execute("PRAGMA user_version = \(index + 1)")
      }
      if version == 0, case .create(let minimum) = mode {
        let insert = try connection.prepare("INSERT INTO meta (key, value) VALUES (?, ?)")
        try insert.run([.text("keyring_id"), .text(keyringID)])
        // A new container starts at the vault's active version: nothing older may enter it.
        try connection.prepare("UPDATE meta SET value = ? WHERE key = 'min_seal_version'").run([
          .text(String(minimum))
        ])
      }
      var foundID: String?
      try connection.prepare("SELECT value FROM meta WHERE key = 'container_id'").query { foundID = $0.text(0) }
      if foundID == nil {
        let id = try Self.newContainerID()
        try connection.prepare("INSERT INTO meta (key, value) VALUES ('container_id', ?)").run([.text(id)])
      }
      try checkIdentity(keyringID: keyringID)
    }
  }

  private func checkIdentity(keyringID: String) throws {
    var found: String?
    var id: String?
    try connection.prepare("SELECT key, value FROM meta WHERE key IN ('keyring_id', 'container_id')").query { row in
      if row.text(0) == "keyring_id" { found = row.text(1) } else { id = row.text(1) }
    }
    guard let found else { throw QueueError.notAQueueContainer(path: path) }
    guard found == keyringID else {
      throw QueueError.foreignContainer(path: path, found: found, expected: keyringID)
    }
    guard let id, !id.isEmpty else { throw QueueError.notAQueueContainer(path: path) }
    containerID = id
  }

  static func newContainerID() throws -> String {
    try SecureRandom.bytes(8).map { String(format: "%02x", $0) }.joined()
  }

  var dataVersion: Statement!
  var sumSizes: Statement!
  var begin: Statement!
  var commit: Statement!
  var insert: Statement!
  var oldestDroppable: Statement!
  var maxSeq: Statement!
  var makeDue: Statement!
  var release: Statement!
  var quarantine: Statement!
  var deleteBySeq: Statement!
  var deleteByID: Statement!
  var sizeOf: Statement!
  var attemptsOf: Statement!
  var park: Statement!
  var due: Statement!
  var markInFlight: Statement!
  var setState: Statement!
  var reschedule: Statement!
  var resend: Statement!
  var readAgeClock: Statement!
  var writeMetaText: Statement!
  var renew: Statement!
  var releaseHeld: Statement!
  var expired: Statement!
  var deleteExpired: Statement!
  var countByState: Statement!
  var countByQueue: Statement!
  var drops: Statement!
  var listAll: Statement!
  var countInState: Statement!
  var readMeta: Statement!
  var writeMeta: Statement!
  var addDrop: Statement!
  var olderThanVersion: Statement!
  var replaceEnvelope: Statement!
  var countByHeader: Statement!
  var allAfter: Statement!
  var readCapVictims: Statement!
  var writeCapVictims: Statement!
  var reviewBySeq: Statement!

  private func prepareStatements() throws {
    insert = try connection.prepare(
      """
      INSERT INTO records (id, queue, created_at, size, key_version, envelope, born) VALUES (?, ?, ?, ?, ?, ?, ?)
      ON CONFLICT (id) DO NOTHING
      """)
    dataVersion = try connection.prepare("PRAGMA data_version")
    sumSizes = try connection.prepare("SELECT coalesce(sum(size), 0) FROM records")
    begin = try connection.prepare("BEGIN IMMEDIATE")
    commit = try connection.prepare("COMMIT")
    // ?2 is NULL (any queue) or a JSON array of the queues whose records the cap may drop.
    oldestDroppable = try connection.prepare(
      """
      SELECT seq, size FROM records WHERE state != 'in_flight' AND seq <= ?1
        AND (?2 IS NULL OR queue IN (SELECT value FROM json_each(?2))) ORDER BY seq LIMIT 64
      """)
    maxSeq = try connection.prepare("SELECT coalesce(max(seq), 0) FROM records")
    // Only records whose last failure was the network's (no `http-…` answer): a server that asked
    // for a wait (Retry-After, backoff after a 5xx) is not hurried by a route change on our side.
    makeDue = try connection.prepare(
      """
      UPDATE records SET next_attempt_at = 0
      WHERE queue = ? AND state = 'pending' AND (error_kind IS NULL OR error_kind NOT LIKE 'http-%')
      """)
    release = try connection.prepare(
      "UPDATE records SET state = 'pending', lease_until = 0, attempts = max(attempts - 1, 0) WHERE id = ? AND state = 'in_flight'"
    )
    quarantine = try connection.prepare(
      "UPDATE records SET state = 'review', error_kind = ?, lease_until = 0 WHERE id = ? AND key_version = ?")
    deleteBySeq = try connection.prepare("DELETE FROM records WHERE seq = ?")
    deleteByID = try connection.prepare("DELETE FROM records WHERE id = ?")
    sizeOf = try connection.prepare("SELECT size FROM records WHERE id = ?")
    attemptsOf = try connection.prepare(
      "SELECT attempts, server_failures FROM records WHERE id = ? AND state = 'in_flight'")
    park = try connection.prepare(
      "UPDATE records SET state = 'parked', error_kind = ?, server_failures = ?, lease_until = 0 WHERE id = ?")
    due = try connection.prepare(
      """
      SELECT id, envelope, attempts, size, created_at, key_version FROM records
      WHERE queue = ?1 AND (
        (state = 'pending' AND (next_attempt_at <= ?4 OR next_attempt_at > ?5))
        OR (state = 'in_flight' AND (lease_until <= ?2 OR lease_until > ?6)))
      ORDER BY seq LIMIT ?3
      """)
    markInFlight = try connection.prepare(
      "UPDATE records SET state = 'in_flight', lease_until = ?, attempts = attempts + 1 WHERE id = ?")
    setState = try connection.prepare("UPDATE records SET state = ?, error_kind = ?, lease_until = 0 WHERE id = ?")
    reschedule = try connection.prepare(
      """
      UPDATE records SET state = 'pending', next_attempt_at = ?, error_kind = ?, server_failures = ?, lease_until = 0
      WHERE id = ?
      """)
    resend = try connection.prepare(
      """
      UPDATE records SET state = 'pending', attempts = 0, server_failures = 0, next_attempt_at = 0, error_kind = NULL,
        lease_until = 0
      WHERE id = ?1 AND (state IN ('parked', 'review')
        OR (state = 'in_flight' AND (lease_until <= ?2 OR lease_until > ?3))
        OR (state = 'pending' AND next_attempt_at > ?4))
      """)
    // Only the claim that set `lease_until` (?3) may extend or give back its lease.
    renew = try connection.prepare(
      "UPDATE records SET lease_until = ?1 WHERE id = ?2 AND state = 'in_flight' AND lease_until = ?3")
    releaseHeld = try connection.prepare(
      """
      UPDATE records SET state = 'pending', lease_until = 0, attempts = max(attempts - 1, 0)
      WHERE id = ?1 AND state = 'in_flight' AND lease_until = ?2
      """)
    expired = try connection.prepare(
      "SELECT seq, size FROM records WHERE coalesce(born, created_at) < ? AND state != 'in_flight'")
    deleteExpired = try connection.prepare(
      "DELETE FROM records WHERE coalesce(born, created_at) < ? AND state != 'in_flight'")
    readAgeClock = try connection.prepare(
      "SELECT key, value FROM meta WHERE key IN ('age_clock', 'age_wall', 'age_boot', 'age_monotonic')")
    writeMetaText = try connection.prepare(
      "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value")
    countByState = try connection.prepare("SELECT state, count(*) FROM records GROUP BY state")
    countByQueue = try connection.prepare("SELECT queue, count(*) FROM records GROUP BY queue")
    drops = try connection.prepare("SELECT reason, count FROM drops")
    listAll = try connection.prepare(
      """
      SELECT id, queue, state, attempts, error_kind, created_at, next_attempt_at, size, key_version
      FROM records WHERE (?1 IS NULL OR queue = ?1) AND (?2 IS NULL OR state = ?2) ORDER BY seq
      """)
    countInState = try connection.prepare("SELECT count(*) FROM records WHERE queue = ? AND state = ?")
    readMeta = try connection.prepare("SELECT CAST(value AS INTEGER) FROM meta WHERE key = ?")
    writeMeta = try connection.prepare("UPDATE meta SET value = CAST(? AS TEXT) WHERE key = ?")
    addDrop = try connection.prepare(
      "INSERT INTO drops (reason, count) VALUES (?1, ?2) ON CONFLICT (reason) DO UPDATE SET count = count + ?2")
    // Re-sealing and counting read the version from each envelope's authenticated header (bytes
    // 14–17, big-endian, so blob order is numeric order), never from the plaintext key_version
    // column, which anyone able to write the file could relabel. The value is cast to a BLOB first:
    // substr() counts characters, not bytes, in a value someone retyped as TEXT. ?1 is the 13-byte header prefix
    // "VLT", format, suite, keyring id of this vault.
    olderThanVersion = try connection.prepare(
      """
      SELECT seq, id, queue, envelope FROM records
      WHERE substr(CAST(envelope AS BLOB), 1, 13) IN (?1, ?5) AND substr(CAST(envelope AS BLOB), 14, 4) < ?2 AND seq > ?3
      ORDER BY seq LIMIT ?4
      """)
    replaceEnvelope = try connection.prepare(
      "UPDATE records SET envelope = ?, key_version = ?, size = ? WHERE seq = ? AND substr(CAST(envelope AS BLOB), 14, 4) < ?"
    )
    countByHeader = try connection.prepare(
      "SELECT substr(CAST(envelope AS BLOB), 1, 17) AS header, count(*) FROM records GROUP BY header")
    readCapVictims = try connection.prepare("SELECT value FROM meta WHERE key = 'cap_victims'")
    writeCapVictims = try connection.prepare(
      "INSERT INTO meta (key, value) VALUES ('cap_victims', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value")
    allAfter = try connection.prepare("SELECT seq, id, queue, envelope FROM records WHERE seq > ? ORDER BY seq LIMIT ?")
    reviewBySeq = try connection.prepare(
      "UPDATE records SET state = 'review', error_kind = 'undecryptable', lease_until = 0 WHERE seq = ?")
  }

  func minimumSealVersion() throws -> UInt32 { UInt32(try readMeta.scalar([.text("min_seal_version")]) ?? 0) }

  func setMinimumSealVersion(_ version: UInt32) throws {
    if version > (try minimumSealVersion()) {
      try writeMeta.run([.integer(Int64(version)), .text("min_seal_version")])
    }
  }

  // The container's total envelope bytes, for the cap. Keeping it in a table would dirty one more
  // page on every commit (measured: the single-record enqueue rate drops by about a tenth), so it
  // is cached per connection: adjusted for this connection's own writes, recomputed when
  // `PRAGMA data_version` shows another connection committed, and dropped on rollback.
  private var cachedBytes: Int?
  private var cachedDataVersion: Int64 = -1

  func totalBytes() throws -> Int {
    let version = try dataVersion.scalar() ?? 0
    if let cached = cachedBytes, version == cachedDataVersion { return cached }
    let total = Int(try sumSizes.scalar() ?? 0)
    cachedBytes = total
    cachedDataVersion = version
    return total
  }

  /// Drops the cached byte total (after a change made outside `transaction`, such as VACUUM).
  func forgetCachedBytes() { cachedBytes = nil }

  /// Adjusts the cached total for this connection's own change. Only called inside `transaction`,
  /// which refreshed the cache before any change (no other connection can commit meanwhile).
  func addBytes(_ delta: Int) throws {
    cachedBytes? += delta
  }

  /// A `BEGIN IMMEDIATE` transaction that also forgets the cached byte total when it rolls back.
  func transaction<T>(_ body: () throws -> T) throws -> T {
    try begin.run()
    do {
      _ = try totalBytes()  // refresh the cache before this transaction changes anything
      let result = try body()
      try commit.run()
      return result
    } catch {
      cachedBytes = nil
      try? connection.execute("ROLLBACK")
      throw error
    }
  }

  func countDrop(_ reason: DropReason, _ count: Int) throws {
    guard count > 0 else { return }
    try addDrop.run([.text(reason.rawValue), .integer(Int64(count))])
  }

  /// A TRUNCATE checkpoint that never waits: with the busy timeout it would hold the write lock
  /// for up to 10 s while a reader keeps an old snapshot, stalling every writer. Returns whether the
  /// WAL was written back and emptied (false: a reader or writer was busy; try again later).
  @discardableResult
  func checkpoint() -> Bool {
    guard !readOnly else { return false }
    sqlite3_busy_timeout(connection.handle, 0)
    defer { sqlite3_busy_timeout(connection.handle, 10000) }
    let result = sqlite3_wal_checkpoint_v2(connection.handle, nil, SQLITE_CHECKPOINT_TRUNCATE, nil, nil)
    guard result == SQLITE_OK else { return false }
    var info = stat()
    return stat(path + "-wal", &info) != 0 || info.st_size == 0
  }
}
