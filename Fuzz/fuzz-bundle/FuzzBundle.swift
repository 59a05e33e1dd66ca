// Fuzz target: a backup bundle through `Backup.inspect` (what `vault status` reads without the
// passphrase) and `Backup.verify` (header, lengths, manifest JSON, key section, key checks, every
// container snapshot opened as a queue container and its envelopes).
// The first byte picks the mode:
//
// - even: the rest is the bundle file as it is. The key section's tag covers header and manifest,
//   so random bytes stop at the header, the lengths and the passphrase check.
// - odd: the rest is a bundle's parts, `u32 M ‖ manifest (M) ‖ u32 P ‖ key plaintext (P) ‖
//   snapshots`, which this file assembles into a bundle as SECURITY.md ("Backup bundles") lays it
//   out: the manifest's hash in the header, the key section sealed under the fuzz passphrase's
//   wrapping key. When the manifest decodes, each snapshot's SHA-256 and each version's key-check
//   value are set to match, so the fuzzer reaches what only a passphrase holder could write: the
//   manifest's invariants, the key plaintext's layout and hostile SQLite snapshots.
//
// The passphrase's keys are derived once (scrypt, N = 2^10) and given to `verify` for every input,
// whatever parameters the input names, so no input pays for scrypt. The assembler is written from
// SECURITY.md, not from VaultBackup's writer: seeds made by the real `Backup.create` are read back
// with it, which checks that document too. See Fuzz/README.md.
import Foundation
import FuzzSupport
import Vault
import VaultBackup
import VaultCrypto
import VaultKeys
import VaultQueue

enum BundleTarget {
  static let passphrase = "fuzz passphrase"
  static let parameters = ScryptParameters(logN: 10, r: 8, p: 1)
  /// Fixed salt and nonce: the fuzz key protects nothing, and fixed bytes keep inputs replayable.
  static let salt = [UInt8](repeating: 0x5A, count: 32)
  static let nonce = [UInt8](repeating: 0xA5, count: 12)
  static let keys: (wrap: SymmetricKey, check: [UInt8]) = try! derive(passphrase, salt: salt, parameters: parameters)
  static let magic = Array("VAULTBKP".utf8)

  static func run(_ input: UnsafeRawBufferPointer) {
    guard let mode = input.first else { return }
    let rest = Array(input.dropFirst())
    let bundle = mode & 1 == 0 ? rest : assemble(Parts(reading: rest))
    let path = NSTemporaryDirectory() + "/fuzz-\(getpid()).vaultbackup"
    defer { unlink(path) }
    guard FileManager.default.createFile(atPath: path, contents: Data(bundle)) else {
      fatalError("the fuzz target could not write its input file")
    }
    // What `vault status` reads of a bundle without its passphrase (nothing authenticated).
    do {
      _ = try Backup.inspect(bundle: path)
    } catch {
      expect(error is BackupError, error)
    }
    do {
      let report = try Backup.verify(bundle: path, wrap: keys.wrap, check: keys.check)
      // What verified is consistent with itself: one entry per snapshot, the counts adding up.
      guard report.containers.map(\.records).reduce(0, +) == report.records else {
        fatalError("a verified bundle's per-container counts do not add up to its total")
      }
      replayed("verified: \(report.containers.count) containers, \(report.records) records")
    } catch {
      replayed("refused: \(error)")
      // A QueueError only for what this machine did, never for the bytes of the bundle.
      let machine: Set<String> = ["queue.disk-full", "queue.too-many-open-files", "queue.out-of-memory"]
      expect(error is BackupError || (error as? QueueError).map { machine.contains($0.code) } == true, error)
    }
  }

  /// Says what became of an input when it is replayed by hand (the plain build), never while fuzzing.
  static func replayed(_ outcome: String) {
    #if !FUZZING
      FileHandle.standardError.write(Data((outcome + "\n").utf8))
    #endif
  }

  /// The parts of a bundle before assembly; lengths beyond the input are cut to what is there.
  struct Parts {
    var manifest: [UInt8]
    var keyPlaintext: [UInt8]
    var snapshots: [UInt8]

    init(manifest: [UInt8], keyPlaintext: [UInt8], snapshots: [UInt8]) {
      self.manifest = manifest
      self.keyPlaintext = keyPlaintext
      self.snapshots = snapshots
    }

    init(reading bytes: [UInt8]) {
      var offset = 0
      func chunk() -> [UInt8] {
        guard bytes.count - offset >= 4 else {
          offset = bytes.count
          return []
        }
        let count = Int(bytes[offset..<offset + 4].reduce(UInt32(0)) { $0 << 8 | UInt32($1) })
        offset += 4
        let end = offset + min(count, bytes.count - offset)
        defer { offset = end }
        return Array(bytes[offset..<end])
      }
      manifest = chunk()
      keyPlaintext = chunk()
      snapshots = Array(bytes[offset...])
    }

    var encoded: [UInt8] {
      be(UInt32(manifest.count)) + manifest + be(UInt32(keyPlaintext.count)) + keyPlaintext + snapshots
    }
  }

  /// A bundle of `parts`, its manifest's hashes and key checks made to match when it decodes.
  static func assemble(_ parts: Parts) -> [UInt8] {
    var manifestBytes = parts.manifest
    if var manifest = try? JSONDecoder().decode(BackupManifest.self, from: Data(parts.manifest)) {
      var offset = 0
      for index in manifest.containers.indices {
        let size = Int(min(manifest.containers[index].size, UInt64(parts.snapshots.count - offset)))
        manifest.containers[index].sha256 = hex(try! SHA256.hash(Array(parts.snapshots[offset..<offset + size])))
        offset += size
      }
      let keys = keyEntries(parts.keyPlaintext)
      for index in manifest.versions.indices {
        if let key = keys[manifest.versions[index].version] {
          manifest.versions[index].check = try! KeyVersionRecord.checkValue(of: key)
        }
      }
      let encoder = JSONEncoder()
      encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
      manifestBytes = Array(try! encoder.encode(manifest))
    }
    let keySectionCount = 70 + parts.keyPlaintext.count + 16
    var header = magic + be(UInt16(1)) + be(UInt16(0))
    header += be(UInt32(manifestBytes.count)) + be(UInt32(keySectionCount)) + (try! SHA256.hash(manifestBytes))
    let prefix = [1, parameters.logN] + be(parameters.r) + be(parameters.p) + salt + keys.check + nonce
    var sealed = [UInt8](repeating: 0, count: parts.keyPlaintext.count + 16)
    let aad = header + prefix
    try! parts.keyPlaintext.withUnsafeBytes { plaintext in
      try nonce.withUnsafeBytes { nonce in
        try aad.withUnsafeBytes { aad in
          try sealed.withUnsafeMutableBytes {
            try AESGCMKey(keys.wrap).seal(plaintext, nonce: nonce, authenticating: aad, into: $0)
          }
        }
      }
    }
    return header + manifestBytes + prefix + sealed + parts.snapshots
  }

  /// The key plaintext's entries by version (a 4-byte count, then 4-byte version ‖ 32-byte key),
  /// as far as they are complete; a later entry for a version replaces an earlier one.
  static func keyEntries(_ plaintext: [UInt8]) -> [UInt32: SymmetricKey] {
    var keys: [UInt32: SymmetricKey] = [:]
    var offset = 4
    while plaintext.count - offset >= 36 {
      let version = plaintext[offset..<offset + 4].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
      keys[version] = try! plaintext[offset + 4..<offset + 36].withUnsafeBytes { try SymmetricKey(copying: $0) }
      offset += 36
    }
    return keys
  }

  /// The wrapping key and the passphrase check of `passphrase` (SECURITY.md: scrypt, then HKDF-SHA256
  /// with the labels "vault backup wrap v1" and "vault backup check v1").
  static func derive(
    _ passphrase: String, salt: [UInt8], parameters: ScryptParameters
  ) throws -> (wrap: SymmetricKey, check: [UInt8]) {
    let secret = try Array(passphrase.utf8).withUnsafeBytes {
      try Scrypt.deriveKey(passphrase: $0, salt: salt, parameters: parameters)
    }
    return try secret.withUnsafeBytes { ikm in
      let wrap = try SymmetricKey(
        storage: HKDF.deriveKey(inputKeyMaterial: ikm, salt: [], info: Array("vault backup wrap v1".utf8), length: 32))
      let check = try HKDF.deriveKey(
        inputKeyMaterial: ikm, salt: [], info: Array("vault backup check v1".utf8), length: 16)
      return (wrap, check.withUnsafeBytes { Array($0) })
    }
  }

  /// Reads a bundle `Backup.create` wrote with `passphrase` back into its parts, by SECURITY.md's
  /// layout; traps when the document and the writer disagree.
  static func parts(ofBundle bundle: [UInt8], passphrase: String) throws -> Parts {
    func number(_ offset: Int, _ count: Int) -> Int {
      Int(bundle[offset..<offset + count].reduce(UInt64(0)) { $0 << 8 | UInt64($1) })
    }
    guard Array(bundle[0..<8]) == magic, number(8, 2) == 1, number(10, 2) == 0 else {
      fatalError("the header is not as SECURITY.md describes it")
    }
    let manifestCount = number(12, 4)
    let keyCount = number(16, 4)
    let manifest = Array(bundle[52..<52 + manifestCount])
    guard try SHA256.hash(manifest) == Array(bundle[20..<52]) else { fatalError("the manifest hash differs") }
    let section = Array(bundle[52 + manifestCount..<52 + manifestCount + keyCount])
    let parameters = ScryptParameters(
      logN: section[1], r: UInt32(number(52 + manifestCount + 2, 4)), p: UInt32(number(52 + manifestCount + 6, 4)))
    let derived = try derive(passphrase, salt: Array(section[10..<42]), parameters: parameters)
    guard section[0] == 1, Array(section[42..<58]) == derived.check else { fatalError("the passphrase check differs") }
    var plaintext = [UInt8](repeating: 0, count: keyCount - 70 - 16)
    let aad = Array(bundle[0..<52]) + Array(section[0..<70])
    try Array(section[70...]).withUnsafeBytes { body in
      try Array(section[58..<70]).withUnsafeBytes { nonce in
        try aad.withUnsafeBytes { aad in
          try plaintext.withUnsafeMutableBytes {
            try AESGCMKey(derived.wrap).open(body, nonce: nonce, authenticating: aad, into: $0)
          }
        }
      }
    }
    return Parts(
      manifest: manifest, keyPlaintext: plaintext, snapshots: Array(bundle[(52 + manifestCount + keyCount)...]))
  }

  /// Writes seeds into `directory`: bundles of real vaults (no container; two containers with
  /// records) made by `Backup.create`, read back by SECURITY.md's layout, each both as parts and
  /// as the bundle assembled from them under the fuzz passphrase.
  static func writeSeeds(into directory: String) throws {
    let work = NSTemporaryDirectory() + "/fuzz-bundle-seeds-\(getpid())"
    try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: work) }
    for (name, containers) in [("empty", 0), ("records", 2)] {
      let vault = try Vault.create(
        home: "\(work)/\(name)-home", store: StoreDescriptor(kind: .keyfile, keyfile: "\(work)/\(name)-keys/v.keys"))
      for index in 0..<containers {
        let container = try QueueContainer(path: "\(work)/\(name)-\(index).sqlite", vault: vault)
        for record in 0..<3 { _ = try container.enqueue(Array("record \(record)".utf8), queue: "q\(index)") }
      }
      let backups = "\(work)/\(name)-backups"
      try FileManager.default.createDirectory(atPath: backups, withIntermediateDirectories: true)
      _ = try Backup.create(
        vault: vault, to: backups, passphrase: try Passphrase("seed passphrase"), keep: 1, toolVersion: "fuzz-seed",
        clock: Date.init, kdf: parameters)
      let file = try FileManager.default.contentsOfDirectory(atPath: backups).first { $0.hasSuffix(".vaultbackup") }!
      let bundle = [UInt8](try Data(contentsOf: URL(fileURLWithPath: "\(backups)/\(file)")))
      let parts = try parts(ofBundle: bundle, passphrase: "seed passphrase")
      try Data([1] + parts.encoded).write(to: URL(fileURLWithPath: "\(directory)/\(name)-parts"))
      try Data([0] + assemble(parts)).write(to: URL(fileURLWithPath: "\(directory)/\(name)-bundle"))
    }
  }

  static func be<T: FixedWidthInteger>(_ value: T) -> [UInt8] {
    (0..<T.bitWidth / 8).map { UInt8(truncatingIfNeeded: value >> (T.bitWidth - 8 - 8 * $0)) }
  }

  static func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
  BundleTarget.run(UnsafeRawBufferPointer(start: data, count: size))
  return 0
}

@main enum Main {
  static func main() throws { exit(try FuzzMain.run(fuzz, seeds: BundleTarget.writeSeeds)) }
}
