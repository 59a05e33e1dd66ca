import Foundation
import Vault
import VaultKeys
import VaultTestSupport
import XCTest

@testable import VaultQueue

/// Issue 8, item 17: a container file that existed before vault opened it (an empty file made by
/// `touch`, with the umask's 0644) is made 0600 like one vault creates.
final class AdoptedContainerModeTests: XCTestCase {
  func testAPreExistingEmptyFileAdoptedAsAContainerBecomes0600() throws {
    let temporary = TemporaryDirectory()
    let store = InMemoryKeyStore()
    let vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(store))
    let path = temporary.sub("adopted.sqlite")
    XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: nil))
    XCTAssertEqual(chmod(path, 0o644), 0)

    let queue = try QueueContainer(path: path, vault: vault)
    _ = try queue.enqueue(Array("private".utf8), queue: "outbox")
    XCTAssertEqual(try mode(path), 0o600, "the adopted file")
    for suffix in ["-wal", "-shm"] where FileManager.default.fileExists(atPath: path + suffix) {
      XCTAssertEqual(try mode(path + suffix), 0o600, "SQLite gives \(suffix) the database file's mode")
    }
  }

  /// A file others may write is not adopted, and a container that became one is not opened: they
  /// could have it open already and change its records after any chmod of ours.
  func testAFileOthersMayWriteIsRefusedNotAdoptedOrOpened() throws {
    let temporary = TemporaryDirectory()
    let store = InMemoryKeyStore()
    let vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(store))
    let touched = temporary.sub("touched.sqlite")
    XCTAssertTrue(FileManager.default.createFile(atPath: touched, contents: nil))
    XCTAssertEqual(chmod(touched, 0o666), 0)
    XCTAssertThrowsError(try QueueContainer(path: touched, vault: vault)) {
      XCTAssertEqual($0 as? QueueError, .openToOthers(path: touched, modes: [touched: 0o100666]))
    }
    XCTAssertEqual(try mode(touched), 0o666, "left as it was")
    XCTAssertFalse(vault.manifest.containers.contains { $0.path == touched }, "not registered")

    let used = temporary.sub("used.sqlite")
    _ = try QueueContainer(path: used, vault: vault).enqueue(Array("private".utf8), queue: "outbox")
    XCTAssertEqual(chmod(used, 0o660), 0)
    for mode in [QueueContainer.OpenMode.createIfNeeded, .existing, .readOnly] {
      XCTAssertThrowsError(try QueueContainer(path: used, vault: vault, mode: mode)) {
        XCTAssertEqual($0 as? QueueError, .openToOthers(path: used, modes: [used: 0o100660]))
        XCTAssertEqual(($0 as? QueueError)?.code, "queue.open-to-others")
      }
    }
    XCTAssertThrowsError(try QueueContainer.recordCounts(path: used, keyring: vault.keyringID)) {
      XCTAssertEqual($0 as? QueueError, .openToOthers(path: used, modes: [used: 0o100660]), "counted without a look")
    }
    XCTAssertEqual(chmod(used, 0o640), 0)
    XCTAssertEqual(try QueueContainer(path: used, vault: vault).stats().total, 1, "others may read it: used")
  }

  /// The two refusals read as what to run, each file quoted for a shell, and carry stable codes.
  func testTheRefusalsNameEachFileAndTheCommand() {
    let several = QueueError.openToOthers(
      path: "/d/q.sqlite", modes: ["/d/q.sqlite-wal": 0o100666, "/d/q.sqlite": 0o100660])
    XCTAssertEqual(
      several.description,
      "files of the container /d/q.sqlite let others change or delete its records (/d/q.sqlite has mode 0660, "
        + "/d/q.sqlite-wal has mode 0666); nothing was opened or changed. Run: chmod 600 /d/q.sqlite /d/q.sqlite-wal")
    XCTAssertTrue(
      QueueError.openToOthers(path: "/d/my q", modes: ["/d/my q": 0o100622]).description.hasSuffix(
        "Run: chmod 600 '/d/my q'"))
    let theirs = QueueError.ownedByOther(path: "/d/q.sqlite", file: "/d/q.sqlite-shm", owner: 4242)
    XCTAssertTrue(
      theirs.description.hasPrefix("/d/q.sqlite-shm, beside the container /d/q.sqlite, is owned by uid 4242"),
      theirs.description)
    XCTAssertEqual(several.code, "queue.open-to-others")
    XCTAssertEqual(theirs.code, "queue.owned-by-other")
  }

  private func mode(_ path: String) throws -> UInt32 {
    var info = stat()
    XCTAssertEqual(stat(path, &info), 0)
    return UInt32(info.st_mode) & 0o7777
  }
}
