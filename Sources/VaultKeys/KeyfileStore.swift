import Foundation
import Synchronization
import VaultCrypto

/// Keeps a vault's keys in one 0600 file inside a 0700 directory.
///
/// File format 1 (big-endian): "VKF", format byte 1, the 8-byte keyring id, a 4-byte entry count,
/// then per entry a 4-byte version and 32 key bytes, then SHA-256 of everything before it (to tell
/// corruption from a missing key). The file is replaced atomically on every change, read into
/// zeroizing memory, and refused when its mode, its directory's mode or its owner is wrong.
public final class KeyfileStore: KeyStore {
  public let path: String
  private let lock = Mutex<Void>(())

  private static let magic: [UInt8] = Array("VKF".utf8)
  private static let headerCount = 16
  private static let entryCount = 4 + SymmetricKey.byteCount

  public init(path: String) { self.path = path }

  public var kind: KeyStoreKind { .keyfile }

  /// The default place for a vault's keyfile: outside its data directory, under the user's
  /// configuration directory (`$XDG_CONFIG_HOME/vault-keys/<vault id>.keys`).
  public static func defaultPath(keyring: KeyringID, environment: [String: String]) -> String {
    let config =
      environment["XDG_CONFIG_HOME"].flatMap { $0.isEmpty ? nil : $0 }
      ?? ((environment["HOME"] ?? NSHomeDirectory()) + "/.config")
    return config + "/vault-keys/\(keyring.hex).keys"
  }

  public func loadKey(keyring: KeyringID, version: UInt32) throws -> SymmetricKey? {
    try lock.withLock { _ in try readEntries(keyring: keyring)?[version] }
  }

  public func storeKey(_ key: SymmetricKey, keyring: KeyringID, version: UInt32) throws {
    try lock.withLock { _ in
      var entries = try readEntries(keyring: keyring) ?? [:]
      guard entries[version] == nil else { throw KeyStoreError.keyExists(version: version) }
      entries[version] = key
      try write(entries, keyring: keyring)
    }
  }

  public func deleteKey(keyring: KeyringID, version: UInt32) throws -> Bool {
    try lock.withLock { _ in
      guard var entries = try readEntries(keyring: keyring), entries.removeValue(forKey: version) != nil else {
        return false
      }
      try write(entries, keyring: keyring)
      return true
    }
  }

  public func storedVersions(keyring: KeyringID) throws -> [UInt32] {
    try lock.withLock { _ in try readEntries(keyring: keyring).map { $0.keys.sorted() } ?? [] }
  }

  public func checkWritable() throws {
    try lock.withLock { _ in
      // Reading applies the owner and mode checks; then the directory must accept a new file.
      if let file = try SecureFile.read(path, requirePrivate: true) { _ = file }
      let directory = (path as NSString).deletingLastPathComponent
      if FileManager.default.fileExists(atPath: directory), access(directory, W_OK) != 0 {
        throw KeyStoreError.io(path: directory, operation: "write to", errno: errno)
      }
    }
  }

  // Placeholder until named records land in this store (issue 8); callers must not rely on it yet.
  public func loadRecord(_ record: KeyStoreRecord, keyring: KeyringID) throws -> SecureBytes? {
    throw KeyStoreError.service(detail: "named records are not supported by this store yet")
  }

  public func storeRecord(_ record: KeyStoreRecord, bytes: UnsafeRawBufferPointer, keyring: KeyringID) throws {
    throw KeyStoreError.service(detail: "named records are not supported by this store yet")
  }

  /// Whether a keyfile exists at `path` at all (used to refuse `init` over someone's keys).
  public var exists: Bool {
    var info = stat()
    return lstat(path, &info) == 0
  }

  /// The file's permission bits, for status output; nil when it does not exist.
  public var mode: UInt32? {
    var info = stat()
    return lstat(path, &info) == 0 ? UInt32(info.st_mode) & 0o7777 : nil
  }

  private func readEntries(keyring: KeyringID) throws -> [UInt32: SymmetricKey]? {
    guard let file = try SecureFile.read(path, requirePrivate: true) else { return nil }
    return try file.withUnsafeBytes { bytes in
      let checksumStart = bytes.count - SHA256.byteCount
      guard bytes.count >= Self.headerCount + SHA256.byteCount else {
        throw KeyStoreError.corruptKeyfile(path: path, reason: "too short")
      }
      guard Array(bytes[0..<3]) == Self.magic else {
        throw KeyStoreError.corruptKeyfile(path: path, reason: "not a vault keyfile")
      }
      guard bytes[3] == 1 else { throw KeyStoreError.corruptKeyfile(path: path, reason: "unknown format \(bytes[3])") }
      let expected = try SHA256.hash(UnsafeRawBufferPointer(rebasing: bytes[0..<checksumStart]))
      guard expected.elementsEqual(bytes[checksumStart...]) else {
        throw KeyStoreError.corruptKeyfile(path: path, reason: "checksum mismatch")
      }
      let found = KeyringID(bytes: Array(bytes[4..<12]))!
      guard found == keyring else { throw KeyStoreError.foreignKeyfile(path: path, found: found, expected: keyring) }
      let count = Int(readUInt32(bytes, at: 12))
      guard Self.headerCount + count * Self.entryCount == checksumStart else {
        throw KeyStoreError.corruptKeyfile(path: path, reason: "entry count does not match size")
      }
      var entries: [UInt32: SymmetricKey] = [:]
      for index in 0..<count {
        let offset = Self.headerCount + index * Self.entryCount
        let version = readUInt32(bytes, at: offset)
        entries[version] = try SymmetricKey(
          copying: UnsafeRawBufferPointer(rebasing: bytes[(offset + 4)..<(offset + Self.entryCount)]))
      }
      return entries
    }
  }

  private func write(_ entries: [UInt32: SymmetricKey], keyring: KeyringID) throws {
    try SecureFile.makeDirectory((path as NSString).deletingLastPathComponent, mode: 0o700)
    let versions = entries.keys.sorted()
    let bodyCount = Self.headerCount + versions.count * Self.entryCount
    let file = try SecureBytes(count: bodyCount + SHA256.byteCount) { out in
      out.copyBytes(from: Self.magic)
      out[3] = 1
      out[4..<12].copyBytes(from: keyring.bytes)
      writeUInt32(UInt32(versions.count), to: out, at: 12)
      for (index, version) in versions.enumerated() {
        let offset = Self.headerCount + index * Self.entryCount
        writeUInt32(version, to: out, at: offset)
        entries[version]!.withUnsafeBytes { key in
          UnsafeMutableRawBufferPointer(rebasing: out[(offset + 4)..<(offset + Self.entryCount)]).copyMemory(from: key)
        }
      }
      let checksum = try SHA256.hash(UnsafeRawBufferPointer(rebasing: out[0..<bodyCount]))
      out[bodyCount...].copyBytes(from: checksum)
    }
    try file.withUnsafeBytes { try SecureFile.atomicWrite(path, bytes: $0, mode: 0o600) }
  }
}

func readUInt32(_ bytes: UnsafeRawBufferPointer, at offset: Int) -> UInt32 {
  bytes[offset..<(offset + 4)].reduce(0) { $0 << 8 | UInt32($1) }
}

func writeUInt32(_ value: UInt32, to bytes: UnsafeMutableRawBufferPointer, at offset: Int) {
  for i in 0..<4 { bytes[offset + i] = UInt8(truncatingIfNeeded: value >> (24 - 8 * UInt32(i))) }
}
