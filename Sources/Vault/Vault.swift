import Foundation
import VaultCrypto
import VaultKeys

/// A vault: versioned 256-bit keys in a key store, described by a manifest in a home directory,
/// and `seal` / `open` of records in the envelope format.
///
/// Thread-safe: `seal`, `open` and `status` may be called from any number of threads at once.
/// Changes to the manifest (create, rotate) take an exclusive file lock in the home, so
/// several processes may share one vault.
public final class Vault: Sendable {
  /// The home directory, absolute: where the manifest and the lock file live.
  public let home: String
  /// The vault's id, written into every envelope's header so another vault's records are
  /// refused by name (`EnvelopeError.wrongKeyring`).
  public let keyringID: KeyringID
  /// `manifest.json` in the home, made once: every `seal` and `open` looks at it.
  private let manifestPath: String
  let store: any KeyStore
  let clock: @Sendable () -> Date
  // Not a `Mutex`: LockedValue says why (ThreadSanitizer reported this one too, in a whole-suite
  // run at d2c21dc, `testSealingWhileRotatingLosesNothing`).
  private let state: LockedValue<State>
  /// The shared hold every `seal` takes on the home's lock file, kept open between seals.
  private let sealLock: SealLock

  struct State {
    var manifest: Manifest
    var keys: [UInt32: VersionKey] = [:]
    /// Key-check values computed for versions whose record has none yet (written on the next save).
    var learnedChecks: [UInt32: String] = [:]
    var integrityKey: SymmetricKey
    /// The manifest file as this process last read or wrote it; a different stamp means another
    /// process changed it.
    var stamp: FileStamp?
    /// The highest epoch this process has seen; a manifest below it is a stale copy.
    var epoch: UInt64
    /// Set when the manifest in the home was older than the key store's copy and was superseded.
    var supersededStaleManifest = false
    /// The thread inside `withManifestLock`, if any (the flock is per open file, so the same
    /// thread taking it again would wait for itself).
    var lockHolder: pthread_t?
    /// The version a rotation after a compromise replaces, when opening could not make that
    /// rotation's new version active (no room to record it): this instance reads under it and
    /// never seals under it.
    var leakedVersion: UInt32?
  }

  static let lockFileName = "vault.lock"

  init(
    home: String, manifest: Manifest, store: any KeyStore, integrityKey: SymmetricKey,
    clock: @escaping @Sendable () -> Date
  ) {
    self.home = home
    self.manifestPath = ManifestFile.path(home: home)
    self.keyringID = manifest.keyringID!
    self.store = store
    self.clock = clock
    sealLock = SealLock(path: home + "/" + Self.lockFileName)
    state = LockedValue(
      State(
        manifest: manifest, integrityKey: integrityKey, stamp: FileStamp(ManifestFile.path(home: home)),
        epoch: manifest.epoch))
  }

  // MARK: - Create and open

  /// Creates a new vault in `home` with its first key version in `store`.
  ///
  /// Refuses, changing nothing, when a vault already exists there, when `home` holds other files,
  /// when the keyfile already exists, or when the Secret Service already holds keys for `home`.
  /// If a later step fails, the manifest is removed again so the call can be retried. A home that
  /// holds only `vault.lock` and manifest temporary files a killed `init` left
  /// (`manifest.json.tmp-` and 12 hex digits, regular files of this user) counts as empty; those
  /// files are removed under the home's lock. A keyfile such an `init` left holding no key
  /// (`isKeyfileLeftByKilledInit`) is replaced; any other existing keyfile is refused.
  ///
  /// - Parameters:
  ///   - home: the home directory (made absolute against the working directory); created 0700 if
  ///     missing, and made 0700 if it exists empty (it must then be this user's, neither sticky nor
  ///     writable by others).
  ///   - descriptor: the store to keep the keys in; a keyfile with no path gets the default one
  ///     for the new vault id (`KeyfileStore.defaultPath(keyring:environment:)`).
  ///   - resolver: builds the key store `descriptor` names.
  ///   - clock: the time source for the manifest's timestamps.
  /// - Returns: the open vault, its first key version active.
  /// - Throws: `VaultError.sharedDirectory` for an existing home another user owns, or that is
  ///   sticky or writable by others; `VaultError.alreadyExists`, `.homeNotEmpty`, `.keyfileExists`, `.orphanedKeys`,
  ///   `.orphanedKeyfile` (a keyfile in the default directory holds keys of a vault whose manifest
  ///   copy names `home`) or `.restoreUnfinished` (nothing was changed); `KeyStoreError.keyfileInsideData` for a keyfile inside `home`;
  ///   `KeyStoreError` when the store cannot be written or the Secret Service cannot answer;
  ///   `VaultError.roundTripFailed` when the new key fails its self-test.
  public static func create(
    home: String, store descriptor: StoreDescriptor, resolver: KeyStoreResolver = .system(),
    clock: @escaping @Sendable () -> Date = Date.init
  ) throws -> Vault {
    let home = absolutePath(home)
    try refuseUnfinishedRestore(home)
    if ManifestFile.exists(home: home) { throw VaultError.alreadyExists(home: home) }
    // The lock file and the manifest temporary files of a killed write (an init killed before its
    // manifest was renamed into place) are no one's data: a home holding only those is empty.
    if let entries = try? FileManager.default.contentsOfDirectory(atPath: home),
      entries.contains(where: { $0 != lockFileName && !isStaleManifestTemporary($0, home: home) })
    {
      throw VaultError.homeNotEmpty(home: home)
    }
    // Every check that can refuse runs before anything is created or changed.
    try checkNewHome(home)
    let keyring = try KeyringID.random()
    let descriptor = try newKeyfileChecked(descriptor, keyring: keyring, home: home, acceptingKilledInit: true)
    let store = try resolver.store(for: descriptor, home: home)
    // Whatever the store: a keyfile vault over a home whose Secret Service keys remain orphans them too.
    _ = try checkForOrphanedKeys(home: home, resolver: resolver)
    // And over a home whose vault's keyfile, with its manifest copy, is still in the default directory.
    if let orphan = keyfilesNaming(home: home).first {
      throw VaultError.orphanedKeyfile(home: home, keyfile: orphan.path, vaultID: orphan.vaultID)
    }

    let homeExisted = FileManager.default.fileExists(atPath: home)
    let lockExisted = FileManager.default.fileExists(atPath: home + "/" + lockFileName)
    try SecureFile.makeDirectory(home, mode: 0o700)
    let lock: FileLock
    do {
      // An empty home made beforehand keeps whatever mode it had; make it private like a new one
      // (`checkNewHome` let through only a directory of this user's that others may not write).
      guard chmod(home, 0o700) == 0 else { throw KeyStoreError.io(path: home, operation: "chmod", errno: errno) }
      lock = try FileLock(path: home + "/" + lockFileName)
    } catch {
      if !homeExisted { rmdir(home) }
      throw error
    }
    var created = false
    defer {
      lock.release()
      // A refused init leaves no trace of itself: the lock file and home it made go again (rmdir
      // removes the home only while empty, so nothing anyone else put there is touched).
      if !created {
        if !lockExisted { unlink(home + "/" + lockFileName) }
        if !homeExisted { rmdir(home) }
      }
    }
    if ManifestFile.exists(home: home) { throw VaultError.alreadyExists(home: home) }
    // Under the lock no manifest write is in progress, so every such temporary file is debris.
    try removeStaleManifestTemporaries(home: home)
    // Every check has passed: a keyfile still in the way is one a killed init left (checked again).
    if descriptor.kind == .keyfile, let path = descriptor.keyfile {
      if KeyfileStore(path: path).exists { try removeKeyfileLeftByKilledInit(path) }
      // A keyfile write a killed init left mid-way: its temporary holds an integrity key.
      _ = try? KeyfileStore(path: path).removeLeftoverTemporaryFiles()
    }

    let integrityKey = try SymmetricKey.generate()
    let manifest = Manifest(vaultID: keyring, store: descriptor, createdAt: timestamp(clock()), home: home)
    let vault = Vault(home: home, manifest: manifest, store: store, integrityKey: integrityKey, clock: clock)
    do {
      // The integrity key goes first: every manifest, from the first, is authenticated by it. Its
      // write can fail after the keyfile is in place (the directory's fsync): undone below too, or
      // a keyless keyfile would stay under an id no vault has.
      try integrityKey.withUnsafeBytes { try store.storeRecord(.integrityKey, bytes: $0, keyring: keyring) }
      try vault.save(manifest)
      try vault.completePendingVersion()
    } catch {
      // Nothing was ever sealed under this vault. While its store holds no key for it, undo the
      // manifest so `init` can be retried (records alone do not refuse it), and a keyfile this
      // init made, which holds only the integrity record, or the retry would find "a keyfile
      // already exists". Once a key may have reached the store (it holds one, or cannot say), the
      // manifest stays: it records that key's check value, so the next open finishes the vault
      // with it, as after a kill there. Removed, it left that key as the orphaned key of a lost
      // vault of this home, and every later `init` here was refused. (Deleting a key is never a
      // side effect.)
      if (try? store.storedVersions(keyring: keyring))?.isEmpty == true {
        unlink(ManifestFile.path(home: home))
        if let keyfile = store as? KeyfileStore { unlink(keyfile.path) }
      } else if ManifestFile.exists(home: home) {
        created = true
      }
      throw error
    }
    created = true
    return vault
  }

  /// A new vault's key store with its keyfile path settled (the default one when none is given) and
  /// checked before anything is made: the file must not exist (it may hold another vault's keys),
  /// and it must not lie inside the home, where keys would travel with every copy of the data.
  /// `create` and `restore` both make new keyfiles through this.
  ///
  /// - Parameter acceptingKilledInit: let a keyfile an `init` killed before it stored a key left
  ///   (`isKeyfileLeftByKilledInit`) pass: it protects nothing, and `create` replaces it once every
  ///   other check has passed. `restore` does not pass it: it takes up only its own keyfile.
  static func newKeyfileChecked(
    _ descriptor: StoreDescriptor, keyring: KeyringID, home: String, acceptingKilledInit: Bool = false
  ) throws -> StoreDescriptor {
    guard descriptor.kind == .keyfile else { return descriptor }
    var descriptor = descriptor
    let path = keyfilePath(of: descriptor, keyring: keyring)
    descriptor.keyfile = path
    if KeyfileStore(path: path).exists, !(acceptingKilledInit && isKeyfileLeftByKilledInit(path)) {
      throw VaultError.keyfileExists(path: path)
    }
    if isInside(path, home) {
      throw KeyStoreError.keyfileInsideData(path: path, dataDirectory: home)
    }
    return descriptor
  }

  /// The absolute path of the keyfile `descriptor` names, or the default path for `keyring` when
  /// it names none.
  static func keyfilePath(of descriptor: StoreDescriptor, keyring: KeyringID) -> String {
    absolutePath(
      descriptor.keyfile
        ?? KeyfileStore.defaultPath(keyring: keyring, environment: ProcessInfo.processInfo.environment))
  }

  /// `descriptor` with its keyfile path resolved (`keyfilePath`); any other store as it is.
  static func resolvingKeyfile(_ descriptor: StoreDescriptor, keyring: KeyringID) -> StoreDescriptor {
    guard descriptor.kind == .keyfile else { return descriptor }
    var resolved = descriptor
    resolved.keyfile = keyfilePath(of: descriptor, keyring: keyring)
    return resolved
  }

  /// Refuses an existing directory as a new vault's home unless it is this user's own, not sticky
  /// and not writable by others: `init` and `restore` make an empty home private (mode 0700), and
  /// must never do that to a directory others use (a sticky one such as /tmp or /dev/shm, or one
  /// another user owns), nor take one where others may have planted files before the chmod. A
  /// directory of the user's that their group may write (umask 002) is made private as before.
  /// A directory that is not there yet is made 0700.
  ///
  /// - Throws: `VaultError.sharedDirectory` (nothing was changed).
  package static func checkNewHome(_ home: String) throws {
    var info = stat()
    guard stat(home, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else { return }
    if info.st_uid != geteuid() || info.st_mode & (UInt32(S_ISVTX) | UInt32(S_IWOTH)) != 0 {
      throw VaultError.sharedDirectory(home: home, mode: UInt32(info.st_mode), owner: info.st_uid)
    }
  }

  /// Refuses a home that a stopped restore left half made (it holds the restore's marker): it is
  /// no vault until that restore runs again.
  ///
  /// - Throws: `VaultError.restoreUnfinished`.
  package static func refuseUnfinishedRestore(_ home: String) throws {
    let home = absolutePath(home)
    let found = RestoreMarker.read(home: home)
    if found != .none { throw VaultError.restoreUnfinished(home: home, vaultID: found.vaultID) }
  }

  /// Opens the vault in `home` and loads its active key.
  ///
  /// The manifest must carry a valid MAC under the vault's integrity key (a manifest written by the
  /// release before MACs is upgraded once, under the lock). When the key store's copy of the
  /// manifest is newer than the one in the home (a stale copy was restored), the newer one is used
  /// and written back, so a stale manifest can never drive a rotation.
  ///
  /// - Parameters:
  ///   - home: the home directory (made absolute against the working directory).
  ///   - resolver: builds the key store the manifest names.
  ///   - clock: the time source for manifest writes (finishing a pending version, rotations).
  /// - Returns: the open vault, its active key loaded and checked.
  /// - Throws: `ManifestFile.Failure` when the manifest is missing, corrupt, forged or stripped of
  ///   its MAC; `KeyStoreError` when the store cannot be read (locked, timed out, bad permissions);
  ///   `VaultError.keyMissing` when the active key is absent, `.integrityKeyMissing` when the store
  ///   has no integrity key for a signed manifest, `.keyCheckFailed` when the active key is not
  ///   the one recorded; `.integrityKeyMismatch` when the store's integrity key verifies neither
  ///   the manifest nor the store's copy of it; `.storeMoved` when the keyfile moved meanwhile;
  ///   `.restoreUnfinished` when a restore into `home` stopped part-way. It never creates a key
  ///   for a version that may have sealed data.
  public static func open(
    home: String, resolver: KeyStoreResolver = .system(), clock: @escaping @Sendable () -> Date = Date.init
  ) throws -> Vault {
    try open(home: home, resolver: resolver, clock: clock, finishingStoppedRotation: true)
  }

  /// `open`, leaving a stopped rotation's pending version pending when `finishingStoppedRotation`
  /// is false: what `vault rotate --compromised` opens with, so that its rotation, not the open,
  /// decides whether that version's stored key may be used (it may not: see
  /// `pendingVersionStoredBeforeCompromise`). Finished by the open, that key was made active
  /// before anything recorded the compromise, and a rotation killed then left it active with
  /// nothing to say a compromise rotation had begun (an outside review). A created vault's first
  /// version is finished either way.
  package static func open(
    home: String, resolver: KeyStoreResolver = .system(), clock: @escaping @Sendable () -> Date = Date.init,
    finishingStoppedRotation: Bool
  ) throws -> Vault {
    let home = absolutePath(home)
    try refuseUnfinishedRestore(home)
    let signed = try ManifestFile.read(home: home)
    let store = try resolver.store(for: signed.manifest.store, home: home)
    let keyring = signed.manifest.keyringID!
    let vault: Vault
    if signed.isLegacy, try store.loadRecord(.integrityKey, keyring: keyring) != nil {
      // An upgrade killed after it stored the integrity key and before the signed manifest was in
      // the home; `upgrade` tells that from a stripped manifest and finishes it.
      vault = try upgrade(home: home, store: store, clock: clock)
    } else if let integrityKey = try store.loadRecord(.integrityKey, keyring: keyring).map({
      try SymmetricKey(storage: $0)
    }) {
      vault = Vault(home: home, manifest: signed.manifest, store: store, integrityKey: integrityKey, clock: clock)
      // The lock is taken only when the home or the key store's copy must be rewritten, so opening
      // never waits for a rotation running elsewhere.
      if try vault.adoptVerifiedManifest(heal: false) {
        do {
          try vault.withManifestLock {}
        } catch let error as KeyStoreError where error.isNoRoom {
          // No room (or no write) for the rewrite: the newest authentic manifest, adopted above, is
          // used as it is, so reading works on a full disk; the next open that can write brings the
          // file up to date, and anything that changes the manifest (a rotation) fails there first.
        }
      }
    } else {
      guard signed.isLegacy else { throw try noIntegrityKeyError(signed.manifest, store: store) }
      vault = try upgrade(home: home, store: store, clock: clock)
    }
    let rotating = vault.manifest.versions.contains { $0.state != .pending }
    if vault.manifest.versions.contains(where: { $0.state == .pending }), finishingStoppedRotation || !rotating {
      // A create or rotation stopped part-way; finishing it is safe because nothing was sealed
      // under a pending version. A rotation's (there is an older version) is then still
      // re-sealing: recorded, so that the next rotation resumes it instead of making yet another
      // version while the records are still under the old one.
      do {
        try vault.withManifestLock { try vault.completePendingVersion(resealing: rotating) }
      } catch let error as KeyStoreError where rotating && error.isNoRoom {
        // No room to record it: the version active before the rotation stays active here (nothing
        // was sealed under the pending one), so reading works on a full disk; the next rotation,
        // or the next open that can write, finishes it. After a compromise that version is the
        // leaked one: this vault reads under it and refuses to seal (a security review: `vault
        // seal` on a full disk sealed under it, and the envelope was unreadable once the rotation
        // finished; before that fix, commands that only read refused too).
        if vault.manifest.unfinishedCompromise != nil {
          vault.state.withLock { $0.leakedVersion = $0.manifest.activeVersion }
        }
      }
    }
    _ = try vault.activeKey()
    return vault
  }

  /// What to throw when `store` holds no integrity key for the signed `manifest`: a missing active
  /// key says more (a deleted, moved or replaced keyfile) than a missing record.
  ///
  /// - Returns: `VaultError.keyfileMissing` when the manifest's keyfile is not there at all,
  ///   `.keyMissing` when the active key is gone too, else `.integrityKeyMissing`.
  /// - Throws: the store's error when it cannot be read.
  static func noIntegrityKeyError(_ manifest: Manifest, store: any KeyStore) throws -> VaultError {
    if manifest.store.kind == .keyfile, let path = manifest.store.keyfile, !KeyfileStore(path: path).exists {
      return .keyfileMissing(path: path)
    }
    let active = manifest.activeVersion
    guard let keyring = manifest.keyringID,
      try store.loadKey(keyring: keyring, version: active, check: manifest.record(active)?.check) != nil
    else { return .keyMissing(version: active, store: store.kind) }
    return .integrityKeyMissing(store: store.kind)
  }

  /// Reads the manifest in `home` for display, changing nothing, and says whether it could be
  /// verified: `verified` (MAC checked; a newer copy in the key store is shown instead of a stale
  /// file), `unverified: <why>` when the key store cannot be read right now (a locked keyring), or
  /// `legacy` for a manifest from the release before MACs.
  ///
  /// - Parameters:
  ///   - home: the home directory (made absolute against the working directory).
  ///   - resolver: builds the key store, to read the integrity key and the store's copy.
  /// - Returns: the manifest shown, and `verified`, `unverified: <why>` or `legacy` as above.
  /// - Throws: `ManifestFile.Failure` when the manifest is missing, corrupt or fails its MAC;
  ///   `VaultError.integrityKeyMismatch` when the store's integrity key verifies neither the
  ///   manifest nor the store's copy of it; `VaultError.restoreUnfinished` when a restore into
  ///   `home` stopped part-way.
  public static func inspect(home: String, resolver: KeyStoreResolver = .system()) throws -> (Manifest, String) {
    let inspection = try inspection(home: home, resolver: resolver)
    return (inspection.manifest, inspection.integrity)
  }

  /// What `inspection(home:resolver:)` read: the manifest and integrity `inspect` returns, and the
  /// home's identity (`homeIdentity()`) when the integrity key was read and verified the manifest,
  /// so that `status` and `doctor` need not read the key store a second time for it.
  package struct Inspection: Sendable {
    /// The manifest shown, as `inspect` returns it.
    package let manifest: Manifest
    /// `verified`, `unverified: <why>` or `legacy`, as `inspect` returns it.
    package let integrity: String
    /// The home's identity; nil when the integrity key could not be read.
    package let homeIdentity: String?
  }

  /// `inspect(home:resolver:)`, with the home's identity read from the same integrity key.
  ///
  /// - Parameters:
  ///   - home: the home directory (made absolute against the working directory).
  ///   - resolver: builds the key store, to read the integrity key and the store's copy.
  /// - Returns: the manifest, its integrity and the home's identity.
  /// - Throws: as `inspect(home:resolver:)`.
  package static func inspection(home: String, resolver: KeyStoreResolver = .system()) throws -> Inspection {
    let home = absolutePath(home)
    try refuseUnfinishedRestore(home)
    let signed = try ManifestFile.read(home: home)
    let keyring = signed.manifest.keyringID!
    let integrityKey: SymmetricKey
    do {
      let store = try resolver.store(for: signed.manifest.store, home: home)
      guard let bytes = try store.loadRecord(.integrityKey, keyring: keyring) else {
        if !signed.isLegacy, case .keyfileMissing(let path) = try noIntegrityKeyError(signed.manifest, store: store) {
          return Inspection(
            manifest: signed.manifest,
            integrity: "unverified: its keyfile \(path), which holds the integrity key, is not there", homeIdentity: nil
          )
        }
        return Inspection(
          manifest: signed.manifest,
          integrity: signed.isLegacy ? "legacy" : "unverified: the key store has no integrity key", homeIdentity: nil)
      }
      integrityKey = try SymmetricKey(storage: bytes)
      guard try signed.isAuthentic(under: integrityKey) else {
        // As `open` tells it.
        if integrityKeyFailsTheStoresCopy(store: store, keyring: keyring, integrityKey: integrityKey) {
          throw VaultError.integrityKeyMismatch(store: store.kind)
        }
        throw ManifestFile.Failure.unauthenticated(path: ManifestFile.path(home: home))
      }
      let identity = try? homeIdentity(under: integrityKey)
      if let mirrorBytes = try store.loadRecord(.manifestMirror, keyring: keyring) {
        let mirror = try ManifestFile.parse(mirrorBytes.withUnsafeBytes { Array($0) }, path: "key store copy")
        if try mirror.isAuthentic(under: integrityKey), mirror.manifest.vaultID == signed.manifest.vaultID,
          mirror.manifest.epoch > signed.manifest.epoch
        {
          return movedView(
            mirror.manifest, home: home,
            integrity: "verified (the home's manifest is older than the key store's copy; shown: the copy)",
            homeIdentity: identity)
        }
      }
      return movedView(signed.manifest, home: home, integrity: "verified", homeIdentity: identity)
    } catch let error as KeyStoreError {
      return Inspection(manifest: signed.manifest, integrity: "unverified: \(error)", homeIdentity: nil)
    }
  }

  /// A verified manifest as `inspect` shows it: for a home that was moved (it names another place,
  /// which no longer holds the vault), as the next command that writes will record it, its
  /// containers inside the home followed to the new place; otherwise as it is.
  private static func movedView(_ manifest: Manifest, home: String, integrity: String, homeIdentity: String?)
    -> Inspection
  {
    guard let bound = manifest.home, movedFrom(bound, to: home, vaultID: manifest.vaultID) else {
      return Inspection(manifest: manifest, integrity: integrity, homeIdentity: homeIdentity)
    }
    return Inspection(
      manifest: rebound(manifest, to: home),
      integrity: integrity + " (the home was moved from \(bound); the next command that writes records its new place)",
      homeIdentity: homeIdentity)
  }

  /// Upgrades a vault made by the release before manifest MACs: makes its integrity key and
  /// writes the manifest signed, under the lock. From then on an unsigned manifest is refused.
  private static func upgrade(
    home: String, store: any KeyStore, clock: @escaping @Sendable () -> Date
  ) throws -> Vault {
    let lock = try FileLock(path: home + "/" + lockFileName)
    defer { lock.release() }
    let signed = try ManifestFile.read(home: home)
    let keyring = signed.manifest.keyringID!
    let storedKey = try store.loadRecord(.integrityKey, keyring: keyring)
    if storedKey != nil, !signed.isLegacy {
      // Another process upgraded meanwhile: open normally.
      return try open(home: home, store: store, clock: clock)
    }
    guard signed.isLegacy else { throw VaultError.integrityKeyMissing(store: store.kind) }
    if let mirrorBytes = try store.loadRecord(.manifestMirror, keyring: keyring) {
      // A key store that already holds a signed copy of the manifest belongs to an upgraded vault:
      // without its integrity key, an unsigned file is a downgrade, not an old vault.
      guard let storedKey else { throw VaultError.integrityKeyMissing(store: store.kind) }
      // With it, a copy signed at epoch 1 is the upgrade's own first write, and nothing was
      // signed after it: an upgrade killed after mirroring that write and before its rename into
      // the home (before, every command refused the vault from then on as tampered with, and a
      // vault of the first release has no backup to restore). The copy is the manifest the
      // upgrade made; it is put in the home. Any later copy means the unsigned file replaced a
      // signed one: refused as before.
      let path = ManifestFile.path(home: home)
      let mirror = try ManifestFile.parse(mirrorBytes.withUnsafeBytes { Array($0) }, path: "key store copy")
      guard !mirror.isLegacy, try mirror.isAuthentic(under: try SymmetricKey(storage: storedKey)),
        mirror.manifest.vaultID == signed.manifest.vaultID, mirror.manifest.epoch == 1
      else { throw ManifestFile.Failure.unauthenticated(path: path) }
      try? removeStaleManifestTemporaries(home: home)
      try ManifestFile.write(mirror.bytes, home: home)
      return try open(home: home, store: store, clock: clock)
    }
    // The unsigned file names the store, so nothing in it is trusted yet: upgrade only when that
    // store already holds this vault's active key (a key that was sealing records). A forged
    // format-1 manifest pointing at a new, empty store, or naming a pending version, is refused
    // instead of being signed with a fresh integrity key.
    guard signed.manifest.record(signed.manifest.activeVersion)?.state == .active,
      try store.loadKey(keyring: keyring, version: signed.manifest.activeVersion) != nil
    else {
      throw VaultError.keyMissing(version: signed.manifest.activeVersion, store: store.kind)
    }
    // An integrity key with no signed copy anywhere: an upgrade killed between storing that key
    // and its first signed write. It is finished with the key it stored (nothing was signed
    // under any other).
    let integrityKey: SymmetricKey
    if let storedKey {
      integrityKey = try SymmetricKey(storage: storedKey)
    } else {
      integrityKey = try SymmetricKey.generate()
      try integrityKey.withUnsafeBytes { try store.storeRecord(.integrityKey, bytes: $0, keyring: keyring) }
    }
    // Record key-check values for the keys as they are now, so a swapped item is caught from here on.
    var upgraded = signed.manifest
    upgraded.home = home
    for index in upgraded.versions.indices where upgraded.versions[index].check == nil {
      if let key = try store.loadKey(keyring: keyring, version: upgraded.versions[index].version) {
        upgraded.versions[index].check = try KeyVersionRecord.checkValue(of: key)
      }
    }
    let vault = Vault(home: home, manifest: upgraded, store: store, integrityKey: integrityKey, clock: clock)
    try vault.save(upgraded)
    return vault
  }

  private static func open(home: String, store: any KeyStore, clock: @escaping @Sendable () -> Date) throws -> Vault {
    let signed = try ManifestFile.read(home: home)
    guard let key = try store.loadRecord(.integrityKey, keyring: signed.manifest.keyringID!) else {
      throw VaultError.integrityKeyMissing(store: store.kind)
    }
    let vault = Vault(
      home: home, manifest: signed.manifest, store: store, integrityKey: try SymmetricKey(storage: key), clock: clock)
    try vault.adoptVerifiedManifest(heal: true)
    return vault
  }

  // MARK: - Seal and open

  /// Seals `plaintext`, a record your application keeps itself (in a file, its own database,
  /// anywhere but a vault container), bound to `context`.
  ///
  /// The context says what the record is for (`"notes/42"`); the same context must be given to
  /// `open(_:context:)`, and a record never opens under another. It is bound as the `app` domain
  /// of envelope format 2 (SECURITY.md, "Contexts"), so no app context can be taken for a queue
  /// record's.
  ///
  /// Safe across rotation: the first seal under a key version records that version in the
  /// manifest as used outside containers, so `rotate()` never deletes a key such a record may
  /// need (only a rotation after a compromise does, and says so). A seal waits while a rotation
  /// holds the vault's lock.
  ///
  /// - Parameters:
  ///   - plaintext: the record, any size up to the memory available (it is held twice).
  ///   - context: what the record is for; must not be empty.
  /// - Returns: the envelope: `plaintext.count + 89` bytes (format 2), or `+ 45` while the
  ///   active key version is one made before format 2 (`status` then says to rotate).
  /// - Throws: `EnvelopeError.emptyContext`; `KeyStoreError` when the key store cannot be read
  ///   (a locked keyring, a timeout); `VaultError` when the active key is missing or wrong, and
  ///   the errors of `reload()` when the manifest changed on disk (another process rotated) and
  ///   the new one fails its checks; `KeyStoreError` also when the first seal under a version
  ///   cannot record its pin in the manifest (its copy in the store, or its file: a full disk);
  ///   `VaultError.compromisedVersionActive` when the active version is the one an unfinished
  ///   rotation after a compromise replaces and its new version could not be made active;
  ///   `CryptoError.randomUnavailable` when no nonce can be drawn.
  public func seal(_ plaintext: some DataProtocol, context: String) throws -> Data {
    Data(try Self.withBytes(of: plaintext) { try sealPinned($0, context: .app(Array(context.utf8))) })
  }

  /// Seals `plaintext` bound to a context given as bytes (not necessarily UTF-8; compared byte for
  /// byte), both as byte arrays. Otherwise the same as `seal(_:context:)` with a `String` context.
  ///
  /// - Parameters:
  ///   - plaintext: the record.
  ///   - context: what the record is for, as bytes; must not be empty.
  /// - Returns: the envelope (`plaintext.count + 89` bytes, or `+ 45` under a pre-format-2 key).
  /// - Throws: as `seal(_:context:)` with a `String` context.
  public func seal(_ plaintext: [UInt8], context: [UInt8]) throws -> [UInt8] {
    try plaintext.withUnsafeBytes { try sealPinned($0, context: .app(context)) }
  }

  /// Opens an envelope made by `seal(_:context:)` (or by `vault seal`) with the same context.
  ///
  /// - Parameters:
  ///   - envelope: the bytes `seal` returned, unchanged.
  ///   - context: the context it was sealed with.
  /// - Returns: the plaintext. Nothing is returned unless every check passed.
  /// - Throws: `EnvelopeError`, a distinct case for each reason (not an envelope, truncated,
  ///   another vault's, a retired or unknown key version, a context or key that does not match,
  ///   a modified byte), never saying anything about the contents; `KeyStoreError` when the key
  ///   store cannot be read right now; `VaultError.keyMissing` or `.keyCheckFailed` when the
  ///   version's key is gone from the store or is not the one recorded; `ManifestFile.Failure`
  ///   when the manifest changed on disk and the new one fails its checks.
  public func open(_ envelope: some DataProtocol, context: String) throws -> Data {
    Data(try Self.withBytes(of: envelope) { try open($0, context: .app(Array(context.utf8))) })
  }

  /// Opens an envelope sealed with a context given as bytes, both as byte arrays. Otherwise the
  /// same as `open(_:context:)` with a `String` context.
  ///
  /// - Parameters:
  ///   - envelope: the bytes `seal` returned, unchanged.
  ///   - context: the context it was sealed with, byte for byte.
  /// - Returns: the plaintext.
  /// - Throws: as `open(_:context:)` with a `String` context.
  public func open(_ envelope: [UInt8], context: [UInt8]) throws -> [UInt8] {
    try envelope.withUnsafeBytes { try open($0, context: .app(context)) }
  }

  /// Calls `body` with the bytes of `data`, copying only when they are not contiguous.
  private static func withBytes<T>(of data: some DataProtocol, _ body: (UnsafeRawBufferPointer) throws -> T) rethrows
    -> T
  {
    if let result = try data.withContiguousStorageIfAvailable({ try body(UnsafeRawBufferPointer($0)) }) {
      return result
    }
    return try Array(data).withUnsafeBytes(body)
  }

  /// Seals under the active version after making sure the manifest pins it as used outside
  /// containers. Under the lock's shared mode no rotation can run meanwhile, so the version sealed
  /// under is the one found pinned; the first seal under a version pins it under the exclusive lock.
  private func sealPinned(_ plaintext: UnsafeRawBufferPointer, context: EnvelopeContext) throws -> [UInt8] {
    guard !context.isEmpty else { throw EnvelopeError.emptyContext }
    return try withActiveVersionPinned { try seal(plaintext, context: context, under: $0) }
  }

  /// Runs `body` with the active version, pinned in the manifest as used outside containers, while
  /// no rotation can run (the lock's shared mode, or the exclusive mode for the first pin).
  func withActiveVersionPinned<T>(_ body: (UInt32) throws -> T) throws -> T {
    if !holdsManifestLock {
      let pinned: T? = try sealLock.withShared {
        try refreshIfChanged()
        let (version, pinned, compromisePending, leaked) = state.withLock {
          (
            $0.manifest.activeVersion, $0.manifest.externalSealVersions.contains($0.manifest.activeVersion),
            $0.manifest.hasPendingCompromiseVersion,
            $0.leakedVersion
          )
        }
        // Opened on a full disk under the leaked version: refused here, before any write is tried.
        if leaked == version { throw VaultError.compromisedVersionActive(version: version) }
        // A rotation after a compromise stopped before its new version was active (this process
        // opened the vault before): the active version is the leaked one, so the pending version
        // is finished first, under the exclusive lock, as opening does.
        return pinned && !compromisePending ? try body(version) : nil
      }
      if let pinned { return pinned }
    }
    return try withManifestLock {
      if manifest.hasPendingCompromiseVersion {
        // A security review: a process that had the vault open before such a rotation stopped
        // sealed under the leaked version. No rotation runs while the lock is held, so the
        // pending version is one a stopped rotation left; with no room to record it, nothing is
        // sealed.
        do {
          try completePendingVersion(resealing: true)
        } catch let error as KeyStoreError where error.isNoRoom {
          throw VaultError.compromisedVersionActive(version: manifest.activeVersion)
        }
      }
      let version = manifest.activeVersion
      // Not pinned either: a pin would keep the leaked key past the rotation that retires it.
      try refuseSealing(under: version)
      if !manifest.externalSealVersions.contains(version) {
        var next = manifest
        next.externalSealVersions.append(version)
        try save(next)
      }
      return try body(version)
    }
  }

  /// Seals a container record under the active key, bound to `context`, in the format of the
  /// active version's suite. Records nothing: the container's own records are counted by
  /// rotation, which re-seals them.
  package func seal(_ plaintext: UnsafeRawBufferPointer, context: EnvelopeContext) throws -> [UInt8] {
    guard !context.isEmpty else { throw EnvelopeError.emptyContext }
    try refreshIfChanged()
    return try seal(plaintext, context: context, under: activeVersion)
  }

  /// Seals under `version`, which must be the active version or one kept decrypt-only.
  func seal(_ plaintext: UnsafeRawBufferPointer, context: EnvelopeContext, under version: UInt32) throws
    -> [UInt8]
  {
    // Read in place: `manifest` would copy the whole manifest, and `record(_:)` the record, for one field.
    let (state, leaked) = self.state.withLock { state in
      (
        state.manifest.versions.firstIndex { $0.version == version }.map { state.manifest.versions[$0].state },
        state.leakedVersion
      )
    }
    guard state?.isLive == true else { throw VaultError.noActiveKey }
    guard leaked != version else { throw VaultError.compromisedVersionActive(version: version) }
    let key = try key(for: version)
    switch key.suite {
    case Envelope.suiteAES256GCM:
      return try context.format1Bytes.withUnsafeBytes {
        try Envelope.sealFormat1(plaintext, key: key, keyring: keyringID, version: version, context: $0)
      }
    default:
      return try withUnsafeTemporaryAllocation(byteCount: Envelope.randomByteCount, alignment: 1) { random in
        try KernelRandom.fill(random)
        return try Envelope.sealFormat2(
          plaintext, key: key, keyring: keyringID, version: version, random: UnsafeRawBufferPointer(random),
          context: context)
      }
    }
  }

  /// Throws when `version` is the one an unfinished rotation after a compromise replaces and this
  /// vault could not make the new version active when it opened (`State.leakedVersion`).
  private func refuseSealing(under version: UInt32) throws {
    if state.withLock({ $0.leakedVersion }) == version {
      throw VaultError.compromisedVersionActive(version: version)
    }
  }

  /// Opens an envelope sealed by this vault with the same `context`, in either format. The
  /// envelope's suite must be its key version's.
  package func open(_ envelope: UnsafeRawBufferPointer, context: EnvelopeContext) throws -> [UInt8] {
    let header = try Envelope.header(of: envelope)
    guard header.keyring == keyringID else {
      throw EnvelopeError.wrongKeyring(found: header.keyring, expected: keyringID)
    }
    try refreshIfChanged()
    let key = try key(for: header.version)
    guard key.suite == header.suite else {
      throw EnvelopeError.suiteMismatch(version: header.version, envelope: header.suite, key: key.suite)
    }
    if header.format == Envelope.format1 {
      return try context.format1Bytes.withUnsafeBytes { try Envelope.openFormat1(envelope, key: key, context: $0) }
    }
    return try Envelope.openFormat2(envelope, key: key, context: context)
  }

  package func seal(_ plaintext: [UInt8], context: EnvelopeContext) throws -> [UInt8] {
    try plaintext.withUnsafeBytes { try seal($0, context: context) }
  }

  package func open(_ envelope: [UInt8], context: EnvelopeContext) throws -> [UInt8] {
    try envelope.withUnsafeBytes { try open($0, context: context) }
  }

  // MARK: - Keys

  /// The version new records are sealed under, as this process last read the manifest.
  public var activeVersion: UInt32 { state.withLock { $0.manifest.activeVersion } }

  /// The manifest as this process last read or wrote it.
  public var manifest: Manifest { state.withLock { $0.manifest } }

  /// Whether opening this vault found the home's manifest older than the key store's copy and
  /// replaced it with the newer one (a stale manifest was restored).
  public var supersededStaleManifest: Bool { state.withLock { $0.supersededStaleManifest } }

  /// Re-reads the manifest (another process may have rotated), verifies it, and forgets cached
  /// keys of versions that are no longer usable. `seal` and `open` do this by themselves when the
  /// manifest file changed; call it to see another process's rotation in `manifest` or `status`.
  ///
  /// - Throws: `ManifestFile.Failure` when the manifest is missing or fails its MAC or freshness
  ///   checks; `VaultError.integrityKeyMismatch` when the integrity key verifies neither copy;
  ///   `VaultError.storeMoved` when the keyfile moved since this vault was opened; `KeyStoreError`
  ///   when the store's copy cannot be read.
  public func reload() throws { try adoptVerifiedManifest(heal: false) }

  /// Reloads when the manifest file is not the one this process last saw. The thread inside
  /// `withManifestLock` (a rotation re-sealing every record) skips the `stat`: nobody else can
  /// change the manifest while it holds the lock, and its own saves update the stamp.
  func refreshIfChanged() throws {
    let (seen, holder) = state.withLock { ($0.stamp, $0.lockHolder) }
    let holding = holder.map { pthread_equal($0, pthread_self()) != 0 } ?? false
    if holding { return }
    let current = FileStamp(manifestPath)
    if current != seen {
      sealLock.recheckFile()
      try reload()
    }
  }

  /// Reads the manifest in the home, checks its MAC, compares it with the key store's copy when it
  /// is not newer than what this process saw, and adopts the newest authentic one. With `heal`
  /// (the caller holds the lock) a stale file is replaced by the newer copy and a missing or older
  /// key store copy is rewritten.
  /// - Returns: whether something needs healing that `heal` was not allowed to do (the home holds
  ///   an older manifest than the key store, or the key store's copy is missing or older).
  @discardableResult
  func adoptVerifiedManifest(heal: Bool) throws -> Bool {
    let path = ManifestFile.path(home: home)
    let stampBefore = FileStamp(path)
    let signed = try ManifestFile.read(home: home)
    let (integrityKey, knownEpoch) = state.withLock { ($0.integrityKey, $0.epoch) }
    guard !signed.isLegacy, try signed.isAuthentic(under: integrityKey) else {
      if Self.integrityKeyFailsTheStoresCopy(store: store, keyring: keyringID, integrityKey: integrityKey) {
        throw VaultError.integrityKeyMismatch(store: store.kind)
      }
      throw ManifestFile.Failure.unauthenticated(path: path)
    }
    guard signed.manifest.vaultID == keyringID.hex else { throw ManifestFile.Failure.unauthenticated(path: path) }
    var chosen = signed
    var superseded = false
    var mirrorStale = false
    // The key store's copy is consulted whenever the file is not newer than what this process
    // already saw (always so when opening): that is what a restored old copy looks like.
    if signed.manifest.epoch <= knownEpoch {
      if let mirrorBytes = try store.loadRecord(.manifestMirror, keyring: keyringID) {
        // The file verified; a copy in the key store that does not parse or verify is damaged
        // (the key store is trusted, so this is corruption, not an attack): rewrite it from the file.
        if let mirror = try? ManifestFile.parse(mirrorBytes.withUnsafeBytes { Array($0) }, path: path),
          !mirror.isLegacy, (try? mirror.isAuthentic(under: integrityKey)) == true
        {
          guard mirror.manifest.vaultID == signed.manifest.vaultID else {
            throw ManifestFile.Failure.mismatchedMirror(path: path)
          }
          if mirror.bytes != signed.bytes, mirror.manifest.epoch >= signed.manifest.epoch {
            chosen = mirror
            superseded = true
          } else if mirror.manifest.epoch < signed.manifest.epoch {
            mirrorStale = true
          }
        } else {
          mirrorStale = true
        }
      } else {
        mirrorStale = true
      }
    }
    guard chosen.manifest.epoch >= knownEpoch else {
      // Older than what this process already acted on, and no newer copy anywhere: refuse it.
      throw ManifestFile.Failure.unauthenticated(path: path)
    }
    // Bound to another directory: a copy of a live home is refused; a home that was moved (the
    // old directory no longer holds a manifest) is bound to its new place under the lock.
    var rebind = false
    if let bound = chosen.manifest.home, !Self.sameFile(bound, home) {
      // Only a live home of the same vault makes this a copy; a manifest there that cannot be read
      // is treated as one too (nobody can tell), while another vault there means this one moved.
      guard Self.movedFrom(bound, to: home, vaultID: keyringID.hex) else {
        throw ManifestFile.Failure.copiedHome(path: path, home: bound)
      }
      rebind = true
    }
    // A process that opened the vault before its keyfile was moved holds the old store: it must
    // not write a manifest naming the old place.
    if chosen.manifest.store != state.withLock({ $0.manifest.store }) {
      throw VaultError.storeMoved(home: home)
    }
    var stamp = stampBefore
    if heal {
      if mirrorStale {
        try signed.bytes.withUnsafeBytes { try store.storeRecord(.manifestMirror, bytes: $0, keyring: keyringID) }
      }
      if superseded {
        // What a write killed before its rename left (the key store's copy was written first).
        try? Self.removeStaleManifestTemporaries(home: home)
        try ManifestFile.write(chosen.bytes, home: home)
        stamp = FileStamp(path)
      }
    }
    let fresh = chosen.manifest
    let installed = state.withLock { state -> Bool in
      // Another thread may have installed a newer manifest since this one was read (two reloads at
      // once, or this process's own save): the active version must never go back. A writer that
      // trusted it would store a record under a version a rotation has already retired.
      guard fresh.epoch >= state.epoch else { return false }
      state.manifest = fresh
      state.stamp = stamp
      state.epoch = max(state.epoch, fresh.epoch)
      if superseded, heal { state.supersededStaleManifest = true }
      state.keys = state.keys.filter { version, _ in
        guard let record = fresh.record(version) else { return false }
        return record.state.isLive
      }
      return true
    }
    guard installed else { return false }
    if rebind, heal { try save(Self.rebound(fresh, to: home)) }
    return !heal && (superseded || mirrorStale || rebind)
  }

  /// `manifest` bound to the home it was moved to: its home, and the paths of the containers that
  /// were inside the old home (absolute, so they moved with it: kept as they were, the moved
  /// container would look like a copy and the old path like a missing container).
  static func rebound(_ manifest: Manifest, to home: String) -> Manifest {
    guard let old = manifest.home, old != home else { return manifest }
    var next = manifest
    next.home = home
    for index in next.containers.indices where next.containers[index].path.hasPrefix(old + "/") {
      next.containers[index].path = home + next.containers[index].path.dropFirst(old.count)
    }
    return next
  }

  /// Whether the manifest of a vault bound to `bound` is read in `home` because the home was moved
  /// there: `bound` is another place that no longer holds a live manifest of `vaultID` (one that
  /// does makes `home` a copy, and one that cannot be read is taken as one: nobody can tell).
  package static func movedFrom(_ bound: String, to home: String, vaultID: String) -> Bool {
    guard !sameFile(bound, home) else { return false }
    guard ManifestFile.exists(home: bound) else { return true }
    return ((try? ManifestFile.read(home: bound).manifest.vaultID) ?? vaultID) != vaultID
  }

  /// Whether the key store's own copy of the manifest fails under `integrityKey` too, once the
  /// home's manifest has failed: then the integrity key is what is wrong (a stray or replaced
  /// item), not the manifest, and the error should say so rather than blame the file. No copy,
  /// or one that cannot be read right now, says nothing against the key.
  static func integrityKeyFailsTheStoresCopy(
    store: any KeyStore, keyring: KeyringID, integrityKey: SymmetricKey
  ) -> Bool {
    guard let mirrorBytes = try? store.loadRecord(.manifestMirror, keyring: keyring),
      let mirror = try? ManifestFile.parse(mirrorBytes.withUnsafeBytes { Array($0) }, path: "key store copy")
    else { return false }
    return (try? mirror.isAuthentic(under: integrityKey)) != true
  }

  /// Whether two paths name one existing file or directory (same device and inode), so a home
  /// reached through a symlink is still the same home and a keyfile under another name is itself.
  package static func sameFile(_ a: String, _ b: String) -> Bool {
    if a == b { return true }
    var first = stat()
    var second = stat()
    guard stat(a, &first) == 0, stat(b, &second) == 0 else { return false }
    return first.st_dev == second.st_dev && first.st_ino == second.st_ino
  }

  func activeKey() throws -> (UInt32, VersionKey) {
    let (version, record) = state.withLock {
      ($0.manifest.activeVersion, $0.manifest.record($0.manifest.activeVersion))
    }
    guard record?.state == .active else { throw VaultError.noActiveKey }
    return (version, try key(for: version))
  }

  /// The key for `version`, from the cache or the store, checked against the manifest's key-check
  /// value. An unknown version triggers one manifest reload, since another process may have
  /// rotated since this one loaded it.
  func key(for version: UInt32) throws -> VersionKey {
    if let cached = state.withLock({ $0.keys[version] }) { return cached }
    var record = state.withLock { $0.manifest.record(version) }
    if record == nil {
      try reload()
      record = state.withLock { $0.manifest.record(version) }
    }
    guard let record else {
      if manifest.isRetired(version) { throw EnvelopeError.retiredKeyVersion(version) }
      throw EnvelopeError.unknownKeyVersion(version)
    }
    guard record.state != .retired else { throw EnvelopeError.retiredKeyVersion(version) }
    guard let material = try store.loadKey(keyring: keyringID, version: version, check: record.check) else {
      throw VaultError.keyMissing(version: version, store: store.kind)
    }
    let check = try KeyVersionRecord.checkValue(of: material)
    if let expected = record.check {
      guard constantTimeEquals(check, expected) else { throw VaultError.keyCheckFailed(version: version) }
    }
    let key = try VersionKey(material, suite: record.effectiveSuite)
    state.withLock {
      $0.keys[version] = key
      if record.check == nil { $0.learnedChecks[version] = check }
    }
    return key
  }

  /// The versions still in use (active and decrypt-only) for which the key store holds other items
  /// beside the key recorded: Secret Service items with this vault's attributes that vault did not
  /// store, holding another key or material that is no key. `key(for:)` reads past them by the
  /// key-check value; doctor names them.
  ///
  /// - Returns: each such version and how many items the store holds for it.
  /// - Throws: `KeyStoreError` when the store cannot be read.
  package func versionsWithStrayKeys() throws -> [(version: UInt32, items: Int)] {
    var found: [(version: UInt32, items: Int)] = []
    for record in manifest.versions where record.state.isLive {
      // `loadKey` without a key-check value refuses exactly these (copies of one key are that key);
      // `loadKeyCandidates` leaves an item of another size out, and it went unnamed.
      do {
        _ = try store.loadKey(keyring: keyringID, version: record.version)
      } catch KeyStoreError.ambiguousKey(_, let items) {
        found.append((record.version, items))
      } catch KeyStoreError.corruptKey {
        // One item, not a key: no stray beside it (what reads it says so), and the other versions
        // are still looked at.
        continue
      }
    }
    return found
  }

  /// For a Secret Service vault: the key versions still in use (active, decrypt-only) whose keys,
  /// and whether the integrity key, are held only in the collection gnome-keyring keeps in memory
  /// and empties when the session ends (`SecretServiceStore.keptOnlyInMemory`). Nil for any other
  /// store.
  ///
  /// - Throws: `KeyStoreError` when the store cannot be read.
  package func keysKeptOnlyInMemory() throws -> (versions: [UInt32], integrityKey: Bool)? {
    guard let store = store as? SecretServiceStore else { return nil }
    let found = try store.keptOnlyInMemory(keyring: keyringID)
    let live = manifest.versions.filter { $0.state.isLive }.map(\.version)
    return (found.versions.filter(live.contains), found.integrityKey)
  }

  /// Writes `next` (caller holds the lock, or is creating the vault) and adopts it: a new epoch,
  /// compacted history, signed with the integrity key, mirrored into the key store first and then
  /// written to the home, so the key store's copy is never older than the file.
  func save(_ next: Manifest) throws {
    var next = next
    let (integrityKey, epoch, learned) = state.withLock { ($0.integrityKey, $0.epoch, $0.learnedChecks) }
    let (nextEpoch, overflow) = max(epoch, next.epoch).addingReportingOverflow(1)
    guard !overflow else {
      throw ManifestFile.Failure.corrupt(path: ManifestFile.path(home: home), reason: "epoch exhausted")
    }
    next.epoch = nextEpoch
    for index in next.versions.indices where next.versions[index].check == nil {
      next.versions[index].check = learned[next.versions[index].version]
    }
    next.compactRetiredHistory()
    if next.home == nil { next.home = home }
    let bytes = try ManifestFile.sign(next, key: integrityKey)
    try bytes.withUnsafeBytes { try store.storeRecord(.manifestMirror, bytes: $0, keyring: keyringID) }
    // A write killed before its rename left a temporary that no later write replaces; under the
    // lock none is a write in progress. Best effort: one that cannot go stays for the next write.
    try? Self.removeStaleManifestTemporaries(home: home)
    try ManifestFile.write(bytes, home: home)
    let stamp = FileStamp(ManifestFile.path(home: home))
    state.withLock {
      $0.manifest = next
      $0.epoch = nextEpoch
      $0.stamp = stamp
      $0.keys = $0.keys.filter { version, _ in
        guard let record = next.record(version) else { return false }
        return record.state.isLive || record.state == .pending
      }
    }
  }

  /// Runs `body` holding the home's exclusive lock, with the manifest freshly read, verified and
  /// (if a stale copy was found) healed. Re-entrant on the thread that holds it: a container's
  /// re-seal that seals inside a rotation must not wait for its own lock.
  func withManifestLock<T>(_ body: () throws -> T) throws -> T {
    if holdsManifestLock { return try body() }
    let lock = try FileLock(path: home + "/" + Self.lockFileName)
    state.withLock { $0.lockHolder = pthread_self() }
    defer {
      state.withLock { $0.lockHolder = nil }
      lock.release()
    }
    try adoptVerifiedManifest(heal: true)
    return try body()
  }

  /// The integrity key, for `homeIdentity()` (which says nothing of it).
  var integrityKeyForIdentity: SymmetricKey { state.withLock { $0.integrityKey } }

  /// Whether the calling thread is inside `withManifestLock`.
  var holdsManifestLock: Bool {
    state.withLock { state in state.lockHolder.map { pthread_equal($0, pthread_self()) != 0 } ?? false }
  }

  /// Adds the next version as pending: generates its key, records its key-check value in the
  /// manifest, then stores the key. A crash in between leaves a pending version whose key is either
  /// absent (a new one is made on resume; nothing was sealed under it) or exactly the one recorded.
  /// With `compromise` (a rotation after a compromise), the same write marks the rotation as one,
  /// so that no crash point leaves a version made for a compromise that an ordinary rotation could
  /// finish. Caller holds the lock.
  ///
  /// - Parameters:
  ///   - compromise: whether this is a rotation after a compromise.
  ///   - setAside: a pending version to make decrypt-only in the same write (see
  ///     `pendingVersionStoredBeforeCompromise`).
  func addPendingVersion(compromise: Bool = false, settingAside setAside: UInt32? = nil) throws {
    var next = manifest
    if let setAside { next.setState(.decryptOnly, of: setAside) }
    let (version, overflow) = next.highestVersion.addingReportingOverflow(1)
    guard !overflow, version < UInt32.max else { throw VaultError.versionsExhausted(highest: next.highestVersion) }
    let material = try SymmetricKey.generate()
    next.highestVersion = version
    next.versions.append(
      KeyVersionRecord(
        version: version, state: .pending, createdAt: timestamp(clock()),
        check: try KeyVersionRecord.checkValue(of: material), suite: KeyVersionRecord.currentSuite))
    if compromise { next.unfinishedCompromise = version }
    // An item the store already holds at the new version was not made by this vault: refused now,
    // with nothing recorded. Recorded first, the pending version would make every later open
    // refuse that item too (it cannot be adopted), not only this rotation.
    guard try !requireStoredKeysForLiveVersions().contains(version) else {
      throw VaultError.unexpectedKeyItem(version: version, store: store.kind)
    }
    try save(next)
    try store.storeVaultKey(material, keyring: keyringID, version: version)
  }

  /// Generating a key is safe only while the store still holds every version that may have sealed
  /// data: a lost keyfile must be an error, not a fresh file with one new key in it.
  ///
  /// - Returns: the versions the store holds.
  @discardableResult
  private func requireStoredKeysForLiveVersions() throws -> Set<UInt32> {
    let stored = Set(try store.storedVersions(keyring: keyringID))
    for record in manifest.versions where record.state.isLive {
      guard stored.contains(record.version) else {
        throw VaultError.keyMissing(version: record.version, store: store.kind)
      }
    }
    return stored
  }

  /// Finishes the pending version, if any: adopts a key the store already holds only when its
  /// key-check value is the one recorded, otherwise generates one (recording its check value before
  /// storing it); proves it with a seal/open round trip; then makes it active and the previous
  /// active version decrypt-only, in one manifest write that also marks the rotation as re-sealing
  /// when `resealing` is set, and as one after a compromise when `compromise` is. Caller holds
  /// the lock.
  func completePendingVersion(resealing: Bool = false, compromise: Bool = false) throws {
    guard let pendingRecord = manifest.versions.first(where: { $0.state == .pending }) else { return }
    let pending = pendingRecord.version
    let material: SymmetricKey
    if let existing = try store.loadKey(keyring: keyringID, version: pending, check: pendingRecord.check) {
      // Only a key this vault recorded may be adopted; anything else was not made by this vault.
      guard let expected = pendingRecord.check,
        constantTimeEquals(try KeyVersionRecord.checkValue(of: existing), expected)
      else {
        throw VaultError.unexpectedKeyItem(version: pending, store: store.kind)
      }
      material = existing
    } else {
      try requireStoredKeysForLiveVersions()
      material = try SymmetricKey.generate()
      var next = manifest
      if let index = next.versions.firstIndex(where: { $0.version == pending }) {
        next.versions[index].check = try KeyVersionRecord.checkValue(of: material)
      }
      try save(next)
      try store.storeVaultKey(material, keyring: keyringID, version: pending)
    }
    // Read back what the store holds: the round trip must use the key that future opens will load
    // (by the key-check value recorded for it, should a stray item have appeared beside it).
    let recorded = try KeyVersionRecord.checkValue(of: material)
    guard let stored = try store.loadKey(keyring: keyringID, version: pending, check: recorded), stored == material
    else {
      throw VaultError.keyMissing(version: pending, store: store.kind)
    }
    let key = try VersionKey(stored, suite: pendingRecord.effectiveSuite)
    try selfTest(key, version: pending)

    var next = manifest
    if next.activeVersion != pending, next.record(next.activeVersion)?.state == .active {
      next.setState(.decryptOnly, of: next.activeVersion)
    }
    next.setState(.active, of: pending)
    next.activeVersion = pending
    if resealing { next.resealing = pending }
    if compromise { next.unfinishedCompromise = pending }
    try save(next)
    state.withLock { $0.keys[pending] = key }
  }

  /// Seals and opens a probe under `key` in its suite's format before the version may seal records.
  private func selfTest(_ key: VersionKey, version: UInt32) throws {
    let probe: [UInt8] = Array("vault self-test".utf8)
    let context = EnvelopeContext(domain: "self-test", parts: [Array("version".utf8)], format1Bytes: [])
    do {
      let opened = try probe.withUnsafeBytes { probe -> [UInt8] in
        if key.suite == Envelope.suiteAES256GCM {
          let sealed = try Envelope.sealFormat1(
            probe, key: key, keyring: keyringID, version: version, context: .init(start: nil, count: 0))
          return try sealed.withUnsafeBytes {
            try Envelope.openFormat1($0, key: key, context: .init(start: nil, count: 0))
          }
        }
        let random = try SecureRandom.bytes(Envelope.randomByteCount)
        let sealed = try random.withUnsafeBytes {
          try Envelope.sealFormat2(probe, key: key, keyring: keyringID, version: version, random: $0, context: context)
        }
        return try sealed.withUnsafeBytes { try Envelope.openFormat2($0, key: key, context: context) }
      }
      guard opened == probe else { throw VaultError.roundTripFailed(version: version) }
    } catch {
      throw VaultError.roundTripFailed(version: version)
    }
  }
}

/// Compares two key-check values (hex strings) with VaultCrypto's constant-time comparison.
func constantTimeEquals(_ a: String, _ b: String) -> Bool {
  Array(a.utf8).withUnsafeBytes { x in Array(b.utf8).withUnsafeBytes { constantTimeEquals(x, $0) } }
}

/// The identity of a file as `stat` sees it: a rewrite by rename changes the inode, an in-place
/// change the size or times (the manifest's reload check, and the scan's check that a file was not
/// written while it was read).
package struct FileStamp: Equatable, Sendable {
  let device: UInt64
  let inode: UInt64
  let size: Int64
  let modified: Int
  let modifiedNanoseconds: Int
  let changed: Int
  let changedNanoseconds: Int

  init?(_ path: String) {
    var info = stat()
    guard stat(path, &info) == 0 else { return nil }
    self.init(info)
  }

  /// The stamp of what `stat` or `fstat` filled `info` with.
  package init(_ info: stat) {
    device = UInt64(info.st_dev)
    inode = UInt64(info.st_ino)
    size = Int64(info.st_size)
    modified = info.st_mtim.tv_sec
    modifiedNanoseconds = info.st_mtim.tv_nsec
    changed = info.st_ctim.tv_sec
    changedNanoseconds = info.st_ctim.tv_nsec
  }
}

/// `path` made absolute (against the working directory) and standardised.
package func absolutePath(_ path: String) -> String {
  let expanded = (path as NSString).expandingTildeInPath
  let absolute = expanded.hasPrefix("/") ? expanded : FileManager.default.currentDirectoryPath + "/" + expanded
  return (absolute as NSString).standardizingPath
}

extension KeyStoreError {
  /// Whether this is a write that failed for want of room (a full disk, a quota, a read-only file
  /// system): opening tolerates it where a read can go on without the write.
  var isNoRoom: Bool {
    if case .io(_, _, let code) = self { return [ENOSPC, EDQUOT, EROFS].contains(code) }
    return false
  }
}

extension Manifest {
  /// Whether a rotation after a compromise stopped with its new version still pending: the active
  /// version is then the leaked one.
  var hasPendingCompromiseVersion: Bool {
    unfinishedCompromise != nil && versions.contains { $0.state == .pending }
  }
}
