import Foundation
import VaultCrypto
import VaultKeys

/// One key version as a backup carries it: its manifest record and its key.
package struct ExportedKey: Sendable {
  package let record: KeyVersionRecord
  package let key: SymmetricKey

  package init(record: KeyVersionRecord, key: SymmetricKey) {
    self.record = record
    self.key = key
  }
}

extension Vault {
  /// Runs `body` holding the home's lock in shared mode, with the manifest freshly read: no
  /// rotation can add, re-seal or retire a version meanwhile, while writers keep sealing under the
  /// active version. What a backup takes its keys and snapshots under.
  package func withSharedLock<T>(_ body: () throws -> T) throws -> T {
    let lock = try FileLock(path: home + "/" + Self.lockFileName, shared: true)
    defer { lock.release() }
    try reload()
    return try body()
  }

  /// The key of every version that may still open a record (active and decrypt-only), each
  /// checked against its manifest key-check value. Pending and retired versions are left out.
  ///
  /// - Throws: `VaultError.keyMissing` / `.keyCheckFailed`, or `KeyStoreError` when the store
  ///   cannot be read (a locked keyring): a backup without a key it needs is refused, not written.
  package func exportKeys() throws -> [ExportedKey] {
    var exported: [ExportedKey] = []
    for record in manifest.versions where record.state == .active || record.state == .decryptOnly {
      guard let material = try store.loadKey(keyring: keyringID, version: record.version) else {
        throw VaultError.keyMissing(version: record.version, store: store.kind)
      }
      if let expected = record.check {
        guard constantTimeEquals(try KeyVersionRecord.checkValue(of: material), expected) else {
          throw VaultError.keyCheckFailed(version: record.version)
        }
      }
      var copy = record
      copy.check = try KeyVersionRecord.checkValue(of: material)
      exported.append(ExportedKey(record: copy, key: material))
    }
    return exported
  }

  /// Makes a new home for a vault restored from a backup: the same vault id (keyring id), the
  /// same key versions with their states and suites, keys written into `descriptor`'s store, a new
  /// integrity key, and the containers `placeContainers` puts into the home registered.
  ///
  /// Refuses, changing nothing, when a vault exists in `home`, `home` holds other files, the
  /// keyfile exists, or the store already holds keys of this vault (the vault lives on here).
  /// When a later step fails, the manifest, the containers placed and a keyfile made here are
  /// removed again (Secret Service items already written stay: deleting keys is never a side effect).
  ///
  /// - Throws: `VaultError`, `KeyStoreError` as `create`; `VaultError.keyCheckFailed` when a key
  ///   does not match its record's key-check value; what `placeContainers` throws.
  package static func restore(
    home: String, store descriptor: StoreDescriptor, resolver: KeyStoreResolver, keyring: KeyringID,
    keys: [ExportedKey], activeVersion: UInt32, highestVersion: UInt32, externalSealVersions: [UInt32],
    placeContainers: (String) throws -> [ContainerRecord], clock: @escaping @Sendable () -> Date = Date.init
  ) throws -> Vault {
    let home = absolutePath(home)
    if ManifestFile.exists(home: home) { throw VaultError.alreadyExists(home: home) }
    if let entries = try? FileManager.default.contentsOfDirectory(atPath: home),
      entries.contains(where: { $0 != lockFileName })
    {
      throw VaultError.homeNotEmpty(home: home)
    }
    guard keys.contains(where: { $0.record.version == activeVersion && $0.record.state == .active }) else {
      throw VaultError.noActiveKey
    }
    for exported in keys {
      let check = try KeyVersionRecord.checkValue(of: exported.key)
      if let expected = exported.record.check, !constantTimeEquals(check, expected) {
        throw VaultError.keyCheckFailed(version: exported.record.version)
      }
    }
    let descriptor = try newKeyfileChecked(descriptor, keyring: keyring, home: home)
    let madeKeyfile = descriptor.kind == .keyfile
    let store = try resolver.store(for: descriptor, home: home)
    if let present = try store.storedVersions(keyring: keyring).first {
      throw KeyStoreError.keyExists(version: present)
    }

    try SecureFile.makeDirectory(home, mode: 0o700)
    guard chmod(home, 0o700) == 0 else { throw KeyStoreError.io(path: home, operation: "chmod", errno: errno) }
    let lock = try FileLock(path: home + "/" + lockFileName)
    defer { lock.release() }
    if ManifestFile.exists(home: home) { throw VaultError.alreadyExists(home: home) }

    var placed: [ContainerRecord] = []
    do {
      let integrityKey = try SymmetricKey.generate()
      try integrityKey.withUnsafeBytes { try store.storeRecord(.integrityKey, bytes: $0, keyring: keyring) }
      for exported in keys.sorted(by: { $0.record.version < $1.record.version }) {
        try store.storeKey(exported.key, keyring: keyring, version: exported.record.version)
      }
      placed = try placeContainers(home)
      var manifest = Manifest(vaultID: keyring, store: descriptor, createdAt: timestamp(clock()), home: home)
      manifest.versions = keys.map(\.record).sorted { $0.version < $1.version }
      manifest.activeVersion = activeVersion
      manifest.highestVersion = max(highestVersion, manifest.versions.map(\.version).max() ?? 0)
      manifest.externalSealVersions = externalSealVersions.filter { manifest.record($0) != nil }
      manifest.containers = placed
      let vault = Vault(home: home, manifest: manifest, store: store, integrityKey: integrityKey, clock: clock)
      try vault.save(manifest)
      return vault
    } catch {
      unlink(ManifestFile.path(home: home))
      for container in placed { unlink(container.path) }
      if madeKeyfile, let path = descriptor.keyfile { unlink(path) }
      throw error
    }
  }
}

/// The keys of a backup, to open the envelopes of its container snapshots without a vault home.
package struct BundleKeys: Sendable {
  package let keyring: KeyringID
  private let keys: [UInt32: VersionKey]

  /// - Throws: `EnvelopeError.unsupportedSuite` for a suite this release does not know.
  package init(keyring: KeyringID, keys: [ExportedKey]) throws {
    self.keyring = keyring
    var map: [UInt32: VersionKey] = [:]
    for exported in keys {
      map[exported.record.version] = try VersionKey(exported.key, suite: exported.record.effectiveSuite)
    }
    self.keys = map
  }

  /// Opens `envelope`, sealed with `context`, as the vault would: same keyring, a version present,
  /// the version's suite, then the envelope's own checks.
  ///
  /// - Returns: the header's key version (the plaintext is dropped at once).
  /// - Throws: `EnvelopeError`, one case per reason.
  package func check(_ envelope: [UInt8], context: EnvelopeContext) throws -> UInt32 {
    var plaintext = try open(envelope, context: context)
    plaintext.withUnsafeMutableBytes { zeroBytes($0) }
    return try envelope.withUnsafeBytes { try Envelope.header(of: $0).version }
  }

  /// Opens `envelope`, sealed with `context`, as `check` does, and returns its plaintext (the
  /// caller zeroes it when done).
  ///
  /// - Throws: `EnvelopeError`, one case per reason.
  package func open(_ envelope: [UInt8], context: EnvelopeContext) throws -> [UInt8] {
    try envelope.withUnsafeBytes { envelope in
      let header = try Envelope.header(of: envelope)
      guard header.keyring == keyring else {
        throw EnvelopeError.wrongKeyring(found: header.keyring, expected: keyring)
      }
      guard let key = keys[header.version] else { throw EnvelopeError.unknownKeyVersion(header.version) }
      guard key.suite == header.suite else {
        throw EnvelopeError.suiteMismatch(version: header.version, envelope: header.suite, key: key.suite)
      }
      if header.format == Envelope.format1 {
        return try context.format1Bytes.withUnsafeBytes { try Envelope.openFormat1(envelope, key: key, context: $0) }
      }
      return try Envelope.openFormat2(envelope, key: key, context: context)
    }
  }
}

/// Overwrites `buffer` with zeros (`explicit_bzero`, which the optimiser may not remove).
package func zeroBytes(_ buffer: UnsafeMutableRawBufferPointer) {
  guard let base = buffer.baseAddress, buffer.count > 0 else { return }
  explicit_bzero(base, buffer.count)
}
