import Foundation

/// Why a backup bundle could not be written, verified or restored. Each case names the part that
/// failed (header, manifest, key section, container N) and never any key, passphrase or record.
public enum BackupError: Error, Equatable, Sendable, CustomStringConvertible {
  /// The file does not start with the bundle magic: it is not a vault backup.
  case notABundle(path: String)
  /// The path is not a regular file (a FIFO, device, socket or directory): it is no bundle, and
  /// nothing was read from it.
  case notARegularFile(path: String)
  /// The file ends before the part named (`header`, `manifest`, `key section`, `container N`).
  case truncated(path: String, part: String)
  /// The bundle was written by a newer release in a format this one cannot read.
  case newerFormat(path: String, found: Int, supported: Int)
  /// The fixed header is inconsistent (`reason` says how): a damaged bundle.
  case damagedHeader(path: String, reason: String)
  /// The manifest's SHA-256 is not the one in the header: the manifest or the header was changed.
  case manifestHashMismatch(path: String)
  /// The manifest is not what a vault writes (`reason` names the problem, never a value).
  case damagedManifest(path: String, reason: String)
  /// The key section's scrypt parameters ask for more than any bundle may (memory or work).
  case unacceptableKeyDerivation(path: String)
  /// The passphrase does not open the key section: a wrong passphrase (or its salt or scrypt
  /// parameters were changed).
  case wrongPassphrase(path: String)
  /// The passphrase is right but the key section, or the header and manifest it authenticates,
  /// was changed.
  case damagedKeySection(path: String)
  /// Container snapshot `index` (1-based, in manifest order) does not have its recorded SHA-256.
  case containerHashMismatch(path: String, index: Int, container: String)
  /// Envelopes in container snapshot `index` did not open with the bundle's keys.
  case envelopesFailed(path: String, index: Int, container: String, failed: Int, kind: String)
  /// Container snapshot `index` has its recorded SHA-256 but cannot be read as a vault queue
  /// container (`kind`: `queue.corrupt`, `queue.not-a-queue-container`, `queue.storage`): the bundle was written that way (its manifest, which the passphrase
  /// authenticates, records these very bytes), so another bundle is needed.
  case damagedSnapshot(path: String, index: Int, container: String, kind: String)
  /// The passphrase is empty.
  case emptyPassphrase
  /// `keep` must be at least 1.
  case invalidKeep(Int)
  /// The backup destination is not a directory.
  case notADirectory(path: String)
  /// The backup destination lets another user rename or replace what is in it: it is writable by
  /// group or others without the sticky bit, or owned by another user (not root). A backup there
  /// could have a snapshot read or an older bundle swapped in while it runs; nothing was written.
  case sharedDirectory(path: String, mode: UInt32, owner: UInt32)
  /// A registered container is missing: a backup never leaves one out silently.
  case containerMissing(path: String)
  /// A merge of `bundles` into a registered container began and did not finish (`Backup.merge`
  /// stopped by a full disk or a kill): it may lack records they hold, so it is not backed up (a
  /// backup of it could have `keep` prune the bundles that hold them).
  case containerMergeUnfinished(path: String, bundles: [String])
  /// Registered container `path` was replaced by another container (`found`: another container
  /// id, another vault's): it is not backed up, nothing was written.
  case containerReplaced(path: String, found: String)
  /// The backup directory's file system offers neither a hard link nor a rename that cannot
  /// replace a file (some FUSE mounts), so a bundle cannot be named without risking an existing
  /// one; nothing was left in it.
  case noSafePublish(directory: String)
  /// Another merge into `home` is running (`Backup.merge`, `vault restore`); nothing was changed.
  case mergeRunning(home: String)
  /// A file-system call failed, with its errno.
  case io(path: String, operation: String, errno: Int32)
  /// The home named for a restore into a new home already holds this bundle's vault: a restore
  /// never writes over one (`Backup.merge` merges into it).
  case homeHoldsThisVault(home: String, vaultID: String)
  /// The home named for a merge holds another vault (another keyring): nothing is merged.
  case anotherVault(home: String, homeVault: String, bundleVault: String)

  /// A sentence naming the failing part and, where there is one, the fix; nothing secret.
  public var description: String {
    switch self {
    case .notABundle(let path): "\(path) is not a vault backup bundle (no bundle magic)"
    case .notARegularFile(let path):
      "\(path) is not a regular file (a FIFO, device, socket or directory), so it is no backup bundle; nothing was "
        + "read from it"
    case .truncated(let path, let part): "bundle \(path) is truncated: it ends inside the \(part)"
    case .newerFormat(let path, let found, let supported):
      "bundle \(path) has format \(found); this vault reads format \(supported): use a newer vault"
    case .damagedHeader(let path, let reason): "bundle \(path) has a damaged header (\(reason))"
    case .manifestHashMismatch(let path):
      "bundle \(path): the manifest does not match its SHA-256 in the header (the manifest was changed)"
    case .damagedManifest(let path, let reason): "bundle \(path) has a damaged manifest (\(reason))"
    case .unacceptableKeyDerivation(let path):
      "bundle \(path): the key section asks for scrypt parameters beyond what vault accepts (damaged or hostile)"
    case .wrongPassphrase(let path):
      "wrong passphrase for bundle \(path) (or the key section's salt or scrypt parameters were changed)"
    case .damagedKeySection(let path):
      "bundle \(path): the key section does not authenticate (the key section, header or manifest was changed)"
    case .containerHashMismatch(let path, let index, let container):
      "bundle \(path): container \(index) (\(container)) does not match its SHA-256 (the snapshot was changed)"
    case .envelopesFailed(let path, let index, let container, let failed, let kind):
      "bundle \(path): \(failed) records in container \(index) (\(container)) do not open with the bundle's keys "
        + "(first failure: \(kind))"
    case .damagedSnapshot(let path, let index, let container, let kind):
      "bundle \(path): container \(index) (\(container)) cannot be read as a vault container (\(kind)); the "
        + "bundle holds it that way: restore from another bundle"
    case .emptyPassphrase: "the passphrase is empty"
    case .invalidKeep(let keep): "--keep must be at least 1 (got \(keep))"
    case .notADirectory(let path): "\(path) is not a directory"
    case .sharedDirectory(let path, let mode, let owner):
      "\(path) lets other users rename or replace its files (mode \(String(mode & 0o7777, radix: 8)), owner uid "
        + "\(owner)), so a backup there could be read or swapped while it runs; nothing was written: use a directory "
        + "of your own that only you can write to (chmod go-w), or one with the sticky bit (chmod +t)"
    case .containerMissing(let path):
      "registered container \(path) is missing; restore it, or forget it (`vault container forget`) before a backup"
    case .containerMergeUnfinished(let path, let bundles):
      "a restore of \(bundles.joined(separator: " and ")) into this home did not finish, so registered container "
        + "\(path) may lack records it holds; nothing was written: run it again (`vault restore BUNDLE`, which adds "
        + "what it had not), or, if that bundle is gone, `vault container accept \(path)` to take the container as it "
        + "is, then back up"
    case .containerReplaced(let path, let found):
      "registered container \(path) was replaced: it holds \(found); nothing was written: put the registered "
        + "container back (from a backup: `vault restore BUNDLE`), then back up"
    case .noSafePublish(let directory):
      "the file system holding \(directory) has neither hard links nor a rename that cannot replace a file (a FUSE "
        + "mount such as ntfs-3g), so a bundle cannot be given its name there safely; nothing was left in it: back up "
        + "to a directory on another file system (ext4, xfs, btrfs, or FAT/exFAT through the kernel's own driver)"
    case .mergeRunning(let home):
      "a restore (merge of a bundle) into \(home) is running in another process; nothing was changed: wait for it "
        + "to finish, then run this again"
    case .io(let path, let operation, let code):
      "\(operation) \(path) failed: \(String(cString: strerror(code)))"
        + (code == ENOSPC || code == EDQUOT ? " (the disk holding it is full: free space there and retry)" : "")
    case .homeHoldsThisVault(let home, let vaultID):
      "\(home) already holds vault \(vaultID), the vault in this bundle; nothing was changed: merge the bundle "
        + "into it (`vault restore BUNDLE` with that home), or restore into a new home (--into NEW_HOME)"
    case .anotherVault(let home, let homeVault, let bundleVault):
      "\(home) holds vault \(homeVault), not \(bundleVault), the vault in this bundle; nothing was changed: "
        + "restore into a new home (--into NEW_HOME)"
    }
  }
}
