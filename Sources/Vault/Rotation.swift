import Foundation
import VaultKeys

/// A store of sealed records that takes part in rotation (the queue containers implement it).
///
/// The coordinator opens one container at a time and, in this order, raises its minimum seal
/// version (so no writer adds records under an older key), re-seals every older record, writes
/// its log back (so no copy of an old envelope lingers in it), and counts records per version.
public protocol SealedContainer: AnyObject {
  /// A stable name for reports (the container's path).
  var name: String { get }
  /// The random id the container keeps in its own metadata.
  var containerID: String { get }
  /// Makes writers in every process seal under at least `version` from now on.
  ///
  /// - Parameter version: the rotation's new active version.
  /// - Throws: the container's storage errors.
  func raiseMinimumSealVersion(to version: UInt32) throws
  /// Re-seals every record whose envelope header names a version older than `version`, in
  /// bounded transactions. Idempotent and resumable. Records that do not open are left as they are
  /// and reported.
  ///
  /// - Parameters:
  ///   - vault: the vault that opens the old records and seals the new ones.
  ///   - version: the version every record should end up under.
  /// - Returns: how many records were re-sealed, and those that did not open per version.
  /// - Throws: the container's storage errors, and `KeyStoreError` when a key cannot be read now.
  func reseal(with vault: Vault, to version: UInt32) throws -> ResealResult
  /// The same as `reseal(with:to:)`, calling `progress` with the number of records re-sealed so
  /// far after each committed batch. The default ignores `progress`.
  ///
  /// - Parameters:
  ///   - vault: the vault that opens the old records and seals the new ones.
  ///   - version: the version every record should end up under.
  ///   - progress: called on the rotating thread; keep it quick.
  /// - Returns: as `reseal(with:to:)`.
  /// - Throws: as `reseal(with:to:)`.
  func reseal(with vault: Vault, to version: UInt32, progress: (Int) -> Void) throws -> ResealResult
  /// Records per key version, read from each envelope's authenticated header (never from a
  /// plaintext column), including parked and dead-letter rows.
  ///
  /// - Returns: the counts; what rotation uses to prove a version unused.
  /// - Throws: the container's storage errors.
  func recordCounts() throws -> RecordCounts
  /// Writes the container's log (SQLite's WAL) back and empties it, waiting a moment (at most a
  /// quarter of a second) for a writer's transaction or a reader of an older snapshot to end.
  ///
  /// - Returns: false when that could not be done now (a writer or a reader of an old snapshot
  ///   stayed): old envelopes may then still be in the log, and their key must not be deleted yet.
  /// - Throws: the container's storage errors.
  func checkpointNow() throws -> Bool
  /// How many records do not open with `vault` (tampered, moved, another vault's, or sealed under
  /// a version whose key is gone). A key that cannot be read right now is an error, not a count.
  ///
  /// - Parameter vault: the vault whose keys are tried.
  /// - Returns: the number of records that do not open.
  /// - Throws: the container's storage errors, and `KeyStoreError` when a key cannot be read now.
  func unopenableRecords(with vault: Vault) throws -> Int
  /// Deletes (or, with `keep`, moves to review) every record that does not open with `vault`.
  /// Used only by a rotation after a compromise, after asking.
  ///
  /// - Parameters:
  ///   - vault: the vault whose keys are tried.
  ///   - keep: move the records aside for review instead of deleting them.
  /// - Returns: how many records were deleted or moved.
  /// - Throws: the container's storage errors, and `KeyStoreError` when a key cannot be read now.
  func removeUnopenableRecords(with vault: Vault, keep: Bool) throws -> Int
  /// Rebuilds the file so that no freed page keeps old ciphertext, then empties the log.
  ///
  /// - Throws: the container's storage errors.
  func compact() throws
  /// The oldest key version writers may seal under here, as the container's own metadata says:
  /// what the last rotation that reached it raised it to (or the active version it was made
  /// with). Rotation reads it before raising it, to notice an older copy of the container put back
  /// in its place (see `RotationError.olderCopy`). The default (a container that keeps no such
  /// number) is nil.
  ///
  /// - Returns: the stored minimum, or nil when the container keeps none.
  /// - Throws: the container's storage errors.
  func minimumSealVersion() throws -> UInt32?
}

/// What re-sealing one container did.
public struct ResealResult: Sendable, Equatable {
  /// Records moved to the new version by this call.
  public var resealed: Int
  /// Records that did not open (tampered, moved, another vault's), per the version their header names.
  public var unopenable: [UInt32: Int]

  /// Makes the result a container's `reseal(with:to:)` returns.
  ///
  /// - Parameters:
  ///   - resealed: records moved to the new version.
  ///   - unopenable: records that did not open, per the version their header names.
  public init(resealed: Int, unopenable: [UInt32: Int] = [:]) {
    self.resealed = resealed
    self.unopenable = unopenable
  }
}

/// Records per key version in one container, from the envelopes' own headers.
public struct RecordCounts: Sendable, Equatable {
  /// Records per version their header names: a version with any is still needed.
  public var byVersion: [UInt32: Int]
  /// Rows whose envelope is not one of this vault's (no header, another keyring): no key of this
  /// vault can open them, so they do not keep any version alive.
  public var foreign: Int
  /// The envelope suites seen per version (from each header's suite byte): what a version that
  /// was compacted out of the manifest is listed again with when its records still need it.
  public var suitesByVersion: [UInt32: Set<UInt8>]

  /// Makes the counts a container's `recordCounts()` returns.
  ///
  /// - Parameters:
  ///   - byVersion: records per key version.
  ///   - foreign: rows that are not this vault's envelopes.
  ///   - suitesByVersion: the suite bytes seen per version.
  public init(byVersion: [UInt32: Int], foreign: Int = 0, suitesByVersion: [UInt32: Set<UInt8>] = [:]) {
    self.byVersion = byVersion
    self.foreign = foreign
    self.suitesByVersion = suitesByVersion
  }
}

/// What a file at a registered container's path turned out to be, looked at without changing it.
public enum ContainerProbe: Sendable, Equatable {
  /// No file at the path: the container was deleted or moved.
  case missing
  /// A file of zero bytes: not the container that was registered.
  case empty
  /// A file that is not a container (`reason` says what was found instead).
  case notAContainer(reason: String)
  /// A container, with the vault it belongs to and its own id (nil for one made before ids).
  case container(keyringID: String, containerID: String?)

  /// Another container than the one registered with `id` in the vault `keyring` (another vault's,
  /// or another container id), as `container list`, `status` and `backup` name what stands in its
  /// place; nil for the registered one (or any when `id` is nil, registered before ids), and for
  /// whatever is not a container.
  package func otherContainer(than id: String?, of keyring: String) -> String? {
    guard case .container(let owner, let found) = self else { return nil }
    if owner != keyring { return "vault \(owner)'s container" }
    if let id, found != id { return "container id \(found ?? "none")" }
    return nil
  }
}

/// Opens registered containers for rotation, one at a time.
public protocol ContainerProvider {
  /// Looks at the file at `path` read-only: creates nothing and changes nothing.
  ///
  /// - Parameter path: a registered container's absolute path.
  /// - Returns: what the file is; rotation refuses to run unless it is this vault's container.
  /// - Throws: when the file cannot be looked at (a missing file is `.missing`, not an error).
  func probe(path: String) throws -> ContainerProbe
  /// Opens the existing container at `path` for `vault` (never creates one).
  ///
  /// - Parameters:
  ///   - path: a registered container's absolute path, already probed.
  ///   - vault: the vault being rotated.
  /// - Returns: the container; rotation holds only one open at a time.
  /// - Throws: the container's errors when it cannot be opened.
  func open(path: String, vault: Vault) throws -> any SealedContainer
  /// The minimum seal version the container at `path` stores, read without changing anything:
  /// how rotation tells an older copy of a registered container before it changes anything.
  ///
  /// - Parameters:
  ///   - path: a registered container's absolute path, already probed as this vault's container.
  ///   - vault: the vault being rotated.
  /// - Returns: the stored minimum; nil when the container keeps none (the default).
  /// - Throws: the container's errors when it cannot be read.
  func minimumSealVersion(path: String, vault: Vault) throws -> UInt32?
}

extension ContainerProvider {
  /// Keeps no minimum: rotation cannot tell an older copy of such containers.
  ///
  /// - Parameters:
  ///   - path: not used.
  ///   - vault: not used.
  /// - Returns: nil.
  /// - Throws: nothing (the requirement may throw).
  public func minimumSealVersion(path: String, vault: Vault) throws -> UInt32? { nil }
}

extension SealedContainer {
  /// Keeps no minimum: rotation cannot tell an older copy of such a container.
  ///
  /// - Returns: nil.
  /// - Throws: nothing (the requirement may throw).
  public func minimumSealVersion() throws -> UInt32? { nil }

  /// Re-seals without reporting progress (for containers that do not count as they go).
  ///
  /// - Parameters:
  ///   - vault: the vault that opens the old records and seals the new ones.
  ///   - version: the version every record should end up under.
  ///   - progress: not called.
  /// - Returns: as `reseal(with:to:)`.
  /// - Throws: as `reseal(with:to:)`.
  public func reseal(with vault: Vault, to version: UInt32, progress: (Int) -> Void) throws -> ResealResult {
    try reseal(with: vault, to: version)
  }
}

/// How far a rotation has come, for a progress display: which container it is re-sealing and how
/// many of its records are done.
public struct RotationProgress: Sendable, Equatable {
  /// The container being re-sealed, counting from 1.
  public var container: Int
  /// How many containers are registered.
  public var containers: Int
  /// The container's path.
  public var path: String
  /// Records of this container re-sealed so far.
  public var resealed: Int
  /// Records re-sealed in the containers before this one, in this rotation.
  public var resealedBefore: Int

  /// Records re-sealed so far in this rotation, over every container: it only rises, where
  /// `resealed` starts again at 0 with each container.
  public var resealedInAll: Int { resealedBefore + resealed }

  /// Makes a progress report (rotation makes them; tests and displays read them).
  ///
  /// - Parameters:
  ///   - container: the container being re-sealed, counting from 1.
  ///   - containers: how many are registered.
  ///   - path: its path.
  ///   - resealed: its records re-sealed so far.
  ///   - resealedBefore: records re-sealed in the containers before it (0 for the first).
  public init(container: Int, containers: Int, path: String, resealed: Int, resealedBefore: Int = 0) {
    self.container = container
    self.containers = containers
    self.path = path
    self.resealed = resealed
    self.resealedBefore = resealedBefore
  }
}

/// What a rotation after a compromise will destroy, shown to a person before it happens.
public struct CompromisePlan: Sendable, Equatable {
  /// Records that do not open under any key present, per container path.
  public var unopenable: [String: Int]
  /// Versions that sealed records outside containers (`vault seal`); those envelopes become
  /// unreadable when the versions are retired.
  public var externalSealVersions: [UInt32]
  /// The versions that will be retired.
  public var retiring: [UInt32]
}

/// The answer to a `CompromisePlan`.
public enum CompromiseDecision: Sendable, Equatable {
  /// Delete the records that do not open, and retire.
  case purge
  /// Move the records that do not open to review (they stay, unreadable forever), and retire.
  case keep
  /// Change nothing more (the new version stays active; nothing is retired).
  case abort
}

/// How to rotate.
public struct RotationOptions: Sendable {
  /// Retire (delete the keys of) older versions proven unused. The library and the CLI both
  /// default to true; a version is kept whenever anything might still need it.
  public var retireUnused: Bool
  /// A rotation after a key compromise: every older version is retired even when envelopes
  /// sealed outside containers need it, records that do not open are purged or kept after
  /// `confirm` says so, and every container is compacted so no old ciphertext stays in its files.
  public var compromised: Bool
  /// Asked, only after a compromise and only when something would be destroyed.
  public var confirm: @Sendable (CompromisePlan) -> CompromiseDecision
  /// Called as each container starts and after each batch of records it re-seals, on the
  /// rotating thread, under the manifest lock: keep it quick. Nil by default.
  public var progress: (@Sendable (RotationProgress) -> Void)?

  /// Options for an ordinary rotation by default: retire what is proven unused, no compromise.
  ///
  /// - Parameters:
  ///   - retireUnused: retire older versions proven unused.
  ///   - compromised: rotate after a key compromise (see `compromised`).
  ///   - confirm: asked before a rotation after a compromise destroys records or external
  ///     envelopes; the default answers `.abort`.
  ///   - progress: told how far the re-sealing has come (see `progress`); nil by default.
  public init(
    retireUnused: Bool = true, compromised: Bool = false,
    confirm: @escaping @Sendable (CompromisePlan) -> CompromiseDecision = { _ in .abort },
    progress: (@Sendable (RotationProgress) -> Void)? = nil
  ) {
    self.retireUnused = retireUnused
    self.compromised = compromised
    self.confirm = confirm
    self.progress = progress
  }
}

/// What `Vault.forgetContainer(at:)` removed, and what that means for retiring keys.
public struct ForgottenContainer: Sendable, Equatable {
  /// The path whose registration was removed.
  public var path: String
  /// The container id it was registered with (nil for one registered before container ids).
  public var id: String?
  /// Containers still registered. With none, a rotation retires nothing (it has nothing to count).
  public var remainingContainers: Int
  /// Decrypt-only versions no `seal` envelope pins: the next rotation retires each one the
  /// remaining containers prove unused (those only the forgotten container held, among others).
  public var retirableVersions: [UInt32]
  /// Decrypt-only versions kept whatever the containers hold, because `seal` envelopes need them.
  public var pinnedBySeal: [UInt32]
}

/// What a rotation did.
public struct RotationReport: Sendable, Equatable, Codable {
  /// The version active when the rotation began (equal to `newVersion` when resuming an
  /// interrupted rotation).
  public var previousVersion: UInt32
  /// The version active after the rotation, that every re-sealed record is now under.
  public var newVersion: UInt32
  /// Records re-sealed, per container path.
  public var resealed: [String: Int]
  /// Versions whose keys this run deleted.
  public var retired: [UInt32]
  /// Older versions kept as decrypt-only.
  public var keptVersions: [UInt32]
  /// Why each kept version was kept (version → reasons, for people).
  public var keptBecause: [String: [String]]
  /// After a compromise: records purged or kept unreadable, per container.
  public var purged: [String: Int]
  /// After a compromise with `.keep`: records moved to review (unreadable forever), per container.
  public var keptUnreadable: [String: Int]
  /// Whether this was a rotation after a compromise.
  public var compromised: Bool
  /// How long the call took, waiting for the lock included.
  public var seconds: Double

  /// A report as `rotate` returns it, for an app's test doubles and its own reports.
  ///
  /// - Parameters:
  ///   - previousVersion: the version active when the rotation began.
  ///   - newVersion: the version active after it.
  ///   - resealed: records re-sealed, per container path.
  ///   - retired: versions whose keys were deleted.
  ///   - keptVersions: older versions kept decrypt-only.
  ///   - keptBecause: why each kept version was kept (version → reasons).
  ///   - purged: after a compromise, records purged per container.
  ///   - keptUnreadable: after a compromise, records moved to review per container.
  ///   - compromised: whether it was a rotation after a compromise.
  ///   - seconds: how long it took.
  public init(
    previousVersion: UInt32, newVersion: UInt32, resealed: [String: Int] = [:], retired: [UInt32] = [],
    keptVersions: [UInt32] = [], keptBecause: [String: [String]] = [:], purged: [String: Int] = [:],
    keptUnreadable: [String: Int] = [:], compromised: Bool = false, seconds: Double = 0
  ) {
    self.previousVersion = previousVersion
    self.newVersion = newVersion
    self.resealed = resealed
    self.retired = retired
    self.keptVersions = keptVersions
    self.keptBecause = keptBecause
    self.purged = purged
    self.keptUnreadable = keptUnreadable
    self.compromised = compromised
    self.seconds = seconds
  }

  enum CodingKeys: String, CodingKey {
    case previousVersion = "previous_version"
    case newVersion = "new_version"
    case resealed, retired, compromised, seconds, purged
    case keptVersions = "kept_versions"
    case keptBecause = "kept_because"
    case keptUnreadable = "kept_unreadable"
  }
}

/// Why a rotation refused to run or stopped. Nothing was changed when it refused before step 2.
public enum RotationError: Error, Equatable, Sendable, CustomStringConvertible {
  /// A registered container's file is gone; its records may still need their keys.
  case containerMissing(path: String)
  /// A registered container's file is empty: not the container that was registered.
  case containerEmpty(path: String)
  /// A registered container's path holds something that is not a container.
  case notAContainer(path: String, reason: String)
  /// A registered container's path holds another vault's container.
  case foreignContainer(path: String, keyringID: String)
  /// The container at a registered path carries another container id (`found`; nil for none) than
  /// the one registered (`expected`).
  case containerReplaced(path: String, expected: String, found: String?)
  /// A container with the same id is already registered at `other`: `path` is a copy.
  case duplicateContainer(path: String, other: String)
  /// The container at a registered path is the registered one, but an older copy of it: its
  /// minimum seal version (`minimum`) is below the `expected` an earlier rotation raised it to at
  /// least (one above the newest retired version). The current file may hold records under
  /// versions this copy does not, so nothing is retired.
  case olderCopy(path: String, minimum: UInt32, expected: UInt32)
  /// `RotationOptions.confirm` answered `.abort`: the new version is active, nothing was retired;
  /// only a rotation after a compromise can go on (with a fresh key again).
  case aborted
  /// A rotation after a compromise made `version` active and has not finished; an ordinary
  /// rotation refuses, changing nothing, so it cannot finish it while keeping the compromised key.
  case compromiseUnfinished(version: UInt32)
  /// After a compromise, some older version could not be retired yet (its key is still present).
  case compromiseIncomplete(retired: [UInt32], kept: [String])
  /// The vault's home or a registered container's file, directory, or -wal, -shm or -journal file
  /// (`path`) cannot be written (`errno`: a read-only mount, an immutable file, permissions).
  /// Nothing was changed.
  case notWritable(path: String, errno: Int32)
  /// `Vault.forgetContainer(at:)` was given a path where no container is registered.
  case containerNotRegistered(path: String)
  /// `Vault.forgetContainer(at:)` found a file at the path (or could not look): the container may
  /// still be there, and its records would lose their keys.
  case containerStillPresent(path: String)

  /// A sentence for a person that says what to restore or run, and whether anything changed.
  public var description: String {
    switch self {
    case .containerMissing(let path):
      "registered container \(path) is missing; restore it from a backup before rotating "
        + "(its records may still need their keys). Nothing was changed"
    case .containerEmpty(let path):
      "registered container \(path) is an empty file, not the container that was registered; restore it from a "
        + "backup before rotating. Nothing was changed"
    case .notAContainer(let path, let reason):
      "registered container \(path) is not a vault container (\(reason)); restore it from a backup before "
        + "rotating. Nothing was changed"
    case .foreignContainer(let path, let keyring):
      "registered container \(path) belongs to vault \(keyring), not this one; restore this vault's container "
        + "before rotating. Nothing was changed"
    case .containerReplaced(let path, let expected, let found):
      "registered container \(path) was replaced: it carries container id \(found ?? "none"), not \(expected); "
        + "restore the registered container before rotating. Nothing was changed"
    case .duplicateContainer(let path, let other):
      "\(path) is a copy of the registered container \(other) (same container id); refusing to register it twice"
    case .olderCopy(let path, let minimum, let expected):
      "\(path) is an older copy of the registered container (minimum seal version \(minimum); an earlier "
        + "rotation raised it to at least \(expected)): the current file may hold records whose keys this copy does not "
        + "need, so no key was retired. Put the current file back and rotate again; if this copy is all that is "
        + "left, move it away, run `vault container forget \(ShellWord.quoted(path))`, put it back and open it, which registers "
        + "it anew"
    case .compromiseIncomplete(let retired, let kept):
      "the rotation after a compromise could not retire every old key yet, so the compromised key still exists"
        + (retired.isEmpty ? "" : " (retired: \(retired.map(String.init).joined(separator: ", ")))")
        + "; kept: \(kept.joined(separator: " | ")). Fix that and run the rotation after a compromise again"
    case .aborted:
      "the rotation after a compromise was stopped before retiring anything; the new key version is active and "
        + "the compromised keys still exist. Run the rotation after a compromise again to finish it (with a "
        + "fresh key); an ordinary rotation refuses until then"
    case .compromiseUnfinished(let version):
      "a rotation after a compromise made version \(version) active and has not finished: the compromised keys "
        + "still exist. Finish it with a rotation after a compromise; an ordinary rotation would keep them. "
        + "Nothing was changed"
    case .notWritable(let path, let code):
      "\(path) cannot be written (\(String(cString: strerror(code)))), and the rotation writes the home, its "
        + "manifest, the keyfile and every registered container, their directories and their -wal, -shm and "
        + "-journal files; make it "
        + "writable (its permissions, the mount, an immutable flag: lsattr) and rotate again. Nothing was changed"
    case .containerNotRegistered(let path):
      "no container is registered at \(path). Nothing was changed"
    case .containerStillPresent(let path):
      "a file is still at \(path) (or it cannot be looked at): only a container that is gone can be forgotten, "
        + "since its records would lose their keys. Nothing was changed"
    }
  }
}

extension Vault {
  /// Before a rotation after a compromise: a pending version an ordinary rotation left (killed
  /// after storing its key) holds a key that was in the store before the compromise was known,
  /// so it may have leaked with it. Finished, its key was adopted as the "fresh" one (an outside
  /// review: a process that had the vault open rotated to that version and reported success, and
  /// the leaked copy of the keyfile opened every record). It is set aside instead: made
  /// decrypt-only, having sealed nothing, in the same manifest write that records the rotation's
  /// own new version and marks it as one after a compromise, and retired with every older
  /// version. A pending version with no key stored yet gets a fresh one when finished, and one
  /// whose stored key is not the one recorded is refused there as before. Caller holds the lock.
  ///
  /// - Returns: the version to set aside, or nil.
  private func pendingVersionStoredBeforeCompromise() throws -> UInt32? {
    guard let pending = manifest.versions.first(where: { $0.state == .pending }),
      pending.version != manifest.activeVersion, manifest.unfinishedCompromise != pending.version,
      let check = pending.check,
      let stored = try store.loadKey(keyring: keyringID, version: pending.version, check: check),
      constantTimeEquals(try KeyVersionRecord.checkValue(of: stored), check)
    else { return nil }
    return pending.version
  }

  /// Rotates the vault's key (crash-safe and multi-process-safe), as `vault rotate` does.
  ///
  /// Under the home's exclusive lock:
  /// 1. checks that every registered container is the one that was registered (missing, empty,
  ///    replaced, foreign or non-container files, and, except after a compromise, an older copy
  ///    of the container — a minimum seal version not above the newest retired version, which an
  ///    earlier rotation raised it past — make it refuse, changing nothing);
  /// 2. finishes a rotation that stopped part-way, or adds version n+1 (recorded, stored,
  ///    self-tested, made active; older versions become decrypt-only);
  /// 3. opens each registered container in turn (one at a time): raises its minimum seal version,
  ///    re-seals every older record, empties its log, and counts records per version from the
  ///    envelopes' headers;
  /// 4. retires (deletes the key of) an older version only when this run proved it unused: zero
  ///    records in every registered container, every container's log emptied, and no envelope
  ///    sealed outside containers under it (`seal`). A version the manifest already calls
  ///    retired whose key is still present gets exactly the same proof before its key is deleted.
  ///
  /// After a compromise (`options.compromised`) every older version is retired once `confirm`
  /// allows what that destroys, and every container is compacted.
  ///
  /// - Parameters:
  ///   - provider: probes and opens each registered container.
  ///   - options: whether to retire unused versions, and whether this follows a compromise.
  /// - Returns: what was re-sealed, retired, kept and why.
  /// - Throws: `RotationError` when a registered container is not what was registered, when
  ///   `confirm` answers `.abort`, or when a rotation after a compromise had to keep an old key
  ///   (`.compromiseIncomplete`); `VaultError`, `KeyStoreError` (a store that cannot take a key
  ///   is refused before anything is recorded) or the container's errors otherwise. A rerun
  ///   resumes.
  public func rotate(
    containers provider: any ContainerProvider, options: RotationOptions = RotationOptions()
  ) throws -> RotationReport {
    let started = Date()
    return try withManifestLock {
      // Refuse before recording anything when the store cannot take a key (locked, no provider…).
      try store.checkWritable()
      // A keyfile move that stopped part-way left a second file holding the keys: finished or
      // undone first, so that no key this rotation deletes stays in it.
      if manifest.store.kind == .keyfile, let current = manifest.store.keyfile {
        _ = try Self.settleStoppedMove(home: home, current: current, manifest: manifest)
      }
      // Every registered container holds a minimum seal version above the newest retired version:
      // a version is retired only at the end of a rotation that raised every registered container
      // to a newer active version first, a container registered later is raised to the active
      // version then, and a minimum never goes down. (The active version alone says less: an open
      // that finishes a stopped rotation's pending version makes it active without raising any.)
      // A container below that is an older copy put back in its place (restored, synced, swapped):
      // re-sealing and counting the copy would retire keys the current file, which may come back,
      // still needs. After a compromise every older version goes whatever any file holds, so
      // there is nothing to protect and an old file is purged like any other.
      var newestRetired = manifest.highestVersion
      while newestRetired > 0 && !manifest.isRetired(newestRetired) { newestRetired -= 1 }
      let raisedFloor = newestRetired == 0 || options.compromised ? 0 : newestRetired + 1
      try preflight(provider, raisedFloor: raisedFloor)
      try refuseUnwritable()
      // A rotation after a compromise that did not finish may only be finished as one: an ordinary
      // rotation would complete it while keeping the compromised key.
      if let unfinished = manifest.unfinishedCompromise, !options.compromised {
        throw RotationError.compromiseUnfinished(version: unfinished)
      }
      let resuming = manifest.resealing != nil && manifest.resealing == manifest.activeVersion
      // A resumed rotation reports the version it rotated from (the newest below its own), not
      // "version 5 -> 5".
      let previous =
        resuming
        ? manifest.versions.map(\.version).filter { $0 < manifest.activeVersion }.max() ?? manifest.activeVersion
        : manifest.activeVersion
      // After a compromise the active key may be the leaked one (an unfinished rotation made it
      // active long ago and it has sealed since, or the operator runs it again because that key
      // leaked too): always a fresh key, never a resumed one. A pending version this rotation
      // made is fine to finish: nothing was ever sealed under it.
      let setAside = options.compromised ? try pendingVersionStoredBeforeCompromise() : nil
      let freshKey = !resuming || options.compromised
      if freshKey, setAside != nil || !manifest.versions.contains(where: { $0.state == .pending }) {
        try addPendingVersion(compromise: options.compromised, settingAside: setAside)
      }
      try completePendingVersion(resealing: true, compromise: options.compromised)
      let active = manifest.activeVersion
      if manifest.resealing != active || (options.compromised && manifest.unfinishedCompromise != active) {
        var next = manifest
        next.resealing = active
        // Recorded before anything can stop it: until it finishes, only a rotation after a
        // compromise may go on (see `Manifest.unfinishedCompromise`).
        if options.compromised { next.unfinishedCompromise = active }
        try save(next)
      }

      // One container at a time: a vault may have more containers than the process has descriptors.
      var resealed: [String: Int] = [:]
      var unopenable: [String: [UInt32: Int]] = [:]
      var inUse: [UInt32: [String]] = [:]
      var suitesInUse: [UInt32: Set<UInt8>] = [:]
      var logNotEmptied: [String] = []
      for (index, registered) in manifest.containers.enumerated() {
        var progress = RotationProgress(
          container: index + 1, containers: manifest.containers.count, path: registered.path, resealed: 0,
          resealedBefore: resealed.values.reduce(0, +))
        options.progress?(progress)
        let container = try provider.open(path: registered.path, vault: self)
        try adoptContainerID(container, registered: registered)
        // Checked again now that it is open: the file may have been swapped since the preflight.
        if let minimum = try container.minimumSealVersion(), minimum < raisedFloor {
          throw RotationError.olderCopy(path: registered.path, minimum: minimum, expected: raisedFloor)
        }
        try container.raiseMinimumSealVersion(to: active)
        let result = try container.reseal(with: self, to: active) { count in
          progress.resealed = count
          options.progress?(progress)
        }
        resealed[registered.path] = result.resealed
        if !result.unopenable.isEmpty { unopenable[registered.path] = result.unopenable }
        if try !checkpointWithRetries(container) { logNotEmptied.append(registered.path) }
        let counts = try container.recordCounts()
        for (version, count) in counts.byVersion where count > 0 && version != active {
          inUse[version, default: []].append(registered.path)
          suitesInUse[version, default: []].formUnion(counts.suitesByVersion[version] ?? [])
        }
      }

      let older = manifest.versions.filter { $0.version != active && $0.state == .decryptOnly }.map(\.version)
      // Retired in the manifest but with material still in the store (a crash between marking and
      // deleting, or a manifest someone edited): delete only on this run's proof, like any other.
      let stored = Set(try store.storedVersions(keyring: keyringID))
      let leftovers = stored.filter { $0 != active && manifest.isRetired($0) }.sorted()
      var candidates = older + leftovers
      var kept: [UInt32: [String]] = [:]
      var purged: [String: Int] = [:]
      var keptUnreadable: [String: Int] = [:]

      if options.compromised {
        // Every record is tried, not only those re-sealing skipped: a tampered record under the
        // new version, or one under a version retired long ago, holds data nobody can read either.
        unopenable = [:]
        for registered in manifest.containers {
          let count = try provider.open(path: registered.path, vault: self).unopenableRecords(with: self)
          if count > 0 { unopenable[registered.path] = [0: count] }
        }
        let plan = CompromisePlan(
          unopenable: unopenable.mapValues { $0.values.reduce(0, +) },
          externalSealVersions: manifest.externalSealVersions.filter { candidates.contains($0) }.sorted(),
          retiring: candidates.sorted())
        if !plan.unopenable.isEmpty || !plan.externalSealVersions.isEmpty {
          let decision = options.confirm(plan)
          if decision == .abort { throw RotationError.aborted }
          for registered in manifest.containers where unopenable[registered.path] != nil {
            let container = try provider.open(path: registered.path, vault: self)
            let count = try container.removeUnopenableRecords(with: self, keep: decision == .keep)
            if decision == .keep { keptUnreadable[registered.path] = count } else { purged[registered.path] = count }
          }
        }
        // Every file is rebuilt so no freed page or log frame keeps old ciphertext.
        logNotEmptied = []
        for registered in manifest.containers {
          let container = try provider.open(path: registered.path, vault: self)
          try container.compact()
          if try !checkpointWithRetries(container) { logNotEmptied.append(registered.path) }
        }
        // Records still counted under a candidate version (kept unreadable) no longer pin it.
        inUse = [:]
      }

      for version in candidates {
        var reasons: [String] = []
        if !options.retireUnused && !options.compromised { reasons.append("retirement was not requested") }
        if manifest.containers.isEmpty, !options.compromised {
          reasons.append(Vault.noContainerToCountReason)
        }
        if let paths = inUse[version] { reasons += paths.map { "records sealed under it remain in \($0)" } }
        if manifest.externalSealVersions.contains(version), !options.compromised {
          reasons.append(Vault.externalSealReason(version))
        }
        reasons += logNotEmptied.map {
          "the log of \($0) could not be emptied (other connections kept writing it or reading an older "
            + "snapshot for about seven seconds); rotate again"
        }
        if !reasons.isEmpty { kept[version] = reasons }
      }
      candidates.removeAll { kept[$0] != nil }

      // Manifest first, in one write: a crash after it leaves keys of versions marked retired, which
      // the next rotation deletes only after proving them unused again.
      var next = manifest
      let now = timestamp(clock())
      for version in candidates where next.record(version)?.state != .retired {
        next.setState(.retired, of: version)
        if let index = next.versions.firstIndex(where: { $0.version == version }) {
          next.versions[index].retiredAt = now
        }
      }
      // A version marked retired that turned out to be in use goes back to decrypt-only.
      for (version, _) in kept where next.isRetired(version) {
        if let index = next.versions.firstIndex(where: { $0.version == version }) {
          next.versions[index].state = .decryptOnly
          next.versions[index].retiredAt = nil
        } else {
          // Compacted away, yet its key is present and needed: list it again, with the suite its
          // envelopes were sealed in (a version from before suites, suite 1, stays suite 1).
          let seen = suitesInUse[version] ?? []
          next.versions.append(
            KeyVersionRecord(
              version: version, state: .decryptOnly, createdAt: now,
              suite: seen == [Envelope.suiteXAES256GCMCommitted] ? Envelope.suiteXAES256GCMCommitted : nil))
          next.versions.sort { $0.version < $1.version }
        }
      }
      // A rotation after a compromise that had to keep an old key is not finished: it stays the
      // current rotation, so running it again resumes it rather than making yet another version.
      var incomplete = options.compromised && !kept.isEmpty
      // After a compromise, the rotation is recorded finished only once the store no longer lists
      // the old keys (a last write below): killed while it deletes them, it stays unfinished, and
      // status warns rather than call a compromised key retired that may still be stored.
      let confirmingDeletion = options.compromised && !candidates.isEmpty
      next.resealing = incomplete || confirmingDeletion ? active : nil
      next.unfinishedCompromise = incomplete || confirmingDeletion ? active : nil
      try save(next)
      // A store may pass over an item it cannot delete without an error (libsecret skips a locked
      // item in a collection of its own): a version whose deletion failed, or whose key the store
      // still lists afterwards, was not retired, whatever the call said. Reported as retired, the
      // key of a compromise would have stayed readable while the rotation said it was gone.
      var failedCalls = Set<UInt32>()
      var deletionFailure: (any Error)?
      for version in candidates {
        do {
          _ = try store.deleteKey(keyring: keyringID, version: version)
        } catch {
          failedCalls.insert(version)
          deletionFailure = deletionFailure ?? error
        }
      }
      // A store that cannot list its items now (locked meanwhile) cannot say a key is gone: the
      // rotation fails with that error rather than report retired a key it may still hold. The
      // manifest keeps those versions retired, so the next rotation deletes what stayed (on its
      // own proof), and after a compromise the rotation stays unfinished.
      // What the store lists decides: a call that failed after the key was gone (a keyfile
      // rewritten, then its directory's sync failed) did delete it, and recorded decrypt-only, the
      // version would name a key no store holds, and every later rotation and backup would refuse
      // (a fault-injection review). Its error is still reported, once the manifest says so.
      var notDeleted = Set<UInt32>()
      var listingFailure: (any Error)?
      do {
        notDeleted = Set(try store.storedVersions(keyring: keyringID)).intersection(candidates)
      } catch {
        listingFailure = error
        notDeleted = failedCalls
      }
      let retired = candidates.filter { !notDeleted.contains($0) }
      if !notDeleted.isEmpty || (listingFailure != nil && !candidates.isEmpty) {
        // Its key is there: the version is decrypt-only again (the next rotation retires it with
        // the same proof), and after a compromise the rotation is not finished (only a rotation
        // after a compromise goes on from here, and status and doctor say so).
        var again = next
        for index in again.versions.indices where notDeleted.contains(again.versions[index].version) {
          again.versions[index].state = .decryptOnly
          again.versions[index].retiredAt = nil
        }
        if options.compromised {
          incomplete = true
          (again.resealing, again.unfinishedCompromise) = (active, active)
        }
        if !notDeleted.isEmpty || options.compromised { try save(again) }
        // A deletion that failed says why itself (the rotation is done, its clean-up is not).
        if let failure = deletionFailure ?? listingFailure {
          // Leftover copies of the keyfile may hold keys just deleted: not kept until a later run.
          if let keyfile = store as? KeyfileStore { _ = try? keyfile.removeLeftoverTemporaryFiles() }
          throw failure
        }
        for version in notDeleted {
          kept[version, default: []].append(
            "the key store did not delete its key (it still lists it: a locked item?)"
              + (options.compromised ? "; unlock the key store" : "; the next rotation retires it"))
        }
      }
      if confirmingDeletion, !incomplete {
        next.resealing = nil
        next.unfinishedCompromise = nil
        try save(next)
      }
      // A keyfile rewrite interrupted by a crash leaves a temporary copy holding keys, retired
      // ones included: remove such leftovers now that the keys it may hold are gone.
      if let keyfile = store as? KeyfileStore { try keyfile.removeLeftoverTemporaryFiles() }
      // The keys are gone from what the store lists, but the call that removed them failed (a sync
      // after it): the manifest records them retired; the error says what to fix.
      if let deletionFailure { throw deletionFailure }
      // Forget every cached key that is no longer usable (save already dropped retired ones).
      try adoptVerifiedManifest(heal: true)
      if incomplete {
        throw RotationError.compromiseIncomplete(
          retired: retired.sorted(),
          kept: kept.keys.sorted().map { "version \($0): " + (kept[$0] ?? []).joined(separator: "; ") })
      }
      let keptVersions = kept.keys.sorted()
      return RotationReport(
        previousVersion: previous, newVersion: active, resealed: resealed, retired: retired.sorted(),
        keptVersions: keptVersions,
        keptBecause: Dictionary(uniqueKeysWithValues: kept.map { (String($0.key), $0.value) }),
        purged: purged, keptUnreadable: keptUnreadable, compromised: options.compromised,
        seconds: Date().timeIntervalSince(started))
    }
  }

  /// Step 1: every registered container must be the container that was registered, and not an
  /// older copy of it (a minimum seal version below `raisedFloor`, what the rotation that retired
  /// the newest retired version raised every container to at least).
  private func preflight(_ provider: any ContainerProvider, raisedFloor: UInt32) throws {
    for registered in manifest.containers {
      switch try provider.probe(path: registered.path) {
      case .missing: throw RotationError.containerMissing(path: registered.path)
      case .empty: throw RotationError.containerEmpty(path: registered.path)
      case .notAContainer(let reason): throw RotationError.notAContainer(path: registered.path, reason: reason)
      case .container(let keyring, let id):
        guard keyring == keyringID.hex else {
          throw RotationError.foreignContainer(path: registered.path, keyringID: keyring)
        }
        if let expected = registered.id, id != expected {
          throw RotationError.containerReplaced(path: registered.path, expected: expected, found: id)
        }
        if let minimum = try provider.minimumSealVersion(path: registered.path, vault: self), minimum < raisedFloor {
          throw RotationError.olderCopy(path: registered.path, minimum: minimum, expected: raisedFloor)
        }
      }
    }
  }

  /// Step 1 too: the home, its manifest, a keyfile store's file and directory, and every
  /// registered container (the file, its directory, and its -wal, -shm and -journal files where
  /// they are) can be written. Found only at the re-seal, a
  /// read-only mount, an immutable file (`chattr +i`) or a directory without write permission
  /// stopped the rotation after its new version was active (an outside review); it resumed once
  /// fixed, but refusing first changes nothing and says what to fix.
  private func refuseUnwritable() throws {
    // The manifest is replaced (an immutable one stopped a rotation after its key was stored: a
    // review), and a keyfile and its directory are written too.
    var places = [home, home + "/" + Manifest.fileName]
    if manifest.store.kind == .keyfile, let keyfile = manifest.store.keyfile {
      places += [(keyfile as NSString).deletingLastPathComponent, keyfile]
    }
    // A path with no file is the provider's to judge (the probe has passed it: a container that is
    // not a file here, such as an in-memory one).
    for registered in manifest.containers where access(registered.path, F_OK) == 0 {
      places.append((registered.path as NSString).deletingLastPathComponent)
      places.append(registered.path)
      for suffix in ["-wal", "-shm", "-journal"] where access(registered.path + suffix, F_OK) == 0 {
        places.append(registered.path + suffix)
      }
    }
    for place in places where access(place, F_OK) == 0 && access(place, W_OK) != 0 {
      throw RotationError.notWritable(path: place, errno: errno)
    }
  }

  /// A container registered before container ids gets its id recorded the first time it is opened.
  private func adoptContainerID(_ container: any SealedContainer, registered: ContainerRecord) throws {
    if let expected = registered.id {
      guard container.containerID == expected else {
        throw RotationError.containerReplaced(path: registered.path, expected: expected, found: container.containerID)
      }
      return
    }
    var next = manifest
    if let other = next.containers.first(where: { $0.id == container.containerID && $0.path != registered.path }) {
      throw RotationError.duplicateContainer(path: registered.path, other: other.path)
    }
    if let index = next.containers.firstIndex(where: { $0.path == registered.path }) {
      next.containers[index].id = container.containerID
      try save(next)
    }
  }

  /// Each attempt waits at most a quarter of a second (holding new writers off meanwhile); it is
  /// retried over about seven seconds in all. Without that wait, a checkpoint gave up at once
  /// whenever the app's own enqueues or claims held the write lock, and a rotation after a
  /// compromise failed as unfinished under ordinary load (outside review: 3 of 13).
  private func checkpointWithRetries(_ container: any SealedContainer) throws -> Bool {
    for attempt in 0..<20 {
      if try container.checkpointNow() { return true }
      if attempt < 19 { usleep(100_000) }
    }
    return false
  }
}

extension Vault {
  /// Registers the container at `path` with id `id` so rotation re-seals and counts its records.
  /// Idempotent. Refuses a second path for an id that is already registered (a copy).
  ///
  /// - Parameters:
  ///   - path: the container file (made absolute against the working directory).
  ///   - id: the random id the container keeps in its own metadata.
  /// - Throws: `RotationError.containerReplaced` when `path` is registered with another id,
  ///   `.duplicateContainer` when `id` is registered at another path;
  ///   `VaultError.containerBesideKeyfile` (see `checkContainerLocation(_:)`); the manifest's and
  ///   key store's errors when the manifest cannot be read or written.
  public func registerContainer(_ path: String, id: String) throws {
    let path = absolutePath(path)
    try refreshIfChanged()
    if manifest.container(at: path)?.id == id { return }
    try checkContainerLocation(path)
    try withManifestLock {
      if let existing = manifest.container(at: path) {
        if existing.id == id { return }
        if let expected = existing.id {
          throw RotationError.containerReplaced(path: path, expected: expected, found: id)
        }
      }
      var next = manifest
      if let other = next.containers.first(where: { $0.id == id && $0.path != path }) {
        throw RotationError.duplicateContainer(path: path, other: other.path)
      }
      if let index = next.containers.firstIndex(where: { $0.path == path }) {
        next.containers[index].id = id
      } else {
        next.containers.append(ContainerRecord(path: path, id: id))
      }
      try save(next)
    }
  }

  /// Refuses a container path whose directory holds this vault's keyfile: every copy of the data
  /// would then carry its keys (and the keyfile store refuses to work there). Symlinks are
  /// resolved before the directories are compared. Other stores allow any place.
  ///
  /// - Parameter path: the container file (made absolute against the working directory).
  /// - Throws: `VaultError.containerBesideKeyfile`.
  public func checkContainerLocation(_ path: String) throws {
    guard manifest.store.kind == .keyfile, let keyfile = manifest.store.keyfile else { return }
    let keyfileDirectory = (keyfile as NSString).deletingLastPathComponent
    let directory = (absolutePath(path) as NSString).deletingLastPathComponent
    let resolved = { (path: String) in (path as NSString).resolvingSymlinksInPath }
    if resolved(directory) == resolved(keyfileDirectory) {
      throw VaultError.containerBesideKeyfile(container: absolutePath(path), keyfile: keyfile)
    }
  }

  /// Removes the registration of a container that is gone for good (deleted, lost with a disk),
  /// under the home's lock, so rotation no longer refuses to run for it.
  ///
  /// Its records are gone with it: nothing can count them any more, so the versions they were
  /// sealed under stop being kept for them. The next rotation retires a version only it still held
  /// once the remaining containers prove it unused (and no `seal` envelope pins it); with no
  /// container left registered, a rotation retires nothing.
  ///
  /// - Parameter path: the registered container's path (made absolute against the working
  ///   directory).
  /// - Returns: what was removed and what it means for retirement.
  /// - Throws: `RotationError.containerNotRegistered` when nothing is registered at `path`;
  ///   `.containerStillPresent` when a file (or anything else, a symlink included) is at `path` or
  ///   it cannot be looked at. Nothing is changed then. The manifest's and key store's errors
  ///   when the manifest cannot be read or written.
  public func forgetContainer(at path: String) throws -> ForgottenContainer {
    let path = absolutePath(path)
    return try withManifestLock {
      guard let registered = manifest.container(at: path) else {
        throw RotationError.containerNotRegistered(path: path)
      }
      var info = stat()
      // Only a path proven empty (ENOENT) is gone; any other answer may hide the container.
      guard lstat(path, &info) != 0, errno == ENOENT else { throw RotationError.containerStillPresent(path: path) }
      var next = manifest
      next.containers.removeAll { $0.path == path }
      try save(next)
      let pinned = Set(next.externalSealVersions)
      let older = next.versions.filter { $0.state == .decryptOnly }.map(\.version)
      return ForgottenContainer(
        path: path, id: registered.id, remainingContainers: next.containers.count,
        retirableVersions: older.filter { !pinned.contains($0) }.sorted(),
        pinnedBySeal: older.filter { pinned.contains($0) }.sorted())
    }
  }

  /// The registered container at `path`, as the manifest says now (re-read when it changed).
  ///
  /// - Parameter path: the container file (made absolute against the working directory).
  /// - Returns: its record (path and id), or nil when nothing is registered there.
  /// - Throws: `ManifestFile.Failure` and the other errors of `Vault.reload()` when the changed
  ///   manifest cannot be read or verified.
  public func registeredContainer(at path: String) throws -> ContainerRecord? {
    try refreshIfChanged()
    return manifest.container(at: absolutePath(path))
  }
}

extension RotationError: CodedError {
  /// `rotation.` and the case, in kebab case: stable across releases.
  public var code: String {
    switch self {
    case .containerMissing: "rotation.container-missing"
    case .containerEmpty: "rotation.container-empty"
    case .notAContainer: "rotation.not-a-container"
    case .foreignContainer: "rotation.foreign-container"
    case .containerReplaced: "rotation.container-replaced"
    case .olderCopy: "rotation.older-copy"
    case .duplicateContainer: "rotation.duplicate-container"
    case .aborted: "rotation.aborted"
    case .compromiseUnfinished: "rotation.compromise-unfinished"
    case .compromiseIncomplete: "rotation.compromise-incomplete"
    case .notWritable: "rotation.not-writable"
    case .containerNotRegistered: "rotation.container-not-registered"
    case .containerStillPresent: "rotation.container-still-present"
    }
  }
}
