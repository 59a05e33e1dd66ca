import Foundation
import Vault
import VaultCrypto
import VaultKeys
import VaultQueue

extension Backup {
  /// Merges a bundle into the home of the same vault (SECURITY.md, "Merging a bundle into a home"):
  /// verifies the bundle completely first (nothing is touched before), then merges each of its
  /// container snapshots into the registered container with the same id, re-sealing every record
  /// it adds or changes under the home's active key. A registered container whose file is missing
  /// or empty is restored from its snapshot; a container the home does not know is added to it.
  ///
  /// Per record: one the home lacks is added, unless the home held it and removed it since (it was
  /// delivered or dropped there); where it cannot be told whether the home delivered it, a record
  /// waiting for delivery is added in review (`merge-maybe-delivered`), never sent by itself. Of two
  /// copies of one record the one changed later wins; a losing copy with another payload or queue
  /// is kept in review under a new id (listed in the report, returnable with `queue resend`).
  /// Nothing is deleted, no key is added to or removed from the home's store, and merging the
  /// same bundle again changes nothing.
  ///
  /// - Parameters:
  ///   - bundle: the bundle file.
  ///   - passphrase: the passphrase it was written with.
  ///   - vault: the home's vault; must have the bundle's vault id.
  ///   - progress: told each step as it starts (for a progress display); nil by default.
  /// - Returns: what was merged, per container.
  /// - Throws: `BackupError` from verification; `BackupError.anotherVault` when the home holds
  ///   another vault; `BackupError.mergeRunning` while another merge into the home runs (in this
  ///   process or another: nothing is merged); `QueueError` for a registered container that
  ///   cannot be opened (replaced, damaged, foreign: checked before anything is merged) or
  ///   written; the home's key store errors.
  public static func merge(
    bundle: String, passphrase: Passphrase, into vault: Vault,
    progress: (@Sendable (BackupStep) -> Void)? = nil
  ) throws -> MergeReport {
    let bundle = absolutePath(bundle)
    // One merge into a home at a time, from start to end; `vault container accept` waits for none.
    let lock = try MergeLock(home: vault.home)
    defer { lock.release() }
    let verified = try verify(bundle: bundle, passphrase: passphrase, cached: { _ in nil }, progress: progress)
    let manifest = verified.manifest
    guard manifest.keyringID == vault.keyringID.hex else {
      throw BackupError.anotherVault(home: vault.home, homeVault: vault.keyringID.hex, bundleVault: manifest.vaultID)
    }
    let keys = try BundleKeys(keyring: vault.keyringID, keys: verified.keys)
    let reader = try BundleReader(path: bundle)
    let work = try WorkDirectory(parent: NSTemporaryDirectory())
    // Records are merged as writers enqueue: each transaction checks the container's minimum seal
    // version and seals under the active key, so a rotation may run meanwhile (taking the vault's
    // lock here would deadlock with registering a container, which takes it exclusively).
    try vault.reload()
    // A container registered before container ids has none in the manifest until it is opened
    // (which records it): opened first, so it is matched by id instead of added again beside itself.
    if vault.manifest.containers.contains(where: { $0.id == nil }) {
      for registered in vault.manifest.containers where registered.id == nil {
        _ = try? QueueContainer(path: registered.path, vault: vault, mode: .existing)
      }
      try vault.reload()
    }
    // Every target is opened (or found missing) before anything is merged.
    var names = Set((try? FileManager.default.contentsOfDirectory(atPath: vault.home)) ?? [])
    var targets: [MergeTarget] = []
    for container in manifest.containers {
      if let registered = vault.manifest.containers.first(where: { $0.id == container.id }) {
        do {
          targets.append(.existing(try QueueContainer(path: registered.path, vault: vault, mode: .existing)))
        } catch QueueError.registeredContainerMissing {
          targets.append(.missing(registered.path))
        }
      } else {
        // A merge of an earlier release, killed after it made this container and before it
        // registered it, left the file: taken up under its name, rather than a second copy beside it.
        let path = vault.home + "/" + uniqueName(for: container.path, taken: &names)
        switch try strayCopy(before: path, of: container, vault: vault) {
        case .copy(let stray): targets.append(.stray(stray))
        case .empty(let place): targets.append(.added(place))
        case nil: targets.append(.added(path))
        }
      }
    }
    // Before anything is merged, every container the bundle goes into shows that a merge of it
    // began (until it finishes, `vault backup` refuses the home: a bundle of a half-merged
    // container would be the newest, and `--keep` could prune this one, which holds the rest; an
    // outside review lost records that way three ways, a second one two more). A registered
    // container that is missing already stops backups; one the home does not know is registered
    // now, to be made when its turn comes.
    for (index, target) in targets.enumerated() {
      let container = manifest.containers[index]
      switch target {
      case .existing(let existing):
        try existing.beginMerge(UnfinishedMerge(snapshot: container.sha256, madeIt: false, bundle: bundle))
      case .stray(let stray):
        try stray.beginMerge(UnfinishedMerge(snapshot: container.sha256, madeIt: true, bundle: bundle))
      case .added(let path): try vault.registerContainer(path, id: container.id)
      case .missing: break
      }
    }
    var merged: [MergeReport.Container] = []
    for (index, container) in manifest.containers.enumerated() {
      progress?(.merging(container: index + 1, of: manifest.containers.count))
      let snapshot = work.path + "/\(index).sqlite"
      try copyContainer(
        container, number: index + 1, at: verified.offsets[index], from: reader, bundle: bundle,
        into: try NewFile(path: snapshot), sync: false)
      defer { unlink(snapshot) }
      let entry = try readingSnapshot(snapshot, name: "container \(index + 1)") { source in
        try merge(container, from: source, into: targets[index], bundle: bundle, keys: keys, vault: vault)
      }
      merged.append(entry)
    }
    return MergeReport(home: vault.home, vaultID: manifest.vaultID, bundle: bundle, containers: merged)
  }

  /// Merges one snapshot into its target.
  private static func merge(
    _ container: BackupManifest.Container, from source: ContainerReader, into target: MergeTarget, bundle: String,
    keys: BundleKeys, vault: Vault
  ) throws -> MergeReport.Container {
    let open: (SnapshotRecord, EnvelopeContext) throws -> [UInt8] = { record, context in
      try keys.open(record.envelope, context: context)
    }
    let snapshot = container.sha256
    // Made with its origin: a merge stopped part way and run again restores what it had not added
    // (as it would from the copy's origin) instead of putting it in review.
    let lineage = try source.lineage()
    let origin = lineage.instance
    switch target {
    case .existing(let existing):
      let outcome = try existing.merge(from: source, fresh: false, open: open)
      // One a merge of this snapshot made and did not finish filling is finished as that merge
      // would have: marked restored from the snapshot.
      if try existing.lineage().unfinishedMerges[snapshot]?.madeIt == true {
        try existing.markRestored(from: origin, finishing: snapshot)
        try markHolding(lineage, in: existing)
        return MergeReport.Container(from: container.path, path: existing.path, action: "restored", outcome: outcome)
      }
      try existing.endMerge(snapshot: snapshot)
      try markHolding(lineage, in: existing)
      return MergeReport.Container(from: container.path, path: existing.path, action: "merged", outcome: outcome)
    case .stray(let stray):
      let outcome = try stray.merge(from: source, fresh: false, open: open)
      try stray.markRestored(from: origin, finishing: snapshot)
      try markHolding(lineage, in: stray)
      return MergeReport.Container(from: container.path, path: stray.path, action: "added", outcome: outcome)
    case .missing(let path), .added(let path):
      let mark = UnfinishedMerge(snapshot: snapshot, madeIt: true, bundle: bundle)
      let made = try QueueContainer(
        restoring: path, containerID: container.id, origin: origin, merge: mark, vault: vault)
      // Marked when it was made, unless another merge made it while this one waited for its lock
      // (a second review: two merges racing into a missing container, the second left no mark).
      try made.beginMerge(mark)
      let outcome = try made.merge(from: source, fresh: true, open: open)
      try made.markRestored(from: origin, finishing: snapshot)
      try markHolding(lineage, in: made)
      let action = if case .missing = target { "restored" } else { "added" }
      return MergeReport.Container(from: container.path, path: made.path, action: action, outcome: outcome)
    }
  }

  /// Marks `container` as holding what the snapshot of `lineage` held, once merged, and what the
  /// snapshots it had gone on from held (its own marks): a backup may then prune bundles of them
  /// (`Backup.create` keeps one whose snapshot the live container has no mark of). After the
  /// merge's own marks go (`markRestored` clears a made copy's snapshot marks); a kill in between
  /// leaves those bundles kept, never pruned. (A copy `markRestored` made has an instance of its
  /// own, so these marks do not make a later merge take what it lacks for delivered.)
  private static func markHolding(_ lineage: ContainerLineage, in container: QueueContainer) throws {
    try container.markSnapshotsPassed(lineage.passedSnapshots.union(lineage.snapshotToken.map { [$0] } ?? []))
  }

  /// What an earlier, killed merge left for a container it was adding.
  private enum Stray {
    /// The container it made (this vault's, the same id), opened and so registered.
    case copy(QueueContainer)
    /// An empty file where it began making it (its creation was cut short): holds nothing.
    case empty(String)
  }

  /// What an earlier release's killed merge left for `container` and did not register, among the
  /// files the new name `path` was chosen around (its base name, then `-2`, … before `path`), none
  /// of them registered: the container it made (this vault's, with `container`'s id; a container
  /// id is registered at one path only, so such a file can only be taken up), else an empty file;
  /// nil when there is neither. (This release registers a container before it makes it.)
  private static func strayCopy(
    before path: String, of container: BackupManifest.Container, vault: Vault
  ) throws -> Stray? {
    let directory = (path as NSString).deletingLastPathComponent
    var taken = Set<String>()
    var empty: String?
    while true {
      let candidate = directory + "/" + uniqueName(for: container.path, taken: &taken)
      guard candidate != path else { return empty.map(Stray.empty) }
      // Only a file of this user's with no other name: a hard link would make the container, or
      // the empty file written into, someone else's file too (another home's container, a note).
      var info = stat()
      guard vault.manifest.containers.allSatisfy({ $0.path != candidate }), lstat(candidate, &info) == 0,
        info.st_mode & S_IFMT == S_IFREG, info.st_nlink == 1, info.st_uid == geteuid()
      else { continue }
      // A creation killed mid-transaction leaves a hot journal only a writer plays back; this
      // file, in the vault's home under the container's name, is about to be written anyway.
      QueueContainer.rollBackInterruptedWrite(candidate)
      switch try? QueueContainer.probe(path: candidate) {
      case .container(let keyring, let id) where keyring == vault.keyringID.hex && id == container.id:
        return .copy(try QueueContainer(path: candidate, vault: vault, mode: .existing))
      case .empty: if empty == nil { empty = candidate }
      default: continue
      }
    }
  }

  /// Where a bundle's container goes in a merge.
  private enum MergeTarget {
    /// The registered container with its id, opened.
    case existing(QueueContainer)
    /// The registered container with its id, whose file is missing or empty: restored there.
    case missing(String)
    /// A container with its id that an earlier release's killed merge made and did not register:
    /// taken up (opened, so registered), and marked restored once merged.
    case stray(QueueContainer)
    /// A container the home does not know: added under this new path in the home.
    case added(String)
  }
}

/// What `Backup.merge` did.
public struct MergeReport: Encodable, Sendable, Equatable {
  /// What was done with one of the bundle's containers.
  public struct Container: Encodable, Sendable, Equatable {
    /// The path it had in the vault backed up.
    public var from: String
    /// The home's container it went into.
    public var path: String
    /// `merged` into the registered container, `restored` where a registered container's file
    /// was missing or empty, or `added` as a new container of the home.
    public var action: String
    /// Records the home lacked, added in their state.
    public var restored: Int
    /// Records whose bundle copy had changed later, now held by the home.
    public var updated: Int
    /// Records the home holds as they were, or changed later.
    public var unchanged: Int
    /// Records the home held and removed since (delivered or dropped): not brought back.
    public var goneHere: Int
    /// Records waiting for delivery that the home may have delivered: added in review
    /// (error kind `merge-maybe-delivered`), not sent until resent.
    public var undetermined: Int
    /// Losing copies with another payload or queue, kept in review (error kind `merge-superseded`).
    public var keptForReview: [KeptCopy]

    init(from: String, path: String, action: String, outcome: QueueContainer.MergeOutcome) {
      self.from = from
      self.path = path
      self.action = action
      restored = outcome.restored
      updated = outcome.updated
      unchanged = outcome.unchanged
      goneHere = outcome.goneHere
      undetermined = outcome.undetermined
      keptForReview = outcome.keptForReview.map { KeptCopy(id: $0.id, keptAs: $0.keptAs, from: $0.from) }
    }

    enum CodingKeys: String, CodingKey {
      case from, path, action, restored, updated, unchanged, undetermined
      case goneHere = "gone_here"
      case keptForReview = "kept_for_review"
    }
  }

  /// A losing copy of a record, kept in review under its own id.
  public struct KeptCopy: Encodable, Sendable, Equatable {
    /// The record's id.
    public var id: String
    /// The id the losing copy is kept under (`queue list --state review`, `queue resend`).
    public var keptAs: String
    /// Whose copy lost: `bundle` or `home`.
    public var from: String

    enum CodingKeys: String, CodingKey {
      case id, from
      case keptAs = "kept_as"
    }
  }

  /// The home merged into.
  public var home: String
  /// The vault id.
  public var vaultID: String
  /// The bundle merged.
  public var bundle: String
  /// One entry per container of the bundle, in its order.
  public var containers: [Container]

  enum CodingKeys: String, CodingKey {
    case home, bundle, containers
    case vaultID = "vault_id"
  }
}

/// The lock a merge into a home holds from its start to its end: a flock on `merge.lock` in the
/// home (made 0600 when missing, never removed: a file removed while locked could be locked
/// twice). A second merge would find the first one's marks in the containers, and `vault container
/// accept` would remove them while the merge that set them still runs (a merge stopped after that
/// would leave containers that lack records unmarked, and a backup could have `--keep` prune the
/// bundle holding them); both refuse instead. A killed merge's lock goes with its process.
package final class MergeLock {
  /// The lock file's name in the home.
  package static let fileName = "merge.lock"

  private var descriptor: Int32

  /// Takes the lock of `home` without waiting.
  ///
  /// - Throws: `BackupError.mergeRunning` when a merge holds it (another process's, or another in
  ///   this one); `BackupError.io` when the lock file cannot be opened or locked.
  package init(home: String) throws {
    let path = home + "/" + Self.fileName
    descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
    guard descriptor >= 0 else { throw BackupError.io(path: path, operation: "open lock", errno: errno) }
    while flock(descriptor, LOCK_EX | LOCK_NB) != 0 {
      let code = errno
      guard code != EINTR else { continue }
      close(descriptor)
      descriptor = -1
      if code == EWOULDBLOCK { throw BackupError.mergeRunning(home: home) }
      throw BackupError.io(path: path, operation: "lock", errno: code)
    }
  }

  /// The process holding the lock of `home` now (a merge running, or stopped: `stopped` says),
  /// read from /proc/locks (`LockWait.writer`): the file is neither made nor locked (a probe lock,
  /// even a shared one, would have a merge starting at that moment refused). Nil when none is, or
  /// it cannot be told.
  package static func holder(home: String) -> LockHolder? {
    LockWait.writer(ofFiles: [home + "/" + fileName])
  }

  /// Whether a merge into `home` holds the lock now (see `holder(home:)`).
  package static func isHeld(home: String) -> Bool { holder(home: home) != nil }

  /// Gives the lock up (at once; deinit does it otherwise).
  package func release() {
    guard descriptor >= 0 else { return }
    close(descriptor)
    descriptor = -1
  }

  deinit { release() }
}
