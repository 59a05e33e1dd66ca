import Foundation

extension QueueContainer {
  /// Writes a consistent copy of the container at `path` to `destination` (a new file, 0600),
  /// with SQLite's online backup API, while other connections keep writing: every record committed
  /// before the call is in the copy. The copy holds what the container holds (sealed envelopes),
  /// in one file without a WAL. Package API: VaultBackup's.
  ///
  /// - Throws: `QueueError.noContainer` when nothing is at `path`; `.cannotOpen` naming why when
  ///   what is there is not a container (a FIFO, a directory, an empty file …); other kinds when
  ///   either file cannot be read or written, naming the file that failed (`destination` for a
  ///   full or unwritable destination).
  ///
  /// The copy gets a new random snapshot token (meta `snapshot_token`), and then the container
  /// records it as passed (meta `passed_snapshot:TOKEN`): a later merge of the copy into the
  /// container knows the copy is the container's own past only when the container holds that
  /// mark. A container put back from an older file-system copy (a rollback: same instance id, but
  /// an earlier state) lacks it, and what the copy holds that it does not is never taken for
  /// delivered. Marking is best effort (a read-only container still backs up): without the mark a
  /// merge treats such records as undetermined, which loses nothing.
  ///
  /// - Returns: the copy's snapshot token (a bundle's manifest records it: `Backup.create` prunes
  ///   a bundle only while the live container holds its mark).
  @discardableResult
  package static func snapshot(path: String, to destination: String) throws -> String {
    // A FIFO, directory, device or link there is named as such (a backup said "there is no vault
    // container" for each, and that opening it for writing would make one; an outside review).
    if let special = specialFile(at: path, reported: path) { throw special }
    switch try probe(path: path) {
    case .container: break
    case .missing: throw QueueError.noContainer(path: path)
    case .empty:
      throw QueueError.cannotOpen(
        path: path,
        reason: "it is empty (its creation was cut short): nothing of it can be backed up; restore it, or "
          + "remove the file and forget it (`vault container forget`) before a backup")
    case .notAContainer(let reason):
      throw QueueError.cannotOpen(
        path: path,
        reason: "it is not a vault container (\(reason)); restore it from a backup, or move it away and "
          + "forget it (`vault container forget`) before a backup")
    }
    let token = try Storage.newContainerID()
    return try translating(path) {
      let source = try Connection(path: path, create: false)
      try source.execute("PRAGMA busy_timeout = 10000")
      do {
        try backupDatabase(from: source, to: destination)
      } catch let failure as DestinationFailure {
        // The copy's disk or file failed, not the container: say which.
        try translating(destination) { throw failure.error }
      }
      try translating(destination) {
        let copy = try Connection(path: destination, create: false)
        try copy.prepare("INSERT OR REPLACE INTO meta (key, value) VALUES ('snapshot_token', ?)").run([.text(token)])
      }
      try? markPassed([token], in: source)
      return token
    }
  }

  /// The snapshot tokens the container at `path` holds marks of (see `snapshot(path:to:)`): the
  /// snapshots it has gone on from, or merged. Read-only.
  ///
  /// - Throws: as `unfinishedMerges(path:)`; `QueueError.noContainer` when there is none at `path`.
  package static func passedSnapshots(path: String) throws -> Set<String> {
    guard case .container = try probe(path: path) else { throw QueueError.noContainer(path: path) }
    return try translating(path) {
      let connection = try Connection(path: path, readOnly: true)
      try connection.execute("PRAGMA busy_timeout = 10000")
      return try ContainerLineage.read(from: connection).passedSnapshots
    }
  }

  /// Records that this container holds what the snapshots `tokens` held (a merge of one finished:
  /// its token, and the marks it carried of the snapshots before it): bundles of them may be
  /// pruned, as bundles of its own past may.
  package func markSnapshotsPassed(_ tokens: Set<String>) throws {
    guard !tokens.isEmpty else { return }
    try withStorage { try Self.markPassed(tokens, in: $0.connection) }
  }

  /// The most recent snapshot marks a container keeps: a merge of a bundle older than that many
  /// backups treats what it holds beyond the container as undetermined (in review), never lost.
  static let keptSnapshotMarks = 256

  /// Records in the live container that it has passed the snapshot `token`, keeping the newest
  /// `keptSnapshotMarks` marks.
  private static func markPassed(_ tokens: Set<String>, in source: Connection) throws {
    try source.execute("BEGIN IMMEDIATE")
    do {
      let now = Int64(Date().timeIntervalSince1970 * 1000)
      for token in tokens.sorted() {
        try source.prepare("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)").run([
          .text(ContainerLineage.passedPrefix + token), .text(String(now)),
        ])
      }
      try source.prepare(
        """
        DELETE FROM meta WHERE \(ContainerLineage.passedMarks) AND key NOT IN (
          SELECT key FROM meta WHERE \(ContainerLineage.passedMarks)
          ORDER BY CAST(value AS INTEGER) DESC, key LIMIT ?)
        """
      ).run([.integer(Int64(keptSnapshotMarks))])
      try source.execute("COMMIT")
    } catch {
      try? source.execute("ROLLBACK")
      throw error
    }
  }
}
