import Foundation
import VaultCrypto
import VaultTestSupport
import XCTest

@testable import VaultKeys

/// Named records in a real keyfile (format 2), and the upgrade from format 1.
final class KeyfileRecordTests: XCTestCase {
  var temporary: TemporaryDirectory!
  var keyring: KeyringID!

  override func setUpWithError() throws {
    temporary = TemporaryDirectory()
    keyring = try KeyringID.random()
  }

  override func tearDown() { temporary = nil }

  private func makeStore() -> KeyfileStore { KeyfileStore(path: temporary.sub("keys/vault.keys")) }

  /// A store whose file exists, as every vault's does before its first manifest copy: its
  /// integrity key made it.
  private func makeStoreWithIntegrityKey() throws -> KeyfileStore {
    let store = makeStore()
    try store.storeRecord(.integrityKey, bytes: [UInt8](repeating: 0xAA, count: 32), keyring: keyring)
    return store
  }

  /// The manifest's copy goes only into a keyfile that is there: one that is gone (moved or
  /// deleted under an open vault) is not made again holding none of the keys (outside review).
  func testTheManifestCopyIsNeverWrittenIntoAKeyfileThatIsNotThere() throws {
    let store = makeStore()
    XCTAssertThrowsError(try store.storeRecord(.manifestMirror, bytes: [1], keyring: keyring)) {
      XCTAssertEqual($0 as? KeyStoreError, .keyfileMissing(path: store.path))
    }
    XCTAssertFalse(FileManager.default.fileExists(atPath: temporary.sub("keys")), "not even its directory")
    try store.storeKey(try .generate(), keyring: keyring, version: 1)
    XCTAssertEqual(unlink(store.path), 0)
    XCTAssertThrowsError(try store.storeRecord(.manifestMirror, bytes: [1], keyring: keyring)) {
      XCTAssertEqual($0 as? KeyStoreError, .keyfileMissing(path: store.path))
    }
    XCTAssertFalse(store.exists)
    try store.storeRecord(.integrityKey, bytes: [UInt8](repeating: 0xAA, count: 32), keyring: keyring)
    XCTAssertTrue(store.exists, "a new vault's integrity key makes its keyfile")
  }

  func testRecordRoundTripsAndReplaceKeepsOnlyTheNewValue() throws {
    let store = try makeStoreWithIntegrityKey()
    try store.storeRecord(.manifestMirror, bytes: Array("first".utf8), keyring: keyring)
    XCTAssertEqual(try store.loadRecord(.manifestMirror, keyring: keyring).map(bytes), Array("first".utf8))
    try store.storeRecord(.manifestMirror, bytes: Array("second, longer".utf8), keyring: keyring)
    XCTAssertEqual(try store.loadRecord(.manifestMirror, keyring: keyring).map(bytes), Array("second, longer".utf8))
    XCTAssertEqual(
      try KeyfileStore(path: store.path).loadRecord(.manifestMirror, keyring: keyring).map(bytes),
      Array("second, longer".utf8), "a fresh instance reads the same file")
    let raw = try fileBytes(store.path)
    XCTAssertNil(raw.firstRange(of: Array("first".utf8)), "the replaced value is not in the file")
    XCTAssertEqual(try mode(store.path), 0o600)
    XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: temporary.sub("keys")), ["vault.keys"])
  }

  func testAbsentRecordIsNil() throws {
    let store = makeStore()
    XCTAssertNil(try store.loadRecord(.integrityKey, keyring: keyring), "no file at all")
    try store.storeKey(try .generate(), keyring: keyring, version: 1)
    XCTAssertNil(try store.loadRecord(.integrityKey, keyring: keyring), "a file without that record")
    try store.storeRecord(.manifestMirror, bytes: [1, 2, 3], keyring: keyring)
    XCTAssertNil(try store.loadRecord(.integrityKey, keyring: keyring), "a file with only another record")
  }

  func testEmptyRecordIsPresentNotAbsent() throws {
    let store = try makeStoreWithIntegrityKey()
    try store.storeRecord(.manifestMirror, bytes: [], keyring: keyring)
    XCTAssertEqual(try store.loadRecord(.manifestMirror, keyring: keyring)?.count, 0)
  }

  func testRecordsNeverShowUpAsKeyVersions() throws {
    let store = makeStore()
    let key = try SymmetricKey.generate()
    try store.storeKey(key, keyring: keyring, version: 7)
    try store.storeRecord(.integrityKey, bytes: [UInt8](repeating: 0xAA, count: 32), keyring: keyring)
    try store.storeRecord(.manifestMirror, bytes: Array("{}".utf8), keyring: keyring)
    XCTAssertEqual(try store.storedVersions(keyring: keyring), [7])
    XCTAssertEqual(try store.loadKey(keyring: keyring, version: 7), key)
    XCTAssertTrue(try store.deleteKey(keyring: keyring, version: 7))
    XCTAssertEqual(try store.storedVersions(keyring: keyring), [])
    XCTAssertEqual(
      try store.loadRecord(.integrityKey, keyring: keyring).map(bytes), [UInt8](repeating: 0xAA, count: 32),
      "deleting the last key keeps the records")
  }

  func testRecordOfAnInsecureFileIsRefusedNeverNil() throws {
    let store = makeStore()
    try store.storeRecord(.integrityKey, bytes: [UInt8](repeating: 1, count: 32), keyring: keyring)
    chmod(store.path, 0o640)
    XCTAssertThrowsError(try store.loadRecord(.integrityKey, keyring: keyring)) {
      guard case .insecurePermissions? = $0 as? KeyStoreError else { return XCTFail("\($0)") }
    }
    XCTAssertThrowsError(try store.loadRecord(.integrityKey, keyring: try KeyringID.random())) {
      guard case .insecurePermissions? = $0 as? KeyStoreError else { return XCTFail("\($0)") }
    }
  }

  func testRecordOfAnotherVaultsKeyfileIsRefused() throws {
    let store = makeStore()
    try store.storeRecord(.integrityKey, bytes: [UInt8](repeating: 1, count: 32), keyring: keyring)
    let other = try KeyringID.random()
    XCTAssertThrowsError(try store.loadRecord(.integrityKey, keyring: other)) {
      XCTAssertEqual($0 as? KeyStoreError, .foreignKeyfile(path: store.path, found: keyring, expected: other))
    }
    XCTAssertThrowsError(try store.storeRecord(.integrityKey, bytes: [1], keyring: other))
  }

  /// The largest mirror, the integrity key and many versions fit in what `SecureFile.read` loads.
  func testKeyfileWithTheLargestMirrorFitsAndRoundTrips() throws {
    XCTAssertLessThanOrEqual(KeyfileContents.largestByteCount(versions: 10_000), SecureFile.readLimit)
    let store = makeStore()
    for version in UInt32(1)...200 { try store.storeKey(try .generate(), keyring: keyring, version: version) }
    let mirror = (0..<KeyStoreRecord.maximumByteCount).map { UInt8(truncatingIfNeeded: $0 * 31) }
    let integrity = [UInt8](repeating: 0x5A, count: 32)
    try store.storeRecord(.manifestMirror, bytes: mirror, keyring: keyring)
    try store.storeRecord(.integrityKey, bytes: integrity, keyring: keyring)
    let fresh = KeyfileStore(path: store.path)
    XCTAssertEqual(try fresh.loadRecord(.manifestMirror, keyring: keyring).map(bytes), mirror)
    XCTAssertEqual(try fresh.loadRecord(.integrityKey, keyring: keyring).map(bytes), integrity)
    XCTAssertEqual(try fresh.storedVersions(keyring: keyring), Array(1...200))
  }

  func testOversizedRecordIsRefusedAndNothingIsWritten() throws {
    let store = try makeStoreWithIntegrityKey()
    try store.storeRecord(.manifestMirror, bytes: [1], keyring: keyring)
    let before = try fileBytes(store.path)
    let tooBig = [UInt8](repeating: 0, count: KeyStoreRecord.maximumByteCount + 1)
    XCTAssertThrowsError(try store.storeRecord(.manifestMirror, bytes: tooBig, keyring: keyring)) {
      XCTAssertEqual(
        $0 as? KeyStoreError,
        .recordTooLarge(record: "manifest", byteCount: tooBig.count, limit: KeyStoreRecord.maximumByteCount))
    }
    XCTAssertEqual(try fileBytes(store.path), before)
  }

  /// Format 1 files (every keyfile written before records) are read as before; the next change
  /// rewrites them as format 2 with every key intact.
  func testFormat1FileIsReadThenUpgradedToFormat2WithItsKeys() throws {
    let store = makeStore()
    let one = try SymmetricKey.generate()
    let two = try SymmetricKey.generate()
    try writeFormat1(store.path, entries: [(1, one), (2, two)])
    XCTAssertEqual(try store.storedVersions(keyring: keyring), [1, 2])
    XCTAssertEqual(try store.loadKey(keyring: keyring, version: 2), two)
    XCTAssertNil(try store.loadRecord(.integrityKey, keyring: keyring))
    XCTAssertEqual(try fileBytes(store.path)[3], 1, "reading does not rewrite")

    try store.storeRecord(.integrityKey, bytes: [UInt8](repeating: 9, count: 32), keyring: keyring)
    let upgraded = try fileBytes(store.path)
    XCTAssertEqual(upgraded[3], 2)
    XCTAssertEqual(Array(upgraded[4..<12]), keyring.bytes)
    XCTAssertEqual(try store.loadKey(keyring: keyring, version: 1), one)
    XCTAssertEqual(try store.loadKey(keyring: keyring, version: 2), two)
    XCTAssertEqual(try store.loadRecord(.integrityKey, keyring: keyring).map(bytes), [UInt8](repeating: 9, count: 32))
    XCTAssertEqual(try mode(store.path), 0o600)
  }

  /// Byte for byte as KeyfileStore's doc comment and SECURITY.md describe format 2.
  func testFormat2LayoutIsTheDocumentedOne() throws {
    let store = makeStore()
    let key = try SymmetricKey.generate()
    try store.storeKey(key, keyring: keyring, version: 3)
    try store.storeRecord(.manifestMirror, bytes: Array("MM".utf8), keyring: keyring)
    try store.storeRecord(.integrityKey, bytes: Array("IK".utf8), keyring: keyring)
    var expected: [UInt8] = Array("VKF".utf8) + [2] + keyring.bytes + [0, 0, 0, 1] + [0, 0, 0, 2]
    expected += [0, 0, 0, 3] + key.withUnsafeBytes { Array($0) }
    expected += [13] + Array("integrity-key".utf8) + [0, 0, 0, 2] + Array("IK".utf8)
    expected += [8] + Array("manifest".utf8) + [0, 0, 0, 2] + Array("MM".utf8)
    expected += try SHA256.hash(expected)
    XCTAssertEqual(try fileBytes(store.path), expected)
  }

  /// A record this release does not know (written by a newer one) survives this release's rewrites.
  func testUnknownRecordsAreKeptWhenTheFileIsRewritten() throws {
    let store = makeStore()
    var contents = KeyfileContents(keyring: keyring)
    contents.records["zz-from-the-future"] = [UInt8]([7, 7]).withUnsafeBytes { SecureBytes(copying: $0) }
    let file = try contents.serialized(path: store.path)
    try SecureFile.makeDirectory(temporary.sub("keys"))
    try file.withUnsafeBytes { try SecureFile.atomicWrite(store.path, bytes: $0) }

    try store.storeKey(try .generate(), keyring: keyring, version: 1)
    try store.storeRecord(.manifestMirror, bytes: [1], keyring: keyring)
    let reread = try fileBytes(store.path).withUnsafeBytes {
      try KeyfileContents(parsing: $0, path: store.path, expecting: keyring)
    }
    XCTAssertEqual(reread.records["zz-from-the-future"].map(bytes), [7, 7])
    XCTAssertEqual(reread.keys.keys.sorted(), [1])
  }

  func testMalformedRecordSectionIsCorruptNotAbsent() throws {
    let store = makeStore()
    // A well-checksummed format-2 file whose record claims more bytes than the file holds.
    var body: [UInt8] = Array("VKF".utf8) + [2] + keyring.bytes + [0, 0, 0, 0] + [0, 0, 0, 1]
    body += [8] + Array("manifest".utf8) + [0, 0, 1, 0] + [1, 2, 3]
    try writeRaw(store.path, body + (try SHA256.hash(body)))
    XCTAssertThrowsError(try store.loadRecord(.manifestMirror, keyring: keyring)) {
      XCTAssertEqual($0 as? KeyStoreError, .corruptKeyfile(path: store.path, reason: "truncated record"))
    }
    XCTAssertThrowsError(try store.storeRecord(.manifestMirror, bytes: [1], keyring: keyring))
    XCTAssertEqual(try fileBytes(store.path), body + (try SHA256.hash(body)), "a corrupt file is left as found")
  }

  func testUnknownFormatIsRefused() throws {
    let store = makeStore()
    var body: [UInt8] = Array("VKF".utf8) + [3] + keyring.bytes + [0, 0, 0, 0] + [0, 0, 0, 0]
    body += try SHA256.hash(body)
    try writeRaw(store.path, body)
    XCTAssertThrowsError(try store.storedVersions(keyring: keyring)) {
      XCTAssertEqual($0 as? KeyStoreError, .corruptKeyfile(path: store.path, reason: "unknown format 3"))
    }
  }

  /// tools/interop/vault_envelope.py, written from SECURITY.md, reads a format-2 keyfile that
  /// holds records: it seals with the key it found, and that key opens it here.
  func testIndependentReaderFindsTheKeysBesideTheLargestRecords() throws {
    let probe = try Spawn.run("/usr/bin/env", ["python3", "-c", "import cryptography"])
    if ProcessInfo.processInfo.environment["VAULT_REQUIRE_INTEROP"] == "1" {
      XCTAssertEqual(probe.status, 0, "python3 with the cryptography package is required")
    } else {
      try XCTSkipUnless(probe.status == 0, "python3 with `cryptography` is missing; tools/test.sh installs it")
    }
    let store = makeStore()
    let one = try SymmetricKey.generate()
    try store.storeKey(one, keyring: keyring, version: 1)
    try store.storeKey(try .generate(), keyring: keyring, version: 2)
    try store.storeRecord(.integrityKey, bytes: [UInt8](repeating: 3, count: 32), keyring: keyring)
    try store.storeRecord(
      .manifestMirror, bytes: [UInt8](repeating: 4, count: KeyStoreRecord.maximumByteCount), keyring: keyring)
    let script = packageRoot() + "/tools/interop/vault_envelope.py"
    let sealed = try Spawn.run(
      "/usr/bin/env",
      [
        "python3", script, "seal", "--keyfile", store.path, "--context", "ctx", "--version", "1", "--format", "1",
      ],
      input: Array("hello".utf8))
    XCTAssertEqual(sealed.status, 0, sealed.error)
    let envelope = sealed.output
    XCTAssertEqual(envelope.count, 29 + 5 + 16)
    XCTAssertEqual(Array(envelope[5..<13]), keyring.bytes)
    let opened = try AESGCM.open(
      ciphertext: Array(envelope[29..<(envelope.count - 16)]), tag: Array(envelope.suffix(16)), using: one,
      nonce: Array(envelope[17..<29]), authenticating: Array(envelope[0..<17]) + Array("ctx".utf8))
    XCTAssertEqual(opened, Array("hello".utf8))
  }

  // MARK: - Helpers

  private func bytes(_ secure: SecureBytes) -> [UInt8] { secure.withUnsafeBytes { Array($0) } }

  private func fileBytes(_ path: String) throws -> [UInt8] { Array(try Data(contentsOf: URL(fileURLWithPath: path))) }

  private func writeRaw(_ path: String, _ bytes: [UInt8]) throws {
    try SecureFile.makeDirectory((path as NSString).deletingLastPathComponent)
    try bytes.withUnsafeBytes { try SecureFile.atomicWrite(path, bytes: $0) }
  }

  /// Writes a keyfile exactly as the first release did (format 1).
  private func writeFormat1(_ path: String, entries: [(UInt32, SymmetricKey)]) throws {
    var body: [UInt8] = Array("VKF".utf8) + [1] + keyring.bytes + be32(UInt32(entries.count))
    for (version, key) in entries { body += be32(version) + key.withUnsafeBytes { Array($0) } }
    try writeRaw(path, body + (try SHA256.hash(body)))
  }

  private func be32(_ value: UInt32) -> [UInt8] { (0..<4).map { UInt8(truncatingIfNeeded: value >> (24 - 8 * $0)) } }

  private func mode(_ path: String) throws -> UInt32 {
    var info = stat()
    XCTAssertEqual(stat(path, &info), 0)
    return UInt32(info.st_mode) & 0o7777
  }
}

extension KeyStore {
  func storeRecord(_ record: KeyStoreRecord, bytes: [UInt8], keyring: KeyringID) throws {
    try bytes.withUnsafeBytes { try storeRecord(record, bytes: $0, keyring: keyring) }
  }
}

/// Follow-ups from the documentation review: one spelling per keyring id, and a test twin that
/// refuses what the real stores refuse.
final class KeyStoreStrictnessTests: XCTestCase {
  func testAKeyringIDHasOneSpelling() throws {
    let id = try XCTUnwrap(KeyringID(hex: "0123456789abcdef"))
    XCTAssertEqual(id.hex, "0123456789abcdef")
    for other in ["0123456789ABCDEF", "+123456789abcdef", "0123456789abcde", "0123456789abcdeg", " 123456789abcdef"] {
      XCTAssertNil(KeyringID(hex: other), other)
    }
  }

  func testTheInMemoryStoreRefusesAnOversizedRecordAsTheOthersDo() throws {
    let store = InMemoryKeyStore()
    let big = [UInt8](repeating: 1, count: KeyStoreRecord.maximumByteCount + 1)
    XCTAssertThrowsError(
      try big.withUnsafeBytes { try store.storeRecord(.manifestMirror, bytes: $0, keyring: try KeyringID.random()) }
    ) {
      guard case KeyStoreError.recordTooLarge = $0 else { return XCTFail("\($0)") }
    }
  }
}
