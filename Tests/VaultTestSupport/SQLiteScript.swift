import Foundation

/// SQL run against a database by Python's sqlite3 module: an independent writer, used by tests to
/// tamper with or create files behind vault's back.
public enum SQLiteScript {
  /// What the script printed on stderr when it failed.
  public struct Failed: Error, CustomStringConvertible {
    public let status: Int32
    public let error: String
    public var description: String { "python3 sqlite3 exited \(status): \(error)" }
  }

  /// Runs `sql` (one or more statements) in `path` and commits. Throws `Failed` when it did not.
  public static func run(_ path: String, _ sql: String) throws {
    let script =
      "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.executescript(sys.argv[2]); c.commit(); c.close()"
    let result = try Spawn.run("/usr/bin/env", ["python3", "-c", script, path, sql])
    guard result.status == 0 else { throw Failed(status: result.status, error: result.error) }
  }
}
