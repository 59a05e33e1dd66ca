internal import CSQLite
import Foundation
import VaultCrypto

/// The container's connection, schema and cache of prepared statements. Used under QueueContainer's lock.
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
    // For merging a backup into a home (VaultBackup): `changed` is the time of the record's last
    // state change (NULL: none since it was stored; created_at stands in), so the newer copy wins;
    // `inherited` holds the ids a container restored from a backup started with, so a merge can
    // tell a record delivered here since from one added on the other copy. No declared type, as
    // for `born`.
    // `merged` holds the ids this container held at a merge or a merge stored in it (records
    // added, copies kept for review), so merging a copy of one again after it was delivered here
    // does not bring it back.
    """
    ALTER TABLE records ADD COLUMN changed;
    CREATE TABLE inherited (id TEXT PRIMARY KEY) WITHOUT ROWID;
    CREATE TABLE merged (id TEXT PRIMARY KEY) WITHOUT ROWID;
    """,
    // When the server first refused the record since it was stored or resent (wall-clock
    // milliseconds; NULL: not refused yet, or refused before this column, when the next refusal
    // starts the count): a record is parked only once refused for `parkAfter`, so an outage of
    // minutes or hours parks nothing. No declared type, as for `born`.
    """
    ALTER TABLE records ADD COLUMN refused_since;
    """,
    // The rest of every envelope longer than `inlineEnvelopeLimit`: its records row keeps the first
    // 17 bytes. A claim, a failure or a release changes the row's size (its state text, its lease),
    // and SQLite rewrites a row whose size changes whole, overflow pages included (each freed one
    // zeroed by secure_delete, then all written again at the checkpoint): one delivery attempt of
    // an 18.7 MB record wrote 150 MB (outside review). A row that keeps its size is overwritten in
    // place; a tail is written only when its record is stored, re-sealed or merged, or split once
    // when a row stored whole before is first claimed. Deleted with its record.
    """
    CREATE TABLE envelope_tails (
      seq INTEGER PRIMARY KEY REFERENCES records (seq) ON DELETE CASCADE,
      tail BLOB NOT NULL
    );
    """,
  ]

  /// The oldest schema a read-only open reads as it is: what listing and counting read has not
  /// changed since (migration 5 added only what merges use), so a container of the previous
  /// release is listed without being upgraded first.
  static let readableFrom = 4

  /// How a container file is opened.
  enum Mode: Equatable {
    /// Create the schema in an empty database (a new container, its id made here unless
    /// `containerID` names it: a container restored from a backup keeps its id, and records the
    /// snapshot's instance it is a copy of as `restoredFrom`, and `merge`, the merge that is to fill
    /// it, as unfinished); an existing container is opened as with `.existing`.
    case create(
      minimumSealVersion: UInt32, containerID: String? = nil, restoredFrom: String? = nil,
      merge: UnfinishedMerge? = nil)
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
  }

  /// The read-only counterpart of `migrate`: checks, changes nothing.
  private func inspect(keyringID: String) throws {
    let version = Int(try connection.prepare("PRAGMA user_version").scalar() ?? 0)
    guard version > 0 else { throw QueueError.notAQueueContainer(path: path) }
    guard version <= Self.migrations.count else { throw QueueError.newerSchema(path: path, version: version) }
    guard version >= Self.readableFrom else {
      throw QueueError.olderSchema(path: path, version: version)
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
      if version >= 5 { try addWhatRenumberedSchemasLack() }
      var givenID: String?
      if version == 0, case .create(let minimum, let containerID, let restoredFrom, let merge) = mode {
        givenID = containerID
        let insert = try connection.prepare("INSERT INTO meta (key, value) VALUES (?, ?)")
        try insert.run([.text("keyring_id"), .text(keyringID)])
        if let restoredFrom { try insert.run([.text("restored_from"), .text(restoredFrom)]) }
        // Made for a merge to fill: unfinished until the merge has filled it, so a backup does not
        // take it, half filled, for the container (and prune the bundles that hold the rest; an
        // outside review).
        if let merge { try insert.run([.text(merge.row.key), .text(merge.row.value)]) }
        // A new container starts at the vault's active version: nothing older may enter it.
        try connection.prepare("UPDATE meta SET value = ? WHERE key = 'min_seal_version'").run([
          .text(String(minimum))
        ])
      }
      var foundID: String?
      try connection.prepare("SELECT value FROM meta WHERE key = 'container_id'").query { foundID = $0.text(0) }
      if foundID == nil {
        let id = try givenID ?? Self.newContainerID()
        try connection.prepare("INSERT INTO meta (key, value) VALUES ('container_id', ?)").run([.text(id)])
      }
      // This copy of the container (a restore into another home makes a new one); see `merge`.
      try connection.prepare("INSERT INTO meta (key, value) VALUES ('instance_id', ?) ON CONFLICT (key) DO NOTHING")
        .run([.text(try Self.newContainerID())])
      try checkIdentity(keyringID: keyringID)
    }
  }

  /// Two builds of the main branch (0c6199f and 7cee1da, 2026-12-01) numbered the schemas
  /// differently before migrations 5 and 6 settled: the first stored schema 5 without the table
  /// `merged`, the next added that table as schema 6, a number migration 6 (`refused_since`) took
  /// later. Their containers carry those numbers, so the migrations above skip what they lack: a
  /// container of the second never got `refused_since`, and every refusal, resend and telemetry
  /// retry failed on it ("no such column"). Whatever of the two is missing is added here, in the
  /// migration's transaction; a container of any other build has both and is not changed.
  private func addWhatRenumberedSchemasLack() throws {
    let merged = try connection.prepare(
      "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'merged'"
    ).scalar()
    if merged == 0 { try connection.execute("CREATE TABLE merged (id TEXT PRIMARY KEY) WITHOUT ROWID") }
    let refusedSince = try connection.prepare(
      "SELECT count(*) FROM pragma_table_info('records') WHERE name = 'refused_since'"
    ).scalar()
    if refusedSince == 0 { try connection.execute("ALTER TABLE records ADD COLUMN refused_since") }
  }

  /// The minimum seal version stored in the container at `path`, read through a read-only
  /// connection that changes nothing, whatever its schema: every schema since the first keeps it
  /// in `meta`. Rotation checks it before it changes anything, also for a container of the first
  /// release (schema 3, no container id), which a read-only open refuses until a writer upgrades
  /// it, and which rotation itself upgrades once the check has passed.
  ///
  /// - Throws: `QueueError.notAQueueContainer`, `.foreignContainer`, `.newerSchema`, or
  ///   `SQLiteError` when the file cannot be read.
  static func storedMinimumSealVersion(path: String, keyringID: String) throws -> UInt32 {
    let connection = try Connection(path: path, readOnly: true, create: false)
    try connection.execute("PRAGMA busy_timeout = 10000")
    let version = Int(try connection.prepare("PRAGMA user_version").scalar() ?? 0)
    guard version > 0 else { throw QueueError.notAQueueContainer(path: path) }
    guard version <= migrations.count else { throw QueueError.newerSchema(path: path, version: version) }
    var found: String?
    try connection.prepare("SELECT value FROM meta WHERE key = 'keyring_id'").query { found = $0.text(0) }
    guard let found else { throw QueueError.notAQueueContainer(path: path) }
    guard found == keyringID else { throw QueueError.foreignContainer(path: path, found: found, expected: keyringID) }
    let minimum = try connection.prepare("SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'min_seal_version'")
      .scalar()
    return UInt32(clamping: minimum ?? 0)
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

  /// This connection's prepared statements, keyed by the address of their SQL text. A
  /// `StaticString` literal stays at one address for the life of the process and two literals at
  /// one address hold the same text, so the lookup never hashes SQL. A text written out in two
  /// places may get two statements; nothing depends on them being shared.
  private var statements: [UnsafeRawPointer: Statement] = [:]

  /// The statement for `sql`, prepared on this connection the first time it is asked for and
  /// reused after that, so the SQL can be written where it runs without being prepared on every
  /// call (a single-record enqueue runs seven: BEGIN, data_version, the minimum seal version, max(seq),
  /// the age clock, the INSERT, COMMIT).
  ///
  /// - Parameter sql: the statement's text, a literal.
  /// - Returns: the prepared statement; it is reset and rebound by each `run`, `query` or `scalar`.
  /// - Throws: `SQLiteError` when the statement cannot be prepared (a syntax error, a schema that
  ///   lacks a table or column it names, a corrupt file).
  ///
  /// Not thread-safe: Storage is used by one thread at a time, under QueueContainer's lock.
  func statement(_ sql: StaticString) throws -> Statement {
    let key = UnsafeRawPointer(sql.utf8Start)
    if let statement = statements[key] { return statement }
    let statement = try connection.prepare(sql.description)
    statements[key] = statement
    return statement
  }

  /// How many statements this connection has prepared (for tests: repeating work prepares none).
  var preparedStatementCount: Int { statements.count }

  func minimumSealVersion() throws -> UInt32 {
    UInt32(
      try statement("SELECT CAST(value AS INTEGER) FROM meta WHERE key = ?").scalar([.text("min_seal_version")]) ?? 0)
  }

  func setMinimumSealVersion(_ version: UInt32) throws {
    if version > (try minimumSealVersion()) {
      try statement("UPDATE meta SET value = CAST(? AS TEXT) WHERE key = ?").run([
        .integer(Int64(version)), .text("min_seal_version"),
      ])
    }
  }

  // The container's total envelope bytes, for the cap. Keeping it in a table would dirty one more
  // page on every commit (measured: the single-record enqueue rate drops by about a tenth), so it
  // is cached per connection: adjusted for this connection's own writes, trusted only while
  // `PRAGMA data_version` shows no other connection committed, and dropped on rollback. What is
  // cached is either the exact total (`exact`, summed) or a bound the total cannot be above (the
  // database's bytes when read, `mayExceed`, plus this connection's own changes since: every byte
  // added to the total is added to the bound, every byte removed is removed from both).
  private var knownBytes: (value: Int, exact: Bool)?
  private var cachedDataVersion: Int64 = -1

  func totalBytes() throws -> Int {
    let version = try statement("PRAGMA data_version").scalar() ?? 0
    if let known = knownBytes, known.exact, version == cachedDataVersion { return known.value }
    let total = Int(try statement("SELECT coalesce(sum(size), 0) FROM records").scalar() ?? 0)
    knownBytes = (total, true)
    cachedDataVersion = version
    return total
  }

  /// Whether the records could hold more than `cap` bytes at all. What this connection knows
  /// answers first: a total or a bound no larger than `cap` says no, an exact total above it yes.
  /// Else the database's size: every byte of the envelopes is stored in one of its pages, so while
  /// the database is no larger than `cap` their total is not either, and need not be summed (before
  /// this, every enqueue after another process committed summed every record's size). That size is
  /// kept as the bound: `PRAGMA page_count` is compiled again each time it runs, which cost a
  /// single enqueue about 6,000 of its 100,000 instructions (callgrind).
  func mayExceed(_ cap: Int) throws -> Bool {
    let version = try statement("PRAGMA data_version").scalar() ?? 0
    if let known = knownBytes, version == cachedDataVersion {
      if known.value <= cap { return false }
      if known.exact { return true }
    }
    let pages = try statement("PRAGMA page_count").scalar() ?? 0
    if pageSize == nil { pageSize = try statement("PRAGMA page_size").scalar() ?? 0 }
    let (bytes, overflow) = pages.multipliedReportingOverflow(by: pageSize ?? 0)
    guard !overflow, bytes <= cap, pages <= Int64(Int32.max) else { return true }
    knownBytes = (Int(bytes), false)
    cachedDataVersion = version
    return false
  }

  /// Read once per connection: a WAL database's page size cannot change (not even by VACUUM),
  /// and `mayExceed` runs on every enqueue.
  private var pageSize: Int64?

  /// Drops the cached byte total (after a change made outside `transaction`, such as VACUUM), and
  /// the cap's search start with it.
  func forgetCachedBytes() {
    knownBytes = nil
    capSearch = nil
  }

  /// Where the byte cap's search for records to drop may start (`QueueContainer.enforceCap`): no
  /// record before `seq` belongs to the queues `queues` names (their JSON list; nil: any queue).
  /// It holds while this connection alone changes the file: a record's queue never changes but by
  /// a merge, which forgets it, and a new record goes after every other, unless the newest were
  /// deleted, and then one inserted before it forgets it (`recordInserted(envelope:)`). Another connection's
  /// commit (`data_version`) or a rollback (rows deleted come back) forgets it too.
  private var capSearch: (queues: String?, seq: Int64, dataVersion: Int64)?

  /// The seq the cap's search for records of `queues` may start at: 0 (the oldest) unless this
  /// connection knows no record of them comes before a later one.
  func capSearchStart(for queues: String?) throws -> Int64 {
    guard let known = capSearch, known.queues == queues else { return 0 }
    guard try statement("PRAGMA data_version").scalar() == known.dataVersion else {
      capSearch = nil
      return 0
    }
    return known.seq
  }

  /// Records that no record of `queues` comes before `seq` (the first record of those queues a
  /// search from the last start found, in any state), inside the transaction that read it.
  func setCapSearchStart(_ seq: Int64, for queues: String?) throws {
    capSearch = (queues, seq, try statement("PRAGMA data_version").scalar() ?? 0)
  }

  /// What follows an INSERT of a records row on this connection, whose inline part came from
  /// `envelope` (`inlinePart`): its tail is stored, the cap may not drop the row in this
  /// transaction, and a search start after it no longer holds.
  func recordInserted(envelope: UnsafeRawBufferPointer) throws {
    let seq = connection.lastInsertedRowID
    if let known = capSearch, seq < known.seq { capSearch = nil }
    insertedInTransaction.insert(seq)
    try storeTail(of: envelope, seq: seq, replacing: false)
  }

  /// The rows this connection inserted in the open transaction (`transaction`): never the cap's
  /// victims. The cap also looks only at rows numbered up to the newest before the transaction,
  /// but once a row holds Int64.max (an edited file) SQLite numbers new rows at random, below it.
  private(set) var insertedInTransaction: Set<Int64> = []

  /// Set by the age limit's delete in the open transaction: once it commits, the WAL is
  /// checkpointed (`TRUNCATE`, never waiting), as after an ack, so the expired envelopes do not
  /// linger in its frames (an outside review found them there). The cap's drops do not set it: a
  /// checkpoint after each made an enqueue at the cap 2.6× slower (0.29 → 0.77 ms, debug build),
  /// and its victims are the oldest records, whose frames later writes have mostly overwritten.
  var deletedInTransaction = false

  func forgetCapSearchStart() { capSearch = nil }

  /// Envelopes longer than this keep only their head (`headCount` bytes) in their records row, the
  /// rest in `envelope_tails` (migration 7). Up to it, a row with a 128-byte queue name and every
  /// other column at its widest (about 300 bytes) still fits in one 4 KiB page (SQLite keeps at most
  /// 4,061 bytes of a row on its leaf page), so a change of the row's state rewrites that page only,
  /// and an enqueue writes no page beside the row's: a second table written on every enqueue cost
  /// durable single-record enqueues about a tenth of their rate (measured with Python's sqlite3,
  /// 2,000 commits, medians of five alternated runs).
  static let inlineEnvelopeLimit = 3_584

  /// What a records row keeps of a longer envelope: its first 17 bytes (magic, format, suite,
  /// keyring id, key version), the header that counting (`headerCountsSQL`) and rotation read in
  /// SQL. Shorter than any envelope, so an inline part of this length is always a head.
  static let headCount = 17

  /// The part of `envelope` its records row holds: all of it, or its head when it is longer than
  /// `inlineEnvelopeLimit`.
  static func inlinePart(of envelope: UnsafeRawBufferPointer) -> UnsafeRawBufferPointer {
    envelope.count > inlineEnvelopeLimit ? UnsafeRawBufferPointer(rebasing: envelope.prefix(headCount)) : envelope
  }

  /// Stores the part of `envelope` that the row of record `seq` does not hold (see `inlinePart`),
  /// replacing the tail it had; removes that tail when `envelope` fits in the row. Inside the
  /// transaction that writes the row.
  ///
  /// - Parameter replacing: false for a row inserted in this transaction, which has no tail to
  ///   remove (an enqueue of a small record then runs no statement here).
  func storeTail(of envelope: UnsafeRawBufferPointer, seq: Int64, replacing: Bool = true) throws {
    if envelope.count > Self.inlineEnvelopeLimit {
      try statement(
        "INSERT INTO envelope_tails (seq, tail) VALUES (?1, ?2) ON CONFLICT (seq) DO UPDATE SET tail = ?2"
      ).run([.integer(seq), .blob(UnsafeRawBufferPointer(rebasing: envelope.dropFirst(Self.headCount)))])
    } else if replacing {
      try statement("DELETE FROM envelope_tails WHERE seq = ?").run([.integer(seq)])
    }
  }

  /// Splits the envelope of record `seq`, which its row holds whole (stored by a release before
  /// migration 7), into head and tail if it is longer than `inlineEnvelopeLimit`. Inside a
  /// transaction.
  ///
  /// - Parameter envelope: the envelope the row holds, as read in this transaction.
  func splitStoredEnvelope(_ envelope: UnsafeRawBufferPointer, seq: Int64) throws {
    guard envelope.count > Self.inlineEnvelopeLimit else { return }
    try statement("UPDATE records SET envelope = ? WHERE seq = ?").run([
      .blob(Self.inlinePart(of: envelope)), .integer(seq),
    ])
    try storeTail(of: envelope, seq: seq)
  }

  /// Adjusts the cached total or bound for this connection's own change, inside `transaction` (no
  /// other connection can commit meanwhile). One made before another connection committed is
  /// adjusted too, harmlessly: `data_version` has changed, and it is not trusted again.
  func addBytes(_ delta: Int) throws {
    knownBytes?.value += delta
  }

  /// A read transaction (`BEGIN`, deferred): every statement of `body` reads one snapshot of the
  /// file, whatever other connections commit meanwhile.
  func readSnapshot<T>(_ body: () throws -> T) throws -> T {
    try statement("BEGIN").run()
    defer { try? connection.execute("COMMIT") }
    return try body()
  }

  /// A `BEGIN IMMEDIATE` transaction that also forgets the cached byte total when it rolls back.
  /// The total is not refreshed here: `totalBytes()` inside the transaction sums again when another
  /// connection committed since the cache was made (its own changes included, the adjustments to
  /// the old total discarded), and trusts the cache and this connection's adjustments otherwise.
  func transaction<T>(_ body: () throws -> T) throws -> T {
    try statement("BEGIN IMMEDIATE").run()
    insertedInTransaction.removeAll(keepingCapacity: true)
    deletedInTransaction = false
    defer {
      insertedInTransaction.removeAll(keepingCapacity: true)
      deletedInTransaction = false
    }
    do {
      let result = try body()
      try statement("COMMIT").run()
      if deletedInTransaction { checkpoint() }
      return result
    } catch {
      knownBytes = nil
      capSearch = nil
      try? connection.execute("ROLLBACK")
      throw error
    }
  }

  /// Runs `body` inside a savepoint of the open transaction, so its changes are undone alone when
  /// it throws (one enqueue of a group commit failing leaves the others in the transaction).
  /// - Throws: `body`'s error after undoing its changes; `SavepointFailure` when they could not be
  ///   undone (then the whole transaction must roll back).
  func savepoint<T>(_ body: () throws -> T) throws -> T {
    // Prepared once, as every statement a commit runs: `execute` compiled the text on each call.
    try statement("SAVEPOINT grouped").run()
    do {
      let result = try body()
      try statement("RELEASE grouped").run()
      return result
    } catch {
      knownBytes = nil
      capSearch = nil
      do {
        try connection.execute("ROLLBACK TO grouped")
        try connection.execute("RELEASE grouped")
      } catch let undo {
        throw SavepointFailure(error: undo)
      }
      throw error
    }
  }

  func countDrop(_ reason: DropReason, _ count: Int) throws {
    guard count > 0 else { return }
    try statement(
      "INSERT INTO drops (reason, count) VALUES (?1, ?2) ON CONFLICT (reason) DO UPDATE SET count = count + ?2"
    ).run([.text(reason.rawValue), .integer(Int64(count))])
  }

  /// Adds to the resend ledger: records `resend` moved from `state` (parked or review) back to
  /// pending. Kept in the drops table under `resent-<state>` (no schema change), apart from the
  /// drop reasons, which keep counting every record that ever left the flow.
  func countResend(from state: RecordState, _ count: Int) throws {
    guard count > 0 else { return }
    try statement(
      "INSERT INTO drops (reason, count) VALUES (?1, ?2) ON CONFLICT (reason) DO UPDATE SET count = count + ?2"
    ).run([.text(QueueContainer.resentPrefix + state.rawValue), .integer(Int64(count))])
  }

  /// A TRUNCATE checkpoint that by default never waits: with the busy timeout it would hold the
  /// write lock for up to 10 s while a reader keeps an old snapshot, stalling every writer. Returns
  /// whether the WAL was written back and emptied (false: a reader or writer was busy; try again
  /// later).
  ///
  /// - Parameter milliseconds: how long it may wait for a writer or a reader of an older snapshot
  ///   (rotation's); new writers wait meanwhile.
  @discardableResult
  func checkpoint(waitingUpTo milliseconds: Int32 = 0) -> Bool {
    guard !readOnly else { return false }
    sqlite3_busy_timeout(connection.handle, milliseconds)
    defer { sqlite3_busy_timeout(connection.handle, 10000) }
    let result = sqlite3_wal_checkpoint_v2(connection.handle, nil, SQLITE_CHECKPOINT_TRUNCATE, nil, nil)
    guard result == SQLITE_OK else { return false }
    var info = stat()
    return stat(path + "-wal", &info) != 0 || info.st_size == 0
  }
}

/// A savepoint whose changes could not be undone: the enclosing transaction must roll back whole.
struct SavepointFailure: Error {
  let error: any Error
}

extension Row {
  /// A record's envelope from the row's inline part (column `inline`, `records.envelope`) and its
  /// tail (column `tail`, from `envelope_tails`, NULL when it has none): joined when the inline
  /// part is a head (`Storage.headCount` bytes), else the inline part alone, whatever tail a row
  /// of another shape has (one left by a writer that bypassed the cascade cannot be added to it).
  func envelope(inline: Int32, tail: Int32) -> [UInt8] {
    withBlob(inline) { head in
      guard head.count == Storage.headCount, !isNull(tail) else { return [UInt8](head) }
      return withBlob(tail) { rest in
        var envelope: [UInt8] = []
        envelope.reserveCapacity(head.count + rest.count)
        envelope.append(contentsOf: head)
        envelope.append(contentsOf: rest)
        return envelope
      }
    }
  }
}
