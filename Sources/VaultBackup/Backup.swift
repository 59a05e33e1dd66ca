import Foundation
import Vault
import VaultCrypto
import VaultKeys
import VaultQueue

/// Backup bundles of a vault: one file holding its manifest, its key versions wrapped under a
/// passphrase, and snapshots of its containers (SECURITY.md, "Backup bundles").
public enum Backup {
  /// How many bundles of a vault `create` keeps in its directory unless told otherwise.
  public static let defaultKeep = 5

  /// Writes a bundle of `vault` into `directory`, verifies it, then removes this vault's older
  /// bundles beyond the newest `keep`.
  ///
  /// The keys and the snapshots are taken under the vault's lock in shared mode: no rotation runs
  /// meanwhile, while writers keep enqueueing (every record committed before the call is in the
  /// bundle). The bundle is written to a temporary name, synced, renamed and the directory synced;
  /// older bundles are removed only after the new one verified.
  ///
  /// - Parameters:
  ///   - vault: the vault to back up.
  ///   - directory: where bundles are kept; must exist, and be writable only by its owner (this user
  ///     or root) or have the sticky bit.
  ///   - passphrase: wraps the keys (scrypt, then AES-256-GCM).
  ///   - keep: how many of this vault's bundles to keep, at least 1.
  ///   - toolVersion: the release writing it, recorded in the manifest.
  ///   - clock: the time recorded and used in the bundle's name.
  ///   - progress: told each step as it starts (for a progress display); nil by default.
  /// - Returns: what was written, verified and removed.
  /// - Throws: `BackupError` (`.invalidKeep`, `.notADirectory`, `.sharedDirectory` (others may
  ///   rename entries in `directory`), `.containerMissing`, `.containerMergeUnfinished` (a merge into
  ///   a container began and did not finish), `.mergeRunning` (it is running now), `.io`, or a
  ///   verification failure of the new bundle, which is then removed and never takes a bundle's
  ///   name);
  ///   `KeyStoreError` / `VaultError` when a key cannot be read; `QueueError` when a container
  ///   cannot be snapshotted.
  public static func create(
    vault: Vault, to directory: String, passphrase: Passphrase, keep: Int = defaultKeep,
    toolVersion: String = "unknown", clock: @escaping @Sendable () -> Date = Date.init,
    progress: (@Sendable (BackupStep) -> Void)? = nil
  ) throws -> BackupReport {
    try create(
      vault: vault, to: directory, passphrase: passphrase, keep: keep, toolVersion: toolVersion, clock: clock,
      kdf: .standard, progress: progress)
  }

  /// Checks that `directory` may take bundles, as `create` does first: a directory that no other
  /// user may rename entries in. Call it before asking for a passphrase, so that a mistyped path
  /// is said before the passphrase is typed.
  ///
  /// - Parameter directory: where bundles are to be written.
  /// - Returns: the directory's absolute path.
  /// - Throws: `BackupError.notADirectory`, `.sharedDirectory`.
  @discardableResult
  public static func checkDestination(_ directory: String) throws -> String {
    let directory = absolutePath(directory)
    var info = stat()
    guard stat(directory, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else {
      throw BackupError.notADirectory(path: directory)
    }
    // Everything in DIR is reached by path: another user who may rename entries there could swap a
    // work directory (and read a snapshot) or the partial bundle (and have an older genuine bundle
    // linked in, after which pruning drops the newer ones). The sticky bit stops renames by others.
    let othersMayWrite = info.st_mode & (S_IWGRP | S_IWOTH) != 0 && info.st_mode & S_ISVTX == 0
    if othersMayWrite || (info.st_uid != geteuid() && info.st_uid != 0) {
      throw BackupError.sharedDirectory(path: directory, mode: UInt32(info.st_mode), owner: info.st_uid)
    }
    return directory
  }

  /// Removes the work directory of every backup under way in this process: for a process about
  /// to exit on a signal (SIGINT, SIGTERM), whose backups' own clean-up would not run. It waits
  /// for a container snapshot under way (the step that makes files there); a backup still
  /// running then fails. Without it, the next backup to the same directory removes what a
  /// stopped one left, a minute later.
  /// - Returns: the work directories that could not be removed (normally none).
  @discardableResult
  public static func abandonWork() -> [String] { WorkDirectory.abandonAll() }

  /// The checks of a bundle that need no passphrase and read only its header and manifest: it
  /// can be read, it is a bundle of a format this version reads, its manifest is whole. Call it
  /// before asking for the passphrase (`verify` and `restore` make these checks and the rest).
  ///
  /// - Parameter bundle: the bundle file.
  /// - Throws: `BackupError` (`.io`, `.notABundle`, `.truncated`, `.damagedHeader`,
  ///   `.manifestHashMismatch`, `.damagedManifest`).
  public static func check(bundle: String) throws {
    let path = absolutePath(bundle)
    try checkContainerPaths(try inspect(bundle: path, hashingSnapshots: false), bundle: path)
  }

  /// Refuses a manifest whose container paths cannot be container files: each must be absolute,
  /// with a file name last (not "/", nor a path ending in "/", "." or ".."), no "." or ".."
  /// component and no NUL, as `Vault.registerContainer` records them. A restore names each new
  /// container after that file name; "/" passed verification and then failed the restore half-way.
  /// `check(bundle:)` and every verification (so `restore` and `merge`) make this one check.
  ///
  /// - Parameters:
  ///   - manifest: the bundle's manifest.
  ///   - bundle: the bundle's path, for the error.
  /// - Throws: `BackupError.damagedManifest` naming the container by its place, never its path.
  static func checkContainerPaths(_ manifest: BackupManifest, bundle: String) throws {
    for (index, container) in manifest.containers.enumerated() {
      let components = container.path.split(separator: "/", omittingEmptySubsequences: false)
      guard container.path.hasPrefix("/"), !container.path.utf8.contains(0), let last = components.last,
        !last.isEmpty, !components.contains(where: { $0 == "." || $0 == ".." })
      else {
        throw BackupError.damagedManifest(path: bundle, reason: "container \(index + 1)'s path is not a file path")
      }
    }
  }

  /// `create` with chosen scrypt parameters: for tests only (real bundles use `.standard`).
  package static func create(
    vault: Vault, to directory: String, passphrase: Passphrase, keep: Int, toolVersion: String,
    clock: @escaping @Sendable () -> Date, kdf: ScryptParameters, progress: (@Sendable (BackupStep) -> Void)? = nil
  ) throws -> BackupReport {
    let started = Date()
    guard keep >= 1 else { throw BackupError.invalidKeep(keep) }
    let directory = try checkDestination(directory)
    let work = try WorkDirectory(parent: directory)
    let now = clock()
    // A container registered by the first release has no id in the manifest nor in its file (and
    // an older schema) until a writer opens it; its snapshot could not be told for this vault's
    // container, and every backup failed until the app or a `vault queue put` wrote to it. One
    // writing open upgrades it and records its id, as rotation's first visit does.
    for container in vault.manifest.containers where container.id == nil {
      guard case .container = try QueueContainer.probe(path: container.path) else { continue }
      _ = try QueueContainer(path: container.path, vault: vault, mode: .existing)
    }
    // Keys and snapshots under one shared lock: the versions exported are the ones the snapshots need.
    let (manifest, keys, containers) = try vault.withSharedLock {
      let manifest = vault.manifest
      let keys = try vault.exportKeys()
      var containers: [(BackupManifest.Container, String)] = []
      for (index, container) in manifest.containers.enumerated() {
        progress?(.snapshotting(container: index + 1, of: manifest.containers.count))
        guard FileManager.default.fileExists(atPath: container.path) else {
          throw BackupError.containerMissing(path: container.path)
        }
        // Another container (of this vault or another) in its place is named as such: its bundle
        // failed verification as "0 records … do not open … (not this vault's container)".
        if let other = try QueueContainer.probe(path: container.path).otherContainer(
          than: container.id, of: vault.keyringID.hex)
        {
          throw BackupError.containerReplaced(path: container.path, found: other)
        }
        // A merge into it that did not finish (see below) is refused before the snapshot, which
        // records in the live container that it passed it: refused backups (an hourly timer)
        // pushed the real bundles' marks out (an outside review).
        let unfinished = try QueueContainer.unfinishedMerges(path: container.path)
        if !unfinished.isEmpty { throw Self.mergeRefusal(container.path, unfinished, home: vault.home) }
        let snapshot = work.path + "/\(index).sqlite"
        let token: String
        do {
          token = try work.making { try QueueContainer.snapshot(path: container.path, to: snapshot) }
        } catch QueueError.diskFull(let path) where path == snapshot {
          // The destination's disk, not the container's: nothing was written, the backup cannot run.
          throw BackupError.io(path: snapshot, operation: "write", errno: ENOSPC)
        }
        // And after, from the copy itself: a merge may have begun in between. A container a merge
        // did not finish may lack records its bundle holds: a backup of it would count as the
        // newest, and `--keep` could prune the bundle with the rest.
        let marks = try readingSnapshot(snapshot, name: container.path, { try $0.lineage() }).unfinishedMerges
        if !marks.isEmpty {
          throw Self.mergeRefusal(container.path, marks.values.map(\.bundle).sorted(), home: vault.home)
        }
        let (size, digest) = try hashFile(snapshot)
        let id = container.id ?? ""
        containers.append(
          (
            BackupManifest.Container(
              path: container.path, id: id, size: size, sha256: hex(digest), snapshotToken: token),
            snapshot
          ))
      }
      return (manifest, keys, containers)
    }
    let backupManifest = BackupManifest(
      format: Int(BundleLayout.format), vaultID: manifest.vaultID, keyringID: vault.keyringID.hex,
      createdAt: millisecondTimestamp(now), toolVersion: toolVersion, activeVersion: manifest.activeVersion,
      highestVersion: manifest.highestVersion, externalSealVersions: manifest.externalSealVersions,
      versions: keys.map {
        BackupManifest.Version(
          version: $0.record.version, state: $0.record.state.rawValue, createdAt: $0.record.createdAt,
          suite: $0.record.effectiveSuite, check: $0.record.check ?? "")
      },
      containers: containers.map(\.0), home: vault.home, homeID: try vault.homeIdentity(),
      unfinishedCompromise: manifest.unfinishedCompromise)
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    let manifestBytes = Array(try encoder.encode(backupManifest))

    // The key section: scrypt(passphrase, salt) → wrapping key and check; the keys sealed under it.
    let salt = try SecureRandom.bytes(BundleLayout.saltCount)
    let nonce = try SecureRandom.bytes(AESGCMKey.nonceByteCount)
    progress?(.derivingKey)
    let derived = try BundleLayout.passphraseKeys(passphrase, salt: salt, parameters: kdf)
    let prefix = BundleLayout.KeyPrefix(
      kdf: BundleLayout.kdfScrypt, parameters: kdf, salt: salt, check: derived.check, nonce: nonce)
    let plaintext = BundleLayout.keyPlaintext(keys)
    let keySectionCount = BundleLayout.keyPrefixCount + plaintext.count + AESGCMKey.tagByteCount
    let header = BundleLayout.Header(
      manifestCount: UInt32(manifestBytes.count), keySectionCount: UInt32(keySectionCount),
      manifestHash: try SHA256.hash(manifestBytes))
    let aad = header.bytes + prefix.bytes
    var sealed = [UInt8](repeating: 0, count: plaintext.count + AESGCMKey.tagByteCount)
    try plaintext.withUnsafeBytes { input in
      try nonce.withUnsafeBytes { nonce in
        try aad.withUnsafeBytes { aad in
          try sealed.withUnsafeMutableBytes {
            try AESGCMKey(derived.wrap).seal(input, nonce: nonce, authenticating: aad, into: $0)
          }
        }
      }
    }

    let name = bundlePrefix(vaultID: manifest.vaultID) + fileStamp(now) + BundleLayout.fileSuffix
    let final = directory + "/" + name
    // In the work directory (in DIR, so linking it is one file system): a backup killed while
    // writing leaves it there, and the next one removes it with the directory.
    let partial = work.path + "/" + name + ".partial"
    var verified: Verified
    do {
      progress?(.writing)
      let file = try work.making { try NewFile(path: partial) }
      try file.write(header.bytes)
      try file.write(manifestBytes)
      try file.write(prefix.bytes)
      try file.write(sealed)
      for (_, snapshot) in containers {
        let reader = try BundleReader(path: snapshot)
        try reader.forEachBlock(at: 0, count: reader.size) { try file.write($0) }
      }
      try file.sync()
      // Verified under its temporary name: a bundle that fails never takes a bundle's name.
      verified = try verify(
        bundle: partial, passphrase: passphrase,
        cached: { candidate in candidate.parameters == kdf && candidate.salt == salt ? derived : nil },
        progress: progress)
      // link, not rename: a bundle of the same name is never replaced.
      try publish(partial, as: final)
      unlink(partial)
      try syncDirectory(directory)
    } catch {
      unlink(partial)
      throw error
    }
    verified.report.bundle = final
    // Where to look, for `status`: the bundle itself is what status reads. The bundle is written and
    // verified by now, so a failure here is a warning: throwing made a good backup look failed.
    var warnings: [String] = []
    let unlisted = ": `status` does not find this backup until a later one to a directory it can list is recorded"
    if directory.contains("\n") {
      // The list holds one path a line: this name would read back as two paths.
      warnings.append(
        "\(directory) holds a newline, so it was not added to the home's list of backup directories" + unlisted)
    } else {
      do {
        try rememberDirectory(directory, home: vault.home)
      } catch {
        warnings.append(
          "\(directory) could not be added to \(vault.home)/\(directoriesFileName) (\(error))" + unlisted)
      }
    }
    // What each registered container holds marks of now: a bundle whose snapshot a container has
    // no mark of is kept (see `prune`). A container that cannot be read keeps every bundle of it.
    var held: [String: Set<String>?] = [:]
    for container in manifest.containers {
      guard let id = container.id else { continue }
      held.updateValue(try? QueueContainer.passedSnapshots(path: container.path), forKey: id)
    }
    let (removed, kept) = try prune(
      directory: directory, vaultID: manifest.vaultID, homeID: try vault.homeIdentity(), keep: keep, newest: name,
      held: held)
    for (bundle, container) in kept {
      warnings.append(
        "\(bundle) was kept, not pruned: registered container \(container) holds no mark of its snapshot, so it may "
          + "lack records that bundle holds (an older copy of it was put back: a file-system restore, a sync; or the "
          + "mark could not be written then); "
          + "merge it into this home (`vault restore \(bundle)`), and the next backup may prune it")
    }
    return BackupReport(
      bundle: final, size: try BundleReader(path: final).size, verification: verified.report, removed: removed,
      seconds: Date().timeIntervalSince(started), warnings: warnings)
  }

  /// Checks a bundle completely without restoring it: header and format, the manifest's hash, the
  /// passphrase (and the key section's tag, which authenticates header and manifest), every
  /// container snapshot's SHA-256, and that every envelope in every snapshot opens with the
  /// bundle's keys.
  ///
  /// - Parameters:
  ///   - bundle: the bundle file.
  ///   - passphrase: the passphrase it was written with.
  /// - Returns: the bundle's manifest and the records per container and key version.
  /// - Throws: `BackupError`, one case per failing part (`.notABundle`, `.truncated`,
  ///   `.newerFormat`, `.damagedHeader`, `.manifestHashMismatch`, `.damagedManifest`,
  ///   `.unacceptableKeyDerivation`, `.wrongPassphrase`, `.damagedKeySection`,
  ///   `.containerHashMismatch`, `.envelopesFailed`, `.damagedSnapshot`, `.io`); `QueueError`
  ///   when this machine fails to read a snapshot (disk full, out of descriptors or memory).
  public static func verify(bundle: String, passphrase: Passphrase) throws -> VerificationReport {
    try verify(bundle: bundle, passphrase: passphrase, progress: nil)
  }

  /// `verify(bundle:passphrase:)`, telling `progress` each step as it starts.
  ///
  /// - Parameters:
  ///   - bundle: the bundle file.
  ///   - passphrase: the passphrase it was written with.
  ///   - progress: told each step (deriving the key, each container verified); nil for none.
  /// - Returns: as `verify(bundle:passphrase:)`.
  /// - Throws: as `verify(bundle:passphrase:)`.
  public static func verify(
    bundle: String, passphrase: Passphrase, progress: (@Sendable (BackupStep) -> Void)?
  ) throws -> VerificationReport {
    try verify(bundle: absolutePath(bundle), passphrase: passphrase, cached: { _ in nil }, progress: progress).report
  }

  /// `verify(bundle:passphrase:)` with the passphrase's two keys already derived, whatever the
  /// bundle's KDF parameters and salt (for the fuzz target: no scrypt per input). A bundle whose
  /// passphrase check differs from `check` is a wrong passphrase, as for a typed one.
  ///
  /// - Parameters:
  ///   - bundle: the bundle file.
  ///   - wrap: the key-section wrapping key.
  ///   - check: the 16-byte passphrase check.
  /// - Returns: as `verify(bundle:passphrase:)`.
  /// - Throws: as `verify(bundle:passphrase:)`.
  package static func verify(bundle: String, wrap: SymmetricKey, check: [UInt8]) throws -> VerificationReport {
    try verify(bundle: absolutePath(bundle), passphrase: try Passphrase("unused"), cached: { _ in (wrap, check) })
      .report
  }

  /// Restores a bundle into a new home: verifies it completely first (nothing is touched before),
  /// then creates the home with the same vault id and key versions in the store `store` names,
  /// and copies the container snapshots into it, registered under their new paths.
  ///
  /// - Parameters:
  ///   - bundle: the bundle file.
  ///   - passphrase: the passphrase it was written with.
  ///   - home: the new home; must not exist or be empty.
  ///   - store: the key store for the restored keys (a keyfile without a path gets the default one).
  ///   - resolver: builds that key store.
  ///   - progress: told each step as it starts (for a progress display); nil by default.
  /// - Returns: the new home, its store and the records restored per container.
  /// A restore stopped part-way (killed, a full disk) leaves a marker in the home: the home does
  /// not open as a vault, and running the same restore again finishes it, taking up what the
  /// stopped one wrote (see `Vault.restore`'s rules: the same store, key items identical to the
  /// bundle's).
  ///
  /// - Throws: `BackupError.homeHoldsThisVault` when `home` already holds this bundle's vault,
  ///   `VaultError.alreadyExists` / `.homeNotEmpty` for another existing home (checked before
  ///   anything else), `VaultError.restoreUnfinished` for a home a stopped restore of another
  ///   vault left, `BackupError` from verification, `VaultError.keyfileExists` or
  ///   `KeyStoreError.keyExists` when the store already holds this vault's keys,
  ///   `VaultError.restoreStoreDiffers` when a rerun names another store than the stopped restore's.
  public static func restore(
    bundle: String, passphrase: Passphrase, into home: String, store: StoreDescriptor,
    resolver: KeyStoreResolver = .system(), progress: (@Sendable (BackupStep) -> Void)? = nil
  ) throws -> RestoreReport {
    let home = absolutePath(home)
    let bundle = absolutePath(bundle)
    try refuseExistingHome(home, bundle: bundle)
    let verified = try verify(bundle: bundle, passphrase: passphrase, cached: { _ in nil }, progress: progress)
    let manifest = verified.manifest
    guard let keyring = KeyringID(hex: manifest.keyringID) else {
      throw BackupError.damagedManifest(path: bundle, reason: "keyring id")
    }
    let reader = try BundleReader(path: bundle)
    // The names the containers get, the same on every run: a rerun clears only these.
    var planned: Set<String> = [Manifest.fileName, "vault.lock", Vault.restoreMarkerName]
    let containerNames = manifest.containers.map { uniqueName(for: $0.path, taken: &planned) }
    let vault = try Vault.restore(
      home: home, store: store, resolver: resolver, keyring: keyring, keys: verified.keys,
      activeVersion: manifest.activeVersion, highestVersion: manifest.highestVersion,
      externalSealVersions: manifest.externalSealVersions, unfinishedCompromise: manifest.unfinishedCompromise,
      containerNames: containerNames,
      placeContainers: { home in
        var placed: [ContainerRecord] = []
        do {
          for (index, container) in manifest.containers.enumerated() {
            progress?(.restoring(container: index + 1, of: manifest.containers.count))
            let path = home + "/" + containerNames[index]
            let file = try NewFile(path: path)
            placed.append(ContainerRecord(path: path, id: container.id))
            try copyContainer(
              container, number: index + 1, at: verified.offsets[index], from: reader, bundle: bundle, into: file,
              sync: true)
            // A new copy of each container, marked before the home is a vault: a later merge tells
            // its records from the original's.
            let origin = try snapshotLineage(path).instance
            try QueueContainer.markRestored(path: path, keyringID: keyring.hex, from: origin)
          }
          try syncDirectory(home)
        } catch {
          for record in placed { Vault.removeContainerFile(record.path) }
          throw error
        }
        return placed
      })
    var restored: [RestoreReport.Container] = []
    for (index, record) in vault.manifest.containers.enumerated() {
      let from = manifest.containers[index].path
      restored.append(
        RestoreReport.Container(from: from, path: record.path, records: verified.report.containers[index].records))
    }
    let descriptor = vault.manifest.store
    return RestoreReport(
      home: vault.home, vaultID: manifest.vaultID, store: descriptor.kind.rawValue,
      keyfile: descriptor.kind == .keyfile ? descriptor.keyfile : nil, activeVersion: vault.manifest.activeVersion,
      containers: restored, records: verified.report.records)
  }

  /// The lineage a container file records, read before it is opened (and upgraded) as the vault's.
  static func snapshotLineage(_ path: String) throws -> ContainerLineage {
    try readingSnapshot(path, name: path) { try $0.lineage() }
  }

  /// Refuses, before anything is read or asked, a restore into a home that holds a vault (naming
  /// it when it is this bundle's vault, as the bundle's manifest says) or any other file.
  ///
  /// - Parameters:
  ///   - home: the home a restore would create.
  ///   - bundle: the bundle to restore; its manifest is read only to name the vault.
  /// - Throws: `BackupError.homeHoldsThisVault`, `VaultError.alreadyExists` (another vault),
  ///   `VaultError.homeNotEmpty`, or `VaultError.restoreUnfinished` when a stopped restore of
  ///   another vault holds the home (one of this bundle's vault is let through, to be taken up).
  public static func refuseExistingHome(_ home: String, bundle: String) throws {
    try refuseExistingHome(absolutePath(home), bundle: bundle, lookedAgain: false)
  }

  private static func refuseExistingHome(_ home: String, bundle: String, lookedAgain: Bool) throws {
    // A restore (or init) under way in `home` holds its lock until it has finished: wait for it,
    // so that the checks below see a finished home, not one half made (a second restore of the
    // same bundle started beside the first read its marker as missing, then its files as someone
    // else's, and was refused with advice to restore a manifest). Only a lock file already there
    // is taken: none is made in a home that may be someone else's.
    let lockPath = home + "/vault.lock"
    let lock = FileManager.default.fileExists(atPath: lockPath) ? try? FileLock(path: lockPath, shared: true) : nil
    defer { lock?.release() }
    if let stopped = Vault.unfinishedRestore(home: home) {
      // A rerun of a stopped restore of this bundle's vault takes it up; `Vault.restore` checks
      // the rest (a marker that does not parse, the store it names).
      let bundleVault = try? inspectManifest(bundle: absolutePath(bundle)).vaultID
      if let vaultID = stopped.vaultID, let bundleVault, vaultID != bundleVault {
        throw VaultError.restoreUnfinished(home: home, vaultID: vaultID)
      }
      return
    }
    if ManifestFile.exists(home: home) {
      if let resident = try? ManifestFile.read(home: home).manifest.vaultID,
        let manifest = try? inspectManifest(bundle: absolutePath(bundle)), manifest.vaultID == resident
      {
        throw BackupError.homeHoldsThisVault(home: home, vaultID: resident)
      }
      throw VaultError.alreadyExists(home: home)
    }
    // The vault's lock file alone is no vault (a restore or an init that failed leaves it, and
    // `Vault.restore` accepts it): a rerun must not be refused for it.
    if let entries = try? FileManager.default.contentsOfDirectory(atPath: home),
      entries.contains(where: { $0 != "vault.lock" })
    {
      // A restore that began after the lock file was looked for made it, its marker and files:
      // wait for it and look again, once.
      if lock == nil, !lookedAgain, FileManager.default.fileExists(atPath: lockPath) {
        return try refuseExistingHome(home, bundle: bundle, lookedAgain: true)
      }
      throw VaultError.homeNotEmpty(home: home)
    }
  }

  // MARK: - Verification

  struct Verified {
    var manifest: BackupManifest
    var keys: [ExportedKey]
    var offsets: [UInt64]
    var report: VerificationReport
  }

  /// Verifies `bundle`; `cached` may hand back the passphrase keys the writer already derived.
  static func verify(
    bundle path: String, passphrase: Passphrase,
    cached: (BundleLayout.KeyPrefix) -> (wrap: SymmetricKey, check: [UInt8])?,
    progress: (@Sendable (BackupStep) -> Void)? = nil
  ) throws -> Verified {
    let reader = try BundleReader(path: path)
    guard reader.size >= UInt64(BundleLayout.magic.count) else {
      throw reader.size == 0 ? BackupError.notABundle(path: path) : BackupError.truncated(path: path, part: "header")
    }
    guard try reader.read(at: 0, count: BundleLayout.magic.count) == BundleLayout.magic else {
      throw BackupError.notABundle(path: path)
    }
    guard reader.size >= UInt64(BundleLayout.headerCount) else {
      throw BackupError.truncated(path: path, part: "header")
    }
    let headerBytes = try reader.read(at: 0, count: BundleLayout.headerCount)
    let header = BundleLayout.Header(parsing: headerBytes)
    if header.format > BundleLayout.format {
      throw BackupError.newerFormat(path: path, found: Int(header.format), supported: Int(BundleLayout.format))
    }
    guard header.format == BundleLayout.format else { throw BackupError.damagedHeader(path: path, reason: "format 0") }
    guard header.flags == 0 else { throw BackupError.damagedHeader(path: path, reason: "unknown flags") }
    guard Int(header.manifestCount) <= BundleLayout.sectionLimit, header.manifestCount > 0 else {
      throw BackupError.damagedHeader(path: path, reason: "manifest length")
    }
    guard Int(header.keySectionCount) <= BundleLayout.sectionLimit,
      Int(header.keySectionCount) >= BundleLayout.keyPrefixCount + 4 + AESGCMKey.tagByteCount
    else {
      throw BackupError.damagedHeader(path: path, reason: "key section length")
    }
    let manifestOffset = UInt64(BundleLayout.headerCount)
    guard reader.size >= manifestOffset + UInt64(header.manifestCount) else {
      throw BackupError.truncated(path: path, part: "manifest")
    }
    let manifestBytes = try reader.read(at: manifestOffset, count: Int(header.manifestCount))
    guard try SHA256.hash(manifestBytes) == header.manifestHash else {
      throw BackupError.manifestHashMismatch(path: path)
    }
    let manifest: BackupManifest
    do {
      manifest = try JSONDecoder().decode(BackupManifest.self, from: Data(manifestBytes))
    } catch {
      throw BackupError.damagedManifest(path: path, reason: "not a bundle manifest")
    }
    guard manifest.format == Int(header.format) else {
      throw BackupError.damagedManifest(path: path, reason: "format differs from the header's")
    }
    try checkContainerPaths(manifest, bundle: path)
    let keyOffset = manifestOffset + UInt64(header.manifestCount)
    guard reader.size >= keyOffset + UInt64(header.keySectionCount) else {
      throw BackupError.truncated(path: path, part: "key section")
    }
    var offsets: [UInt64] = []
    var end = keyOffset + UInt64(header.keySectionCount)
    for (index, container) in manifest.containers.enumerated() {
      offsets.append(end)
      let (next, overflow) = end.addingReportingOverflow(container.size)
      guard !overflow, reader.size >= next else {
        throw BackupError.truncated(path: path, part: "container \(index + 1)")
      }
      end = next
    }
    guard reader.size == end else { throw BackupError.damagedHeader(path: path, reason: "bytes after the last part") }

    // The key section: the passphrase first, then the tag over header, manifest hash and prefix.
    let keySection = try reader.read(at: keyOffset, count: Int(header.keySectionCount))
    let prefix = BundleLayout.KeyPrefix(parsing: Array(keySection.prefix(BundleLayout.keyPrefixCount)))
    guard prefix.kdf == BundleLayout.kdfScrypt, prefix.parameters.isAcceptable else {
      throw BackupError.unacceptableKeyDerivation(path: path)
    }
    let derived: (wrap: SymmetricKey, check: [UInt8])
    if let known = cached(prefix) {
      derived = known
    } else {
      progress?(.derivingKey)
      derived = try BundleLayout.passphraseKeys(passphrase, salt: prefix.salt, parameters: prefix.parameters)
    }
    let checkMatches = derived.check.withUnsafeBytes { a in prefix.check.withUnsafeBytes { constantTimeEquals(a, $0) } }
    guard checkMatches else { throw BackupError.wrongPassphrase(path: path) }
    let aad = headerBytes + prefix.bytes
    let body = keySection[BundleLayout.keyPrefixCount...]
    let opened: SecureBytes
    do {
      opened = try SecureBytes(count: body.count - AESGCMKey.tagByteCount) { out in
        try Array(body).withUnsafeBytes { body in
          try prefix.nonce.withUnsafeBytes { nonce in
            try aad.withUnsafeBytes {
              try AESGCMKey(derived.wrap).open(body, nonce: nonce, authenticating: $0, into: out)
            }
          }
        }
      }
    } catch CryptoError.authenticationFailed {
      throw BackupError.damagedKeySection(path: path)
    }
    guard let parsed = try opened.withUnsafeBytes({ try BundleLayout.parseKeys($0) }),
      parsed.map(\.0) == manifest.versions.map(\.version)
    else {
      throw BackupError.damagedManifest(path: path, reason: "key versions differ from the key section's")
    }
    var keys: [ExportedKey] = []
    for (version, key) in parsed {
      let entry = manifest.versions.first { $0.version == version }!
      guard let state = KeyState(rawValue: entry.state), state.isLive,
        KeyVersionRecord.knownSuites.contains(entry.suite)
      else {
        throw BackupError.damagedManifest(path: path, reason: "state or suite of version \(version)")
      }
      var record = KeyVersionRecord(version: version, state: state, createdAt: entry.createdAt, suite: entry.suite)
      record.check = entry.check
      guard try KeyVersionRecord.checkValue(of: key) == entry.check else {
        throw BackupError.damagedManifest(path: path, reason: "key-check value of version \(version)")
      }
      keys.append(ExportedKey(record: record, key: key))
    }
    guard let keyring = KeyringID(hex: manifest.keyringID), manifest.vaultID == manifest.keyringID,
      keys.contains(where: { $0.record.version == manifest.activeVersion && $0.record.state == .active })
    else {
      throw BackupError.damagedManifest(path: path, reason: "vault id or active version")
    }
    // Versions stop one short of 2^32 - 1 (`VaultError.versionsExhausted`): a bundle claiming more
    // restored a vault whose rotation trapped (a security review, an edited bundle).
    guard manifest.highestVersion < UInt32.max, keys.allSatisfy({ $0.record.version <= manifest.highestVersion }),
      manifest.unfinishedCompromise.map({ $0 <= manifest.highestVersion }) ?? true
    else {
      throw BackupError.damagedManifest(path: path, reason: "highest version")
    }
    let bundleKeys = try BundleKeys(keyring: keyring, keys: keys)

    // Every snapshot: its hash, then every envelope opened.
    let work = try WorkDirectory(parent: NSTemporaryDirectory())
    var containers: [VerificationReport.Container] = []
    var totals: [UInt32: Int] = [:]
    for (index, container) in manifest.containers.enumerated() {
      progress?(.verifying(container: index + 1, of: manifest.containers.count))
      let snapshot = work.path + "/\(index).sqlite"
      let counts = try work.making {
        try copyContainer(
          container, number: index + 1, at: offsets[index], from: reader, bundle: path,
          into: try NewFile(path: snapshot), sync: false)
        defer { unlink(snapshot) }
        return try checkEnvelopes(
          snapshot: snapshot, container: container, index: index + 1, bundle: path, keys: bundleKeys)
      }
      for (version, count) in counts { totals[version, default: 0] += count }
      containers.append(
        VerificationReport.Container(
          path: container.path, id: container.id, size: container.size, records: counts.values.reduce(0, +),
          byVersion: Dictionary(uniqueKeysWithValues: counts.map { (String($0.key), $0.value) })))
    }
    let report = VerificationReport(
      bundle: path, format: manifest.format, vaultID: manifest.vaultID, createdAt: manifest.createdAt,
      toolVersion: manifest.toolVersion, activeVersion: manifest.activeVersion,
      versions: manifest.versions.map {
        VerificationReport.Version(version: $0.version, state: $0.state, suite: $0.suite)
      },
      containers: containers, records: totals.values.reduce(0, +),
      byVersion: Dictionary(uniqueKeysWithValues: totals.map { (String($0.key), $0.value) }))
    return Verified(manifest: manifest, keys: keys, offsets: offsets, report: report)
  }

  /// Copies one container snapshot of a bundle into `file`, hashing it as it goes (and syncing it
  /// when `sync`). The bytes are read again after the bundle was verified, so a bundle changed in
  /// between is caught here.
  ///
  /// - Parameters:
  ///   - container: the snapshot's manifest entry (its size and SHA-256).
  ///   - number: its place in the bundle, from 1, for the error.
  ///   - offset: where it starts in the bundle.
  ///   - reader: the bundle.
  ///   - bundle: the bundle's path, for the error.
  ///   - file: the new file to write.
  ///   - sync: whether to fsync the file before checking the hash.
  /// - Throws: `BackupError.containerHashMismatch` when the bytes are not the manifest's; `.io`.
  static func copyContainer(
    _ container: BackupManifest.Container, number: Int, at offset: UInt64, from reader: BundleReader,
    bundle: String, into file: NewFile, sync: Bool
  ) throws {
    let hasher = try SHA256Hasher()
    try reader.forEachBlock(at: offset, count: container.size) {
      try hasher.update($0)
      try file.write($0)
    }
    if sync { try file.sync() }
    guard hex(try hasher.finish()) == container.sha256 else {
      throw BackupError.containerHashMismatch(path: bundle, index: number, container: container.path)
    }
  }

  /// Runs `body` with the container snapshot at `path` opened read-only as a container
  /// (`name` is how errors call it); `live` reads it through its WAL (a container a writer left
  /// rows in there), else the file alone.
  static func readingSnapshot<T>(
    _ path: String, name: String, live: Bool = false, _ body: (ContainerReader) throws -> T
  ) throws -> T {
    let descriptor = open(path, O_RDONLY | O_CLOEXEC)
    guard descriptor >= 0 else { throw BackupError.io(path: path, operation: "open", errno: errno) }
    defer { close(descriptor) }
    return try body(try ContainerReader(descriptor: descriptor, path: name, live: live))
  }

  /// Opens every envelope of one snapshot with the bundle's keys; counts them per version.
  ///
  /// - Throws: `BackupError.envelopesFailed` for envelopes that do not open, `.damagedSnapshot`
  ///   for a snapshot that is not a readable container; `QueueError` when this machine fails to
  ///   read it (disk full, out of descriptors or memory), which another try may not meet.
  static func checkEnvelopes(
    snapshot: String, container: BackupManifest.Container, index: Int, bundle: String, keys: BundleKeys
  ) throws -> [UInt32: Int] {
    do {
      return try readingSnapshot(snapshot, name: "container \(index)") { reader in
        try countEnvelopes(reader, container: container, index: index, bundle: bundle, keys: keys)
      }
    } catch let error as QueueError {
      switch error {
      // What the snapshot's bytes are, not what this machine did: "restore it from a backup", the
      // container's own advice, would send the user back to this bundle.
      case .corrupt, .notAQueueContainer, .storage:
        throw BackupError.damagedSnapshot(path: bundle, index: index, container: container.path, kind: error.code)
      default: throw error
      }
    }
  }

  private static func countEnvelopes(
    _ reader: ContainerReader, container: BackupManifest.Container, index: Int, bundle: String, keys: BundleKeys
  ) throws -> [UInt32: Int] {
    guard reader.keyringID != nil else {
      throw BackupError.damagedSnapshot(
        path: bundle, index: index, container: container.path, kind: QueueError.notAQueueContainer(path: "").code)
    }
    guard reader.keyringID == keys.keyring.hex, reader.containerID == container.id else {
      throw BackupError.envelopesFailed(
        path: bundle, index: index, container: container.path, failed: 0, kind: "not this vault's container")
    }
    var counts: [UInt32: Int] = [:]
    var failed = 0
    var firstKind: String?
    try reader.forEachEnvelope { id, queue, _, envelope in
      do {
        let version = try keys.check(
          envelope, context: QueueContainer.context(containerID: container.id, queue: queue, id: id))
        counts[version, default: 0] += 1
      } catch {
        failed += 1
        if firstKind == nil { firstKind = (error as? any CodedError)?.code ?? "\(type(of: error))" }
      }
    }
    guard failed == 0 else {
      throw BackupError.envelopesFailed(
        path: bundle, index: index, container: container.path, failed: failed, kind: firstKind ?? "unknown")
    }
    return counts
  }

  // MARK: - Names and pruning

  static func bundlePrefix(vaultID: String) -> String { "vault-\(vaultID)-" }

  /// The names in `directory` of this vault's bundles that this user wrote: regular files with
  /// the vault's prefix, owned by the effective user. In a shared (sticky) directory anyone may
  /// make a file with such a name; it is neither counted, pruned nor taken for the last backup.
  static func ownBundleNames(in directory: String, vaultID: String) -> [String] {
    let prefix = bundlePrefix(vaultID: vaultID)
    let user = geteuid()
    return ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).filter { name in
      guard name.hasPrefix(prefix), name.hasSuffix(BundleLayout.fileSuffix),
        isFileStamp(name.dropFirst(prefix.count).dropLast(BundleLayout.fileSuffix.count))
      else { return false }
      var info = stat()
      return lstat(directory + "/" + name, &info) == 0 && info.st_mode & S_IFMT == S_IFREG && info.st_uid == user
    }
  }

  /// Whether `text` has `fileStamp`'s shape (digits where it has digits): a file of yours named
  /// `vault-ID-notes.vaultbackup` is no bundle of the vault's.
  static func isFileStamp(_ text: Substring) -> Bool {
    let shape = Array("00000000T000000.000Z".utf8)
    let bytes = Array(text.utf8)
    guard bytes.count == shape.count else { return false }
    return zip(bytes, shape).allSatisfy { byte, expected in
      expected == UInt8(ascii: "0") ? (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) : byte == expected
    }
  }

  /// Whether the file at `path` reads as a bundle of `vaultID` by its header and manifest (their
  /// hash checked, nothing authenticated), and, with `homeID`, one taken from the home with that
  /// identity: what pruning removes. A bundle that records no identity (written before it was
  /// recorded) or another one (a second home of the vault, restored into another key store, even
  /// at the same path on another machine) is never pruned: it may be another home's only backup
  /// (two security reviews; the path alone was not enough).
  static func looksLikeBundle(_ path: String, of vaultID: String, homeID: String? = nil) -> Bool {
    bundleManifest(path, of: vaultID, homeID: homeID) != nil
  }

  /// The manifest of the file at `path` when it `looksLikeBundle` (for a caller that reads it next).
  static func bundleManifest(_ path: String, of vaultID: String, homeID: String? = nil) -> BackupManifest? {
    guard let manifest = try? inspectManifest(bundle: path), manifest.vaultID == vaultID else { return nil }
    guard let homeID else { return manifest }
    return manifest.homeID == homeID ? manifest : nil
  }

  /// Whether the file at `path` reads as a bundle of `vaultID` taken from another home than this
  /// one: another identity than `homeID` when both are known, else (no identity to compare) a
  /// recorded home other than `home` that still holds the vault. Not this home's backup.
  static func isAnotherHomesBundle(_ path: String, of vaultID: String, home: String, homeID: String?) -> Bool {
    guard let manifest = try? inspectManifest(bundle: path), manifest.vaultID == vaultID else { return false }
    if let homeID, let theirs = manifest.homeID { return theirs != homeID }
    guard let from = manifest.home else { return false }
    return !Vault.sameFile(from, home) && from != home && !Vault.movedFrom(from, to: home, vaultID: vaultID)
  }

  /// `20261201T160512.123Z`: sorts by time as text.
  static func fileStamp(_ date: Date) -> String {
    let formatter = DateFormatter()
    formatter.locale = Locale(identifier: "en_US_POSIX")
    formatter.timeZone = TimeZone(identifier: "UTC")
    formatter.dateFormat = "yyyyMMdd'T'HHmmss.SSS'Z'"
    return formatter.string(from: date)
  }

  /// Removes this vault's bundles in `directory` beyond the newest `keep` (by the time in their
  /// names); `newest`, just written and verified, is always kept. A bundle newer than `newest`
  /// (a backup running at the same time) counts among the newest and is never removed for it.
  /// Only files whose header and manifest read as this vault's bundle taken from the home with
  /// `homeID` count: a file that only has a bundle's name (a note, a truncated copy), or a bundle of
  /// another home of the same vault (restored into another key store), is neither counted nor
  /// removed.
  ///
  /// A bundle is never removed while a registered container it holds a snapshot of (by container
  /// id, in `held`) has no mark of that snapshot's token, or could not be read (nil): the container
  /// does not hold what the snapshot held (an older copy of it was put back: an outside review
  /// lost ten records when `--keep` pruned the only bundle holding them). Such bundles come back
  /// as `kept`, with the container's path; they do not count against `keep`.
  static func prune(
    directory: String, vaultID: String, homeID: String, keep: Int, newest: String, held: [String: Set<String>?] = [:]
  ) throws -> (removed: [String], kept: [(bundle: String, container: String)]) {
    // Each header and manifest read once: here, and kept for the marks' check below.
    var manifests: [String: BackupManifest] = [:]
    var names = ownBundleNames(in: directory, vaultID: vaultID).filter { name in
      guard name != newest else { return true }
      manifests[name] = bundleManifest(directory + "/" + name, of: vaultID, homeID: homeID)
      return manifests[name] != nil
    }
    if !names.contains(newest) { names.append(newest) }
    let older = names.sorted().dropLast(keep).filter { $0 != newest }
    guard !older.isEmpty else { return ([], []) }
    var removed: [String] = []
    var kept: [(bundle: String, container: String)] = []
    for name in older {
      let path = directory + "/" + name
      var info = stat()
      guard lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { continue }
      if let manifest = manifests[name],
        let lacking = manifest.containers.first(where: { snapshot in
          guard let token = snapshot.snapshotToken, let marks = held[snapshot.id] else { return false }
          return marks?.contains(token) != true
        })
      {
        kept.append((path, lacking.path))
        continue
      }
      if unlink(path) == 0 { removed.append(path) }
    }
    if !removed.isEmpty { try syncDirectory(directory) }
    return (removed, kept)
  }

  /// Gives the written bundle `partial` the name `final` without ever replacing a file of that
  /// name: a hard link, or, where the file system has none (FAT and exFAT answer EPERM; an outside
  /// review found every backup to such a drive failing after the whole write and verify), a rename
  /// that refuses to replace (renameat2's RENAME_NOREPLACE). After the rename `partial` is gone.
  private static func publish(_ partial: String, as final: String) throws {
    guard link(partial, final) != 0 else { return }
    let code = errno
    guard [EPERM, EOPNOTSUPP, ENOSYS].contains(code), let renameNoReplace = renameAt2 else {
      throw BackupError.io(path: final, operation: "link", errno: code)
    }
    let noReplace: UInt32 = 1  // RENAME_NOREPLACE, <linux/fs.h>
    guard renameNoReplace(AT_FDCWD, partial, AT_FDCWD, final, noReplace) == 0 else {
      let code = errno
      // Neither a link nor a rename that cannot replace (a FUSE mount such as ntfs-3g answers
      // EINVAL): named as such, not as a bare "Invalid argument" (a review).
      if code == EINVAL || code == ENOSYS || code == EOPNOTSUPP {
        throw BackupError.noSafePublish(directory: (final as NSString).deletingLastPathComponent)
      }
      throw BackupError.io(path: final, operation: "rename", errno: code)
    }
  }

  /// glibc's renameat2 (2.28 and later), found at run time: Swift's Glibc module declares it only
  /// under _GNU_SOURCE, which it does not define.
  private static let renameAt2:
    (@convention(c) (Int32, UnsafePointer<CChar>?, Int32, UnsafePointer<CChar>?, UInt32) -> Int32)? = {
      guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "renameat2") else { return nil }
      return unsafeBitCast(
        symbol, to: (@convention(c) (Int32, UnsafePointer<CChar>?, Int32, UnsafePointer<CChar>?, UInt32) -> Int32).self)
    }()

  /// Why a container with merge marks is not backed up: the merge is running now (wait for it),
  /// or it did not finish (run it again, or accept the container).
  private static func mergeRefusal(_ path: String, _ bundles: [String], home: String) -> BackupError {
    MergeLock.isHeld(home: home)
      ? .mergeRunning(home: home) : .containerMergeUnfinished(path: path, bundles: bundles)
  }

  /// The registered path's last component, made unique in the new home (`queue.sqlite`, `queue-2.sqlite`).
  static func uniqueName(for path: String, taken: inout Set<String>) -> String {
    var base = (path as NSString).lastPathComponent
    if base.isEmpty || base == "." || base == ".." { base = "container.sqlite" }
    var name = base
    var counter = 2
    while taken.contains(name) {
      let stem = (base as NSString).deletingPathExtension
      let ext = (base as NSString).pathExtension
      name = ext.isEmpty ? "\(stem)-\(counter)" : "\(stem)-\(counter).\(ext)"
      counter += 1
    }
    taken.insert(name)
    return name
  }
}

/// A step of a backup, a verification or a restore, told to a progress display as it starts.
public enum BackupStep: Sendable, Equatable, CustomStringConvertible {
  /// Taking the online snapshot of container `container` (counting from 1) of `of`.
  case snapshotting(container: Int, of: Int)
  /// Deriving the wrapping key from the passphrase (scrypt: about half a second here).
  case derivingKey
  /// Writing the bundle under its temporary name.
  case writing
  /// Checking container `container`'s hash and opening every envelope in it.
  case verifying(container: Int, of: Int)
  /// Copying container `container` into the new home.
  case restoring(container: Int, of: Int)
  /// Merging container `container` into the home's.
  case merging(container: Int, of: Int)

  /// The step in a few words, for a progress line.
  public var description: String {
    switch self {
    case .snapshotting(let container, let count): "snapshot of container \(container) of \(count)"
    case .derivingKey: "deriving the key from the passphrase"
    case .writing: "writing the bundle"
    case .verifying(let container, let count): "verifying container \(container) of \(count)"
    case .restoring(let container, let count): "restoring container \(container) of \(count)"
    case .merging(let container, let count): "merging container \(container) of \(count)"
    }
  }
}
