import Foundation
import Vault
import VaultKeys
import VaultTestSupport
import XCTest

@testable import VaultQueue

/// SQLite's locks are POSIX record locks, which belong to the process and the file: closing *any*
/// descriptor of the file in this process drops the locks of every connection this process has
/// open on it. Found by the concurrency stress test (SQLite code 522, a short read of a WAL that
/// another process had deleted, believing itself the last connection).
final class ProcessLockTests: XCTestCase {
  var temporary: TemporaryDirectory!
  var vault: Vault!
  var path: String { temporary.sub("data/queue.sqlite") }

  override func setUpWithError() throws {
    temporary = TemporaryDirectory()
    let store = InMemoryKeyStore()
    vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(store))
    try FileManager.default.createDirectory(atPath: temporary.sub("data"), withIntermediateDirectories: true)
  }

  override func tearDown() {
    vault = nil
    temporary = nil
  }

  /// Probing a container this process has open (rotation probes every registered container; a
  /// second `QueueContainer` on the same file probes it first) must leave the open connection's
  /// locks in place, so another process that connects and disconnects does not take itself for
  /// the last connection and delete the log this process is still writing to.
  func testProbingAnOpenContainerKeepsItsLocksSoAnotherProcessLeavesTheLogAlone() throws {
    let queue = try QueueContainer(path: path, vault: vault)
    let first = UUID()
    let second = UUID()
    XCTAssertEqual(try queue.enqueue(Array("first".utf8), queue: "q", id: first), .stored)
    guard case .container = try QueueContainer.probe(path: path) else { return XCTFail("not probed as a container") }
    _ = try QueueContainer(path: path, vault: vault)  // a second connection probes first too

    // Another process opens and closes the file; the last connection out checkpoints and deletes the log.
    try sqlite(path, "SELECT count(*) FROM records;")
    XCTAssertTrue(
      FileManager.default.fileExists(atPath: path + "-wal"),
      "another process took itself for the last connection and deleted the log")

    XCTAssertEqual(try queue.enqueue(Array("second".utf8), queue: "q", id: second), .stored)
    let script = """
      import sqlite3,sys
      c=sqlite3.connect(sys.argv[1])
      print(' '.join(sorted(r[0] for r in c.execute('SELECT id FROM records'))))
      """
    let listed = try Spawn.run("/usr/bin/env", ["python3", "-c", script, path])
    XCTAssertEqual(listed.status, 0, listed.error)
    let ids = Set(listed.outputText.split(whereSeparator: \.isWhitespace).map { $0.lowercased() })
    XCTAssertEqual(ids, [first.uuidString.lowercased(), second.uuidString.lowercased()], "a committed record was lost")
  }
}
