import Foundation

/// What `Backup.verify` found: the bundle's manifest facts and the records per container and
/// key version (every one of them opened with the bundle's keys).
public struct VerificationReport: Encodable, Sendable, Equatable {
  /// A key version in the bundle.
  public struct Version: Encodable, Sendable, Equatable {
    /// The version number.
    public var version: UInt32
    /// `active` or `decrypt-only`.
    public var state: String
    /// The envelope suite.
    public var suite: UInt8
  }

  /// One container snapshot.
  public struct Container: Encodable, Sendable, Equatable {
    /// The path it was registered under when backed up.
    public var path: String
    /// Its container id.
    public var id: String
    /// The snapshot's size in bytes.
    public var size: UInt64
    /// Records in it (all opened).
    public var records: Int
    /// Records per key version (the version as text, for JSON).
    public var byVersion: [String: Int]

    enum CodingKeys: String, CodingKey {
      case path, id, size, records
      case byVersion = "by_version"
    }
  }

  /// The bundle file.
  public var bundle: String
  /// The bundle format.
  public var format: Int
  /// The vault backed up.
  public var vaultID: String
  /// When the backup was taken.
  public var createdAt: String
  /// The release that wrote it.
  public var toolVersion: String
  /// The active key version.
  public var activeVersion: UInt32
  /// The key versions in the bundle.
  public var versions: [Version]
  /// The container snapshots, in bundle order.
  public var containers: [Container]
  /// Records in all containers.
  public var records: Int
  /// Records per key version across containers.
  public var byVersion: [String: Int]

  enum CodingKeys: String, CodingKey {
    case bundle, format, versions, containers, records
    case vaultID = "vault_id"
    case createdAt = "created_at"
    case toolVersion = "tool_version"
    case activeVersion = "active_version"
    case byVersion = "by_version"
  }
}

/// What `Backup.create` did.
public struct BackupReport: Encodable, Sendable, Equatable {
  /// The new bundle.
  public var bundle: String
  /// Its size in bytes.
  public var size: UInt64
  /// Its verification, done before anything older was removed.
  public var verification: VerificationReport
  /// Older bundles of this vault removed (beyond `keep`).
  public var removed: [String]
  /// Wall time of the whole backup.
  public var seconds: Double
  /// What went wrong after the bundle was written and verified, as sentences: the bundle is good,
  /// but (today) its directory could not be added to the home's list that `status` reads.
  /// Empty when all went well.
  public var warnings: [String] = []
}

/// What `Backup.restore` did.
public struct RestoreReport: Encodable, Sendable, Equatable {
  /// A restored container.
  public struct Container: Encodable, Sendable, Equatable {
    /// The path it had in the vault backed up.
    public var from: String
    /// Its path in the new home (registered there).
    public var path: String
    /// Records in it.
    public var records: Int
  }

  /// The new home.
  public var home: String
  /// The vault id (unchanged).
  public var vaultID: String
  /// The key store the keys were written to.
  public var store: String
  /// The keyfile, when the store is one; null otherwise.
  public var keyfile: String?
  /// The active key version.
  public var activeVersion: UInt32
  /// The containers restored.
  public var containers: [Container]
  /// Records restored in all containers.
  public var records: Int

  enum CodingKeys: String, CodingKey {
    case home, store, keyfile, containers, records
    case vaultID = "vault_id"
    case activeVersion = "active_version"
  }

  /// Encodes every member; `keyfile` is null, never omitted.
  ///
  /// - Parameter encoder: the encoder to write to.
  /// - Throws: the encoder's errors.
  public func encode(to encoder: any Encoder) throws {
    var values = encoder.container(keyedBy: CodingKeys.self)
    try values.encode(home, forKey: .home)
    try values.encode(vaultID, forKey: .vaultID)
    try values.encode(store, forKey: .store)
    try values.encode(keyfile, forKey: .keyfile)
    try values.encode(activeVersion, forKey: .activeVersion)
    try values.encode(containers, forKey: .containers)
    try values.encode(records, forKey: .records)
  }
}
