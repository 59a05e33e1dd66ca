import Foundation
import VaultTestSupport
import XCTest

@testable import VaultKeys

final class ManifestTests: XCTestCase {
  func testSaveThenLoadRoundTripsAndIs0600() throws {
    let temporary = TemporaryDirectory()
    var manifest = Manifest(
      vaultID: try KeyringID.random(), store: StoreDescriptor(kind: .keyfile, keyfile: "/k"), createdAt: "t")
    manifest.setState(.active, of: 1)
    try ManifestFile.save(manifest, home: temporary.path)
    XCTAssertEqual(try ManifestFile.load(home: temporary.path), manifest)
    var info = stat()
    stat(ManifestFile.path(home: temporary.path), &info)
    XCTAssertEqual(info.st_mode & 0o777, 0o600)
  }

  func testMissingCorruptAndFutureManifestsAreDistinct() throws {
    let temporary = TemporaryDirectory()
    XCTAssertThrowsError(try ManifestFile.load(home: temporary.path)) {
      XCTAssertEqual($0 as? ManifestFile.Failure, .missing(home: temporary.path))
    }
    let path = ManifestFile.path(home: temporary.path)
    try Data("{\"format\": 1, \"vault_id\": ".utf8).write(to: URL(fileURLWithPath: path))
    XCTAssertThrowsError(try ManifestFile.load(home: temporary.path)) {
      XCTAssertEqual($0 as? ManifestFile.Failure, .corrupt(path: path, reason: "not valid manifest JSON"))
    }
    let future = """
      {"format": 9, "vault_id": "0011223344556677", "store": {"kind": "keyfile", "keyfile": "/k"},
       "active_version": 1, "versions": [], "containers": []}
      """
    try Data(future.utf8).write(to: URL(fileURLWithPath: path))
    XCTAssertThrowsError(try ManifestFile.load(home: temporary.path)) {
      XCTAssertEqual($0 as? ManifestFile.Failure, .unsupportedFormat(path: path, format: 9))
    }
  }

  func testFileLockExcludesASecondHolder() throws {
    let temporary = TemporaryDirectory()
    let path = temporary.sub("lock")
    let first = try FileLock(path: path)
    // flock locks belong to the open file description, so a second open in this process contends.
    let fd = open(path, O_RDWR)
    defer { close(fd) }
    XCTAssertNotEqual(flock(fd, LOCK_EX | LOCK_NB), 0, "held lock must exclude others")
    first.release()
    XCTAssertEqual(flock(fd, LOCK_EX | LOCK_NB), 0)
  }
}
