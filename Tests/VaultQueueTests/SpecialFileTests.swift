import Foundation
import Vault
import VaultKeys
import VaultTestSupport
import XCTest

@testable import VaultQueue

/// A FIFO (or socket, device, symlink) put where a container, or its WAL, was, by anyone who can
/// write in its directory: SQLite opens these files with a blocking open(2), and a read-only open
/// of a FIFO with no writer waits forever (an outside review hung `vault scan` with a FIFO at a
/// removed container's path).
/// The container's own path is looked at before SQLite is asked; its -wal and -shm files are
/// looked at before the audit reads through them, and after any SQLite error, which then names
/// the file. Nothing stored is lost.
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

  /// `vault status` counts records by key version without a key: a FIFO where the container was
  /// hung it in SQLite's open (an outside review); refused at once now, naming it.
  func testCountingRecordsRefusesAFIFOWhereTheContainerWasAtOnce() throws {
    let path = temporary.sub("queue.sqlite")
    XCTAssertEqual(mkfifo(path, 0o600), 0)
    let keyring = vault.keyringID
    let error = withinSeconds { _ = try QueueContainer.recordCounts(path: path, keyring: keyring) }
    XCTAssertTrue(
      "\(error.map { "\($0)" } ?? "none")".contains("database file is a FIFO"), "\(String(describing: error))")
  }

  /// The audit (`vault scan`) reads a live container read-only through its WAL: a FIFO in the
  /// WAL's place is refused before SQLite opens anything, naming it.
  func testTheAuditRefusesAFIFOWhereTheLogWas() throws {
    let path = temporary.sub("queue.sqlite")
    let queue = try QueueContainer(path: path, vault: vault)
    XCTAssertEqual(try queue.enqueue(Array("kept".utf8), queue: "q", id: UUID()), .stored)
    // Copied aside with its -shm file while the queue is open; the copy's log becomes a FIFO.
    let copy = temporary.sub("copy.sqlite")
    XCTAssertNoThrow(try FileManager.default.copyItem(atPath: path, toPath: copy))
    XCTAssertNoThrow(try FileManager.default.copyItem(atPath: path + "-shm", toPath: copy + "-shm"))
    XCTAssertEqual(mkfifo(copy + "-wal", 0o600), 0)
    let descriptor = open(copy, O_RDONLY | O_CLOEXEC)
    XCTAssertGreaterThanOrEqual(descriptor, 0)
    defer { close(descriptor) }
    let error = withinSeconds {
      let reader = try ContainerReader(descriptor: descriptor, path: "copy.sqlite", live: true)
      try reader.forEachEnvelope { _, _, _, _ in }
    }
    XCTAssertTrue("\(error.map { "\($0)" } ?? "none")".contains("-wal file is a FIFO"), "\(String(describing: error))")
    XCTAssertEqual(try queue.stats().total, 1)
  }

  /// A FIFO where a container's log was, for the queue itself: no wait, and the records are kept.
  func testAFIFOWhereTheLogWasLosesNothing() throws {
    let path = temporary.sub("queue.sqlite")
    do {
      let queue = try QueueContainer(path: path, vault: vault)
      XCTAssertEqual(try queue.enqueue(Array("kept".utf8), queue: "q", id: UUID()), .stored)
    }
    // The last connection checkpointed and removed the log; a FIFO takes its name.
    XCTAssertFalse(FileManager.default.fileExists(atPath: path + "-wal"))
    XCTAssertEqual(mkfifo(path + "-wal", 0o600), 0)
    let vault = vault!
    let error = withinSeconds {
      let queue = try QueueContainer(path: path, vault: vault)
      _ = try queue.enqueue(Array("second".utf8), queue: "q", id: UUID())
    }
    XCTAssertTrue("\(error.map { "\($0)" } ?? "none")".contains("-wal file is a FIFO"), "\(String(describing: error))")
    _ = unlink(path + "-wal")  // (SQLite may have removed it already, closing as the last connection)
    XCTAssertEqual(try QueueContainer(path: path, vault: vault).stats().total, 1, "the stored record is still there")
  }
}
