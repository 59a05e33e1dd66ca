import Foundation

/// One database file opened read-only to audit it as a vault queue container (`vault scan`), over
/// a single SQLite connection that creates nothing and changes nothing. Package API: VaultScan's.
///
/// The file is the one behind a descriptor the caller opened (and keeps open and closes): SQLite is
/// given its link under /proc (`/proc/self/fd/N`, or `/proc/self/task/T/fd/N` for a descriptor of
/// a thread with a table of its own) and resolves it to the file's path, so names that are not
/// UTF-8 work and its WAL is found next to it. The descriptor's file and the file SQLite opened
/// are compared (device and inode) after the read; a file replaced in between is an error, not an
/// audit of another file.
package final class ContainerReader {
  /// The keyring id (hex) recorded in the container; nil when the database is not a vault queue
  /// container (no `records` and `meta` tables, or no keyring id), and then it holds no records.
  package let keyringID: String?
  /// The container id recorded in the container (part of every format-2 record's context); nil
  /// when absent (not a container, or one made by a release before container ids that was never
  /// opened for writing since).
  package let containerID: String?
  private let connection: Connection
  /// How a query of `records` reads each record's envelope tail (`Storage` migration 7): a join and
  /// the column, or no join and NULL in a container of a release before, whose rows hold their
  /// envelopes whole. A join, not a subquery for each row: SQLite copied a subquery's value once
  /// more, and a record of 19 MB no longer fitted where it had.
  private let tails: (join: String, column: String)
  /// The descriptor's link under /proc: `stat` of it is the file the caller opened.
  private let link: String
  /// The path the descriptor resolved to when it was opened, as raw bytes (NUL-terminated).
  private let resolved: [CChar]
  private let path: String

  /// Opens the database file behind `descriptor`.
  /// - Parameters:
  ///   - descriptor: an open, readable descriptor of a regular file; not closed here.
  ///   - path: how errors name the file (the caller's display path).
  ///   - live: whether a -wal or -shm file sits next to the file (a connection is or was live):
  ///     then the read goes through the WAL with locks, so committed records there are read;
  ///     otherwise the file is opened `immutable` and no -wal or -shm file is created.
  /// - Throws: `QueueError` (`.corrupt`, `.busy`, `.permissionDenied`, `.cannotOpen`…) when the
  ///   file cannot be read as a database.
  package convenience init(descriptor: Int32, path: String, live: Bool) throws {
    try self.init(link: "/proc/self/fd/\(descriptor)", path: path, live: live)
  }

  /// Opens the database file behind the descriptor whose link under /proc is `link`.
  /// - Parameters:
  ///   - link: `/proc/self/fd/N`, or `/proc/self/task/T/fd/N` for descriptor N of thread T's own
  ///     table; the descriptor stays open while the reader is used (the caller closes it).
  ///   - path: how errors name the file (the caller's display path).
  ///   - live: as for `init(descriptor:path:live:)`.
  /// - Throws: as `init(descriptor:path:live:)` does.
  package init(link: String, path: String, live: Bool) throws {
    self.link = link
    self.path = path
    var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
    let count = readlink(link, &buffer, buffer.count - 1)
    guard count > 0 else {
      throw QueueError.cannotOpen(path: path, reason: String(cString: strerror(errno)))
    }
    resolved = Array(buffer.prefix(count)) + [0]
    // The path must still name the open file, a regular file: a file removed since reads back as
    // "PATH (deleted)", and whatever sits at that path is not the file that was read; and read
    // through its WAL, its -wal and -shm files must be regular files too: SQLite opens them with a
    // blocking open(2), and a read-only open of a FIFO waits for a writer forever. (Checked once
    // here: a file swapped in after the check is found different by `checkSameFile`, but a FIFO
    // swapped in between this check and SQLite's open would still block it.)
    var opened = stat()
    var named = stat()
    guard stat(link, &opened) == 0, opened.st_nlink > 0, lstat(resolved, &named) == 0,
      named.st_mode & S_IFMT == S_IFREG, named.st_dev == opened.st_dev, named.st_ino == opened.st_ino
    else { throw QueueError.cannotOpen(path: path, reason: "the file was removed or replaced while it was read") }
    let resolvedBytes = resolved.dropLast().map { UInt8(bitPattern: $0) }
    if live, let special = QueueContainer.specialFile(at: resolvedBytes, reported: path) {
      throw special
    }
    // Read through its WAL, SQLite run as root gives a -wal it opens the database file's owner and
    // plays its frames: one planted by someone else (in a directory they may write) would become
    // the owner's, and the next write would keep its frames (outside review: a root scan did this).
    // So a live read needs the files and directory to be the database owner's alone.
    if live {
      try QueueContainer.checkPrivate(String(decoding: resolvedBytes, as: UTF8.self), owner: named.st_uid)
    }
    let (connection, keyring, containerID, hasTails) = try QueueContainer.translating(path) {
      let connection = try Connection(path: link, readOnly: true, live: live)
      try connection.execute("PRAGMA busy_timeout = 10000")
      var tables = 0
      try connection.prepare(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('records', 'meta')"
      ).query { tables = Int($0.int(0)) }
      var keyring: String?
      var containerID: String?
      var tails = 0
      try connection.prepare(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'envelope_tails'"
      ).query { tails = Int($0.int(0)) }
      if tables == 2 {
        try connection.prepare("SELECT key, value FROM meta WHERE key IN ('keyring_id', 'container_id')").query {
          if $0.text(0) == "keyring_id" { keyring = $0.text(1) } else { containerID = $0.text(1) }
        }
      }
      return (connection, keyring, containerID, tails == 1)
    }
    tails = hasTails ? ("LEFT JOIN envelope_tails USING (seq)", "tail") : ("", "NULL")
    self.connection = connection
    keyringID = keyring
    self.containerID = containerID
    try checkSameFile()
  }

  /// Calls `body` with every record's id, queue, key version and envelope, in the order they were
  /// stored; calls nothing when the file is not a vault queue container.
  /// - Throws: `QueueError` when the read fails part way (the records before were passed on), or
  ///   what `body` throws.
  package func forEachEnvelope(
    _ body: (_ id: String, _ queue: String, _ version: UInt32, _ envelope: [UInt8]) throws -> Void
  ) throws {
    guard keyringID != nil else { return }
    try QueueContainer.translating(path) {
      try connection.prepare(
        "SELECT id, queue, key_version, envelope, \(tails.column) FROM records \(tails.join) ORDER BY seq"
      ).query { row in
        try body(row.text(0) ?? "", row.text(1) ?? "", UInt32(clamping: row.int(2)), row.envelope(inline: 3, tail: 4))
      }
    }
    try checkSameFile()
  }

  /// Calls `body` with the seq of every envelope tail no record joins (`Storage` migration 7): one
  /// whose seq no record has, or whose record's row does not hold a 17-byte head. Vault never
  /// leaves one (a tail is deleted with its record); a writer that bypassed it can, and its bytes
  /// are then in the file without being any record's. Calls nothing for a container without tails.
  /// - Throws: `QueueError` when the read fails part way, or what `body` throws.
  package func forEachUnjoinedTail(_ body: (_ seq: Int64) throws -> Void) throws {
    guard keyringID != nil, !tails.join.isEmpty else { return }
    try QueueContainer.translating(path) {
      try connection.prepare(
        """
        SELECT t.seq FROM envelope_tails AS t LEFT JOIN records AS r ON r.seq = t.seq
        WHERE r.seq IS NULL OR length(CAST(r.envelope AS BLOB)) != \(Storage.headCount) ORDER BY t.seq
        """
      ).query { row in try body(row.int(0)) }
    }
    try checkSameFile()
  }

  /// Every record with its delivery state, in the order stored, for merging a backup's snapshot
  /// into a home (`QueueContainer.merge`). Columns a container made by an older release lacks
  /// read as nil (`changed`); nothing is returned when the file is not a vault queue container.
  /// - Throws: `QueueError` when the read fails part way, or what `body` throws.
  package func forEachRecord(_ body: (SnapshotRecord) throws -> Void) throws {
    guard keyringID != nil else { return }
    try QueueContainer.translating(path) {
      var columns: Set<String> = []
      try connection.prepare("SELECT name FROM pragma_table_info('records')").query { columns.insert($0.text(0) ?? "") }
      let changed = columns.contains("changed") ? "changed" : "NULL"
      let failures = columns.contains("server_failures") ? "server_failures" : "0"
      try connection.prepare(
        """
        SELECT id, queue, state, attempts, error_kind, created_at, next_attempt_at, \(failures), \(changed),
          key_version, envelope, \(tails.column)
        FROM records \(tails.join) ORDER BY seq
        """
      ).query { row in
        try body(
          SnapshotRecord(
            id: row.text(0) ?? "", queue: row.text(1) ?? "", state: row.text(2) ?? "", attempts: row.int(3),
            errorKind: row.text(4), createdAt: row.int(5), nextAttemptAt: row.int(6), serverFailures: row.int(7),
            changed: row.isNull(8) ? nil : row.int(8), version: UInt32(clamping: row.int(9)),
            envelope: row.envelope(inline: 10, tail: 11)))
      }
    }
    try checkSameFile()
  }

  /// The lineage a merge compares: this copy's instance id, the instance it was restored from,
  /// and the ids it started with then (`Storage`'s migration 5). Nil and empty for a container of
  /// an older release, or one never restored.
  package func lineage() throws -> ContainerLineage {
    guard keyringID != nil else { return ContainerLineage(instance: nil, restoredFrom: nil, inherited: []) }
    return try QueueContainer.translating(path) { try ContainerLineage.read(from: connection) }
  }

  /// SQLite opened the file by the path the descriptor resolved to: if another file was put there
  /// in between, what was read is not the file the caller opened.
  private func checkSameFile() throws {
    var mine = stat()
    var theirs = stat()
    guard stat(link, &mine) == 0, stat(resolved, &theirs) == 0, mine.st_dev == theirs.st_dev,
      mine.st_ino == theirs.st_ino
    else { throw QueueError.cannotOpen(path: path, reason: "the file was replaced while it was read") }
  }
}

/// One record of a container snapshot as `ContainerReader.forEachRecord` reads it.
package struct SnapshotRecord: Sendable {
  package var id: String
  package var queue: String
  package var state: String
  package var attempts: Int64
  package var errorKind: String?
  package var createdAt: Int64
  package var nextAttemptAt: Int64
  package var serverFailures: Int64
  /// The last state change (ms since 1970); nil when none since it was stored.
  package var changed: Int64?
  package var version: UInt32
  package var envelope: [UInt8]

  /// When the record last changed: its last state change, else when it was stored.
  package var lastChange: Int64 { changed ?? createdAt }
}

/// A merge of one bundle's snapshot into a container that began and has not finished (a full disk,
/// a kill): meta `merge_unfinished:<the snapshot's SHA-256>`, written before the merge's first batch
/// (in the transaction that makes the container, when the merge makes it) and deleted after its
/// last. Keyed by the snapshot, not the container's instance: every bundle taken of one container
/// shares its instance, and a merge of an older bundle cleared the mark a newer one's left (review).
package struct UnfinishedMerge: Sendable, Equatable {
  /// The snapshot's SHA-256, as the bundle's manifest records it (hex).
  package var snapshot: String
  /// The merge made the container (a registered one missing, or one the home did not know): when
  /// it finishes, the container is marked restored from the snapshot.
  package var madeIt: Bool
  /// The bundle file the merge read, as given to it (for the operator: what to run again).
  package var bundle: String

  package init(snapshot: String, madeIt: Bool, bundle: String) {
    self.snapshot = snapshot
    self.madeIt = madeIt
    self.bundle = bundle
  }

  /// Read from the meta row's value, `made <bundle>` or `into <bundle>`.
  init(snapshot: String, value: String) {
    self.init(snapshot: snapshot, madeIt: value.hasPrefix("made "), bundle: String(value.dropFirst(5)))
  }

  /// The meta row: its key and value.
  package var row: (key: String, value: String) {
    (Self.key(snapshot: snapshot), (madeIt ? "made " : "into ") + bundle)
  }

  /// The meta key of the mark of `snapshot` (its SHA-256).
  static func key(snapshot: String) -> String { prefix + snapshot }

  /// The meta key prefix of a mark.
  static let prefix = "merge_unfinished:"
  /// The SQL condition on `key` that selects the marks (`;` follows `:`).
  static let marks = "key >= 'merge_unfinished:' AND key < 'merge_unfinished;'"
}

/// Which copy of a container a file is, and where it came from (see `QueueContainer.merge`).
package struct ContainerLineage: Sendable, Equatable {
  /// Reads it from a container's meta and `inherited` table (absent before schema 5: none).
  static func read(from connection: Connection) throws -> ContainerLineage {
    var instance: String?
    var origin: String?
    var token: String?
    var passed: Set<String> = []
    var merges: [String: UnfinishedMerge] = [:]
    try connection.prepare(
      """
      SELECT key, value FROM meta
      WHERE key IN ('instance_id', 'restored_from', 'snapshot_token') OR (\(passedMarks)) OR (\(UnfinishedMerge.marks))
      """
    ).query {
      let key = $0.text(0) ?? ""
      switch key {
      case "instance_id": instance = $0.text(1)
      case "restored_from": origin = $0.text(1)
      case "snapshot_token": token = $0.text(1)
      case _ where key.hasPrefix(UnfinishedMerge.prefix):
        let snapshot = String(key.dropFirst(UnfinishedMerge.prefix.count))
        merges[snapshot] = UnfinishedMerge(snapshot: snapshot, value: $0.text(1) ?? "")
      default: passed.insert(String(key.dropFirst(passedPrefix.count)))
      }
    }
    var inherited: Set<String> = []
    var hasTable = false
    try connection.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'inherited'").query { _ in
      hasTable = true
    }
    if hasTable {
      try connection.prepare("SELECT id FROM inherited").query { inherited.insert($0.text(0) ?? "") }
    }
    return ContainerLineage(
      instance: instance, restoredFrom: origin, inherited: inherited, snapshotToken: token, passedSnapshots: passed,
      unfinishedMerges: merges)
  }

  /// The meta key prefix of a snapshot mark (`passed_snapshot:TOKEN`).
  static let passedPrefix = "passed_snapshot:"
  /// The SQL condition on `key` that selects the snapshot marks in `meta` (`;` follows `:`).
  static let passedMarks = "key >= 'passed_snapshot:' AND key < 'passed_snapshot;'"

  /// This copy's random id (nil: made by a release before lineage was kept).
  package var instance: String?
  /// The instance this copy was restored from (nil: it was not restored, or it is not known).
  package var restoredFrom: String?
  /// The record ids the restored copy started with.
  package var inherited: Set<String>
  /// In a snapshot (a bundle's copy): the token its backup gave it (nil: made before tokens).
  package var snapshotToken: String? = nil
  /// The tokens of snapshots taken of this container that it has gone on from (its newest marks).
  package var passedSnapshots: Set<String> = []
  /// Merges of bundle snapshots into this container that began and have not finished, by the
  /// snapshot's SHA-256: it may lack records those snapshots hold.
  package var unfinishedMerges: [String: UnfinishedMerge] = [:]

  /// Whether `snapshot` is this container's own past: the same instance, and a snapshot this
  /// container recorded having passed. Same instance alone is not enough: a container put back
  /// from an older file-system copy shares the instance id but not what came after the copy.
  package func hasPassed(_ snapshot: ContainerLineage) -> Bool {
    guard let instance, snapshot.instance == instance, let token = snapshot.snapshotToken else { return false }
    return passedSnapshots.contains(token)
  }
}
