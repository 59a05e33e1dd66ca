import VaultKeys

/// What `vault status` reports; its JSON form is part of the command-line contract.
public struct VaultStatus: Codable, Sendable, Equatable {
  public struct Version: Codable, Sendable, Equatable {
    public var version: UInt32
    public var state: KeyState
    public var createdAt: String
    public var retiredAt: String?
    /// Records sealed under this version across all registered containers.
    public var records: Int

    enum CodingKeys: String, CodingKey {
      case version, state, records
      case createdAt = "created_at"
      case retiredAt = "retired_at"
    }
  }

  public struct Keyfile: Codable, Sendable, Equatable {
    public var path: String
    /// Octal permission bits, e.g. "0600"; nil when the file is missing.
    public var mode: String?
  }

  public var vaultID: String
  public var home: String
  public var store: KeyStoreKind
  public var activeVersion: UInt32
  public var versions: [Version]
  public var keyfile: Keyfile?
  public var containers: [String]

  enum CodingKeys: String, CodingKey {
    case home, store, versions, keyfile, containers
    case vaultID = "vault_id"
    case activeVersion = "active_version"
  }
}

extension Vault {
  /// The vault's state from its manifest. `counts` gives records per version from the registered
  /// containers (none are registered until queues exist, so every count is then 0).
  public func status(counts: [UInt32: Int] = [:]) -> VaultStatus {
    Self.describe(home: home, manifest: manifest, counts: counts)
  }

  /// The status of a vault from its manifest alone, without touching the key store (so it works
  /// while the keyring is locked).
  public static func describe(home: String, manifest: Manifest, counts: [UInt32: Int] = [:]) -> VaultStatus {
    var keyfile: VaultStatus.Keyfile?
    if manifest.store.kind == .keyfile, let path = manifest.store.keyfile {
      keyfile = .init(path: path, mode: KeyfileStore(path: path).mode.map { "0" + String($0, radix: 8) })
    }
    return VaultStatus(
      vaultID: manifest.vaultID, home: home, store: manifest.store.kind, activeVersion: manifest.activeVersion,
      versions: manifest.versions.map {
        .init(
          version: $0.version, state: $0.state, createdAt: $0.createdAt, retiredAt: $0.retiredAt,
          records: counts[$0.version] ?? 0)
      },
      keyfile: keyfile, containers: manifest.containers)
  }
}
