import Foundation
import VaultCrypto
import VaultKeys

/// The file a restore writes into its new home before anything else and removes last.
///
/// While it is there the home is not a vault yet: opening it is refused (`VaultError.restoreUnfinished`),
/// so nothing can seal into, enqueue into or deliver from a half-made copy. A rerun of the same
/// restore takes up what the stopped one wrote: the files it writes in the home, and a keyfile or
/// key items in the store it names whose integrity key has the check the marker records (and whose
/// keys are byte for byte the bundle's).
struct RestoreMarker: Codable, Equatable {
  static let fileName = "restore-unfinished"

  /// The vault being restored (its keyring id in hex).
  var vaultID: String
  /// The store the stopped restore wrote keys into: checked against the store before it wrote.
  var store: StoreDescriptor
  /// The key-check value of the integrity key it stores (`KeyVersionRecord.checkValue`): items in
  /// that store are the stopped run's only when its integrity key has this check.
  var integrityCheck: String?

  enum CodingKeys: String, CodingKey {
    case vaultID = "vault_id"
    case store
    case integrityCheck = "integrity_check"
  }

  static func path(home: String) -> String { home + "/" + fileName }

  /// The integrity key `store` holds for `keyring`, and whether it is the stopped run's own (its
  /// key-check value is the one this marker records); nil when the store holds none.
  func storedIntegrityKey(in store: any KeyStore, keyring: KeyringID) throws -> (key: SymmetricKey, own: Bool)? {
    guard let stored = try store.loadRecord(.integrityKey, keyring: keyring).map({ try SymmetricKey(storage: $0) })
    else { return nil }
    guard let integrityCheck else { return (stored, false) }
    return (stored, constantTimeEquals(try KeyVersionRecord.checkValue(of: stored), integrityCheck))
  }

  /// Whether `home` holds a marker at all (readable or not).
  static func exists(home: String) -> Bool {
    var info = stat()
    return lstat(path(home: home), &info) == 0
  }

  /// What a marker in `home` says.
  enum Found: Equatable {
    case none
    /// A marker whose bytes do not parse: the stopped restore wrote nothing after it (the marker is
    /// on disk, synced, before anything else is written), so only the marker itself is its own.
    case unreadable
    case marker(RestoreMarker)

    var vaultID: String? {
      if case .marker(let marker) = self { return marker.vaultID }
      return nil
    }
  }

  static func read(home: String) -> Found {
    // Only this user's marker counts: in a home others can write to (vault does not refuse one),
    // a marker planted by another user must not lock the vault out.
    var info = stat()
    guard lstat(path(home: home), &info) == 0, info.st_uid == geteuid() else { return .none }
    guard let bytes = try? SecureFile.read(path(home: home), requirePrivate: false),
      let marker = try? bytes.withUnsafeBytes({ try JSONDecoder().decode(RestoreMarker.self, from: Data($0)) })
    else {
      return .unreadable
    }
    return .marker(marker)
  }

  /// Writes the marker as a new file (never over another) and syncs it and the home, so that it is
  /// on disk before the first key item or container is.
  func write(home: String) throws {
    let path = Self.path(home: home)
    let bytes = try JSONEncoder().encode(self)
    let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
    guard fd >= 0 else { throw KeyStoreError.io(path: path, operation: "create", errno: errno) }
    defer { close(fd) }
    // One write of a few hundred bytes: a kill lands before or after it, never inside.
    let written = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress!, $0.count) }
    guard written == bytes.count else {
      throw KeyStoreError.io(path: path, operation: "write", errno: written < 0 ? errno : EIO)
    }
    guard fsync(fd) == 0 else { throw KeyStoreError.io(path: path, operation: "fsync", errno: errno) }
    try SecureFile.syncDirectory(home)
  }

  /// Replaces the marker of a stopped restore with this one (a rerun that makes a new integrity
  /// key records its check before storing it): atomically, so a kill leaves one or the other.
  func replace(home: String) throws {
    let bytes = try JSONEncoder().encode(self)
    try bytes.withUnsafeBytes { try SecureFile.atomicWrite(Self.path(home: home), bytes: $0) }
  }

  /// Removes the marker from `home`: the home is a vault from here on.
  static func remove(home: String) throws {
    guard unlink(path(home: home)) == 0 || errno == ENOENT else {
      throw KeyStoreError.io(path: path(home: home), operation: "unlink", errno: errno)
    }
    try SecureFile.syncDirectory(home)
  }
}
