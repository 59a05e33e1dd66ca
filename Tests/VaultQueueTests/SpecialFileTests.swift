import Foundation
import Vault
import VaultKeys
import VaultTestSupport
import XCTest

@testable import VaultQueue

/// A FIFO put where a container, or its WAL, was (by anyone who can write in its directory): SQLite
/// opened files with a blocking open(2), and opening or reading a FIFO waits for a writer forever,
/// so `vault rotate`, `vault scan` or the app hung. Now refused at once (`vault_sqlite_refuse_fifos`).
final class SpecialFileTests: XCTestCase {
  var temporary: TemporaryDirectory!
  var vault: Vault!

  override func setUpWithError() throws {
    temporary = TemporaryDirectory()
    vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(InMemoryKeyStore()))
  }

  override func tearDown() {
    vault = nil
    temporary = nil
  }

  /// Runs `body` on a thread of its own and fails (rather than hanging the suite) if it has not
  /// returned within 20 s; returns what it threw, if anything.
  private func withinSeconds(_ body: @escaping @Sendable () throws -> Void) -> (any Error)? {
    final class Outcome: @unchecked Sendable {
      var error: (any Error)?
      let done = DispatchSemaphore(value: 0)
    }
    let outcome = Outcome()
    Thread {
      do { try body() } catch { outcome.error = error }
      outcome.done.signal()
    }.start()
    guard outcome.done.wait(timeout: .now() + 20) == .success else {
      XCTFail("still waiting after 20 s (a FIFO opened as a file)")
      return nil
    }
    return outcome.error
  }

  func testAFIFOWhereTheContainerWasIsRefusedAtOnce() throws {
    let path = temporary.sub("queue.sqlite")
    XCTAssertEqual(mkfifo(path, 0o600), 0)
    let vault = vault!
    let error = withinSeconds { _ = try QueueContainer(path: path, vault: vault) }
    // (Refused before SQLite is asked: the path is looked at first.)
    XCTAssertNotNil(error as? QueueError)
    XCTAssertTrue("\(error.map { "\($0)" } ?? "")".contains("FIFO"), "\(String(describing: error))")
  }

  /// The audit (`vault scan`) opens the file a descriptor's /proc link resolves to; swapped for a
  /// FIFO just before (the audit checks the path first, so only a race gets this far), SQLite's
  /// read-only open waited for a writer forever.
  func testSQLiteRefusesAFIFOInsteadOfWaitingOnIt() throws {
    let path = temporary.sub("swapped.sqlite")
    XCTAssertEqual(mkfifo(path, 0o600), 0)
    for live in [true, false] {
      let error = withinSeconds { _ = try Connection(path: path, readOnly: true, live: live) }
      XCTAssertEqual((error as? SQLiteError)?.systemErrno, ENXIO, "\(String(describing: error))")
    }
  }

  /// A FIFO where a container's log was: refused, naming it, and the records are kept.
  func testAFIFOWhereTheLogWasIsRefusedByNameAndTheRecordsAreKept() throws {
    let path = temporary.sub("queue.sqlite")
    do {
      let queue = try QueueContainer(path: path, vault: vault)
      XCTAssertEqual(try queue.enqueue(Array("kept".utf8), queue: "q", id: UUID()), .stored)
    }
    // The last connection checkpointed and removed the log; a FIFO takes its name.
    XCTAssertFalse(FileManager.default.fileExists(atPath: path + "-wal"))
    XCTAssertEqual(mkfifo(path + "-wal", 0o600), 0)
    let vault = vault!
    let error = withinSeconds { _ = try QueueContainer(path: path, vault: vault).stats() }
    XCTAssertTrue(
      "\(error.map { "\($0)" } ?? "none")".contains("queue.sqlite-wal is a FIFO"), "\(String(describing: error))")
    XCTAssertEqual(unlink(path + "-wal"), 0)
    XCTAssertEqual(try QueueContainer(path: path, vault: vault).stats().total, 1, "the record is still there")
  }
}
