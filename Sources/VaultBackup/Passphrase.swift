import Vault
import VaultCrypto

/// A backup passphrase in zeroizing storage; it never prints.
public final class Passphrase: Sendable {
  let storage: SecureBytes

  /// Copies `bytes` (UTF-8 as typed or read from a file) into zeroizing storage.
  ///
  /// - Parameter bytes: the passphrase; the caller should clear its own copy.
  /// - Throws: `BackupError.emptyPassphrase` when `bytes` is empty.
  public init(copying bytes: UnsafeRawBufferPointer) throws {
    guard bytes.count > 0 else { throw BackupError.emptyPassphrase }
    storage = SecureBytes(copying: bytes)
  }

  /// Copies `text`'s UTF-8 bytes into zeroizing storage (for tests and apps that hold it as text).
  ///
  /// - Parameter text: the passphrase.
  /// - Throws: `BackupError.emptyPassphrase` when `text` is empty.
  public init(_ text: String) throws {
    var bytes = Array(text.utf8)
    defer { bytes.withUnsafeMutableBytes { zeroBytes($0) } }
    guard !bytes.isEmpty else { throw BackupError.emptyPassphrase }
    storage = bytes.withUnsafeBytes { SecureBytes(copying: $0) }
  }

  func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
    try storage.withUnsafeBytes(body)
  }
}
