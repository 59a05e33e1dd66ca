import Foundation

extension QueueContainer {
  /// Writes a consistent copy of the container at `path` to `destination` (a new file, 0600),
  /// with SQLite's online backup API, while other connections keep writing: every record committed
  /// before the call is in the copy. The copy holds what the container holds (sealed envelopes),
  /// in one file without a WAL. Package API: VaultBackup's.
  ///
  /// - Throws: `QueueError.noContainer` when nothing is at `path`; other `QueueError` kinds when
  ///   either file cannot be read or written.
  package static func snapshot(path: String, to destination: String) throws {
    guard case .container = try probe(path: path) else { throw QueueError.noContainer(path: path) }
    try translating(path) {
      let source = try Connection(path: path, create: false)
      try source.execute("PRAGMA busy_timeout = 10000")
      try backupDatabase(from: source, to: destination)
    }
  }
}
