import VaultCrypto
import VaultKeys

/// The sealed-record formats (SECURITY.md, "Envelopes", describes them byte by byte).
///
/// ```
/// format 2 (suite 2)                       format 1 (suite 1)
/// offset size                              offset size
///  0      3   magic "VLT"                   0      3   magic "VLT"
///  3      1   format = 2                    3      1   format = 1
///  4      1   suite  = 2                    4      1   suite  = 1
///  5      8   keyring id                    5      8   keyring id
/// 13      4   key version, big-endian      13      4   key version, big-endian
/// 17     24   R, random                    17     12   nonce
/// 41     32   key commitment C             29      n   ciphertext
/// 73      n   ciphertext                   29+n   16   tag
/// 73+n   16   tag
///
/// N  = SHA-256("vault-envelope-2-nonce" ‖ R ‖ E)[0..<24]      E: the encoded context
/// C  = SHA-256("vault-envelope-2-commit" ‖ K ‖ N)
/// ciphertext ‖ tag = XAES-256-GCM(K, N, plaintext, AAD = bytes 0..<41 ‖ E)
/// ```
public enum Envelope {
  /// The first three bytes of every envelope, `VLT`: how a reader tells an envelope from other bytes.
  public static let magic: [UInt8] = Array("VLT".utf8)
  /// Byte 3 of an envelope sealed by a suite-1 key version (made before format 2): still opened,
  /// sealed only while such a version is active.
  public static let format1: UInt8 = 1
  /// Byte 3 of an envelope sealed by a suite-2 key version: what every version made by this release
  /// seals.
  public static let format2: UInt8 = 2
  /// AES-256-GCM, 96-bit random nonce, raw context (format 1).
  public static let suiteAES256GCM: UInt8 = 1
  /// XAES-256-GCM on a context-bound 192-bit nonce, with a SHA-256 key commitment (format 2).
  public static let suiteXAES256GCMCommitted: UInt8 = 2
  /// Bytes before the version's fields end: magic … version, the same in both formats.
  public static let fixedHeaderCount = 17
  /// The random value R of format 2.
  public static let randomByteCount = 24
  /// The key commitment C of format 2.
  public static let commitmentByteCount = 32
  /// The most any envelope adds to a plaintext (format 2; format 1 adds 45).
  public static let overhead = overhead(format: format2)

  static let nonceLabel: [UInt8] = Array("vault-envelope-2-nonce".utf8)
  static let commitmentLabel: [UInt8] = Array("vault-envelope-2-commit".utf8)

  /// Bytes before the ciphertext in `format`: 29 (format 1) or 73 (format 2).
  ///
  /// - Parameter format: `Envelope.format1`; any other value is taken as format 2.
  /// - Returns: the offset of the ciphertext.
  public static func headerCount(format: UInt8) -> Int {
    format == format1 ? fixedHeaderCount + AESGCMKey.nonceByteCount : 41 + commitmentByteCount
  }

  /// Everything an envelope of `format` adds to a plaintext: 45 or 89 bytes, which is also the
  /// shortest envelope of that format.
  ///
  /// - Parameter format: `Envelope.format1`; any other value is taken as format 2.
  /// - Returns: the header and tag bytes together.
  public static func overhead(format: UInt8) -> Int { headerCount(format: format) + AESGCMKey.tagByteCount }

  /// The fields of an envelope's header, read without any key.
  public struct Header: Equatable, Sendable {
    /// Byte 3: which layout follows (`Envelope.format1` or `Envelope.format2`).
    public let format: UInt8
    /// Byte 4: the cipher suite, which must be the one the key version was made for.
    public let suite: UInt8
    /// Bytes 5..<13: the vault that sealed the envelope, so another vault's record is refused by name.
    public let keyring: KeyringID
    /// Bytes 13..<17: the key version to open it with.
    public let version: UInt32
  }

  /// Reads the header, checking magic, format, suite (each format has exactly one) and the
  /// format's minimum length, in that order. Needs no key: it says which vault and key version an
  /// envelope wants before any key is loaded.
  ///
  /// - Parameter envelope: a whole envelope (only its first 17 bytes are read, but its length is
  ///   checked against the format's minimum).
  /// - Returns: the header's fields.
  /// - Throws: `EnvelopeError.notAnEnvelope` (no `VLT` magic, or fewer than 5 bytes),
  ///   `.unsupportedFormat`, `.unsupportedSuite` (not the one suite of its format) or `.truncated`
  ///   (shorter than the format's overhead).
  public static func header(of envelope: UnsafeRawBufferPointer) throws -> Header {
    guard envelope.count >= 3, envelope[0] == magic[0], envelope[1] == magic[1], envelope[2] == magic[2] else {
      throw EnvelopeError.notAnEnvelope
    }
    guard envelope.count >= 5 else { throw EnvelopeError.notAnEnvelope }
    let format = envelope[3]
    guard format == format1 || format == format2 else { throw EnvelopeError.unsupportedFormat(format) }
    let suite = envelope[4]
    guard suite == (format == format1 ? suiteAES256GCM : suiteXAES256GCMCommitted) else {
      throw EnvelopeError.unsupportedSuite(suite)
    }
    guard envelope.count >= overhead(format: format) else { throw EnvelopeError.truncated(format: format) }
    let keyring = KeyringID(bytes: Array(envelope[5..<13]))!
    let version = envelope[13..<17].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
    return Header(format: format, suite: suite, keyring: keyring, version: version)
  }

  /// Reads the header of an envelope held in a byte array; the same checks as the
  /// `UnsafeRawBufferPointer` overload.
  ///
  /// - Parameter envelope: a whole envelope.
  /// - Returns: the header's fields.
  /// - Throws: `EnvelopeError`, as the `UnsafeRawBufferPointer` overload does.
  public static func header(of envelope: [UInt8]) throws -> Header {
    try envelope.withUnsafeBytes { try header(of: $0) }
  }

  /// The format a version of `suite` seals.
  static func format(suite: UInt8) -> UInt8 { suite == suiteAES256GCM ? format1 : format2 }

  // MARK: - Format 2

  /// Seals `plaintext` in format 2 with the random value `random` (24 bytes). Vault draws `random`
  /// from the kernel for every seal; tests pass fixed values to check published vectors.
  package static func sealFormat2(
    _ plaintext: UnsafeRawBufferPointer, key: VersionKey, keyring: KeyringID, version: UInt32,
    random: UnsafeRawBufferPointer, context: EnvelopeContext
  ) throws -> [UInt8] {
    guard random.count == randomByteCount else {
      throw CryptoError.invalidLength(what: "envelope random value", expected: randomByteCount, actual: random.count)
    }
    let count = plaintext.count + overhead(format: format2)
    let xaes = try key.xaes()
    return try [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
      let out = UnsafeMutableRawBufferPointer(buffer)
      writeFixedHeader(into: out, format: format2, suite: suiteXAES256GCMCommitted, keyring: keyring, version: version)
      UnsafeMutableRawBufferPointer(rebasing: out[17..<41]).copyMemory(from: random)
      // One workspace for both hashes and the cipher: one pool borrow per record, not four.
      let workspace = try xaes.borrowWorkspace(sealing: true)
      defer { xaes.giveBack(workspace, sealing: true) }
      try context.withEncoded { encoded in
        try withNonce(random: random, context: encoded, workspace) { nonce in
          try commitment(
            key: key, nonce: nonce, into: UnsafeMutableRawBufferPointer(rebasing: out[41..<73]), workspace)
          try xaes.seal(
            plaintext, nonce: nonce, authenticating: UnsafeRawBufferPointer(rebasing: out[0..<41]), encoded,
            into: UnsafeMutableRawBufferPointer(rebasing: out[73...]), using: workspace)
        }
      }
      initialized = count
    }
  }

  /// Opens a format-2 envelope whose header was already checked (`header(of:)`) against the vault
  /// and the version: checks the commitment in constant time, then decrypts.
  package static func openFormat2(
    _ envelope: UnsafeRawBufferPointer, key: VersionKey, context: EnvelopeContext
  ) throws -> [UInt8] {
    let random = UnsafeRawBufferPointer(rebasing: envelope[17..<41])
    let body = UnsafeRawBufferPointer(rebasing: envelope[73...])
    let count = body.count - AESGCMKey.tagByteCount
    let xaes = try key.xaes()
    let workspace = try xaes.borrowWorkspace(sealing: false)
    defer { xaes.giveBack(workspace, sealing: false) }
    return try context.withEncoded { encoded in
      try withNonce(random: random, context: encoded, workspace) { nonce in
        let matches = try withUnsafeTemporaryAllocation(byteCount: commitmentByteCount, alignment: 1) { expected in
          try commitment(key: key, nonce: nonce, into: expected, workspace)
          return constantTimeEquals(
            UnsafeRawBufferPointer(expected), UnsafeRawBufferPointer(rebasing: envelope[41..<73]))
        }
        guard matches else { throw EnvelopeError.keyCommitmentMismatch }
        do {
          return try [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            try xaes.open(
              body, nonce: nonce, authenticating: UnsafeRawBufferPointer(rebasing: envelope[0..<41]), encoded,
              into: UnsafeMutableRawBufferPointer(buffer), using: workspace)
            initialized = count
          }
        } catch CryptoError.authenticationFailed {
          throw EnvelopeError.authenticationFailed
        }
      }
    }
  }

  /// Calls `body` with N = SHA-256(label ‖ R ‖ E)[0..<24].
  static func withNonce<T>(
    random: UnsafeRawBufferPointer, context: UnsafeRawBufferPointer, _ workspace: XAESKey.Workspace? = nil,
    _ body: (UnsafeRawBufferPointer) throws -> T
  ) throws -> T {
    try withUnsafeTemporaryAllocation(byteCount: SHA256.byteCount, alignment: 1) { digest in
      try nonceLabel.withUnsafeBytes { label in try sha256(label, random, context, into: digest, workspace) }
      return try body(UnsafeRawBufferPointer(rebasing: digest[0..<XAESKey.nonceByteCount]))
    }
  }

  /// C = SHA-256(label ‖ K ‖ N), into `output` (32 bytes).
  static func commitment(
    key: VersionKey, nonce: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer,
    _ workspace: XAESKey.Workspace? = nil
  ) throws {
    try commitmentLabel.withUnsafeBytes { label in
      try key.material.withUnsafeBytes { material in try sha256(label, material, nonce, into: output, workspace) }
    }
  }

  /// SHA-256 of `a ‖ b ‖ c` with the workspace's digest context, or a pooled one without.
  private static func sha256(
    _ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer, _ c: UnsafeRawBufferPointer,
    into output: UnsafeMutableRawBufferPointer, _ workspace: XAESKey.Workspace?
  ) throws {
    if let workspace {
      try workspace.sha256(a, b, c, into: output)
    } else {
      try SHA256.hash(a, b, c, into: output)
    }
  }

  // MARK: - Format 1

  /// Seals `plaintext` in format 1 with a nonce from one `getrandom(2)` call.
  package static func sealFormat1(
    _ plaintext: UnsafeRawBufferPointer, key: VersionKey, keyring: KeyringID, version: UInt32,
    context: UnsafeRawBufferPointer
  ) throws -> [UInt8] {
    let count = plaintext.count + overhead(format: format1)
    return try [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
      let out = UnsafeMutableRawBufferPointer(buffer)
      writeFixedHeader(into: out, format: format1, suite: suiteAES256GCM, keyring: keyring, version: version)
      let nonce = UnsafeMutableRawBufferPointer(rebasing: out[17..<29])
      try KernelRandom.fill(nonce)
      try key.gcm().seal(
        plaintext, nonce: UnsafeRawBufferPointer(nonce),
        authenticating: UnsafeRawBufferPointer(rebasing: out[0..<fixedHeaderCount]), context,
        into: UnsafeMutableRawBufferPointer(rebasing: out[29...]))
      initialized = count
    }
  }

  package static func openFormat1(
    _ envelope: UnsafeRawBufferPointer, key: VersionKey, context: UnsafeRawBufferPointer
  ) throws -> [UInt8] {
    let body = UnsafeRawBufferPointer(rebasing: envelope[29...])
    let count = body.count - AESGCMKey.tagByteCount
    do {
      return try [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
        try key.gcm().open(
          body, nonce: UnsafeRawBufferPointer(rebasing: envelope[17..<29]),
          authenticating: UnsafeRawBufferPointer(rebasing: envelope[0..<fixedHeaderCount]), context,
          into: UnsafeMutableRawBufferPointer(buffer))
        initialized = count
      }
    } catch CryptoError.authenticationFailed {
      throw EnvelopeError.authenticationFailed
    }
  }

  private static func writeFixedHeader(
    into out: UnsafeMutableRawBufferPointer, format: UInt8, suite: UInt8, keyring: KeyringID, version: UInt32
  ) {
    out.copyBytes(from: magic)
    out[3] = format
    out[4] = suite
    UnsafeMutableRawBufferPointer(rebasing: out[5..<13]).copyBytes(from: keyring.bytes)
    for i in 0..<4 { out[13 + i] = UInt8(truncatingIfNeeded: version >> (24 - 8 * UInt32(i))) }
  }
}

/// One key version's key with the cipher objects of its suite, made once and cached by the vault.
package final class VersionKey: Sendable {
  let material: SymmetricKey
  package let suite: UInt8
  private let aesGCM: AESGCMKey?
  private let xaesKey: XAESKey?

  package init(_ material: SymmetricKey, suite: UInt8) throws {
    self.material = material
    self.suite = suite
    switch suite {
    case Envelope.suiteAES256GCM:
      aesGCM = AESGCMKey(material)
      xaesKey = nil
    case Envelope.suiteXAES256GCMCommitted:
      aesGCM = nil
      xaesKey = try XAESKey(material)
    default:
      throw EnvelopeError.unsupportedSuite(suite)
    }
  }

  func gcm() throws -> AESGCMKey {
    guard let aesGCM else {
      throw EnvelopeError.suiteMismatch(version: 0, envelope: Envelope.suiteAES256GCM, key: suite)
    }
    return aesGCM
  }

  func xaes() throws -> XAESKey {
    guard let xaesKey else {
      throw EnvelopeError.suiteMismatch(version: 0, envelope: Envelope.suiteXAES256GCMCommitted, key: suite)
    }
    return xaesKey
  }
}

/// What a record is for, bound to its envelope and given again to open it.
///
/// A domain (`app`, `queue`, …) and one or more parts, encoded for format 2 as a length-prefixed
/// tuple (SECURITY.md, "Contexts"), so no two different contexts encode alike and an app's context
/// can never be taken for a queue record's.
package struct EnvelopeContext: Sendable, Equatable {
  package let domain: String
  package let parts: [[UInt8]]
  /// The context bytes format 1 used for the same record (opened only; sealed only by a suite-1
  /// version that was never rotated away).
  package let format1Bytes: [UInt8]

  /// The context of a record an application seals (`Vault.seal`, `vault seal`): one part, the
  /// caller's bytes, which must not be empty.
  package static func app(_ bytes: [UInt8]) -> EnvelopeContext {
    EnvelopeContext(domain: "app", parts: [bytes], format1Bytes: bytes)
  }

  /// The context of a record in a queue container: its container id, queue and record id.
  package static func queue(containerID: String, queue: String, id: String) -> EnvelopeContext {
    EnvelopeContext(
      domain: "queue", parts: [Array(containerID.utf8), Array(queue.utf8), Array(id.utf8)],
      format1Bytes: Array("vault.queue.v1".utf8) + [0] + Array(queue.utf8) + [0] + Array(id.utf8))
  }

  /// Whether nothing identifies the record (every part empty): refused when sealing.
  // A closure, not the key path `\.isEmpty`: that one was instantiated at run time on every seal.
  var isEmpty: Bool { parts.allSatisfy { $0.isEmpty } }

  /// E: the domain's length (1 byte) and bytes, then each part's length (4 bytes, big-endian) and bytes.
  package var encoded: [UInt8] { withEncoded { Array($0) } }

  /// Calls `body` with E (as `encoded`), built on the stack when it is small (a queue record's
  /// context is about 80 bytes), so sealing a record allocates nothing for it.
  func withEncoded<T>(_ body: (UnsafeRawBufferPointer) throws -> T) rethrows -> T {
    var count = 1 + domain.utf8.count
    for part in parts { count += 4 + part.count }
    // Above this the buffer comes from the heap (withUnsafeTemporaryAllocation decides).
    return try withUnsafeTemporaryAllocation(byteCount: count, alignment: 1) { out in
      out[0] = UInt8(domain.utf8.count)
      var offset = 1
      for byte in domain.utf8 {
        out[offset] = byte
        offset += 1
      }
      for part in parts {
        // Four bytes of length: a context part of 4 GiB or more cannot be encoded (nor held sensibly).
        precondition(part.count <= Int(UInt32.max), "context part too large to encode")
        let length = UInt32(part.count)
        out[offset] = UInt8(truncatingIfNeeded: length >> 24)
        out[offset + 1] = UInt8(truncatingIfNeeded: length >> 16)
        out[offset + 2] = UInt8(truncatingIfNeeded: length >> 8)
        out[offset + 3] = UInt8(truncatingIfNeeded: length)
        offset += 4
        part.withUnsafeBytes { bytes in
          UnsafeMutableRawBufferPointer(rebasing: out[offset..<offset + bytes.count]).copyMemory(from: bytes)
        }
        offset += part.count
      }
      return try body(UnsafeRawBufferPointer(out))
    }
  }
}

/// Why an envelope could not be opened. None of these say anything about the contents.
public enum EnvelopeError: Error, Equatable, Sendable, CustomStringConvertible {
  /// The bytes do not start with the `VLT` magic, or end before the suite byte.
  case notAnEnvelope
  /// Shorter than the minimum of its format (45 bytes for format 1, 89 for format 2).
  case truncated(format: UInt8)
  /// The format byte is neither 1 nor 2: made by a later release, or not an envelope at all.
  case unsupportedFormat(UInt8)
  /// The suite byte is not the one suite its format uses.
  case unsupportedSuite(UInt8)
  /// Another vault sealed the envelope (`found`); this vault is `expected`.
  case wrongKeyring(found: KeyringID, expected: KeyringID)
  /// The manifest has no such key version, even after a reload (the envelope is newer than any
  /// rotation this vault knows of, or was forged).
  case unknownKeyVersion(UInt32)
  /// The version was retired and its key deleted: the record can never be opened again.
  case retiredKeyVersion(UInt32)
  /// The envelope's suite is not the one its key version uses: refused, so a key is only ever
  /// used with one construction.
  case suiteMismatch(version: UInt32, envelope: UInt8, key: UInt8)
  /// Format 2: the key commitment does not match this version's key and the given context.
  case keyCommitmentMismatch
  /// The tag does not verify: the envelope was modified, or the context differs from the sealing one.
  case authenticationFailed
  /// `seal` was given an empty context: every record must be bound to what it is for.
  case emptyContext

  /// A sentence for a person, naming the cause and never any of the envelope's contents.
  public var description: String {
    switch self {
    case .notAnEnvelope: "input is not a vault envelope (no complete VLT header)"
    case .truncated(let format):
      "the envelope is truncated (shorter than the \(Envelope.overhead(format: format))-byte minimum of format \(format))"
    case .unsupportedFormat(let format):
      "envelope format \(format) is not one this version of vault reads: the envelope is damaged, or from a newer "
        + "release"
    case .unsupportedSuite(let suite): "envelope cipher suite \(suite) is not supported by this version of vault"
    case .wrongKeyring(let found, let expected):
      "the envelope belongs to vault \(found), not to this vault (\(expected)); open it with the vault that sealed it"
    case .unknownKeyVersion(let version): "key version \(version) is unknown to this vault"
    case .retiredKeyVersion(let version):
      "key version \(version) was retired and its key deleted; this record cannot be opened"
    case .suiteMismatch(let version, let envelope, let key):
      "the envelope uses cipher suite \(envelope) but key version \(version) uses suite \(key); it was not sealed by this vault's key and was refused"
    case .keyCommitmentMismatch:
      "the envelope does not open with this context and key (key commitment mismatch): the context differs from the one it was sealed with, the envelope was modified, or another key with this version number sealed it"
    case .authenticationFailed:
      "authentication failed: the envelope was modified, or the context does not match the one it was sealed with"
    case .emptyContext:
      "a context is required to seal: it binds the record to what it is for (an empty one would let any use of this key open it)"
    }
  }
}

extension EnvelopeError: CodedError {
  /// `envelope.` and the case, in kebab case: stable across releases.
  public var code: String {
    switch self {
    case .notAnEnvelope: "envelope.not-an-envelope"
    case .truncated: "envelope.truncated"
    case .unsupportedFormat: "envelope.unsupported-format"
    case .unsupportedSuite: "envelope.unsupported-suite"
    case .wrongKeyring: "envelope.wrong-keyring"
    case .unknownKeyVersion: "envelope.unknown-key-version"
    case .retiredKeyVersion: "envelope.retired-key-version"
    case .suiteMismatch: "envelope.suite-mismatch"
    case .keyCommitmentMismatch: "envelope.key-commitment-mismatch"
    case .authenticationFailed: "envelope.authentication-failed"
    case .emptyContext: "envelope.empty-context"
    }
  }
}
