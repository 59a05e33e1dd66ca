import Foundation
import VaultCrypto
import VaultKeys

/// A key store that hands every call to another store, after letting the test step in: to fail
/// it (a keyring that locked, a disk that failed, a process killed there), to answer it as absent
/// (a record someone deleted), or to note it.
///
/// Thread-safe as far as `interpose` is: it is called on the caller's thread, without a lock.
public final class InterposedKeyStore: KeyStore, @unchecked Sendable {
  /// A call about to be forwarded.
  public enum Call: Equatable, Sendable {
    case loadKey(version: UInt32)
    case storeKey(version: UInt32)
    case deleteKey(version: UInt32)
    case storedVersions
    case checkWritable
    case loadRecord(KeyStoreRecord)
    case storeRecord(KeyStoreRecord)
  }

  /// What to do with a call.
  public enum Answer: Sendable {
    /// Forward it.
    case forward
    /// Answer without forwarding, as a store that holds nothing of the kind (nil, false, []).
    case absent
  }

  public let inner: any KeyStore
  public let kind: KeyStoreKind
  private let interpose: @Sendable (Call) throws -> Answer

  /// - Parameters:
  ///   - inner: the store calls go to.
  ///   - kind: the kind this store says it is (the inner store's when nil).
  ///   - interpose: called before each call; throws to fail the call, or says how to answer it.
  public init(
    _ inner: any KeyStore, kind: KeyStoreKind? = nil, interpose: @escaping @Sendable (Call) throws -> Answer
  ) {
    self.inner = inner
    self.kind = kind ?? inner.kind
    self.interpose = interpose
  }

  public func loadKey(keyring: KeyringID, version: UInt32) throws -> SymmetricKey? {
    guard try interpose(.loadKey(version: version)) == .forward else { return nil }
    return try inner.loadKey(keyring: keyring, version: version)
  }

  /// Interposed as a `loadKey` of the version: the same read, of every item.
  public func loadKeyCandidates(keyring: KeyringID, version: UInt32) throws -> [SymmetricKey] {
    guard try interpose(.loadKey(version: version)) == .forward else { return [] }
    return try inner.loadKeyCandidates(keyring: keyring, version: version)
  }

  public func storeKey(_ key: SymmetricKey, keyring: KeyringID, version: UInt32) throws {
    guard try interpose(.storeKey(version: version)) == .forward else { return }
    try inner.storeKey(key, keyring: keyring, version: version)
  }

  public func deleteKey(keyring: KeyringID, version: UInt32) throws -> Bool {
    guard try interpose(.deleteKey(version: version)) == .forward else { return false }
    return try inner.deleteKey(keyring: keyring, version: version)
  }

  public func storedVersions(keyring: KeyringID) throws -> [UInt32] {
    guard try interpose(.storedVersions) == .forward else { return [] }
    return try inner.storedVersions(keyring: keyring)
  }

  public func checkWritable() throws {
    guard try interpose(.checkWritable) == .forward else { return }
    try inner.checkWritable()
  }

  public func loadRecord(_ record: KeyStoreRecord, keyring: KeyringID) throws -> SecureBytes? {
    guard try interpose(.loadRecord(record)) == .forward else { return nil }
    return try inner.loadRecord(record, keyring: keyring)
  }

  public func storeRecord(_ record: KeyStoreRecord, bytes: UnsafeRawBufferPointer, keyring: KeyringID) throws {
    guard try interpose(.storeRecord(record)) == .forward else { return }
    try inner.storeRecord(record, bytes: bytes, keyring: keyring)
  }
}
