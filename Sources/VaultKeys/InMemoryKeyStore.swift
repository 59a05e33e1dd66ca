import Synchronization
import VaultCrypto

/// A key store held in memory, for unit tests. It can be told to fail like a real backend.
public final class InMemoryKeyStore: KeyStore {
  private struct Slot: Hashable {
    let keyring: KeyringID
    let version: UInt32
  }

  private let keys = Mutex<[Slot: SymmetricKey]>([:])
  private let records = Mutex<[String: SecureBytes]>([:])
  private let failure = Mutex<KeyStoreError?>(nil)

  /// An empty store that does not fail.
  public init() {}

  public var kind: KeyStoreKind { .memory }

  /// Makes every later call throw `error` (nil restores normal behaviour).
  ///
  /// - Parameter error: what each call throws, e.g. `.locked` to test a locked keyring.
  public func failAll(with error: KeyStoreError?) { failure.withLock { $0 = error } }

  public func loadKey(keyring: KeyringID, version: UInt32) throws -> SymmetricKey? {
    try failIfAsked()
    return keys.withLock { $0[Slot(keyring: keyring, version: version)] }
  }

  public func storeKey(_ key: SymmetricKey, keyring: KeyringID, version: UInt32) throws {
    try failIfAsked()
    try keys.withLock { keys in
      let slot = Slot(keyring: keyring, version: version)
      if let stored = keys[slot] {
        guard stored == key else { throw KeyStoreError.keyExists(version: version) }
        return
      }
      keys[slot] = key
    }
  }

  public func deleteKey(keyring: KeyringID, version: UInt32) throws -> Bool {
    try failIfAsked()
    return keys.withLock { $0.removeValue(forKey: Slot(keyring: keyring, version: version)) != nil }
  }

  public func storedVersions(keyring: KeyringID) throws -> [UInt32] {
    try failIfAsked()
    return keys.withLock { $0.keys.filter { $0.keyring == keyring }.map(\.version).sorted() }
  }

  public func checkWritable() throws { try failIfAsked() }

  public func loadRecord(_ record: KeyStoreRecord, keyring: KeyringID) throws -> SecureBytes? {
    try failIfAsked()
    return records.withLock { $0[keyring.hex + "/" + record.rawValue] }
  }

  public func storeRecord(_ record: KeyStoreRecord, bytes: UnsafeRawBufferPointer, keyring: KeyringID) throws {
    try failIfAsked()
    // The same limit the keyfile and the Secret Service enforce: a twin that accepted more would
    // let a test pass that the real stores fail.
    guard bytes.count <= KeyStoreRecord.maximumByteCount else {
      throw KeyStoreError.recordTooLarge(
        record: record.rawValue, byteCount: bytes.count, limit: KeyStoreRecord.maximumByteCount)
    }
    let copy = SecureBytes(copying: bytes)
    records.withLock { $0[keyring.hex + "/" + record.rawValue] = copy }
  }

  private func failIfAsked() throws {
    if let error = failure.withLock({ $0 }) { throw error }
  }
}
