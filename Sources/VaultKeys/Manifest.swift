import Foundation

/// The state of one key version.
public enum KeyState: String, Codable, Sendable {
  /// Generated and stored, not yet proven by a round trip; nothing is sealed under it.
  case pending
  /// New records are sealed under it. Exactly one version is active.
  case active
  /// Opens old records; seals nothing.
  case decryptOnly = "decrypt-only"
  /// Proven unused everywhere; its material has been deleted from the store.
  case retired
}

/// One key version as recorded in the manifest.
public struct KeyVersionRecord: Codable, Sendable, Equatable {
  public var version: UInt32
  public var state: KeyState
  public var createdAt: String
  public var retiredAt: String?

  enum CodingKeys: String, CodingKey {
    case version, state
    case createdAt = "created_at"
    case retiredAt = "retired_at"
  }

  public init(version: UInt32, state: KeyState, createdAt: String) {
    self.version = version
    self.state = state
    self.createdAt = createdAt
  }
}

/// Where the vault's key material lives.
public struct StoreDescriptor: Codable, Sendable, Equatable {
  public var kind: KeyStoreKind
  /// The keyfile's absolute path, for `.keyfile`.
  public var keyfile: String?

  public init(kind: KeyStoreKind, keyfile: String? = nil) {
    self.kind = kind
    self.keyfile = keyfile
  }
}

/// Non-secret metadata of a vault: its keyring id, key versions and their states, where the keys
/// live, and the containers that hold records sealed under them. Stored as `manifest.json` (0600)
/// in the vault home, replaced atomically.
public struct Manifest: Codable, Sendable, Equatable {
  public static let currentFormat = 1
  public static let fileName = "manifest.json"

  public var format: Int
  public var vaultID: String
  public var store: StoreDescriptor
  public var activeVersion: UInt32
  public var versions: [KeyVersionRecord]
  /// Absolute paths of queue containers whose records rotation re-seals and counts.
  public var containers: [String]
  /// Key versions that sealed records outside any container (`vault seal`). Rotation cannot count
  /// those records, so it never retires these versions.
  public var externalSealVersions: [UInt32]
  /// Set while a rotation to this version has not yet finished re-sealing and retiring; a rerun of
  /// `rotate` resumes it instead of making yet another version.
  public var resealing: UInt32?

  enum CodingKeys: String, CodingKey {
    case format, store, versions, containers
    case vaultID = "vault_id"
    case activeVersion = "active_version"
    case externalSealVersions = "external_seal_versions"
    case resealing
  }

  public init(from decoder: any Decoder) throws {
    let values = try decoder.container(keyedBy: CodingKeys.self)
    format = try values.decode(Int.self, forKey: .format)
    vaultID = try values.decode(String.self, forKey: .vaultID)
    store = try values.decode(StoreDescriptor.self, forKey: .store)
    activeVersion = try values.decode(UInt32.self, forKey: .activeVersion)
    versions = try values.decode([KeyVersionRecord].self, forKey: .versions)
    containers = try values.decode([String].self, forKey: .containers)
    externalSealVersions = try values.decodeIfPresent([UInt32].self, forKey: .externalSealVersions) ?? []
    resealing = try values.decodeIfPresent(UInt32.self, forKey: .resealing)
  }

  public init(vaultID: KeyringID, store: StoreDescriptor, createdAt: String) {
    format = Self.currentFormat
    self.vaultID = vaultID.hex
    self.store = store
    activeVersion = 1
    versions = [KeyVersionRecord(version: 1, state: .pending, createdAt: createdAt)]
    containers = []
    externalSealVersions = []
  }

  public var keyringID: KeyringID? { KeyringID(hex: vaultID) }

  public func record(_ version: UInt32) -> KeyVersionRecord? { versions.first { $0.version == version } }

  public mutating func setState(_ state: KeyState, of version: UInt32) {
    guard let index = versions.firstIndex(where: { $0.version == version }) else { return }
    versions[index].state = state
  }
}

/// Reading and writing `manifest.json`.
public enum ManifestFile {
  public enum Failure: Error, Equatable, Sendable, CustomStringConvertible {
    case missing(home: String)
    case corrupt(path: String, reason: String)
    case unsupportedFormat(path: String, format: Int)

    public var description: String {
      switch self {
      case .missing(let home):
        "no vault at \(home) (\(Manifest.fileName) is missing); run `vault init` to create one, "
          + "or restore \(Manifest.fileName) from a backup if this vault existed"
      case .corrupt(let path, let reason):
        "\(path) is corrupt (\(reason)); restore it from a backup. Nothing was changed and no key was made"
      case .unsupportedFormat(let path, let format):
        "\(path) has format \(format), which this version of vault does not understand; upgrade vault"
      }
    }
  }

  public static func path(home: String) -> String { home + "/" + Manifest.fileName }

  public static func exists(home: String) -> Bool {
    var info = stat()
    return lstat(path(home: home), &info) == 0
  }

  public static func load(home: String) throws -> Manifest {
    let path = path(home: home)
    guard let bytes = try SecureFile.read(path, requirePrivate: false) else { throw Failure.missing(home: home) }
    let data = bytes.withUnsafeBytes { Data($0) }
    let manifest: Manifest
    do {
      manifest = try JSONDecoder().decode(Manifest.self, from: data)
    } catch {
      throw Failure.corrupt(path: path, reason: "not valid manifest JSON")
    }
    guard manifest.format == Manifest.currentFormat else {
      throw Failure.unsupportedFormat(path: path, format: manifest.format)
    }
    guard manifest.keyringID != nil else { throw Failure.corrupt(path: path, reason: "bad vault_id") }
    guard manifest.record(manifest.activeVersion) != nil else {
      throw Failure.corrupt(path: path, reason: "active version \(manifest.activeVersion) is not listed")
    }
    if manifest.store.kind == .keyfile, manifest.store.keyfile == nil {
      throw Failure.corrupt(path: path, reason: "keyfile store without a keyfile path")
    }
    return manifest
  }

  public static func save(_ manifest: Manifest, home: String) throws {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
    let data = try encoder.encode(manifest) + Data("\n".utf8)
    try data.withUnsafeBytes { try SecureFile.atomicWrite(path(home: home), bytes: $0, mode: 0o600) }
  }
}

/// An exclusive advisory lock (flock) on a file in the vault home, held until released or deinit.
/// Init, rotation and any other manifest change take it so that processes do not interleave.
public final class FileLock {
  private var fd: Int32

  /// Blocks until the lock on `path` is taken (the file is created 0600 if needed).
  public init(path: String) throws {
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
    guard fd >= 0 else { throw KeyStoreError.io(path: path, operation: "open lock", errno: errno) }
    while flock(fd, LOCK_EX) != 0 {
      if errno == EINTR { continue }
      let code = errno
      close(fd)
      throw KeyStoreError.io(path: path, operation: "lock", errno: code)
    }
  }

  public func release() {
    guard fd >= 0 else { return }
    flock(fd, LOCK_UN)
    close(fd)
    fd = -1
  }

  deinit { release() }
}
