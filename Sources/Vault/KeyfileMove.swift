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
  /// the new keyfile), and only then removes the old file. The home's `keyfile-move-pending`,
  /// written before anything is made at `newPath`, names both places until the move is over. A
  /// crash before the manifest write leaves an unused copy at `newPath` (or its temporary), which
  /// the next move or rotation removes (a move run again then makes a fresh copy); a crash after
  /// it leaves the old file, which the next move or rotation removes. Either file is removed only
  /// when every key it holds is the current keyfile's too, or of a version retired since. `status`
  /// and `doctor` warn of a move stopped part-way. A copy of the keyfile already at `newPath`
  /// with no move pending (identical, or holding the same keys) is adopted.
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
  ///   keyfile itself under another name); `KeyStoreError.notARegularFile` when `newPath` is a
  ///   directory, a link or another special file; `VaultError.keyMissing` when the old keyfile is gone;
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
    if let stopped = try settleStoppedMove(home: home, current: oldPath, manifest: signed.manifest),
      sameFile(oldPath, newPath)
    {
      // The same move run again after it was killed past its manifest write: now finished.
      return stopped
    }
    if oldPath == newPath {
      // Already there (the same move run again after it finished): nothing to do.
      return oldPath
    }
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

    var existingInfo = stat()
    let adopting = lstat(newPath, &existingInfo) == 0
    // A directory (or another special file) there is not a keyfile in the way: the path must name
    // the keyfile itself (`keyfile move ~` said "a keyfile already exists").
    if adopting, existingInfo.st_mode & S_IFMT != S_IFREG {
      throw KeyStoreError.notARegularFile(path: newPath)
    }
    if adopting {
      // Only a copy of this keyfile (a move that stopped before its manifest write) is adopted:
      // identical, or holding the same keys and integrity key (the stopped move had stored the
      // manifest's copy in it). Anything else is "already exists", before its mode is judged: a
      // file of yours there was refused for its mode, then, once chmod-ed, for being there.
      let existing = (try? SecureFile.read(newPath, requirePrivate: false)) ?? nil
      guard let existing, existing == oldBytes || (try? sameKeys(newPath, oldPath, keyring: keyring)) == true else {
        throw VaultError.keyfileExists(path: newPath)
      }
      // A copy of the keyfile open to others (or a link) is refused for that, as before.
      _ = try SecureFile.read(newPath, requirePrivate: true)
    }

    // Written before anything is made at the new place, removed once the move is over: a move
    // killed before its manifest names the new place left a copy of every key there (or its
    // temporary), unused, which the next move or rotation removes, so that no key outlives its
    // retirement in it; one killed after it is finished by the next move or rotation (the old path
    // is nowhere else once the manifest names the new one, and the old file still holds every key).
    let pendingPath = home + "/" + movePendingName
    try PendingMove(old: oldPath, new: newPath).bytes.withUnsafeBytes {
      try SecureFile.atomicWrite(pendingPath, bytes: $0)
    }
    do {
      if !adopting {
        try SecureFile.makeDirectory((newPath as NSString).deletingLastPathComponent, mode: 0o700)
        try oldBytes.withUnsafeBytes { try SecureFile.atomicWrite(newPath, bytes: $0, mode: 0o600) }
      }
      // Reading through the new store applies its owner, mode and location checks.
      guard try newStore.storedVersions(keyring: keyring) == oldStore.storedVersions(keyring: keyring) else {
        throw KeyStoreError.corruptKeyfile(path: newPath, reason: "the copy does not hold the same key versions")
      }
    } catch {
      // Nothing names the new place: the copy (made here, or adopted) goes, and the move with it.
      unlink(newPath)
      _ = try? KeyfileStore(path: newPath).removeLeftoverTemporaryFiles()
      unlink(pendingPath)
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
    unlink(home + "/" + movePendingName)
    try SecureFile.syncDirectory(home)
    // Temporaries a killed earlier attempt left beside either place hold keys too.
    _ = try? KeyfileStore(path: oldPath).removeLeftoverTemporaryFiles()
    _ = try? KeyfileStore(path: newPath).removeLeftoverTemporaryFiles()
    return oldPath
  }

  /// Whether the keyfiles at `a` and `b` hold the same key versions of `keyring` with the same
  /// bytes, and the same integrity key: copies of one keyfile, whatever manifest copy they hold.
  private static func sameKeys(_ a: String, _ b: String, keyring: KeyringID) throws -> Bool {
    let first = KeyfileStore(path: a)
    let second = KeyfileStore(path: b)
    let versions = try first.storedVersions(keyring: keyring)
    guard try second.storedVersions(keyring: keyring) == versions else { return false }
    for version in versions {
      // (`==` on keys and secure bytes compares in constant time.)
      guard let x = try first.loadKey(keyring: keyring, version: version),
        try x == second.loadKey(keyring: keyring, version: version)
      else { return false }
    }
    return try first.loadRecord(.integrityKey, keyring: keyring) == second.loadRecord(.integrityKey, keyring: keyring)
  }

  /// Whether the keyfile at `old` is what a move of this vault's keyfile to `current` left: it
  /// holds this vault's integrity key (so it is this vault's own, not a restored copy's, which gets
  /// a new one), and each key in it is in `current` byte for byte or belongs to a version this
  /// vault retired since (a version the manifest names as active, decrypt-only or pending, but
  /// `current` lacks, is never deleted). A keyfile of another vault, or of another home of it, is not.
  ///
  /// The file is read whatever its mode, owner or directory (a move's copy in a directory others
  /// may read, a mode changed since, still holds the keys: a security review saw such a copy kept,
  /// and the note dropped, by a rotation after a compromise). A symbolic link or special file is
  /// not what a move makes: not this vault's.
  ///
  /// - Throws: `VaultError.stoppedMoveUnclear` when the file cannot be looked at, or is a regular
  ///   file that cannot be read or parsed (nobody can tell whose keys it holds: the caller keeps its
  ///   note and stops); `KeyStoreError` when the current keyfile cannot be read.
  private static func isLeftByThisVault(
    _ old: String, current: String, manifest: Manifest, keyring: KeyringID
  ) throws -> Bool {
    var info = stat()
    guard lstat(old, &info) == 0 else {
      // Gone: nothing to keep. Anything else (a directory that cannot be searched) cannot tell.
      guard errno == ENOENT else {
        throw VaultError.stoppedMoveUnclear(path: old, reason: String(cString: strerror(errno)))
      }
      return false
    }
    guard info.st_mode & S_IFMT == S_IFREG else { return false }
    let left: KeyfileContents
    do {
      left = try keyfileContents(old, requirePrivate: false)
    } catch {
      throw VaultError.stoppedMoveUnclear(path: old, reason: "\(error)")
    }
    let kept = KeyfileStore(path: current)
    guard left.keyring == keyring, let theirs = left.records[KeyStoreRecord.integrityKey.rawValue],
      try theirs == kept.loadRecord(.integrityKey, keyring: keyring)
    else { return false }
    for (version, key) in left.keys {
      guard let held = try kept.loadKey(keyring: keyring, version: version) else {
        let state = manifest.record(version)?.state
        guard state == nil || state == .retired else { return false }
        continue
      }
      guard key == held else { return false }
    }
    return true
  }

  /// The file in the home naming the keyfile a move is leaving, while that move is under way.
  static let movePendingName = "keyfile-move-pending"

  /// What the home's `keyfile-move-pending` holds: the keyfile a move is leaving and where it is
  /// going, both absolute, separated by a NUL (which no path holds). A file written by a build
  /// before the destination was recorded holds the old path alone.
  package struct PendingMove: Equatable {
    package let old: String
    package let new: String?

    var bytes: [UInt8] { Array(old.utf8) + (new.map { [0] + Array($0.utf8) } ?? []) }

    /// The pending move recorded in `home`; nil when none is.
    ///
    /// - Throws: `KeyStoreError` when the file cannot be read or is not private.
    static func read(home: String) throws -> PendingMove? {
      guard let bytes = try SecureFile.read(home + "/" + movePendingName, requirePrivate: true) else { return nil }
      let parts = bytes.withUnsafeBytes { $0.split(separator: 0, omittingEmptySubsequences: false) }
      let text = parts.map { String(decoding: $0, as: UTF8.self) }
      return PendingMove(old: text.first ?? "", new: text.count > 1 ? text[1] : nil)
    }
  }

  /// The keyfile move that stopped part-way in `home`, for `status` and `doctor`: where from and
  /// to; nil when none did (or the file cannot be read).
  package static func stoppedMove(home: String) -> PendingMove? { (try? PendingMove.read(home: home)) ?? nil }

  /// Settles a keyfile move that stopped part-way before anything deletes a key: the next move and
  /// every rotation call it under the home's lock. Killed before its manifest write (the manifest
  /// still names the old keyfile, `current`), the copy it made at the new place is unused and is
  /// removed (it and any temporary beside it hold keys, which a rotation would otherwise leave
  /// there after deleting them from `current`), as long as it holds nothing `current` lacks.
  /// Killed after it, the move is finished (`finishStoppedMove`).
  ///
  /// - Returns: the old path a finished move left (removed, or found gone); nil otherwise.
  /// - Throws: `VaultError.stoppedMoveUnclear` when the move's other file cannot be looked at or
  ///   read (the note is kept); `KeyStoreError` when the current keyfile cannot be read or a file
  ///   cannot be removed.
  static func settleStoppedMove(home: String, current: String, manifest: Manifest) throws -> String? {
    guard let keyring = manifest.keyringID, let pending = try PendingMove.read(home: home) else { return nil }
    guard pending.old.hasPrefix("/"), pending.old == current || sameFile(pending.old, current) else {
      return try finishStoppedMove(home: home, current: current, manifest: manifest)
    }
    if let new = pending.new, new.hasPrefix("/"), new != current, !sameFile(new, current) {
      let copy = KeyfileStore(path: new)
      if try isLeftByThisVault(new, current: current, manifest: manifest, keyring: keyring) {
        guard unlink(new) == 0 || errno == ENOENT else {
          throw KeyStoreError.io(path: new, operation: "remove the unused keyfile copy", errno: errno)
        }
        try SecureFile.syncDirectory((new as NSString).deletingLastPathComponent)
      }
      _ = try? copy.removeLeftoverTemporaryFiles()
    }
    unlink(home + "/" + movePendingName)
    try SecureFile.syncDirectory(home)
    return nil
  }

  /// Finishes a keyfile move that was killed after its manifest write and before the old keyfile
  /// was removed (its pending file names the old path, the manifest already names `current`):
  /// removes the old file when every key it holds is `current`'s too, byte for byte, or belongs
  /// to a version retired since (a rotation ran in between).
  ///
  /// - Returns: the old path it removed (or found gone); nil when no move was pending, or the
  ///   pending move stopped before its manifest write (the new move then starts over from `current`).
  /// A file at the old path that is not this vault's old keyfile any more (`isLeftByThisVault`)
  /// is left alone, and the pending note dropped.
  ///
  /// - Throws: `KeyStoreError` when the current keyfile cannot be read or a file cannot be removed.
  private static func finishStoppedMove(home: String, current: String, manifest: Manifest) throws -> String? {
    guard let keyring = manifest.keyringID else { return nil }
    let pending = home + "/" + movePendingName
    guard let old = try PendingMove.read(home: home)?.old else { return nil }
    guard !old.isEmpty, old.hasPrefix("/"), !sameFile(old, current) else {
      unlink(pending)
      return nil
    }
    // Only a file that is gone is skipped: one that cannot be looked at stops here (isLeftByThisVault).
    var info = stat()
    if lstat(old, &info) == 0 || errno != ENOENT {
      guard try isLeftByThisVault(old, current: current, manifest: manifest, keyring: keyring) else {
        // Not this vault's old keyfile any more (replaced since: another vault's, someone's file):
        // left alone, and the pending move forgotten.
        unlink(pending)
        try SecureFile.syncDirectory(home)
        return nil
      }
      guard unlink(old) == 0 || errno == ENOENT else {
        throw KeyStoreError.io(path: old, operation: "remove the old keyfile", errno: errno)
      }
      try SecureFile.syncDirectory((old as NSString).deletingLastPathComponent)
    }
    // A copy killed mid-write left its temporary (keys and all) beside the old place.
    _ = try? KeyfileStore(path: old).removeLeftoverTemporaryFiles()
    unlink(pending)
    try SecureFile.syncDirectory(home)
    return old
  }
}
