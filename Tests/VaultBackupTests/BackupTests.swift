import Foundation
import Vault
import VaultBackup
import VaultCrypto
import VaultKeys
import VaultQueue
import VaultTestSupport
import XCTest

/// Issue 14's core through the library: bundles written, verified and restored with real SQLite
/// containers and real key stores (a keyfile; the Secret Service where the test keyring runs).
final class BackupTests: XCTestCase {
  var temporary: TemporaryDirectory!
  /// Cheap scrypt for tests only (the package knob; real bundles use N = 2^17).
  let cheap = ScryptParameters(logN: 10, r: 8, p: 1)
  let resolver = KeyStoreResolver.system(secretServiceTimeout: 10)

  override func setUp() { temporary = TemporaryDirectory() }
  override func tearDown() { temporary = nil }

  private func makeVault(_ name: String = "home") throws -> Vault {
    try Vault.create(
      home: temporary.sub(name), store: StoreDescriptor(kind: .keyfile, keyfile: temporary.sub("keys-\(name)/v.keys")),
      resolver: resolver)
  }

  private func backup(_ vault: Vault, to directory: String? = nil, keep: Int = 5, passphrase: String = "correct horse")
    throws -> BackupReport
  {
    let directory = directory ?? temporary.sub("backups")
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    return try Backup.create(
      vault: vault, to: directory, passphrase: try Passphrase(passphrase), keep: keep, toolVersion: "test",
      clock: Date.init, kdf: cheap)
  }

  /// Three containers with records, a rotation (two versions), `vault seal` outside containers.
  private func populate(_ vault: Vault) throws -> [String: [String]] {
    var expected: [String: [String]] = [:]
    for (index, name) in ["a.sqlite", "b.sqlite", "c.sqlite"].enumerated() {
      let path = temporary.sub(name)
      let container = try QueueContainer(path: path, vault: vault)
      for record in 0..<(index + 2) {
        let text = "record \(record) of \(name)"
        _ = try container.enqueue(Array(text.utf8), queue: "q")
        expected[name, default: []].append(text)
      }
    }
    try vault.rotate(options: RotationOptions(retireUnused: false))
    _ = try QueueContainer(path: temporary.sub("a.sqlite"), vault: vault).enqueue(
      Array("after rotation".utf8), queue: "q")
    expected["a.sqlite", default: []].append("after rotation")
    return expected
  }

  private func payloads(_ path: String, _ vault: Vault) throws -> [String] {
    let container = try QueueContainer(path: path, vault: vault, mode: .existing)
    return try container.claim(queue: "q", maxCount: 1000).map { String(decoding: $0.payload, as: UTF8.self) }.sorted()
  }

  func testRoundTripWithRecordsInSeveralContainers() throws {
    let vault = try makeVault()
    let expected = try populate(vault)
    let report = try backup(vault)
    XCTAssertEqual(report.verification.records, 10)
    XCTAssertEqual(report.verification.byVersion, ["2": 10], "rotation re-sealed everything under version 2")
    XCTAssertEqual(report.verification.versions.map(\.version), [1, 2])
    XCTAssertEqual(report.verification.containers.map(\.records), [3, 3, 4])
    XCTAssertTrue(report.bundle.hasSuffix(".vaultbackup"))
    var info = stat()
    XCTAssertEqual(stat(report.bundle, &info), 0)
    XCTAssertEqual(info.st_mode & 0o777, 0o600)

    let verified = try Backup.verify(bundle: report.bundle, passphrase: try Passphrase("correct horse"))
    XCTAssertEqual(verified.records, 10)
    XCTAssertEqual(verified.vaultID, vault.keyringID.hex)

    let home = temporary.sub("restored")
    let restored = try Backup.restore(
      bundle: report.bundle, passphrase: try Passphrase("correct horse"), into: home,
      store: StoreDescriptor(kind: .keyfile, keyfile: temporary.sub("keys-restored/v.keys")), resolver: resolver)
    XCTAssertEqual(restored.vaultID, vault.keyringID.hex)
    XCTAssertEqual(restored.records, 10)
    let reopened = try Vault.open(home: home, resolver: resolver)
    XCTAssertEqual(reopened.keyringID, vault.keyringID)
    XCTAssertEqual(reopened.manifest.activeVersion, 2)
    XCTAssertEqual(reopened.manifest.versions.map(\.state), [.decryptOnly, .active])
    XCTAssertEqual(reopened.manifest.containers.count, 3)
    for name in ["a.sqlite", "b.sqlite", "c.sqlite"] {
      XCTAssertEqual(try payloads(home + "/" + name, reopened), expected[name]!.sorted(), name)
    }
    // The restored vault rotates like any other: every registered container is its own.
    XCTAssertEqual(try reopened.rotate().retired, [1, 2])
  }

  func testBackupWhileAnotherThreadEnqueuesHoldsEveryRecordConfirmedBefore() throws {
    let vault = try makeVault()
    let path = temporary.sub("busy.sqlite")
    let container = try QueueContainer(path: path, vault: vault)
    for i in 0..<50 { _ = try container.enqueue(Array("before \(i)".utf8), queue: "q") }
    let stop = LockedValue(false)
    let written = LockedValue(0)
    let writer = Thread {
      let mine = try! QueueContainer(path: path, vault: vault)
      var i = 0
      while !stop.withLock({ $0 }) {
        _ = try! mine.enqueue(Array("during \(i)".utf8), queue: "q")
        i += 1
        written.withLock { $0 = i }
      }
    }
    writer.start()
    while written.withLock({ $0 }) < 5 { usleep(1000) }
    let confirmed = 50 + written.withLock { $0 }
    let report = try backup(vault)
    stop.withLock { $0 = true }
    while !writer.isFinished { usleep(1000) }
    XCTAssertGreaterThanOrEqual(report.verification.records, confirmed)
    let home = temporary.sub("restored")
    _ = try Backup.restore(
      bundle: report.bundle, passphrase: try Passphrase("correct horse"), into: home,
      store: StoreDescriptor(kind: .keyfile, keyfile: temporary.sub("keys-restored/v.keys")), resolver: resolver)
    let restored = try payloads(home + "/busy.sqlite", try Vault.open(home: home, resolver: resolver))
    for i in 0..<50 { XCTAssertTrue(restored.contains("before \(i)")) }
    XCTAssertGreaterThanOrEqual(restored.count, confirmed)
  }

  /// One flipped byte in each part of a bundle: refused, naming the part.
  func testOneFlippedByteInEachPartIsRefusedNamingThePart() throws {
    let vault = try makeVault()
    _ = try populate(vault)
    let bundle = try backup(vault).bundle
    let original = try Data(contentsOf: URL(fileURLWithPath: bundle))
    let bytes = [UInt8](original)
    let manifestCount = Int(bytes[12..<16].reduce(UInt32(0)) { $0 << 8 | UInt32($1) })
    let keyCount = Int(bytes[16..<20].reduce(UInt32(0)) { $0 << 8 | UInt32($1) })
    let keyStart = 52 + manifestCount
    let containerStart = keyStart + keyCount
    let manifest = try JSONSerialization.jsonObject(with: Data(bytes[52..<keyStart])) as! [String: Any]
    let sizes = (manifest["containers"] as! [[String: Any]]).map { ($0["size"] as! NSNumber).intValue }
    var cases: [(String, Int, (BackupError) -> Bool)] = [
      ("magic", 0, { if case .notABundle = $0 { true } else { false } }),
      ("format", 8, { if case .newerFormat = $0 { true } else { false } }),
      ("manifest hash in header", 30, { if case .manifestHashMismatch = $0 { true } else { false } }),
      ("manifest", 60, { if case .manifestHashMismatch = $0 { true } else { false } }),
      ("key section salt", keyStart + 12, { if case .wrongPassphrase = $0 { true } else { false } }),
      ("key section ciphertext", keyStart + 75, { if case .damagedKeySection = $0 { true } else { false } }),
      ("key section tag", containerStart - 1, { if case .damagedKeySection = $0 { true } else { false } }),
    ]
    var offset = containerStart
    for (index, size) in sizes.enumerated() {
      cases.append(
        (
          "container \(index + 1)", offset + size / 2,
          {
            if case .containerHashMismatch(_, let found, _) = $0 { found == index + 1 } else { false }
          }
        ))
      offset += size
    }
    XCTAssertEqual(offset, bytes.count)
    for (part, position, matches) in cases {
      var damaged = bytes
      damaged[position] ^= 0x01
      try Data(damaged).write(to: URL(fileURLWithPath: bundle))
      do {
        _ = try Backup.verify(bundle: bundle, passphrase: try Passphrase("correct horse"))
        XCTFail("\(part): a flipped byte verified")
      } catch let error as BackupError {
        XCTAssertTrue(matches(error), "\(part): \(error)")
        XCTAssertFalse(error.description.contains("correct horse"))
      }
    }
    try original.write(to: URL(fileURLWithPath: bundle))
    XCTAssertEqual(try Backup.verify(bundle: bundle, passphrase: try Passphrase("correct horse")).records, 10)
  }

  func testTruncatedNewerFormatAndWrongPassphraseAreRefused() throws {
    let vault = try makeVault()
    _ = try populate(vault)
    let bundle = try backup(vault).bundle
    let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: bundle)))
    let passphrase = try Passphrase("correct horse")
    func refusal(_ data: [UInt8], _ passphrase: Passphrase) throws -> BackupError? {
      let path = temporary.sub("candidate.vaultbackup")
      try Data(data).write(to: URL(fileURLWithPath: path))
      do {
        _ = try Backup.verify(bundle: path, passphrase: passphrase)
        return nil
      } catch let error as BackupError { return error }
    }
    for cut in [4, 30, 100, bytes.count - 1] {
      guard case .truncated = try refusal(Array(bytes.prefix(cut)), passphrase) else {
        return XCTFail("cut at \(cut) was not reported as truncated")
      }
    }
    var newer = bytes
    newer[9] = 2
    XCTAssertEqual(
      try refusal(newer, passphrase),
      .newerFormat(path: temporary.sub("candidate.vaultbackup"), found: 2, supported: 1))
    guard case .wrongPassphrase = try refusal(bytes, try Passphrase("correct horsf")) else {
      return XCTFail("a wrong passphrase was not named")
    }
    guard case .damagedHeader = try refusal(bytes + [0], passphrase) else {
      return XCTFail("a trailing byte was not refused")
    }
    // A hostile bundle asking for 2^40 rounds of scrypt memory is refused before deriving anything.
    var hostile = bytes
    let manifestCount = Int(bytes[12..<16].reduce(UInt32(0)) { $0 << 8 | UInt32($1) })
    hostile[52 + manifestCount + 1] = 40
    XCTAssertEqual(
      try refusal(hostile, passphrase), .unacceptableKeyDerivation(path: temporary.sub("candidate.vaultbackup")))
  }

  func testRestoreOverAnExistingHomeIsRefusedAndTouchesNothing() throws {
    let vault = try makeVault()
    _ = try populate(vault)
    let bundle = try backup(vault).bundle
    let before = try Data(contentsOf: URL(fileURLWithPath: vault.home + "/manifest.json"))
    XCTAssertThrowsError(
      try Backup.restore(
        bundle: bundle, passphrase: try Passphrase("correct horse"), into: vault.home,
        store: StoreDescriptor(kind: .keyfile, keyfile: temporary.sub("keys-x/v.keys")), resolver: resolver)
    ) { error in
      XCTAssertEqual(error as? BackupError, .homeHoldsThisVault(home: vault.home, vaultID: vault.keyringID.hex))
    }
    XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: vault.home + "/manifest.json")), before)
    XCTAssertFalse(FileManager.default.fileExists(atPath: temporary.sub("keys-x/v.keys")))
    // The vault's own keyfile again: refused (it holds this vault's keys), nothing made.
    let other = temporary.sub("other")
    XCTAssertThrowsError(
      try Backup.restore(
        bundle: bundle, passphrase: try Passphrase("correct horse"), into: other,
        store: vault.manifest.store, resolver: resolver))
    XCTAssertFalse(FileManager.default.fileExists(atPath: other + "/manifest.json"))
    // What a failed restore may leave (the vault's lock file) does not refuse the rerun.
    try FileManager.default.createDirectory(atPath: other, withIntermediateDirectories: true)
    XCTAssertTrue(FileManager.default.createFile(atPath: other + "/vault.lock", contents: nil))
    let rerun = try Backup.restore(
      bundle: bundle, passphrase: try Passphrase("correct horse"), into: other,
      store: StoreDescriptor(kind: .keyfile, keyfile: temporary.sub("keys-other/v.keys")), resolver: resolver)
    XCTAssertEqual(rerun.home, other)
  }

  func testKeyfileVaultRestoredIntoTheSecretServiceAndBack() throws {
    try XCTSkipUnless(TestKeyring.isAvailable, "needs the test Secret Service (tools/test.sh)")
    let vault = try makeVault()
    let expected = try populate(vault)
    let first = try backup(vault)
    let viaService = temporary.sub("service-home")
    let restored = try Backup.restore(
      bundle: first.bundle, passphrase: try Passphrase("correct horse"), into: viaService,
      store: StoreDescriptor(kind: .secretService), resolver: resolver)
    XCTAssertEqual(restored.store, "secret-service")
    XCTAssertNil(restored.keyfile)
    let service = try Vault.open(home: viaService, resolver: resolver)
    XCTAssertEqual(try payloads(viaService + "/b.sqlite", service), expected["b.sqlite"]!.sorted())
    // Restoring the same vault into the same Secret Service again is refused: its keys live there.
    XCTAssertThrowsError(
      try Backup.restore(
        bundle: first.bundle, passphrase: try Passphrase("correct horse"), into: temporary.sub("twice"),
        store: StoreDescriptor(kind: .secretService), resolver: resolver))

    let second = try backup(service, to: temporary.sub("backups-2"), passphrase: "another one")
    let back = temporary.sub("back-home")
    _ = try Backup.restore(
      bundle: second.bundle, passphrase: try Passphrase("another one"), into: back,
      store: StoreDescriptor(kind: .keyfile, keyfile: temporary.sub("keys-back/v.keys")), resolver: resolver)
    let final = try Vault.open(home: back, resolver: resolver)
    XCTAssertEqual(final.keyringID, vault.keyringID)
    for name in ["a.sqlite", "c.sqlite"] {
      XCTAssertEqual(try payloads(back + "/" + name, final), expected[name]!.sorted(), name)
    }
    // Leave the shared keyring as it was: this vault's items go.
    let store = try resolver.store(for: StoreDescriptor(kind: .secretService), home: viaService)
    for version in try store.storedVersions(keyring: vault.keyringID) {
      _ = try store.deleteKey(keyring: vault.keyringID, version: version)
    }
  }

  /// In a shared (sticky) backup directory anyone may make files named as this vault's newest
  /// bundles. Another user's file and a FIFO are neither counted against `keep` (pruning the
  /// real ones), nor taken for the last backup, nor opened (a FIFO would hang the open); a
  /// bundle of this user's whose unauthenticated manifest claims a size near 2^64 is reported
  /// damaged, not a trap.
  func testFilesPlantedUnderABundlesNameAreNeitherCountedNorTakenForTheLastBackup() throws {
    let vault = try makeVault()
    _ = try populate(vault)
    let directory = temporary.sub("backups")
    var genuine: [String] = []
    for _ in 0..<2 {
      genuine.append(try backup(vault, keep: 3).bundle)
      usleep(5000)
    }
    let name = (genuine[0] as NSString).lastPathComponent
    let vaultID = String(name.dropFirst("vault-".count).prefix { $0 != "-" })
    let prefix = directory + "/vault-\(vaultID)-"
    let planted = (1...3).map { prefix + "2999010\($0)T000000.000Z.vaultbackup" }
    try FileManager.default.copyItem(atPath: genuine[0], toPath: planted[0])
    XCTAssertEqual(chown(planted[0], 65534, 65534), 0)
    try FileManager.default.copyItem(atPath: genuine[0], toPath: planted[1])
    XCTAssertEqual(chown(planted[1], 65534, 65534), 0)
    XCTAssertEqual(mkfifo(planted[2], 0o600), 0)

    let last = Backup.lastBackup(home: vault.home, vaultID: vaultID)
    XCTAssertEqual(last?.bundle, genuine[1])
    XCTAssertEqual(last?.bundles, 2)
    XCTAssertEqual(last?.intact, true)
    genuine.append(try backup(vault, keep: 3).bundle)
    for path in genuine + planted { XCTAssertTrue(FileManager.default.fileExists(atPath: path), path) }

    // This user's newest bundle, its manifest's container size made 2^64 - 1 (hash recomputed).
    var bytes = Array(try Data(contentsOf: URL(fileURLWithPath: genuine[2])))
    let manifestCount = Int(bytes[12..<16].reduce(0) { $0 << 8 | UInt32($1) })
    var manifest = String(decoding: bytes[52..<(52 + manifestCount)], as: UTF8.self)
    let size = try XCTUnwrap(manifest.range(of: #""size":[0-9]+"#, options: .regularExpression))
    manifest.replaceSubrange(size, with: #""size":18446744073709551615"#)
    let newManifest = Array(manifest.utf8)
    let count = UInt32(newManifest.count)
    bytes.replaceSubrange(12..<16, with: (0..<4).map { UInt8(truncatingIfNeeded: count >> (24 - 8 * $0)) })
    bytes.replaceSubrange(20..<52, with: try SHA256.hash(newManifest))
    bytes.replaceSubrange(52..<(52 + manifestCount), with: newManifest)
    let hostile = prefix + "29980101T000000.000Z.vaultbackup"
    try Data(bytes).write(to: URL(fileURLWithPath: hostile))
    let damaged = Backup.lastBackup(home: vault.home, vaultID: vaultID)
    XCTAssertEqual(damaged?.bundle, hostile)
    XCTAssertEqual(damaged?.intact, false)
    XCTAssertTrue(damaged?.problem?.contains("truncated") == true, "\(String(describing: damaged?.problem))")
  }

  /// Two backups at once: the one that finishes last may see a bundle newer than its own (named
  /// by a later start time). That bundle counts among the newest `keep`, and is never removed
  /// to make room for an older one.
  func testKeepNeverRemovesABundleNewerThanTheOneJustWritten() throws {
    let vault = try makeVault()
    _ = try populate(vault)
    let directory = temporary.sub("backups")
    let oldest = try backup(vault, keep: 5).bundle
    let name = (oldest as NSString).lastPathComponent
    let prefix = directory + "/" + name.prefix { $0 != "-" } + "-" + name.dropFirst("vault-".count).prefix { $0 != "-" }
    let newer = ["29990101T000000.000Z", "29990102T000000.000Z"].map { prefix + "-" + $0 + ".vaultbackup" }
    for path in newer { try FileManager.default.copyItem(atPath: oldest, toPath: path) }
    let written = try backup(vault, keep: 2).bundle
    for path in newer + [written] { XCTAssertTrue(FileManager.default.fileExists(atPath: path), path) }
    XCTAssertFalse(FileManager.default.fileExists(atPath: oldest), "the oldest goes")
  }

  func testKeepRemovesOlderBundlesOnlyAfterTheNewOneVerified() throws {
    let vault = try makeVault()
    _ = try populate(vault)
    let directory = temporary.sub("backups")
    var bundles: [String] = []
    for _ in 0..<3 {
      bundles.append(try backup(vault, keep: 2).bundle)
      usleep(5000)
    }
    let names = try FileManager.default.contentsOfDirectory(atPath: directory).filter { !$0.hasPrefix(".") }.sorted()
    XCTAssertEqual(names, bundles.suffix(2).map { ($0 as NSString).lastPathComponent })
    // A record that does not open: the new bundle fails verification, and nothing older is removed.
    let sqlite = Process()
    sqlite.executableURL = URL(fileURLWithPath: "/usr/bin/sqlite3")
    sqlite.arguments = [
      temporary.sub("b.sqlite"),
      "UPDATE records SET envelope = substr(envelope, 1, 40) || zeroblob(60) WHERE rowid = 1",
    ]
    try sqlite.run()
    sqlite.waitUntilExit()
    XCTAssertEqual(sqlite.terminationStatus, 0)
    XCTAssertThrowsError(try backup(vault, keep: 1)) { error in
      guard case .envelopesFailed(_, 2, _, 1, _) = error as? BackupError else { return XCTFail("\(error)") }
    }
    let after = try FileManager.default.contentsOfDirectory(atPath: directory).filter { !$0.hasPrefix(".") }.sorted()
    XCTAssertEqual(after, names, "the failed bundle is gone, the two verified ones stay")
    let hidden = try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.hasPrefix(".") }
    XCTAssertEqual(hidden, [], "no temporary file or work directory is left")
  }

  func testABundleHoldsNoPlaintextAndNoKey() throws {
    let vault = try makeVault()
    let canary = "CANARY-\(UUID().uuidString)"
    _ = try QueueContainer(path: temporary.sub("a.sqlite"), vault: vault).enqueue(Array(canary.utf8), queue: "q")
    let bundle = try backup(vault).bundle
    let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: bundle)))
    XCTAssertNil(bytes.firstRange(of: Array(canary.utf8)))
    XCTAssertNil(bytes.firstRange(of: Array("correct horse".utf8)))
    let store = try resolver.store(for: vault.manifest.store, home: vault.home)
    let key = try store.loadKey(keyring: vault.keyringID, version: 1)!
    key.withUnsafeBytes { XCTAssertNil(bytes.firstRange(of: Array($0))) }
  }

  /// The cost of the real parameters (N = 2^17, r = 8, p = 1), printed for SECURITY.md.
  func testStandardScryptParametersCostIsMeasured() throws {
    let started = Date()
    let key = try Array("a passphrase".utf8).withUnsafeBytes {
      try Scrypt.deriveKey(passphrase: $0, salt: Array(repeating: 7, count: 32), parameters: .standard)
    }
    let seconds = Date().timeIntervalSince(started)
    print("scrypt N=2^17 r=8 p=1: \(String(format: "%.3f", seconds)) s")
    XCTAssertEqual(ScryptParameters.standard.memoryBytes, 128 << 20)
    XCTAssertNotEqual(key, try [UInt8](repeating: 0, count: 32).withUnsafeBytes { try SymmetricKey(copying: $0) })
    XCTAssertFalse(ScryptParameters(logN: 25, r: 8, p: 1).isAcceptable, "4 GiB is refused")
    XCTAssertFalse(ScryptParameters(logN: 20, r: 8, p: 2).isAcceptable, "2 GiB is refused")
  }
}
