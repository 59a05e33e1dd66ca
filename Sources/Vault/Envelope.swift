import VaultCrypto
import VaultKeys

/// The sealed-record format, version 1 (see SECURITY.md for the byte-by-byte description).
///
/// ```
/// offset size
///  0      3   magic "VLT"
///  3      1   format = 1
///  4      1   suite  = 1 (AES-256-GCM, 96-bit random nonce, 128-bit tag)
///  5      8   keyring id
/// 13      4   key version, big-endian
/// 17     12   nonce
/// 29      n   ciphertext
/// 29+n   16   tag
/// AAD = bytes 0..<17 ‖ caller context
/// ```
public enum Envelope {
  public static let magic: [UInt8] = Array("VLT".utf8)
  public static let format: UInt8 = 1
  public static let suiteAES256GCM: UInt8 = 1
  /// Bytes authenticated as the first part of the AAD: magic … version.
  public static let authenticatedHeaderCount = 17
  /// Bytes before the ciphertext: the authenticated header and the nonce.
  public static let headerCount = 29
  /// Everything an envelope adds to a plaintext.
  public static let overhead = headerCount + AESGCMKey.tagByteCount

  /// The fields of an envelope's header, read without any key.
  public struct Header: Equatable, Sendable {
    public let keyring: KeyringID
    public let version: UInt32
  }

  /// Reads the header, checking magic, format, suite and length in that order.
  public static func header(of envelope: UnsafeRawBufferPointer) throws -> Header {
    guard envelope.count >= 3, envelope[0] == magic[0], envelope[1] == magic[1], envelope[2] == magic[2] else {
      throw EnvelopeError.notAnEnvelope
    }
    guard envelope.count >= 5 else { throw EnvelopeError.notAnEnvelope }
    guard envelope[3] == format else { throw EnvelopeError.unsupportedFormat(envelope[3]) }
    guard envelope[4] == suiteAES256GCM else { throw EnvelopeError.unsupportedSuite(envelope[4]) }
    guard envelope.count >= overhead else { throw EnvelopeError.truncated }
    let keyring = KeyringID(bytes: Array(envelope[5..<13]))!
    let version = envelope[13..<17].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
    return Header(keyring: keyring, version: version)
  }

  public static func header(of envelope: [UInt8]) throws -> Header {
    try envelope.withUnsafeBytes { try header(of: $0) }
  }
}

/// Why an envelope could not be opened. None of these say anything about the contents.
public enum EnvelopeError: Error, Equatable, Sendable, CustomStringConvertible {
  case notAnEnvelope
  case truncated
  case unsupportedFormat(UInt8)
  case unsupportedSuite(UInt8)
  case wrongKeyring(found: KeyringID, expected: KeyringID)
  case unknownKeyVersion(UInt32)
  case retiredKeyVersion(UInt32)
  case authenticationFailed
  /// `seal` was given an empty context: every record must be bound to what it is for.
  case emptyContext

  public var description: String {
    switch self {
    case .notAnEnvelope: "input is not a vault envelope (no VLT header)"
    case .truncated: "the envelope is truncated (shorter than its 45-byte minimum)"
    case .unsupportedFormat(let format): "envelope format \(format) is not supported by this version of vault"
    case .unsupportedSuite(let suite): "envelope cipher suite \(suite) is not supported by this version of vault"
    case .wrongKeyring(let found, let expected):
      "the envelope belongs to vault \(found), not to this vault (\(expected)); open it with the vault that sealed it"
    case .unknownKeyVersion(let version): "key version \(version) is unknown to this vault"
    case .retiredKeyVersion(let version):
      "key version \(version) was retired and its key deleted; this record cannot be opened"
    case .authenticationFailed:
      "authentication failed: the envelope was modified, or the context does not match the one it was sealed with"
    case .emptyContext:
      "a context is required to seal: it binds the record to what it is for (an empty one would let any use of this key open it)"
    }
  }
}
