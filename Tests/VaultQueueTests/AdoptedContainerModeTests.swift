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

  private func mode(_ path: String) throws -> UInt32 {
    var info = stat()
    XCTAssertEqual(stat(path, &info), 0)
    return UInt32(info.st_mode) & 0o7777
  }
}
