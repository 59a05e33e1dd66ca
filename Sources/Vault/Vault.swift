import Foundation
import Synchronization
import VaultCrypto
import VaultKeys

/// A vault: versioned 256-bit keys in a key store, described by a manifest in a home directory,
/// and `seal` / `open` of records in the envelope format.
///
/// Thread-safe: `seal`, `open` and `status` may be called from any number of threads at once.
/// Changes to the manifest (create, rotate) take an exclusive file lock in the home, so
/// several processes may share one vault.
public final class Vault: Sendable {
  public let home: String
  public let keyringID: KeyringID
  let store: any KeyStore
  let clock: @Sendable () -> Date
  private let nonces = NonceSource()
  private let state: Mutex<State>

  struct State {
    var manifest: Manifest
    var keys: [UInt32: AESGCMKey] = [:]
  }

  static let lockFileName = "vault.lock"

  init(home: String, manifest: Manifest, store: any KeyStore, clock: @escaping @Sendable () -> Date) {
    self.home = home
    self.keyringID = manifest.keyringID!
    self.store = store
    self.clock = clock
    state = Mutex(State(manifest: manifest))
  }

  // MARK: - Create and open

  /// Creates a new vault in `home` with its first key version in `store`.
  ///
  /// Refuses, changing nothing, when a vault already exists there, when `home` holds other files,
  /// when the keyfile already exists, or when the Secret Service already holds keys for `home`.
  public static func create(
    home: String, store descriptor: StoreDescriptor, resolver: KeyStoreResolver = .system(),
    clock: @escaping @Sendable () -> Date = Date.init
  ) throws -> Vault {
    let home = absolutePath(home)
    if ManifestFile.exists(home: home) { throw VaultError.alreadyExists(home: home) }
    if let entries = try? FileManager.default.contentsOfDirectory(atPath: home),
      entries.contains(where: { $0 != lockFileName })
    {
      throw VaultError.homeNotEmpty(home: home)
    }
    try SecureFile.makeDirectory(home, mode: 0o700)
    // An empty home made beforehand keeps whatever mode it had; make it private like a new one.
    guard chmod(home, 0o700) == 0 else { throw KeyStoreError.io(path: home, operation: "chmod", errno: errno) }
    let lock = try FileLock(path: home + "/" + lockFileName)
    defer { lock.release() }
    if ManifestFile.exists(home: home) { throw VaultError.alreadyExists(home: home) }

    let keyring = try KeyringID.random()
    var descriptor = descriptor
    if descriptor.kind == .keyfile {
      let path = absolutePath(
        descriptor.keyfile
          ?? KeyfileStore.defaultPath(keyring: keyring, environment: ProcessInfo.processInfo.environment))
      descriptor.keyfile = path
      if KeyfileStore(path: path).exists { throw VaultError.keyfileExists(path: path) }
    }
    let store = try resolver.store(for: descriptor, home: home)
    // Whatever the store: a keyfile vault over a home whose Secret Service keys remain orphans them too.
    _ = try checkForOrphanedKeys(home: home, resolver: resolver)

    let manifest = Manifest(vaultID: keyring, store: descriptor, createdAt: timestamp(clock()))
    try ManifestFile.save(manifest, home: home)
    let vault = Vault(home: home, manifest: manifest, store: store, clock: clock)
    do {
      try vault.completePendingVersion()
    } catch {
      // Nothing was ever sealed under this vault: undo the manifest so `init` can be retried.
      // The key, if it reached the store, stays there (deleting a key is never a side effect).
      unlink(ManifestFile.path(home: home))
      throw error
    }
    return vault
  }

  /// Opens the vault in `home` and loads its active key.
  ///
  /// - Throws: `ManifestFile.Failure` when the manifest is missing or corrupt; `KeyStoreError` when the
  ///   store cannot be read (locked, timed out, bad permissions); `VaultError.keyMissing` when the
  ///   active key is absent. It never creates a key for a version that may have sealed data.
  public static func open(
    home: String, resolver: KeyStoreResolver = .system(), clock: @escaping @Sendable () -> Date = Date.init
  ) throws -> Vault {
    let home = absolutePath(home)
    let manifest = try ManifestFile.load(home: home)
    let store = try resolver.store(for: manifest.store, home: home)
    let vault = Vault(home: home, manifest: manifest, store: store, clock: clock)
    if manifest.versions.contains(where: { $0.state == .pending }) {
      // A create or rotation stopped part-way; finishing it is safe because nothing was sealed
      // under a pending version.
      try vault.withManifestLock { try vault.completePendingVersion() }
    }
    _ = try vault.activeKey()
    return vault
  }

  // MARK: - Seal and open

  /// Seals `plaintext` under the active key, bound to `context` (which must be given again to open).
  /// - Returns: an envelope of `plaintext.count + 45` bytes.
  public func seal(_ plaintext: UnsafeRawBufferPointer, context: UnsafeRawBufferPointer) throws -> [UInt8] {
    let (version, key) = try activeKey()
    let count = plaintext.count + Envelope.overhead
    return try [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
      let out = UnsafeMutableRawBufferPointer(buffer)
      out.copyBytes(from: Envelope.magic)
      out[3] = Envelope.format
      out[4] = Envelope.suiteAES256GCM
      UnsafeMutableRawBufferPointer(rebasing: out[5..<13]).copyBytes(from: keyringID.bytes)
      for i in 0..<4 { out[13 + i] = UInt8(truncatingIfNeeded: version >> (24 - 8 * UInt32(i))) }
      let nonce = UnsafeMutableRawBufferPointer(rebasing: out[17..<Envelope.headerCount])
      try nonces.next(into: nonce)
      try key.seal(
        plaintext, nonce: UnsafeRawBufferPointer(nonce),
        authenticating: UnsafeRawBufferPointer(rebasing: out[0..<Envelope.authenticatedHeaderCount]), context,
        into: UnsafeMutableRawBufferPointer(rebasing: out[Envelope.headerCount...]))
      initialized = count
    }
  }

  /// Opens an envelope sealed by this vault with the same `context`.
  /// - Throws: `EnvelopeError` (distinct cases for each reason), or a key store error when the
  ///   needed key cannot be read.
  public func open(_ envelope: UnsafeRawBufferPointer, context: UnsafeRawBufferPointer) throws -> [UInt8] {
    let header = try Envelope.header(of: envelope)
    guard header.keyring == keyringID else {
      throw EnvelopeError.wrongKeyring(found: header.keyring, expected: keyringID)
    }
    let key = try key(for: header.version)
    let body = UnsafeRawBufferPointer(rebasing: envelope[Envelope.headerCount...])
    let count = body.count - AESGCMKey.tagByteCount
    do {
      return try [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
        try key.open(
          body, nonce: UnsafeRawBufferPointer(rebasing: envelope[17..<Envelope.headerCount]),
          authenticating: UnsafeRawBufferPointer(rebasing: envelope[0..<Envelope.authenticatedHeaderCount]), context,
          into: UnsafeMutableRawBufferPointer(buffer))
        initialized = count
      }
    } catch CryptoError.authenticationFailed {
      throw EnvelopeError.authenticationFailed
    }
  }

  public func seal(_ plaintext: [UInt8], context: [UInt8]) throws -> [UInt8] {
    try plaintext.withUnsafeBytes { p in try context.withUnsafeBytes { try seal(p, context: $0) } }
  }

  public func open(_ envelope: [UInt8], context: [UInt8]) throws -> [UInt8] {
    try envelope.withUnsafeBytes { e in try context.withUnsafeBytes { try open(e, context: $0) } }
  }

  // MARK: - Keys

  /// The version new records are sealed under, as this process last read the manifest.
  public var activeVersion: UInt32 { state.withLock { $0.manifest.activeVersion } }

  /// The manifest as this process last read or wrote it.
  public var manifest: Manifest { state.withLock { $0.manifest } }

  /// Re-reads the manifest (another process may have rotated) and forgets cached keys of versions
  /// that are no longer usable.
  public func reload() throws {
    let fresh = try ManifestFile.load(home: home)
    state.withLock { state in
      state.manifest = fresh
      state.keys = state.keys.filter { fresh.record($0.key).map { $0.state != .retired } ?? false }
    }
  }

  func activeKey() throws -> (UInt32, AESGCMKey) {
    let version = state.withLock { $0.manifest.activeVersion }
    guard manifest.record(version)?.state == .active else { throw VaultError.noActiveKey }
    return (version, try key(for: version))
  }

  /// The key for `version`, from the cache or the store. An unknown version triggers one manifest
  /// reload, since another process may have rotated since this one loaded it.
  func key(for version: UInt32) throws -> AESGCMKey {
    if let cached = state.withLock({ $0.keys[version] }) { return cached }
    var record = state.withLock { $0.manifest.record(version) }
    if record == nil {
      try reload()
      record = state.withLock { $0.manifest.record(version) }
    }
    guard let record else { throw EnvelopeError.unknownKeyVersion(version) }
    guard record.state != .retired else { throw EnvelopeError.retiredKeyVersion(version) }
    guard let material = try store.loadKey(keyring: keyringID, version: version) else {
      throw VaultError.keyMissing(version: version, store: store.kind)
    }
    let key = AESGCMKey(material)
    state.withLock { $0.keys[version] = key }
    return key
  }

  /// Writes `manifest` (caller holds the lock) and adopts it.
  func save(_ next: Manifest) throws {
    try ManifestFile.save(next, home: home)
    state.withLock { $0.manifest = next }
  }

  /// Runs `body` holding the home's exclusive lock, with the manifest freshly re-read.
  func withManifestLock<T>(_ body: () throws -> T) throws -> T {
    let lock = try FileLock(path: home + "/" + Self.lockFileName)
    defer { lock.release() }
    try reload()
    return try body()
  }

  /// Finishes the pending version, if any: uses its key when the store already has it (a crash
  /// after storing), otherwise generates and stores one; proves it with a seal/open round trip;
  /// then makes it active and the previous active version decrypt-only. Caller holds the lock.
  func completePendingVersion() throws {
    guard let pending = manifest.versions.first(where: { $0.state == .pending })?.version else { return }
    let material: SymmetricKey
    if let existing = try store.loadKey(keyring: keyringID, version: pending) {
      material = existing
    } else {
      // Generating is safe only for the pending version, and only if the store still holds every
      // version that may have sealed data: a lost keyfile must be an error, not a fresh file.
      let stored = Set(try store.storedVersions(keyring: keyringID))
      for record in manifest.versions where record.state == .active || record.state == .decryptOnly {
        guard stored.contains(record.version) else {
          throw VaultError.keyMissing(version: record.version, store: store.kind)
        }
      }
      material = try SymmetricKey.generate()
      try store.storeKey(material, keyring: keyringID, version: pending)
    }
    // Read back what the store holds: the round trip must use the key that future opens will load.
    guard let stored = try store.loadKey(keyring: keyringID, version: pending), stored == material else {
      throw VaultError.keyMissing(version: pending, store: store.kind)
    }
    let key = AESGCMKey(stored)
    try selfTest(key, version: pending)

    var next = manifest
    if next.activeVersion != pending, next.record(next.activeVersion)?.state == .active {
      next.setState(.decryptOnly, of: next.activeVersion)
    }
    next.setState(.active, of: pending)
    next.activeVersion = pending
    try ManifestFile.save(next, home: home)
    state.withLock {
      $0.manifest = next
      $0.keys[pending] = key
    }
  }

  private func selfTest(_ key: AESGCMKey, version: UInt32) throws {
    let probe: [UInt8] = Array("vault self-test".utf8)
    let nonce = try SecureRandom.bytes(AESGCMKey.nonceByteCount)
    var sealed = [UInt8](repeating: 0, count: probe.count + AESGCMKey.tagByteCount)
    var opened = [UInt8](repeating: 0, count: probe.count)
    do {
      try probe.withUnsafeBytes { p in
        try nonce.withUnsafeBytes { n in
          try sealed.withUnsafeMutableBytes {
            try key.seal(p, nonce: n, authenticating: .init(start: nil, count: 0), into: $0)
          }
          try sealed.withUnsafeBytes { s in
            try opened.withUnsafeMutableBytes {
              try key.open(s, nonce: n, authenticating: .init(start: nil, count: 0), into: $0)
            }
          }
        }
      }
    } catch {
      throw VaultError.roundTripFailed(version: version)
    }
    guard opened == probe else { throw VaultError.roundTripFailed(version: version) }
  }
}

/// `path` made absolute (against the working directory) and standardised.
public func absolutePath(_ path: String) -> String {
  let expanded = (path as NSString).expandingTildeInPath
  let absolute = expanded.hasPrefix("/") ? expanded : FileManager.default.currentDirectoryPath + "/" + expanded
  return (absolute as NSString).standardizingPath
}

/// ISO 8601 in UTC with seconds, as the manifest and `status --json` show times.
public func timestamp(_ date: Date) -> String {
  let formatter = ISO8601DateFormatter()
  formatter.formatOptions = [.withInternetDateTime]
  formatter.timeZone = TimeZone(identifier: "UTC")
  return formatter.string(from: date)
}
