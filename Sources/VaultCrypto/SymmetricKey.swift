/// A 256-bit secret key over zeroized storage.
///
/// It has no readable description, compares in constant time, and its bytes are reachable only
/// through `withUnsafeBytes`, so key material is never printed by accident.
public struct SymmetricKey: Sendable, Equatable {
  public static let byteCount = 32

  let storage: SecureBytes

  /// Wraps existing key bytes (copied into zeroizing storage).
  /// - Throws: `CryptoError.invalidLength` unless there are exactly 32 bytes.
  public init(copying bytes: UnsafeRawBufferPointer) throws {
    guard bytes.count == Self.byteCount else {
      throw CryptoError.invalidLength(what: "key", expected: Self.byteCount, actual: bytes.count)
    }
    storage = SecureBytes(copying: bytes)
  }

  /// Takes ownership of a zeroizing buffer holding exactly 32 bytes.
  public init(storage: SecureBytes) throws {
    guard storage.count == Self.byteCount else {
      throw CryptoError.invalidLength(what: "key", expected: Self.byteCount, actual: storage.count)
    }
    self.storage = storage
  }

  /// A fresh random key.
  public static func generate() throws -> SymmetricKey {
    let bytes = try SecureBytes(count: byteCount) { (buffer) in try SecureRandom.fill(buffer) }
    return try SymmetricKey(storage: bytes)
  }

  /// Calls `body` with the key bytes; the pointer must not escape.
  public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
    try storage.withUnsafeBytes(body)
  }

  public static func == (lhs: SymmetricKey, rhs: SymmetricKey) -> Bool { lhs.storage == rhs.storage }
}

extension SymmetricKey: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
  public var description: String { "SymmetricKey(redacted)" }
  public var debugDescription: String { description }
  public var customMirror: Mirror { Mirror(self, children: []) }
}
