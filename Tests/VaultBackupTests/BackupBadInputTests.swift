import Foundation
import Vault
import VaultBackup
import VaultCrypto
import VaultKeys
import VaultQueue
import VaultTestSupport
import XCTest

/// Issue 14's bad inputs beyond a damaged bundle: a locked key store, a rotation stopped half
/// way, a destination without space, a restore over another vault.
final class BackupBadInputTests: XCTestCase {
  var temporary: TemporaryDirectory!
  let cheap = ScryptParameters(logN: 10, r: 8, p: 1)
  let resolver = KeyStoreResolver.system(secretServiceTimeout: 10)
  var mounted: String?

  override func setUp() { temporary = TemporaryDirectory() }

  override func tearDown() {
    if let mounted { _ = try? Spawn.run("/bin/umount", [mounted]) }
    temporary = nil
  }

  private func keyfileVault(_ name: String = "home") throws -> Vault {
    try Vault.create(
      home: temporary.sub(name), store: StoreDescriptor(kind: .keyfile, keyfile: temporary.sub("keys-\(name)/v.keys")),
      resolver: resolver)
  }

  private func backup(_ vault: Vault, to directory: String) throws -> BackupReport {
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    return try Backup.create(
      vault: vault, to: directory, passphrase: try Passphrase("pass"), keep: 5, toolVersion: "test", clock: Date.init,
      kdf: cheap)
  }

  private func entries(_ directory: String) throws -> [String] {
    try FileManager.default.contentsOfDirectory(atPath: directory).sorted()
  }

  func testALockedKeyStoreRefusesTheBackupAndWritesNothing() throws {
    try XCTSkipUnless(TestKeyring.isAvailable, "needs the test Secret Service (tools/test.sh)")
    let vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .secretService), resolver: resolver)
    defer {
      try? TestKeyring.unlock()
      if let store = try? resolver.store(for: StoreDescriptor(kind: .secretService), home: vault.home) {
        for version in (try? store.storedVersions(keyring: vault.keyringID)) ?? [] {
          _ = try? store.deleteKey(keyring: vault.keyringID, version: version)
        }
      }
    }
    _ = try QueueContainer(path: temporary.sub("q.sqlite"), vault: vault).enqueue([1, 2, 3], queue: "q")
    try TestKeyring.lock()
    XCTAssertThrowsError(try backup(vault, to: temporary.sub("backups"))) { error in
      XCTAssertEqual(error as? KeyStoreError, .locked, "\(error)")
    }
    XCTAssertEqual(try entries(temporary.sub("backups")), [], "no bundle, no temporary file")
  }

  func testABackupTakenWhileARotationIsHalfDoneRestoresEveryRecord() throws {
    let vault = try keyfileVault()
    for name in ["a.sqlite", "b.sqlite"] {
      let container = try QueueContainer(path: temporary.sub(name), vault: vault)
      for i in 0..<3 { _ = try container.enqueue(Array("\(name) \(i)".utf8), queue: "q") }
    }
    XCTAssertThrowsError(
      try vault.rotate(containers: HalfwayProvider(failing: temporary.sub("b.sqlite")), options: RotationOptions()))
    XCTAssertEqual(vault.manifest.resealing, 2, "the rotation stopped after re-sealing a.sqlite only")
    let report = try backup(vault, to: temporary.sub("backups"))
    XCTAssertEqual(report.verification.byVersion, ["1": 3, "2": 3])
    let home = temporary.sub("restored")
    _ = try Backup.restore(
      bundle: report.bundle, passphrase: try Passphrase("pass"), into: home,
      store: StoreDescriptor(kind: .keyfile, keyfile: temporary.sub("keys-restored/v.keys")), resolver: resolver)
    let restored = try Vault.open(home: home, resolver: resolver)
    for name in ["a.sqlite", "b.sqlite"] {
      let container = try QueueContainer(path: home + "/" + name, vault: restored, mode: .existing)
      XCTAssertEqual(try container.claim(queue: "q").count, 3, name)
    }
    // The restored vault finishes what the rotation left: a new version, and both old ones retired.
    XCTAssertEqual(try restored.rotate().retired, [1, 2])
  }

  func testADestinationWithoutSpaceLeavesNothingHalfWrittenAndOlderBundlesUntouched() throws {
    let directory = temporary.sub("small")
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    let mount = try Spawn.run("/bin/mount", ["-t", "tmpfs", "-o", "size=400k", "tmpfs", directory])
    try XCTSkipUnless(mount.status == 0, "cannot mount a small tmpfs here: \(mount.error)")
    mounted = directory
    let vault = try keyfileVault()
    let container = try QueueContainer(path: temporary.sub("q.sqlite"), vault: vault)
    _ = try container.enqueue(Array("small".utf8), queue: "q")
    let first = try backup(vault, to: directory)
    let firstBytes = try Data(contentsOf: URL(fileURLWithPath: first.bundle))
    for i in 0..<40 { _ = try container.enqueue(Array(repeating: UInt8(i), count: 16_000), queue: "q") }
    XCTAssertThrowsError(try backup(vault, to: directory)) { error in
      // The destination's disk is named, never the container's (which is fine).
      let text = "\(error)"
      XCTAssertTrue(text.contains("No space left on device"), text)
      XCTAssertTrue(text.contains("the disk holding it is full: free space there and retry"), text)
      XCTAssertTrue(text.contains(directory), text)
      XCTAssertFalse(text.contains("q.sqlite"), text)
      XCTAssertFalse(error is QueueError, text)
    }
    XCTAssertEqual(try entries(directory), [(first.bundle as NSString).lastPathComponent], "no partial file or work")
    XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: first.bundle)), firstBytes)
    XCTAssertEqual(try Backup.verify(bundle: first.bundle, passphrase: try Passphrase("pass")).records, 1)
  }

  func testRestoreOverAnotherVaultsHomeIsRefused() throws {
    let vault = try keyfileVault()
    _ = try QueueContainer(path: temporary.sub("q.sqlite"), vault: vault).enqueue([1], queue: "q")
    let bundle = try backup(vault, to: temporary.sub("backups")).bundle
    let other = try keyfileVault("other")
    let before = try Data(contentsOf: URL(fileURLWithPath: other.home + "/manifest.json"))
    XCTAssertThrowsError(
      try Backup.restore(
        bundle: bundle, passphrase: try Passphrase("pass"), into: other.home,
        store: StoreDescriptor(kind: .keyfile, keyfile: temporary.sub("keys-new/v.keys")), resolver: resolver)
    ) { error in XCTAssertEqual(error as? VaultError, .alreadyExists(home: other.home)) }
    XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: other.home + "/manifest.json")), before)
  }
}

/// Opens the real containers, except that re-sealing `failing` throws: a rotation stopped part-way.
struct HalfwayProvider: ContainerProvider {
  let failing: String

  func probe(path: String) throws -> ContainerProbe { try QueueContainerProvider().probe(path: path) }

  func open(path: String, vault: Vault) throws -> any SealedContainer {
    let inner = try QueueContainerProvider().open(path: path, vault: vault)
    return path == failing ? FailingReseal(inner: inner) : inner
  }
}

final class FailingReseal: SealedContainer, @unchecked Sendable {
  let inner: any SealedContainer
  init(inner: any SealedContainer) { self.inner = inner }
  var name: String { inner.name }
  var containerID: String { inner.containerID }
  func raiseMinimumSealVersion(to version: UInt32) throws { try inner.raiseMinimumSealVersion(to: version) }
  func reseal(with vault: Vault, to version: UInt32) throws -> ResealResult { throw VaultError.noActiveKey }
  func recordCounts() throws -> RecordCounts { try inner.recordCounts() }
  func checkpointNow() throws -> Bool { try inner.checkpointNow() }
  func unopenableRecords(with vault: Vault) throws -> Int { try inner.unopenableRecords(with: vault) }
  func removeUnopenableRecords(with vault: Vault, keep: Bool) throws -> Int {
    try inner.removeUnopenableRecords(with: vault, keep: keep)
  }
  func compact() throws { try inner.compact() }
}
