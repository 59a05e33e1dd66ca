import Foundation
import VaultKeys
import VaultTestSupport
import XCTest

@testable import Vault

/// Issue 13, item 6: `reseal` moves `seal` envelopes to the active version, and `releaseSealPin`
/// lets rotation retire the version they pinned.
final class ExternalSealTests: XCTestCase {
  private var temporary: TemporaryDirectory!
  private var store: InMemoryKeyStore!

  override func setUp() {
    temporary = TemporaryDirectory()
    store = InMemoryKeyStore()
  }

  override func tearDown() {
    temporary = nil
    store = nil
  }

  private func makeVault() throws -> Vault {
    try Vault.create(home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(store))
  }

  private func version(of envelope: [UInt8]) throws -> UInt32 { try Envelope.header(of: envelope).version }

  func testResealMovesAnEnvelopeToTheActiveVersionAndPinsIt() throws {
    let vault = try makeVault()
    let old = try vault.seal(Array("field notes".utf8), context: Array("notes/7".utf8))
    let container = RecordingContainer(name: "queue.db")
    let report = try vault.rotate([container])
    XCTAssertEqual(report.keptVersions, [1], "the seal pinned version 1")

    let resealed = try vault.reseal(old, context: "notes/7")
    XCTAssertEqual(try version(of: resealed), 2)
    XCTAssertEqual(try vault.open(resealed, context: Array("notes/7".utf8)), Array("field notes".utf8))
    XCTAssertEqual(vault.manifest.externalSealVersions.sorted(), [1, 2], "the active version is pinned as by seal")
    XCTAssertEqual(try vault.open(old, context: Array("notes/7".utf8)), Array("field notes".utf8), "nothing released")
  }

  func testResealOfAnEnvelopeUnderTheActiveVersionReturnsItUnchanged() throws {
    let vault = try makeVault()
    let envelope = try vault.seal(Array("x".utf8), context: Array("c".utf8))
    XCTAssertEqual(try vault.reseal(envelope, context: Array("c".utf8)), envelope)
    let data = Data(envelope)
    XCTAssertEqual(try vault.reseal(data, context: "c"), data)
    XCTAssertThrowsError(try vault.reseal(envelope, context: Array("other".utf8)), "it is still opened") {
      XCTAssertTrue($0 is EnvelopeError, "\($0)")
    }
  }

  func testResealThatCannotOpenChangesNothingNotEvenAPin() throws {
    let vault = try makeVault()
    let envelope = try vault.seal(Array("x".utf8), context: Array("c".utf8))
    try vault.rotate([RecordingContainer(name: "queue.db")])
    let epoch = vault.manifest.epoch
    XCTAssertThrowsError(try vault.reseal(envelope, context: Array("wrong".utf8))) {
      XCTAssertEqual($0 as? EnvelopeError, .keyCommitmentMismatch)
    }
    XCTAssertThrowsError(try vault.reseal(Array("not an envelope".utf8), context: "c")) {
      XCTAssertEqual($0 as? EnvelopeError, .notAnEnvelope)
    }
    XCTAssertThrowsError(try vault.reseal(envelope, context: [])) {
      XCTAssertEqual($0 as? EnvelopeError, .emptyContext)
    }
    XCTAssertEqual(vault.manifest.externalSealVersions, [1])
    XCTAssertEqual(vault.manifest.epoch, epoch, "the manifest was not written")
  }

  func testReleasingThePinLetsTheNextRotationRetireTheVersion() throws {
    let vault = try makeVault()
    let old = try vault.seal(Data("ledger".utf8), context: "notes/1")
    let container = RecordingContainer(name: "queue.db")
    try vault.rotate([container])
    let resealed = try vault.reseal(old, context: "notes/1")

    try vault.releaseSealPin(version: 1)
    XCTAssertEqual(vault.manifest.externalSealVersions, [2])
    XCTAssertEqual(try store.storedVersions(keyring: vault.keyringID), [1, 2], "releasing deletes no key")
    let report = try vault.rotate([container])
    XCTAssertEqual(report.retired, [1])
    XCTAssertEqual(report.keptVersions, [2], "version 2 is pinned by the re-sealed envelope")
    XCTAssertEqual(try vault.open(resealed, context: "notes/1"), Data("ledger".utf8))
    XCTAssertThrowsError(try vault.open(old, context: "notes/1")) {
      XCTAssertEqual($0 as? EnvelopeError, .retiredKeyVersion(1))
    }
  }

  func testReleaseRefusesTheActiveUnknownRetiredAndUnpinnedVersions() throws {
    let vault = try makeVault()
    _ = try vault.seal(Data("x".utf8), context: "c")
    func refusal(_ version: UInt32) -> VaultError? {
      do {
        try vault.releaseSealPin(version: version)
        return nil
      } catch {
        return error as? VaultError
      }
    }
    XCTAssertEqual(refusal(1), .sealPinOnActiveVersion(version: 1), "active, although pinned")
    XCTAssertEqual(refusal(0), .unknownVersion(version: 0))
    XCTAssertEqual(refusal(2), .unknownVersion(version: 2))

    // No container registered: the rotation retires nothing, so version 2 stays decrypt-only and unpinned.
    try vault.rotate([])
    try vault.rotate([])
    XCTAssertEqual(vault.manifest.record(2)?.state, .decryptOnly)
    XCTAssertEqual(refusal(2), .versionNotPinned(version: 2, pinned: [1]))

    let retiring = try Vault.create(
      home: temporary.sub("other"), store: StoreDescriptor(kind: .memory), resolver: .fixed(store))
    try retiring.rotate([RecordingContainer(name: "empty.db")])
    XCTAssertThrowsError(try retiring.releaseSealPin(version: 1)) {
      XCTAssertEqual($0 as? VaultError, .versionRetired(version: 1))
    }
    XCTAssertEqual(vault.manifest.externalSealVersions, [1], "every refusal changed nothing")
    XCTAssertEqual(VaultError.versionNotPinned(version: 2, pinned: []).code, "vault.version-not-pinned")
  }

  func testKeptBecauseNamesTheWayToRelease() throws {
    let vault = try makeVault()
    _ = try vault.seal(Data("x".utf8), context: "c")
    let report = try vault.rotate([RecordingContainer(name: "queue.db")])
    let reasons = report.keptBecause["1"] ?? []
    XCTAssertTrue(reasons.contains { $0.contains("vault reseal") && $0.contains("vault unpin 1") }, "\(reasons)")
    let status = vault.status().versions.first { $0.version == 1 }
    XCTAssertTrue(
      status?.keptBecause.contains { $0.contains("vault unpin 1") } == true, "\(String(describing: status))")
  }

  /// `status` gives the reason `rotate` then gives: with no container registered no count can
  /// prove an older version unused, and rotation keeps it (status said "the next rotation retires
  /// it").
  func testStatusGivesRotationsReasonWhenNoContainerIsRegistered() throws {
    let vault = try makeVault()
    try vault.rotate([])
    let said = vault.status().versions.first { $0.version == 1 }?.keptBecause
    XCTAssertEqual(said, ["no container is registered, so no count can prove it unused"])
    let report = try vault.rotate([])
    XCTAssertEqual(report.keptBecause["1"], said, "rotation keeps version 1 for the reason status gave")
    XCTAssertEqual(vault.manifest.record(1)?.state, .decryptOnly)
  }

  // MARK: - The shared hold on the lock file

  /// A seal holds the home's lock shared for its whole duration, though the lock file now stays
  /// open between seals: while another holder (a rotation elsewhere) has it exclusively, a seal waits.
  func testASealWaitsForAnExclusiveHolderOfTheLockFile() throws {
    let vault = try makeVault()
    _ = try vault.seal(Array("first".utf8), context: Array("notes/1".utf8))  // opens and keeps the file
    let exclusive = try FileLock(path: vault.home + "/vault.lock")
    let done = DispatchSemaphore(value: 0)
    let sealed = Sealed()
    DispatchQueue.global().async {
      if let envelope = try? vault.seal(Array("second".utf8), context: Array("notes/2".utf8)) {
        sealed.add(Array("second".utf8), envelope)
      }
      done.signal()
    }
    let waited = done.wait(timeout: .now() + 0.3)
    XCTAssertEqual(waited, .timedOut, "the seal went ahead under an exclusive lock")
    exclusive.release()
    if waited == .timedOut { XCTAssertEqual(done.wait(timeout: .now() + 10), .success) }
    XCTAssertEqual(sealed.all.count, 1)
  }

  /// The lock file removed while the vault keeps it open: once the manifest changes (another
  /// process rotated, which made the file again), seals lock the new file, not the unlinked one.
  func testSealsLockTheLockFileMadeAgainAfterTheManifestChanged() throws {
    let vault = try makeVault()
    let lockPath = vault.home + "/vault.lock"
    _ = try vault.seal(Array("first".utf8), context: Array("notes/1".utf8))
    XCTAssertEqual(unlink(lockPath), 0)
    let other = try Vault.open(home: vault.home, resolver: .fixed(store))
    _ = try other.rotate([RecordingContainer(name: "queue.db")])  // makes the lock file again
    // The first seal after the change notices it; the next holds the new file.
    _ = try vault.seal(Array("second".utf8), context: Array("notes/2".utf8))
    let exclusive = try FileLock(path: lockPath)
    let done = DispatchSemaphore(value: 0)
    DispatchQueue.global().async {
      _ = try? vault.seal(Array("third".utf8), context: Array("notes/3".utf8))
      done.signal()
    }
    let waited = done.wait(timeout: .now() + 0.3)
    XCTAssertEqual(waited, .timedOut, "the seal locked the removed file")
    exclusive.release()
    if waited == .timedOut { XCTAssertEqual(done.wait(timeout: .now() + 10), .success) }
  }
}
