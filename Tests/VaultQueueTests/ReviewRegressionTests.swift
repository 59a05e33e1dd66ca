import Foundation
import VaultKeys
import VaultTestSupport
import XCTest

@testable import Vault
@testable import VaultQueue

/// Regressions for defects found in review: each test failed before its fix.
final class ReviewRegressionTests: XCTestCase {
  var temporary: TemporaryDirectory!
  var store: InMemoryKeyStore!
  var vault: Vault!
  var clock: TestClock!

  override func setUpWithError() throws {
    temporary = TemporaryDirectory()
    store = InMemoryKeyStore()
    clock = TestClock()
    vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(store))
  }

  override func tearDown() {
    vault = nil
    temporary = nil
  }

  /// A stale vault (opened before another process rotated) must record the version it really
  /// sealed under, or rotation would delete that key.
  func testSealExternalRecordsTheVersionItSealsUnder() throws {
    let stale = try Vault.open(home: vault.home, resolver: .fixed(store))
    _ = try vault.rotate(containers: QueueContainerProvider())
    let envelope = try stale.seal(Array("file".utf8), context: [1])
    XCTAssertEqual(try Envelope.header(of: envelope).version, 2)
    XCTAssertEqual(try ManifestFile.read(home: vault.home).manifest.externalSealVersions, [2])
    let queue = try QueueContainer(path: temporary.sub("home/q.sqlite"), vault: vault)
    try queue.enqueue([1], queue: "q")
    let report = try vault.rotate(containers: QueueContainerProvider())
    XCTAssertEqual(report.retired, [1])
    XCTAssertEqual(try vault.open(envelope, context: [1]), Array("file".utf8))
  }

  /// A container registered by another process after this one opened the vault is still
  /// re-sealed and counted: rotation walks the manifest it reads under the lock.
  func testRotationCountsAContainerRegisteredByAnotherProcess() throws {
    let counted = try QueueContainer(path: temporary.sub("home/a.sqlite"), vault: vault)
    let other = try Vault.open(home: vault.home, resolver: .fixed(store))
    let late = try QueueContainer(path: temporary.sub("home/b.sqlite"), vault: other)
    try late.enqueue([1], queue: "q")
    try counted.enqueue([2], queue: "q")
    let report = try vault.rotate(containers: QueueContainerProvider())
    XCTAssertEqual(report.resealed, [counted.path: 1, late.path: 1])
    XCTAssertEqual(report.retired, [1])
    XCTAssertEqual(try late.claim(queue: "q").map(\.payloadBytes), [[1]])
  }

  func testTheCapNeverRemovesRecordsOfTheSameEnqueue() throws {
    let queue = try QueueContainer(
      path: temporary.sub("q.sqlite"), vault: vault, configuration: QueueConfiguration(byteCap: 1000))
    let records = (0..<3).map { _ in (id: UUID(), payload: [UInt8](repeating: 1, count: 400)) }
    XCTAssertThrowsError(try queue.enqueue(contentsOf: records, queue: "q")) {
      XCTAssertEqual($0 as? QueueError, .capExceeded(cap: 1000))
    }
    XCTAssertEqual(try queue.stats().total, 0, "nothing half-stored")
    try queue.enqueue([UInt8](repeating: 1, count: 400), queue: "q")
    try queue.enqueue([UInt8](repeating: 1, count: 400), queue: "q")
    _ = try queue.claim(queue: "q", maxCount: 10)  // both in flight: nothing may be dropped
    XCTAssertThrowsError(try queue.enqueue([UInt8](repeating: 1, count: 400), queue: "q")) {
      XCTAssertEqual($0 as? QueueError, .capExceeded(cap: 1000))
    }
    XCTAssertEqual(try queue.stats().total, 2)
  }

  /// A locked keyring is not a broken record: claimed records go back to pending, not to review.
  func testAnUnreadableKeyReleasesTheClaimInsteadOfQuarantining() throws {
    let queue = try QueueContainer(path: temporary.sub("q.sqlite"), vault: vault, clock: clock.function)
    try queue.enqueue([1], queue: "q")
    let fresh = try Vault.open(home: vault.home, resolver: .fixed(store))  // has only v1 cached
    _ = try vault.rotate(containers: QueueContainerProvider())  // the record is now under v2
    let reader = try QueueContainer(path: temporary.sub("q.sqlite"), vault: fresh, clock: clock.function)
    store.failAll(with: .locked)
    XCTAssertThrowsError(try reader.claim(queue: "q")) { XCTAssertEqual($0 as? KeyStoreError, .locked) }
    store.failAll(with: nil)
    XCTAssertEqual(try reader.list(state: .review), [])
    XCTAssertEqual(try reader.list(state: .pending).map(\.attempts), [0])
    XCTAssertEqual(try reader.claim(queue: "q").map(\.payloadBytes), [[1]])
  }

  func testContainerFilesArePrivateToTheUser() throws {
    let path = temporary.sub("q.sqlite")
    let queue = try QueueContainer(path: path, vault: vault)
    try queue.enqueue([1], queue: "q")
    for file in [path, path + "-wal"] {
      var info = stat()
      XCTAssertEqual(stat(file, &info), 0, file)
      XCTAssertEqual(info.st_mode & 0o777, 0o600, file)
    }
  }

  /// After a crashed rotation, a missing keyfile must not be replaced by a new one holding only
  /// the pending version.
  func testAPendingVersionIsNotCompletedWhenOlderKeysAreMissing() throws {
    var manifest = vault.manifest
    manifest.versions.append(KeyVersionRecord(version: 2, state: .pending, createdAt: "t"))
    manifest.highestVersion = 2
    try vault.save(manifest)
    XCTAssertTrue(try store.deleteKey(keyring: vault.keyringID, version: 1))
    XCTAssertThrowsError(try Vault.open(home: vault.home, resolver: .fixed(store))) {
      XCTAssertEqual($0 as? VaultError, .keyMissing(version: 1, store: .memory))
    }
    XCTAssertEqual(try store.storedVersions(keyring: vault.keyringID), [], "no key was generated")
  }
}
