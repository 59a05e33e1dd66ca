import Foundation
import Vault
import VaultCrypto
import VaultKeys

/// The manifest of a bundle: everything about the backup that is not secret, as JSON.
public struct BackupManifest: Codable, Sendable, Equatable {
  /// One key version as the vault's manifest recorded it (the key itself is in the key section).
  public struct Version: Codable, Sendable, Equatable {
    /// The version number.
    public var version: UInt32
    /// `active` or `decrypt-only` (pending and retired versions are not backed up).
    public var state: String
    /// When the version was made (the vault manifest's time).
    public var createdAt: String
    /// The envelope suite the version seals with (1 or 2).
    public var suite: UInt8
    /// The key-check value (SECURITY.md, the manifest): proves on restore that a key is the one recorded.
    public var check: String

    enum CodingKeys: String, CodingKey {
      case version, state, suite, check
      case createdAt = "created_at"
    }
  }

  /// One container snapshot, stored in the bundle in this order.
  public struct Container: Codable, Sendable, Equatable {
    /// The path the container was registered under in the vault backed up.
    public var path: String
    /// The container id (part of every record's context).
    public var id: String
    /// The snapshot's size in bytes.
    public var size: UInt64
    /// The snapshot's SHA-256, lowercase hex.
    public var sha256: String
    /// The snapshot's random token, which the live container records a mark of once copied (and
    /// a merge of the snapshot, once merged); absent in bundles written before it was recorded.
    /// `Backup.create` never prunes a bundle whose token the live container has no mark of: the
    /// container does not hold what that snapshot held (an older copy of it was put back).
    public var snapshotToken: String? = nil

    enum CodingKeys: String, CodingKey {
      case path, id, size, sha256
      case snapshotToken = "snapshot_token"
    }
  }

  /// The bundle format (1).
  public var format: Int
  /// The vault id of the vault backed up.
  public var vaultID: String
  /// The keyring id in every envelope's header (the vault id, in this release).
  public var keyringID: String
  /// When the backup was taken, ISO 8601 UTC with milliseconds.
  public var createdAt: String
  /// The vault release that wrote it.
  public var toolVersion: String
  /// The active key version.
  public var activeVersion: UInt32
  /// The highest version number ever used (never reused after a restore).
  public var highestVersion: UInt32
  /// Versions used by `vault seal` outside containers.
  public var externalSealVersions: [UInt32]
  /// The key versions in the key section.
  public var versions: [Version]
  /// The container snapshots, in bundle order.
  public var containers: [Container]
  /// The home the vault was backed up from (absent in bundles written before it was recorded):
  /// a home prunes and reports as its own only bundles of its vault taken from it, since a restore
  /// into another key store makes a second home of the same vault id.
  public var home: String?
  /// The identity of the home the vault was backed up from (`Vault.homeIdentity()`: it stays when
  /// the home is moved, and a second home of the vault, restored into another key store, has its
  /// own); absent in bundles written before it was recorded. `--keep` prunes only this home's.
  public var homeID: String?
  /// The version a rotation after a compromise was making when the backup was taken, unfinished
  /// (the vault manifest's `unfinished_compromise`); absent when none was, and in bundles written
  /// before it was recorded. A restore keeps it, so the restored vault still warns and refuses an
  /// ordinary rotation (an outside review: a bundle taken then restored a vault that said nothing,
  /// with the leaked key active, and a plain rotation kept it).
  public var unfinishedCompromise: UInt32? = nil

  enum CodingKeys: String, CodingKey {
    case format, versions, containers, home
    case homeID = "home_id"
    case unfinishedCompromise = "unfinished_compromise"
    case vaultID = "vault_id"
    case keyringID = "keyring_id"
    case createdAt = "created_at"
    case toolVersion = "tool_version"
    case activeVersion = "active_version"
    case highestVersion = "highest_version"
    case externalSealVersions = "external_seal_versions"
  }
}

/// The byte layout of a bundle (SECURITY.md, "Backup bundles"). Big-endian integers.
enum BundleLayout {
  static let magic: [UInt8] = Array("VAULTBKP".utf8)
  static let format: UInt16 = 1
  static let headerCount = 52
  /// The manifest and the key section are small; anything larger is a damaged length.
  static let sectionLimit = 4 << 20
  static let kdfScrypt: UInt8 = 1
  static let saltCount = 32
  static let checkCount = 16
  /// Key section bytes before the ciphertext: kdf, log2 N, r, p, salt, check, nonce.
  static let keyPrefixCount = 1 + 1 + 4 + 4 + saltCount + checkCount + AESGCMKey.nonceByteCount
  static let fileSuffix = ".vaultbackup"

  struct Header {
    var format: UInt16
    var flags: UInt16
    var manifestCount: UInt32
    var keySectionCount: UInt32
    var manifestHash: [UInt8]

    var bytes: [UInt8] {
      var out = magic
      out += be(format) + be(flags) + be(manifestCount) + be(keySectionCount) + manifestHash
      return out
    }

    /// Parses the 52 header bytes (magic already checked by the caller).
    init(parsing bytes: [UInt8]) {
      format = UInt16(readBE(bytes, 8, 2))
      flags = UInt16(readBE(bytes, 10, 2))
      manifestCount = UInt32(readBE(bytes, 12, 4))
      keySectionCount = UInt32(readBE(bytes, 16, 4))
      manifestHash = Array(bytes[20..<52])
    }

    init(manifestCount: UInt32, keySectionCount: UInt32, manifestHash: [UInt8]) {
      format = BundleLayout.format
      flags = 0
      self.manifestCount = manifestCount
      self.keySectionCount = keySectionCount
      self.manifestHash = manifestHash
    }
  }

  /// The key section's clear prefix (KDF parameters, salt, passphrase check, nonce).
  struct KeyPrefix {
    var kdf: UInt8
    var parameters: ScryptParameters
    var salt: [UInt8]
    var check: [UInt8]
    var nonce: [UInt8]

    var bytes: [UInt8] {
      [kdf, parameters.logN] + be(parameters.r) + be(parameters.p) + salt + check + nonce
    }

    init(kdf: UInt8, parameters: ScryptParameters, salt: [UInt8], check: [UInt8], nonce: [UInt8]) {
      self.kdf = kdf
      self.parameters = parameters
      self.salt = salt
      self.check = check
      self.nonce = nonce
    }

    init(parsing bytes: [UInt8]) {
      kdf = bytes[0]
      parameters = ScryptParameters(
        logN: bytes[1], r: UInt32(readBE(bytes, 2, 4)), p: UInt32(readBE(bytes, 6, 4)))
      var offset = 10
      salt = Array(bytes[offset..<offset + saltCount])
      offset += saltCount
      check = Array(bytes[offset..<offset + checkCount])
      offset += checkCount
      nonce = Array(bytes[offset..<offset + AESGCMKey.nonceByteCount])
    }
  }

  /// The two keys a passphrase gives: the wrapping key and the 16-byte passphrase check, each
  /// HKDF-SHA256 of the scrypt output with its own label, so neither reveals the other.
  static func passphraseKeys(
    _ passphrase: Passphrase, salt: [UInt8], parameters: ScryptParameters
  ) throws -> (wrap: SymmetricKey, check: [UInt8]) {
    let derived = try passphrase.withUnsafeBytes {
      try Scrypt.deriveKey(passphrase: $0, salt: salt, parameters: parameters)
    }
    return try derived.withUnsafeBytes { ikm in
      let wrap = try SymmetricKey(
        storage: HKDF.deriveKey(
          inputKeyMaterial: ikm, salt: [], info: Array("vault backup wrap v1".utf8), length: SymmetricKey.byteCount))
      let check = try HKDF.deriveKey(
        inputKeyMaterial: ikm, salt: [], info: Array("vault backup check v1".utf8), length: checkCount)
      return (wrap, check.withUnsafeBytes { Array($0) })
    }
  }

  /// The key section's plaintext: a count, then each version (4 bytes) and its 32-byte key.
  static func keyPlaintext(_ keys: [ExportedKey]) -> SecureBytes {
    let count = 4 + keys.count * (4 + SymmetricKey.byteCount)
    return SecureBytes(count: count) { out in
      out.copyBytes(from: be(UInt32(keys.count)))
      var offset = 4
      for exported in keys {
        UnsafeMutableRawBufferPointer(rebasing: out[offset..<offset + 4]).copyBytes(from: be(exported.record.version))
        offset += 4
        exported.key.withUnsafeBytes {
          UnsafeMutableRawBufferPointer(rebasing: out[offset..<offset + SymmetricKey.byteCount]).copyMemory(from: $0)
        }
        offset += SymmetricKey.byteCount
      }
    }
  }

  /// Reads the key section's plaintext back into versions and keys; nil when it is malformed.
  static func parseKeys(_ plaintext: UnsafeRawBufferPointer) throws -> [(UInt32, SymmetricKey)]? {
    guard plaintext.count >= 4 else { return nil }
    let count = Int(plaintext.prefix(4).reduce(UInt32(0)) { $0 << 8 | UInt32($1) })
    guard plaintext.count == 4 + count * (4 + SymmetricKey.byteCount) else { return nil }
    var keys: [(UInt32, SymmetricKey)] = []
    var offset = 4
    for _ in 0..<count {
      let version = plaintext[offset..<offset + 4].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
      offset += 4
      let key = try SymmetricKey(
        copying: UnsafeRawBufferPointer(rebasing: plaintext[offset..<offset + SymmetricKey.byteCount]))
      offset += SymmetricKey.byteCount
      keys.append((version, key))
    }
    return keys
  }
}

func be<T: FixedWidthInteger>(_ value: T) -> [UInt8] {
  (0..<T.bitWidth / 8).map { UInt8(truncatingIfNeeded: value >> (T.bitWidth - 8 - 8 * $0)) }
}

func readBE(_ bytes: [UInt8], _ offset: Int, _ count: Int) -> UInt64 {
  bytes[offset..<offset + count].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
}

func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }
