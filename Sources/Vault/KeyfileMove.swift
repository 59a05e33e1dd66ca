import Foundation
import VaultCrypto
import VaultKeys

extension Vault {
  /// Moves the keyfile of the keyfile vault in `home` to `newPath` and records the new path in the
  /// manifest, for a keyfile that must leave the data it protects (a keyfile inside the home or
  /// beside a container is refused for every other use).
  ///
  /// Under the home's lock: copies the keyfile byte for byte to `newPath` (0600, in a private
  /// directory, which is created 0700 when missing), checks that the copy holds the same key
  /// versions and is in an allowed place, writes the manifest naming it (signed, and mirrored into
  /// the new keyfile), and only then removes the old file. A crash before the manifest write leaves
  /// an unused copy at `newPath` (running the move again adopts it when it is identical); a crash
  /// after it leaves the old file, which the next move reports.
  ///
  /// A manifest from the release before MACs is rewritten unsigned with the new path; the next
  /// `open` upgrades it.
  ///
  /// - Parameters:
  ///   - home: the vault's home directory (made absolute against the working directory).
  ///   - newPath: where the keyfile goes: outside the home and away from every listed container.
  ///   - clock: the time source for the manifest write.
  /// - Returns: the old path.
  /// - Throws: `VaultError.notAKeyfileVault` when the vault keeps its keys elsewhere;
  ///   `VaultError.keyfileExists` when another file is already at `newPath` (or `newPath` is the
  ///   keyfile itself under another name); `VaultError.keyMissing` when the old keyfile is gone;
  ///   `KeyStoreError` when the copy is refused (its place, owner or mode) or does not hold the same
  ///   versions (the copy is then removed) and for I/O failures; `ManifestFile.Failure` when the
  ///   manifest is missing or fails its checks. Nothing is changed when it throws before the
  ///   manifest write.
  @discardableResult
  public static func moveKeyfile(
    home: String, to newPath: String, clock: @escaping @Sendable () -> Date = Date.init
  ) throws -> String {
    let home = absolutePath(home)
    let newPath = absolutePath(newPath)
    let lock = try FileLock(path: home + "/" + lockFileName)
    defer { lock.release() }
    let signed = try ManifestFile.read(home: home)
    guard signed.manifest.store.kind == .keyfile, let oldPath = signed.manifest.store.keyfile else {
      throw VaultError.notAKeyfileVault(home: home)
    }
    let keyring = signed.manifest.keyringID!
    if sameFile(oldPath, newPath) {
      // Another name for the keyfile itself (a symlinked directory, a hard link): "moving" it
      // would end by unlinking the only copy.
      throw VaultError.keyfileExists(path: newPath)
    }
    // The old place may be the refused one, so it is read without the location check.
    let oldStore = KeyfileStore(path: oldPath)
    guard let oldBytes = try SecureFile.read(oldPath, requirePrivate: true) else {
      throw VaultError.keyMissing(version: signed.manifest.activeVersion, store: .keyfile)
    }
    let containers = signed.manifest.containers.map(\.path)
    let newStore = KeyfileStore(path: newPath) { .init(home: home, containers: containers) }

    if let existing = try SecureFile.read(newPath, requirePrivate: true) {
      // Only an identical copy (a move that stopped before the manifest write) is adopted.
      guard existing == oldBytes else { throw VaultError.keyfileExists(path: newPath) }
    } else {
      try SecureFile.makeDirectory((newPath as NSString).deletingLastPathComponent, mode: 0o700)
      try oldBytes.withUnsafeBytes { try SecureFile.atomicWrite(newPath, bytes: $0, mode: 0o600) }
    }
    do {
      // Reading through the new store applies its owner, mode and location checks.
      guard try newStore.storedVersions(keyring: keyring) == oldStore.storedVersions(keyring: keyring) else {
        throw KeyStoreError.corruptKeyfile(path: newPath, reason: "the copy does not hold the same key versions")
      }
    } catch {
      unlink(newPath)
      throw error
    }

    var manifest = signed.manifest
    if signed.isLegacy {
      // No MAC yet: rewrite the previous release's JSON with the new path; the next open upgrades it.
      var object = try JSONSerialization.jsonObject(with: Data(signed.bytes)) as? [String: Any] ?? [:]
      var store = object["store"] as? [String: Any] ?? [:]
      store["keyfile"] = newPath
      object["store"] = store
      let data = try JSONSerialization.data(withJSONObject: object, options: [.prettyPrinted, .sortedKeys])
      try ManifestFile.write([UInt8](data) + [0x0A], home: home)
    } else {
      guard let integrity = try oldStore.loadRecord(.integrityKey, keyring: keyring) else {
        throw VaultError.integrityKeyMissing(store: .keyfile)
      }
      let integrityKey = try SymmetricKey(storage: integrity)
      // Verify (and, for a stale file, supersede) with the keys where they are now.
      let current = Vault(home: home, manifest: manifest, store: oldStore, integrityKey: integrityKey, clock: clock)
      try current.adoptVerifiedManifest(heal: true)
      manifest = current.manifest
      manifest.store.keyfile = newPath
      let moved = Vault(home: home, manifest: manifest, store: newStore, integrityKey: integrityKey, clock: clock)
      try moved.save(manifest)
    }
    guard unlink(oldPath) == 0 || errno == ENOENT else {
      throw KeyStoreError.io(path: oldPath, operation: "remove the old keyfile", errno: errno)
    }
    try SecureFile.syncDirectory((oldPath as NSString).deletingLastPathComponent)
    return oldPath
  }
}
