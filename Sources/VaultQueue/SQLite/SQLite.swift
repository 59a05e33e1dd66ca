// C boundary: every SQLite call in vault goes through this file, and every result code through `check`.
internal import CSQLite
import Foundation

/// A SQLite failure: the result code, SQLite's message and what vault was doing.
/// Bound values never appear in it (they may be user data).
package struct SQLiteError: Error, Equatable, Sendable, CustomStringConvertible {
  public let code: Int32
  public let message: String
  public let operation: String
  /// The operating system's errno behind the failure, when SQLite reports one (0 otherwise).
  public var systemErrno: Int32 = 0

  public var description: String { "\(operation): \(message) (SQLite code \(code))" }

  /// The primary result code (extended codes carry more bits).
  public var primaryCode: Int32 { code & 0xff }
  public var isFull: Bool { primaryCode == SQLITE_FULL }
  public var isBusy: Bool { primaryCode == SQLITE_BUSY || primaryCode == SQLITE_LOCKED }
  public var isReadOnly: Bool { primaryCode == SQLITE_READONLY }
  public var isCannotOpen: Bool { primaryCode == SQLITE_CANTOPEN }
  public var isCorrupt: Bool { primaryCode == SQLITE_CORRUPT || primaryCode == SQLITE_NOTADB }
  /// The file is not a SQLite database at all (its header is not SQLite's).
  public var isNotADatabase: Bool { primaryCode == SQLITE_NOTADB }
  public var isConstraint: Bool { primaryCode == SQLITE_CONSTRAINT }
  /// Out of memory, or out of address space for a mapping: SQLITE_IOERR_SHMMAP (10 | 21 << 8, the
  /// WAL index) and SQLITE_IOERR_MMAP (10 | 24 << 8), as sqlite3.h defines them; under a tight
  /// `ulimit -v` these are what a full address space looks like.
  public var isOutOfMemory: Bool { primaryCode == SQLITE_NOMEM || code == 5386 || code == 6154 }
}

/// One connection to one database file; closed on deinit. Not thread-safe: its owner serialises.
final class Connection {
  let handle: OpaquePointer
  let path: String

  /// - Parameter readOnly: open without writing the database. It is read through its WAL and
  ///   shared memory, with locks, so committed records in the WAL are read and a concurrent
  ///   checkpoint cannot tear the read (SQLite creates the -wal and -shm files when missing).
  ///   Only where they cannot be made (no -wal or -shm file, and a directory this process cannot
  ///   write) is the file opened `immutable`: no files created, no locks taken.
  /// - Parameter live: for `readOnly`, whether a -wal or -shm file sits next to the database, when
  ///   the caller knows better than `path` can tell (a `/proc/self/fd` path has no siblings);
  ///   nil looks for `path`-wal and `path`-shm.
  init(path: String, readOnly: Bool = false, create: Bool = true, live: Bool? = nil) throws {
    if !readOnly, create {
      // Create the file private to the user before SQLite does (SQLite would use the umask,
      // usually 0644), and make a file that was already there (an empty one made by `touch`) 0600
      // too; its -wal and -shm files take the database file's mode.
      //
      // A file that exists is never opened here: closing a descriptor of ours would drop the POSIX
      // locks of every connection this process has open on it, and another process closing its
      // connection would then take itself for the last one and delete the WAL (records lost;
      // ProcessLockTests). Its mode is set by path and its writability asked of the kernel.
      let fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
      var failure: Int32 = 0
      if fd >= 0 {
        _ = fchmod(fd, 0o600)
        close(fd)
      } else if errno == EEXIST {
        var info = stat()
        if lstat(path, &info) != 0 {
          failure = errno
        } else if info.st_mode & S_IFMT == S_IFLNK {
          failure = ELOOP  // as O_NOFOLLOW would say
        } else if info.st_mode & S_IFMT == S_IFDIR {
          failure = EISDIR
        } else if faccessat(AT_FDCWD, path, R_OK | W_OK, AT_EACCESS) != 0 {
          failure = errno
        } else {
          _ = fchmodat(AT_FDCWD, path, 0o600, AT_SYMLINK_NOFOLLOW)
        }
      } else {
        failure = errno
      }
      guard failure == 0 else {
        // Say why (read-only mount, permissions, too many open files) rather than SQLite's guess.
        var error = SQLiteError(code: SQLITE_CANTOPEN, message: "cannot create the file", operation: "open \(path)")
        error.systemErrno = failure
        throw error
      }
    }
    var handle: OpaquePointer?
    var flags =
      (readOnly ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0)))
      | SQLITE_OPEN_NOMUTEX
    var name = path
    if readOnly {
      flags |= SQLITE_OPEN_URI
      let escaped = path.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed) ?? path
      // immutable only when the read cannot go through the WAL: a lock-free read sees pages a
      // checkpoint is rewriting. A -wal or -shm file means a connection is or was live; and where
      // this process may create them, a writer may start at any moment (its first checkpoint
      // rewrote pages under an immutable reader, which then found a healthy container "corrupt"),
      // so the read goes through the WAL there too (SQLite creates the -wal and -shm files, as
      // any reader of a WAL database does).
      var info = stat()
      let live =
        live
        ?? (stat(path + "-wal", &info) == 0 || stat(path + "-shm", &info) == 0
          || access(
            (path as NSString).deletingLastPathComponent.isEmpty
              ? "." : (path as NSString).deletingLastPathComponent, W_OK) == 0)
      name = "file:\(escaped)?mode=ro" + (live ? "" : "&immutable=1")
    }
    let result = sqlite3_open_v2(name, &handle, flags, nil)
    guard result == SQLITE_OK, let handle else {
      let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? "out of memory"
      let systemErrno = handle.map { sqlite3_system_errno($0) } ?? 0
      sqlite3_close_v2(handle)
      var error = SQLiteError(code: result, message: message, operation: "open \(path)")
      error.systemErrno = systemErrno
      throw error
    }
    self.handle = handle
    self.path = path
    sqlite3_extended_result_codes(handle, 1)
  }

  deinit { sqlite3_close_v2(handle) }

  /// Checks a result code; anything but `SQLITE_OK`, `SQLITE_ROW` or `SQLITE_DONE` throws.
  @discardableResult
  func check(_ result: Int32, _ operation: @autoclosure () -> String) throws -> Int32 {
    guard result == SQLITE_OK || result == SQLITE_ROW || result == SQLITE_DONE else {
      var error = SQLiteError(code: result, message: String(cString: sqlite3_errmsg(handle)), operation: operation())
      error.systemErrno = sqlite3_system_errno(handle)
      throw error
    }
    return result
  }

  /// Runs one or more statements that take no parameters.
  func execute(_ sql: String) throws {
    try check(sqlite3_exec(handle, sql, nil, nil, nil), "execute")
  }

  func prepare(_ sql: String) throws -> Statement {
    var statement: OpaquePointer?
    try check(sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil), "prepare")
    return Statement(statement!, connection: self)
  }

  var changes: Int { Int(sqlite3_changes(handle)) }

  /// The rowid of the row the last successful INSERT on this connection stored.
  var lastInsertedRowID: Int64 { sqlite3_last_insert_rowid(handle) }

  /// Runs `body` in a `BEGIN IMMEDIATE` transaction (the write lock is taken up front, so two
  /// writers never deadlock on an upgrade); commits when it returns, rolls back when it throws.
  func transaction<T>(_ body: () throws -> T) throws -> T {
    try execute("BEGIN IMMEDIATE")
    do {
      let result = try body()
      try execute("COMMIT")
      return result
    } catch {
      try? execute("ROLLBACK")
      throw error
    }
  }
}

/// A prepared statement, reset after each use; finalized on deinit.
final class Statement {
  let handle: OpaquePointer
  unowned let connection: Connection

  init(_ handle: OpaquePointer, connection: Connection) {
    self.handle = handle
    self.connection = connection
  }

  deinit { sqlite3_finalize(handle) }

  enum Value {
    case integer(Int64)
    case text(String)
    case blob(UnsafeRawBufferPointer)
    case null
  }

  private func bind(_ values: [Value]) throws {
    sqlite3_reset(handle)
    sqlite3_clear_bindings(handle)
    for (offset, value) in values.enumerated() {
      let index = Int32(offset + 1)
      let result: Int32
      switch value {
      case .integer(let number): result = sqlite3_bind_int64(handle, index, number)
      case .text(let text): result = sqlite3_bind_text(handle, index, text, -1, vault_sqlite_transient())
      case .blob(let bytes):
        // Not copied (SQLITE_STATIC, nil): the caller's bytes outlive the step that reads them
        // (`run` and `query` step and reset before they return, and the bindings are cleared
        // then), and a copy of a large envelope was one more of its size in memory.
        result = sqlite3_bind_blob(handle, index, bytes.baseAddress, Int32(bytes.count), nil)
      case .null: result = sqlite3_bind_null(handle, index)
      }
      try connection.check(result, "bind parameter \(index)")
    }
  }

  /// Runs a statement that returns no rows; returns the number of rows changed.
  @discardableResult
  func run(_ values: [Value] = []) throws -> Int {
    try bind(values)
    defer {
      sqlite3_reset(handle)
      sqlite3_clear_bindings(handle)
    }
    try connection.check(sqlite3_step(handle), "step")
    return connection.changes
  }

  /// Runs a query, calling `row` for each result row.
  func query(_ values: [Value] = [], _ row: (Row) throws -> Void) throws {
    try queryWhile(values) { current in
      try row(current)
      return true
    }
  }

  /// Runs a query, calling `row` for each result row until it returns false (the rows after it
  /// are not read).
  func queryWhile(_ values: [Value] = [], _ row: (Row) throws -> Bool) throws {
    try bind(values)
    defer {
      sqlite3_reset(handle)
      sqlite3_clear_bindings(handle)
    }
    while try connection.check(sqlite3_step(handle), "step") == SQLITE_ROW {
      guard try row(Row(handle: handle)) else { return }
    }
  }

  /// The first column of the first row as an integer, or nil when there is no row.
  func scalar(_ values: [Value] = []) throws -> Int64? {
    var result: Int64?
    try query(values) { row in if result == nil { result = row.isNull(0) ? nil : row.int(0) } }
    return result
  }
}

/// The current row of a query; valid only inside the callback.
struct Row {
  let handle: OpaquePointer

  func int(_ column: Int32) -> Int64 { sqlite3_column_int64(handle, column) }
  func isNull(_ column: Int32) -> Bool { sqlite3_column_type(handle, column) == SQLITE_NULL }
  func text(_ column: Int32) -> String? { sqlite3_column_text(handle, column).map { String(cString: $0) } }
  func blob(_ column: Int32) -> [UInt8] {
    let count = Int(sqlite3_column_bytes(handle, column))
    guard count > 0, let base = sqlite3_column_blob(handle, column) else { return [] }
    return [UInt8](UnsafeRawBufferPointer(start: base, count: count))
  }
  /// Calls `body` with the column's bytes in place (empty for NULL or an empty value), without
  /// copying them; the bytes are valid only inside `body`.
  func withBlob<T>(_ column: Int32, _ body: (UnsafeRawBufferPointer) throws -> T) rethrows -> T {
    let base = sqlite3_column_blob(handle, column)
    let count = Int(sqlite3_column_bytes(handle, column))
    return try body(UnsafeRawBufferPointer(start: count > 0 ? base : nil, count: base == nil ? 0 : count))
  }
}

/// A failure of the backup's destination (its file, its disk), as opposed to the source's: the
/// caller names the destination in the error it reports.
struct DestinationFailure: Error {
  let error: any Error
}

/// Copies the whole database behind `source` into the new file `destination` with SQLite's online
/// backup API, in one step: the copy is one read transaction of the source, so it is consistent, and
/// writers in WAL mode go on meanwhile. The destination is created 0600 and synced.
/// - Throws: `DestinationFailure` around what the destination's file or disk threw; the source's
///   errors as they are.
func backupDatabase(from source: Connection, to destination: String) throws {
  let target: Connection
  do { target = try Connection(path: destination) } catch { throw DestinationFailure(error: error) }
  guard let backup = sqlite3_backup_init(target.handle, "main", source.handle, "main") else {
    try target.check(sqlite3_errcode(target.handle), "backup init")
    throw SQLiteError(code: SQLITE_ERROR, message: "backup init failed", operation: "backup")
  }
  var result = SQLITE_BUSY
  var attempts = 0
  repeat {
    result = sqlite3_backup_step(backup, -1)
    if result == SQLITE_BUSY || result == SQLITE_LOCKED {
      attempts += 1
      usleep(10_000)
    }
  } while (result == SQLITE_BUSY || result == SQLITE_LOCKED) && attempts < 1000
  let finished = sqlite3_backup_finish(backup)
  if result != SQLITE_DONE {
    let code = result == SQLITE_OK ? SQLITE_ERROR : result
    // sqlite3_backup_finish records a failed step's error on the destination's handle; the
    // source's holds one only when reading the source failed (else its message is "not an error").
    if sqlite3_errcode(source.handle) != SQLITE_OK { try source.check(code, "backup step") }
    do { try target.check(finished != SQLITE_OK ? finished : code, "backup step") } catch {
      throw DestinationFailure(error: error)
    }
  }
  do {
    try target.check(finished, "backup finish")
    try target.execute("PRAGMA journal_mode = DELETE")
  } catch {
    throw DestinationFailure(error: error)
  }
}

/// The SQLite that this process runs with, for `vault version`.
package enum SQLiteLibrary {
  /// `sqlite3_libversion()` of the library loaded at run time (`3.40.1`); nil when it gives none.
  package static var version: String? {
    sqlite3_libversion().map { String(cString: $0) }
  }
}
