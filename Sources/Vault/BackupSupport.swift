import Foundation
import VaultCrypto
import VaultKeys

/// One key version as a backup carries it: its manifest record and its key.
package struct ExportedKey: Sendable {
  package let record: KeyVersionRecord
  package let key: SymmetricKey

  package init(record: KeyVersionRecord, key: SymmetricKey) {
    self.record = record
    self.key = key
  }
}

extension Vault {
  /// Runs `body` holding the home's lock in shared mode, with the manifest freshly read: no
  /// rotation can add, re-seal or retire a version meanwhile, while writers keep sealing under the
  /// active version. What a backup takes its keys and snapshots under.
  package func withSharedLock<T>(_ body: () throws -> T) throws -> T {
    let lock = try FileLock(path: home + "/" + Self.lockFileName, shared: true)
    defer { lock.release() }
    try reload()
    return try body()
  }

  /// The key of every version that may still open a record (active and decrypt-only), each
  /// checked against its manifest key-check value. Pending and retired versions are left out.
  ///
  /// - Throws: `VaultError.keyMissing` / `.keyCheckFailed`, or `KeyStoreError` when the store
  ///   cannot be read (a locked keyring): a backup without a key it needs is refused, not written.
  package func exportKeys() throws -> [ExportedKey] {
    var exported: [ExportedKey] = []
    for record in manifest.versions where record.state.isLive {
      guard let material = try store.loadKey(keyring: keyringID, version: record.version, check: record.check) else {
        throw VaultError.keyMissing(version: record.version, store: store.kind)
      }
      if let expected = record.check {
        guard constantTimeEquals(try KeyVersionRecord.checkValue(of: material), expected) else {
          throw VaultError.keyCheckFailed(version: record.version)
        }
      }
      var copy = record
      copy.check = try KeyVersionRecord.checkValue(of: material)
      exported.append(ExportedKey(record: copy, key: material))
    }
    return exported
  }

  /// Makes a new home for a vault restored from a backup: the same vault id (keyring id), the
  /// same key versions with their states and suites, keys written into `descriptor`'s store, a new
  /// integrity key, and the containers `placeContainers` puts into the home registered.
  ///
  /// Refuses, changing nothing, when a vault exists in `home`, `home` holds other files, the
  /// keyfile exists, or the store already holds keys of this vault (the vault lives on here).
  /// Before it writes anything it leaves a marker in the home (`RestoreMarker`), removed as the
  /// last step under the home's lock: a home with the marker is not opened as a vault, and a rerun
  /// into it takes up what a stopped restore of the same vault wrote (the files it writes in the
  /// home; a keyfile or key items in the same store whose integrity key has the check the marker
  /// records, their keys identical to `keys`) instead of being refused.
  /// When a later step fails, the manifest, the containers placed and a keyfile made here are
  /// removed again (Secret Service items already written stay, and so does the marker, for the
  /// rerun: deleting keys is never a side effect).
  ///
  /// - Throws: `VaultError`, `KeyStoreError` as `create`; `VaultError.keyCheckFailed` when a key
  ///   does not match its record's key-check value; `VaultError.restoreUnfinished` when the home
  ///   holds a stopped restore of another vault, `.restoreStoreDiffers` when this one's stopped
  ///   restore used another store, `.restoreKeysPresent` when a new home's store already holds keys
  ///   of this vault, `.orphanedKeyfile` or `.orphanedKeys` when another vault's keys for the new
  ///   home remain; what `placeContainers` throws.
  /// Refuses a new home that another vault lived in and whose keys remain (a keyfile in the
  /// default directory whose manifest copy names it, or Secret Service items of it), as `create`
  /// does: a restore there would leave that vault behind. The restored vault's own keys there
  /// (its home is restored where it was) do not count.
  ///
  /// - Throws: `VaultError.orphanedKeyfile` or `.orphanedKeys`; the Secret Service's error when it
  ///   is there but cannot answer.
  static func refuseOtherVaultsLeftAt(_ home: String, restoring keyring: KeyringID, resolver: KeyStoreResolver) throws {
    if let orphan = keyfilesNaming(home: home).first(where: { $0.vaultID != keyring.hex }) {
      throw VaultError.orphanedKeyfile(home: home, keyfile: orphan.path, vaultID: orphan.vaultID)
    }
    do {
      _ = try checkForOrphanedKeys(home: home, resolver: resolver)
    } catch VaultError.orphanedKeys(let home, let ids) {
      let others = ids.filter { $0 != keyring.hex }
      if !others.isEmpty { throw VaultError.orphanedKeys(home: home, vaultIDs: others) }
    }
  }

  /// This home's identity, which bundles record: an HMAC of a fixed label under the integrity key.
  /// It stays when the home is moved and differs between two homes of one vault (a restore into a
  /// new home makes a new integrity key); it says nothing of the key.
  ///
  /// - Throws: `CryptoError` when the HMAC cannot be computed.
  package func homeIdentity() throws -> String { try Self.homeIdentity(under: integrityKeyForIdentity) }

  static func homeIdentity(under key: SymmetricKey) throws -> String {
    try KeyVersionRecord.labelledCheck(of: key, label: "vault home identity v1")
  }

  package static func restore(
    home: String, store descriptor: StoreDescriptor, resolver: KeyStoreResolver, keyring: KeyringID,
    keys: [ExportedKey], activeVersion: UInt32, highestVersion: UInt32, externalSealVersions: [UInt32],
    unfinishedCompromise: UInt32? = nil, containerNames: [String] = [],
    placeContainers: (String) throws -> [ContainerRecord],
    clock: @escaping @Sendable () -> Date = Date.init
  ) throws -> Vault {
    let home = absolutePath(home)
    guard keys.contains(where: { $0.record.version == activeVersion && $0.record.state == .active }) else {
      throw VaultError.noActiveKey
    }
    for exported in keys {
      let check = try KeyVersionRecord.checkValue(of: exported.key)
      if let expected = exported.record.check, !constantTimeEquals(check, expected) {
        throw VaultError.keyCheckFailed(version: exported.record.version)
      }
    }
    var lock: FileLock?
    defer { lock?.release() }
    let lockPath = home + "/" + lockFileName
    // A restore (or init) under way holds the home's lock until it has finished, and its marker,
    // files and manifest appear one after another: the home is read under that lock whenever its
    // lock file is there, so the checks see a finished home or an empty one, never one half made.
    // (Read without it, a second restore of the same bundle found the first one's marker missing,
    // then its files present, and was refused as "not empty … restore its manifest.json".)
    var stopped: RestoreMarker?
    while true {
      if lock == nil, FileManager.default.fileExists(atPath: lockPath) { lock = try FileLock(path: lockPath) }
      stopped = try stoppedRestore(home: home, vaultID: keyring.hex, locked: lock != nil)
      if stopped != nil { break }
      if ManifestFile.exists(home: home) { throw VaultError.alreadyExists(home: home) }
      guard homeHoldsMoreThanItsLock(home) else { break }
      // A restore that began after the look for the lock file made it, its marker and files: look
      // again, once, under the lock (taken at the top of the loop).
      guard lock == nil, FileManager.default.fileExists(atPath: lockPath) else {
        throw VaultError.homeNotEmpty(home: home)
      }
    }
    var resumed: [UInt32] = []
    if let stopped {
      if lock == nil { lock = try FileLock(path: lockPath) }
      // Under the lock: a restore still running held it until it had finished and removed its
      // marker; it is not taken over.
      guard RestoreMarker.read(home: home) == .marker(stopped) else { throw VaultError.alreadyExists(home: home) }
      try takeUpStoppedRestore(
        stopped, home: home, names: containerNames, descriptor: descriptor, keyring: keyring, keys: keys)
    }
    if stopped == nil {
      try checkNewHome(home)
      try refuseOtherVaultsLeftAt(home, restoring: keyring, resolver: resolver)
      // The keyfile this vault already keeps there (its own home's, usually at the default path) is
      // the case of keys present, not of someone else's file in the way.
      // Read whatever its mode (a keyfile made 0640 is still this vault's: a security review saw it
      // called another vault's).
      let path = keyfilePath(of: descriptor, keyring: keyring)
      if descriptor.kind == .keyfile, let contents = try? keyfileContents(path, requirePrivate: false),
        contents.keyring == keyring, let present = contents.keys.keys.min()
      {
        let home = (try? keyfileManifest(path, requirePrivate: false))?.copy?.manifest.home
        throw VaultError.restoreKeysPresent(store: .keyfile, version: present, home: home)
      }
    }
    let descriptor = try newKeyfileChecked(descriptor, keyring: keyring, home: home)
    let madeKeyfile = descriptor.kind == .keyfile
    let store = try resolver.store(for: descriptor, home: home)
    // The integrity key is made before anything is stored and its check recorded in the marker:
    // a rerun takes over items only from a store whose integrity key is the stopped run's own
    // (another home restored from the same bundle into the same store has its own).
    var integrityKey = try SymmetricKey.generate()
    if let stopped, stopped.store == descriptor,
      let stored = try stopped.storedIntegrityKey(in: store, keyring: keyring)
    {
      guard stored.own else {
        throw KeyStoreError.keyExists(version: try store.storedVersions(keyring: keyring).first ?? activeVersion)
      }
      integrityKey = stored.key
      // Items the stopped restore wrote are taken over only when they are the bundle's own keys.
      resumed = try identicalVersions(in: store, keyring: keyring, keys: keys)
    } else if let present = try store.storedVersions(keyring: keyring).first {
      let home = (try? storedCopy(in: store, keyring: keyring))?.copy?.manifest.home
      throw VaultError.restoreKeysPresent(store: store.kind, version: present, home: home)
    }
    let marker = RestoreMarker(
      vaultID: keyring.hex, store: descriptor, integrityCheck: try KeyVersionRecord.checkValue(of: integrityKey))

    if stopped == nil {
      try SecureFile.makeDirectory(home, mode: 0o700)
      guard chmod(home, 0o700) == 0 else { throw KeyStoreError.io(path: home, operation: "chmod", errno: errno) }
      if lock == nil { lock = try FileLock(path: lockPath) }
      if ManifestFile.exists(home: home) || RestoreMarker.exists(home: home) {
        throw VaultError.alreadyExists(home: home)
      }
      try marker.write(home: home)
    } else if RestoreMarker.read(home: home) != .marker(marker) {
      try marker.replace(home: home)
    }

    var placed: [ContainerRecord] = []
    do {
      try integrityKey.withUnsafeBytes { try store.storeRecord(.integrityKey, bytes: $0, keyring: keyring) }
      // Before any key, a signed copy of the restore's manifest (no container yet) at an epoch
      // above 1. Without one, a restore stopped after storing keys left what an upgrade of a
      // first-release vault killed part-way leaves (an integrity key and no signed copy): with the
      // marker removed and an unsigned manifest put in the home, `Vault.open` finished an
      // "upgrade" by signing that file, whatever it said (a key version retired, an external seal
      // forgotten), and the next rotation deleted a key records needed. A copy at this epoch is
      // refused there. The final manifest is written above it, so the copy's epoch never drops.
      var provisional = Manifest(vaultID: keyring, store: descriptor, createdAt: timestamp(clock()), home: home)
      provisional.versions = keys.map(\.record).sorted { $0.version < $1.version }
      provisional.activeVersion = activeVersion
      provisional.highestVersion = max(highestVersion, provisional.versions.map(\.version).max() ?? 0)
      provisional.externalSealVersions = externalSealVersions.filter { provisional.record($0) != nil }
      provisional.unfinishedCompromise = unfinishedCompromise
      provisional.epoch = Self.restoreProvisionalEpoch
      let provisionalBytes = try ManifestFile.sign(provisional, key: integrityKey)
      try provisionalBytes.withUnsafeBytes { try store.storeRecord(.manifestMirror, bytes: $0, keyring: keyring) }
      for exported in keys.sorted(by: { $0.record.version < $1.record.version })
      where !resumed.contains(exported.record.version) {
        try store.storeVaultKey(exported.key, keyring: keyring, version: exported.record.version)
      }
      placed = try placeContainers(home)
      var manifest = Manifest(vaultID: keyring, store: descriptor, createdAt: timestamp(clock()), home: home)
      manifest.versions = keys.map(\.record).sorted { $0.version < $1.version }
      manifest.activeVersion = activeVersion
      manifest.highestVersion = max(highestVersion, manifest.versions.map(\.version).max() ?? 0)
      manifest.externalSealVersions = externalSealVersions.filter { manifest.record($0) != nil }
      // Kept even when that version was pending (not backed up): the compromised keys are
      // restored, and only a rotation after a compromise may go on from here. Such a version is
      // restored pending, with no key: the first open makes a fresh key for it and makes it
      // active, as it does in the vault backed up. Without it the leaked version stayed active
      // and the restored vault sealed under it (a security review).
      manifest.unfinishedCompromise = unfinishedCompromise
      if let version = unfinishedCompromise, manifest.record(version) == nil, version == manifest.highestVersion,
        version > manifest.versions.map(\.version).max() ?? 0
      {
        manifest.versions.append(
          KeyVersionRecord(
            version: version, state: .pending, createdAt: timestamp(clock()), suite: KeyVersionRecord.currentSuite))
      }
      manifest.containers = placed
      manifest.epoch = Self.restoreProvisionalEpoch
      let vault = Vault(home: home, manifest: manifest, store: store, integrityKey: integrityKey, clock: clock)
      try vault.save(manifest)
      // The last step, under the home's lock: from here on the home opens as a vault, and a
      // restore started meanwhile (waiting for the lock) finds a vault, not a stopped restore.
      try RestoreMarker.remove(home: home)
      return vault
    } catch {
      unlink(ManifestFile.path(home: home))
      for container in placed { removeContainerFile(container.path) }
      if madeKeyfile, let path = descriptor.keyfile {
        unlink(path)
        // Nothing of this restore is left anywhere: the home is as empty as it was.
        try? RestoreMarker.remove(home: home)
      }
      throw error
    }
  }

  /// The epoch of the signed copy a restore stores before its keys: above 1, the epoch at which
  /// `Vault.open` takes a signed copy for an upgrade killed part-way.
  static let restoreProvisionalEpoch: UInt64 = 2

  /// Whether `home` holds anything but the vault's lock file (which a failed restore or init
  /// leaves, and which is no vault); false when it does not exist.
  private static func homeHoldsMoreThanItsLock(_ home: String) -> Bool {
    let entries = (try? FileManager.default.contentsOfDirectory(atPath: home)) ?? []
    return entries.contains { $0 != lockFileName }
  }

  /// Removes a container file a failed restore placed, with the -wal, -shm and -journal SQLite
  /// made beside it: a commit that failed (EIO, a full disk) leaves its log, envelopes and all,
  /// and a home holding it is "not empty" to the rerun, which then refuses to restore.
  package static func removeContainerFile(_ path: String) {
    for suffix in containerFileSuffixes { unlink(path + suffix) }
  }

  /// What a container file's name takes to name it and the files SQLite makes beside it.
  package static let containerFileSuffixes = ["", "-wal", "-shm", "-journal"]

  /// The name of the marker a restore leaves in its home until it is finished: no container may
  /// take it.
  package static let restoreMarkerName = RestoreMarker.fileName

  /// A stopped restore into `home`, as its marker tells: the vault it restores (nil when the
  /// marker does not parse) and the store it began writing keys into; nil when there is none.
  package static func unfinishedRestore(home: String) -> (vaultID: String?, store: StoreDescriptor?)? {
    switch RestoreMarker.read(home: absolutePath(home)) {
    case .none: nil
    case .unreadable: (nil, nil)
    case .marker(let marker): (marker.vaultID, marker.store)
    }
  }

  /// The marker of a stopped restore of `vaultID` in `home`, or nil when there is none.
  ///
  /// - Throws: `VaultError.restoreUnfinished` when the home holds a stopped restore of another
  ///   vault, or an unreadable marker beside files (whose they are cannot be told).
  /// A marker that does not parse is dropped only by a caller holding the home's lock (`locked`):
  /// read without it, it may be the marker a running restore is writing.
  static func stoppedRestore(home: String, vaultID: String, locked: Bool) throws -> RestoreMarker? {
    switch RestoreMarker.read(home: home) {
    case .none: return nil
    case .marker(let marker):
      guard marker.vaultID == vaultID else { throw VaultError.restoreUnfinished(home: home, vaultID: marker.vaultID) }
      return marker
    case .unreadable:
      // Written and synced before anything else: a marker that does not parse stopped the restore
      // before it wrote anything more. Alone in the home (beside the lock) it is dropped.
      guard locked else { return nil }
      let entries = (try? FileManager.default.contentsOfDirectory(atPath: home)) ?? []
      guard entries.allSatisfy({ $0 == lockFileName || $0 == RestoreMarker.fileName }) else {
        throw VaultError.restoreUnfinished(home: home, vaultID: nil)
      }
      try RestoreMarker.remove(home: home)
      return nil
    }
  }

  /// Clears what a stopped restore of the same vault left in `home` (under the home's lock): the
  /// manifest and its temporary files, each container file `names` lists (the names this restore
  /// gives its containers) with its -wal, -shm and -journal, and the keyfile it made (its integrity
  /// key has the marker's check, its keys are the bundle's) with that keyfile's temporaries.
  /// Anything else in the home is left where it is.
  ///
  /// - Throws: `VaultError.restoreStoreDiffers` when the rerun names another store than the
  ///   stopped restore wrote into; `KeyStoreError` when files cannot be removed.
  private static func takeUpStoppedRestore(
    _ stopped: RestoreMarker, home: String, names: [String], descriptor: StoreDescriptor, keyring: KeyringID,
    keys: [ExportedKey]
  ) throws {
    guard resolvingKeyfile(descriptor, keyring: keyring) == stopped.store else {
      throw VaultError.restoreStoreDiffers(home: home, store: stopped.store.kind, keyfile: stopped.store.keyfile)
    }
    let own = Set(names.flatMap { name in containerFileSuffixes.map { name + $0 } } + [Manifest.fileName])
    let entries = try FileManager.default.contentsOfDirectory(atPath: home)
    for name in entries
    where own.contains(name) || isTemporaryName(name) || isTemporaryName(name, of: RestoreMarker.fileName) {
      let path = home + "/" + name
      var info = stat()
      guard lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFREG || info.st_mode & S_IFMT == S_IFLNK else {
        continue
      }
      guard unlink(path) == 0 || errno == ENOENT else {
        throw KeyStoreError.io(path: path, operation: "unlink", errno: errno)
      }
    }
    try SecureFile.syncDirectory(home)
    guard stopped.store.kind == .keyfile, let path = stopped.store.keyfile else { return }
    let made = KeyfileStore(path: path)
    // A keyfile write killed mid-way leaves a temporary beside it, keys and all.
    _ = try? made.removeLeftoverTemporaryFiles()
    guard made.exists else { return }
    // Only the keyfile the stopped run made: its integrity key is the one the marker checks, and
    // its keys are the bundle's (another home restored into that path since has its own).
    guard (try? stopped.storedIntegrityKey(in: made, keyring: keyring))??.own == true else {
      throw VaultError.keyfileExists(path: path)
    }
    _ = try identicalVersions(in: made, keyring: keyring, keys: keys)
    guard unlink(path) == 0 else { throw KeyStoreError.io(path: path, operation: "unlink", errno: errno) }
    try SecureFile.syncDirectory((path as NSString).deletingLastPathComponent)
  }

  /// The versions `store` holds for `keyring`, each of which must be byte for byte the key `keys`
  /// carries for it. An item another program stored beside the restore's own, with another key,
  /// is read past by the bundle key's key-check value, as `Vault` reads its keys.
  ///
  /// - Throws: `KeyStoreError.keyExists` for the first version that is not one of `keys`, or holds
  ///   other bytes: it is not this restore's, and is never overwritten.
  private static func identicalVersions(
    in store: any KeyStore, keyring: KeyringID, keys: [ExportedKey]
  ) throws -> [UInt32] {
    let present = try store.storedVersions(keyring: keyring)
    for version in present {
      guard let expected = keys.first(where: { $0.record.version == version }),
        try store.loadKey(
          keyring: keyring, version: version, check: try KeyVersionRecord.checkValue(of: expected.key))
          == expected.key
      else {
        throw KeyStoreError.keyExists(version: version)
      }
    }
    return present
  }
}

/// The keys of a backup, to open the envelopes of its container snapshots without a vault home.
package struct BundleKeys: Sendable {
  package let keyring: KeyringID
  private let keys: [UInt32: VersionKey]

  /// - Throws: `EnvelopeError.unsupportedSuite` for a suite this release does not know.
  package init(keyring: KeyringID, keys: [ExportedKey]) throws {
    self.keyring = keyring
    var map: [UInt32: VersionKey] = [:]
    for exported in keys {
      map[exported.record.version] = try VersionKey(exported.key, suite: exported.record.effectiveSuite)
    }
    self.keys = map
  }

  /// Opens `envelope`, sealed with `context`, as the vault would: same keyring, a version present,
  /// the version's suite, then the envelope's own checks.
  ///
  /// - Returns: the header's key version (the plaintext is dropped at once).
  /// - Throws: `EnvelopeError`, one case per reason.
  package func check(_ envelope: [UInt8], context: EnvelopeContext) throws -> UInt32 {
    var plaintext = try open(envelope, context: context)
    plaintext.withUnsafeMutableBytes { zeroBytes($0) }
    return try envelope.withUnsafeBytes { try Envelope.header(of: $0).version }
  }

  /// Opens `envelope`, sealed with `context`, as `check` does, and returns its plaintext (the
  /// caller zeroes it when done).
  ///
  /// - Throws: `EnvelopeError`, one case per reason.
  package func open(_ envelope: [UInt8], context: EnvelopeContext) throws -> [UInt8] {
    try envelope.withUnsafeBytes { envelope in
      let header = try Envelope.header(of: envelope)
      guard header.keyring == keyring else {
        throw EnvelopeError.wrongKeyring(found: header.keyring, expected: keyring)
      }
      guard let key = keys[header.version] else { throw EnvelopeError.unknownKeyVersion(header.version) }
      guard key.suite == header.suite else {
        throw EnvelopeError.suiteMismatch(version: header.version, envelope: header.suite, key: key.suite)
      }
      if header.format == Envelope.format1 {
        return try context.format1Bytes.withUnsafeBytes { try Envelope.openFormat1(envelope, key: key, context: $0) }
      }
      return try Envelope.openFormat2(envelope, key: key, context: context)
    }
  }
}

/// Overwrites `buffer` with zeros (`explicit_bzero`, which the optimiser may not remove).
package func zeroBytes(_ buffer: UnsafeMutableRawBufferPointer) {
  guard let base = buffer.baseAddress, buffer.count > 0 else { return }
  explicit_bzero(base, buffer.count)
}
