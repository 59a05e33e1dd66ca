/// A 256-bit secret key over zeroized storage.
///
/// It has no readable description, compares in constant time, and its bytes are reachable only
/// through `withUnsafeBytes`, so key material is never printed by accident.
public struct SymmetricKey: Sendable, Equatable {
  /// The length of every key, in bytes (256 bits): what stored key material is checked against.
  public static let byteCount = 32

  let storage: SecureBytes

  /// Wraps existing key bytes (copied into zeroizing storage).
  ///
  /// - Parameter bytes: the key material; the caller still owns, and should clear, the original.
  /// - Throws: `CryptoError.invalidLength` unless there are exactly 32 bytes.
  public init(copying bytes: UnsafeRawBufferPointer) throws {
    guard bytes.count == Self.byteCount else {
      throw CryptoError.invalidLength(what: "key", expected: Self.byteCount, actual: bytes.count)
    }
    storage = SecureBytes(copying: bytes)
  }

  /// Takes ownership of a zeroizing buffer holding exactly 32 bytes, without copying it.
  ///
  /// - Parameter storage: the key material, e.g. as a key store loaded it.
  /// - Throws: `CryptoError.invalidLength` unless `storage` holds exactly 32 bytes.
  public init(storage: SecureBytes) throws {
    guard storage.count == Self.byteCount else {
      throw CryptoError.invalidLength(what: "key", expected: Self.byteCount, actual: storage.count)
    }
    self.storage = storage
  }

  /// A fresh random key from `SecureRandom` (OpenSSL's DRBG), made straight into zeroizing storage.
  ///
  /// - Returns: the new key.
  /// - Throws: `CryptoError.randomUnavailable` when the generator fails; no key is made then.
  public static func generate() throws -> SymmetricKey {
    let bytes = try SecureBytes(count: byteCount) { (buffer) in try SecureRandom.fill(buffer) }
    return try SymmetricKey(storage: bytes)
  }

  /// Calls `body` with the key bytes; the pointer must not escape.
  ///
  /// - Parameter body: reads the key bytes.
  /// - Returns: what `body` returns.
  /// - Throws: whatever `body` throws.
  public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
    try storage.withUnsafeBytes(body)
  }

  /// Compares two keys in constant time, so a comparison leaks nothing through timing.
  ///
  /// - Parameters:
  ///   - lhs: one key.
  ///   - rhs: the other.
  /// - Returns: true when both hold the same bytes.
  public static func == (lhs: SymmetricKey, rhs: SymmetricKey) -> Bool { lhs.storage == rhs.storage }
}

extension SymmetricKey: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
  /// A fixed placeholder, never the key: a key printed by accident shows nothing.
  public var description: String { "SymmetricKey(redacted)" }
  /// The same as `description`, so `debugPrint` and the debugger show no key either.
  public var debugDescription: String { description }
  /// A mirror with no children, so `dump` and reflection show no key.
  public var customMirror: Mirror { Mirror(self, children: []) }
}
