import Foundation
import Vault
import VaultCrypto
import VaultQueue

/// The newest bundle of a vault as found on disk right now, for `vault status`: read from the
/// bundle itself, never from a record that claims a backup happened.
public struct LastBackup: Encodable, Sendable, Equatable {
  /// The bundle file.
  public var bundle: String
  /// When it was taken (its manifest's `created_at`).
  public var createdAt: String
  /// Days since then, by the caller's clock.
  public var ageDays: Double
  /// Whether its header, manifest hash, sizes and every snapshot's SHA-256 check out now. The key
  /// section needs the passphrase and is not checked here; a bundle gets its name only after a
  /// full verification (`Backup.create`).
  public var intact: Bool
  /// What is wrong when it is not intact (the failing part); nil when intact.
  public var problem: String?
  /// This vault's bundles found in those directories.
  public var bundles: Int
  /// The key versions the bundle holds (empty when it could not be read).
  public var versions: [UInt32]

  enum CodingKeys: String, CodingKey {
    case bundle, intact, problem, bundles, versions
    case createdAt = "created_at"
    case ageDays = "age_days"
  }

  /// Encodes every member; `problem` is null, never omitted.
  ///
  /// - Parameter encoder: the encoder to write to.
  /// - Throws: the encoder's errors.
  public func encode(to encoder: any Encoder) throws {
    var values = encoder.container(keyedBy: CodingKeys.self)
    try values.encode(bundle, forKey: .bundle)
    try values.encode(createdAt, forKey: .createdAt)
    try values.encode(ageDays, forKey: .ageDays)
    try values.encode(intact, forKey: .intact)
    try values.encode(problem, forKey: .problem)
    try values.encode(bundles, forKey: .bundles)
    try values.encode(versions, forKey: .versions)
  }
}

extension Backup {
  /// The file in a vault home listing the directories its backups went to, one absolute path a
  /// line, newest first. It says where to look, not that a backup exists or is good.
  static let directoriesFileName = "backup-directories"
  static let directoriesLimit = 16

  /// Adds `directory` to the home's list of backup directories (atomically, 0600).
  static func rememberDirectory(_ directory: String, home: String) throws {
    let path = home + "/" + directoriesFileName
    var directories = backupDirectories(home: home).filter { $0 != directory }
    directories.insert(directory, at: 0)
    let text = directories.prefix(directoriesLimit).joined(separator: "\n") + "\n"
    let temporary = path + ".tmp-\(getpid())"
    unlink(temporary)
    removeTemporariesOfEndedProcesses(of: path)
    let file = try NewFile(path: temporary)
    do {
      try file.write(Array(text.utf8))
      try file.sync()
      guard rename(temporary, path) == 0 else { throw BackupError.io(path: path, operation: "rename", errno: errno) }
    } catch {
      unlink(temporary)
      throw error
    }
  }

  /// Removes the `FILE.tmp-PID` files of `path` that a backup killed before its rename left: those
  /// of this user (regular files, never a link) whose process no longer exists. A live process's
  /// file is its write in progress, left alone. Best effort.
  private static func removeTemporariesOfEndedProcesses(of path: String) {
    let directory = (path as NSString).deletingLastPathComponent
    let prefix = (path as NSString).lastPathComponent + ".tmp-"
    for name in (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [] where name.hasPrefix(prefix) {
      let digits = name.dropFirst(prefix.count)
      guard let pid = pid_t(digits), String(pid) == digits, pid > 0, kill(pid, 0) != 0, errno == ESRCH else {
        continue
      }
      var info = stat()
      let leftover = directory + "/" + name
      guard lstat(leftover, &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_uid == geteuid() else { continue }
      unlink(leftover)
    }
  }

  /// The directories the home's backups went to, newest first (empty when none was recorded).
  static func backupDirectories(home: String) -> [String] {
    guard let text = try? String(contentsOfFile: home + "/" + directoriesFileName, encoding: .utf8) else { return [] }
    return text.split(separator: "\n").map(String.init).filter { $0.hasPrefix("/") }
  }

  /// Finds the newest bundle of the vault in `home` in the directories its backups went to, and
  /// checks it without the passphrase (header, manifest hash, sizes, every snapshot's SHA-256).
  ///
  /// - Parameters:
  ///   - home: the vault home (where the list of backup directories is kept).
  ///   - vaultID: the vault's id; only its bundles are looked at.
  ///   - now: the time ages are counted to.
  /// - Returns: the newest bundle and what the check found, or nil when no bundle of this vault
  ///   is in those directories now.
  public static func lastBackup(home: String, vaultID: String, now: Date = Date()) -> LastBackup? {
    lastBackup(home: home, vaultID: vaultID, homeID: nil, now: now)
  }

  /// `lastBackup(home:vaultID:now:)` that also leaves out bundles recording another home identity
  /// than `homeID` (`Vault.homeIdentity`), when given: another home of the vault, at the same path
  /// on another machine, or one since deleted, is not this home's backup.
  package static func lastBackup(home: String, vaultID: String, homeID: String?, now: Date = Date()) -> LastBackup? {
    let prefix = bundlePrefix(vaultID: vaultID)
    let home = absolutePath(home)
    var found: [String] = []
    for directory in backupDirectories(home: home) {
      found += ownBundleNames(in: directory, vaultID: vaultID).map { directory + "/" + $0 }
    }
    // Another home of the same vault (restored into another key store) may back up to the same
    // directory: its bundles are not this home's backups.
    found.removeAll { isAnotherHomesBundle($0, of: vaultID, home: home, homeID: homeID) }
    // Names carry the time (sortable text) after the prefix: the newest sorts last. The newest
    // whose header and manifest read as this vault's bundle is the last backup; a file that only
    // has a bundle's name (say, dated 9999) must not hide it. When none reads so, the newest by
    // name is reported, damaged.
    let byName = found.sorted { ($0 as NSString).lastPathComponent > ($1 as NSString).lastPathComponent }
    guard let newest = byName.first(where: { looksLikeBundle($0, of: vaultID) }) ?? byName.first else { return nil }
    let stamp = String(
      (newest as NSString).lastPathComponent.dropFirst(prefix.count).dropLast(BundleLayout.fileSuffix.count))
    var createdAt = stamp
    var age = 0.0
    var problem: String?
    var versions: [UInt32] = []
    do {
      let manifest = try inspect(bundle: newest)
      // The name is not authenticated: a bundle of another vault renamed as this one's is not it.
      guard manifest.vaultID == vaultID else {
        throw BackupError.damagedManifest(path: newest, reason: "it names another vault")
      }
      createdAt = manifest.createdAt
      versions = manifest.versions.map(\.version)
      if let date = parseMillisecondTimestamp(manifest.createdAt) {
        age = max(0, now.timeIntervalSince(date) / 86_400)
      }
    } catch {
      problem = (error as? BackupError)?.description ?? "unreadable"
    }
    return LastBackup(
      bundle: newest, createdAt: createdAt, ageDays: age, intact: problem == nil, problem: problem,
      bundles: found.count, versions: versions)
  }

  /// The bundle's manifest, its hash checked against the header (nothing authenticated).
  static func inspectManifest(bundle path: String) throws -> BackupManifest {
    try inspect(bundle: path, hashingSnapshots: false)
  }

  /// The checks that need no passphrase: header, format, lengths, manifest hash, sizes and every
  /// snapshot's SHA-256.
  package static func inspect(bundle path: String, hashingSnapshots: Bool = true) throws -> BackupManifest {
    let reader = try BundleReader(path: path)
    guard reader.size >= UInt64(BundleLayout.headerCount) else {
      throw BackupError.truncated(path: path, part: "header")
    }
    let header = BundleLayout.Header(parsing: try reader.read(at: 0, count: BundleLayout.headerCount))
    guard try reader.read(at: 0, count: BundleLayout.magic.count) == BundleLayout.magic else {
      throw BackupError.notABundle(path: path)
    }
    guard header.format == BundleLayout.format, Int(header.manifestCount) <= BundleLayout.sectionLimit,
      Int(header.keySectionCount) <= BundleLayout.sectionLimit
    else { throw BackupError.damagedHeader(path: path, reason: "format or lengths") }
    let manifestOffset = UInt64(BundleLayout.headerCount)
    guard reader.size >= manifestOffset + UInt64(header.manifestCount) else {
      throw BackupError.truncated(path: path, part: "manifest")
    }
    let manifestBytes = try reader.read(at: manifestOffset, count: Int(header.manifestCount))
    guard try SHA256.hash(manifestBytes) == header.manifestHash else {
      throw BackupError.manifestHashMismatch(path: path)
    }
    guard let manifest = try? JSONDecoder().decode(BackupManifest.self, from: Data(manifestBytes)) else {
      throw BackupError.damagedManifest(path: path, reason: "not a bundle manifest")
    }
    guard hashingSnapshots else { return manifest }
    var offset = manifestOffset + UInt64(header.manifestCount) + UInt64(header.keySectionCount)
    for (index, container) in manifest.containers.enumerated() {
      // The manifest is not authenticated here: a size near 2^64 must not wrap the sum (a trap).
      let (end, overflow) = offset.addingReportingOverflow(container.size)
      guard !overflow, reader.size >= end else {
        throw BackupError.truncated(path: path, part: "container \(index + 1)")
      }
      let hasher = try SHA256Hasher()
      try reader.forEachBlock(at: offset, count: container.size) { try hasher.update($0) }
      guard hex(try hasher.finish()) == container.sha256 else {
        throw BackupError.containerHashMismatch(path: path, index: index + 1, container: container.path)
      }
      offset = end
    }
    guard reader.size == offset else {
      throw BackupError.damagedHeader(path: path, reason: "bytes after the last part")
    }
    return manifest
  }
}

extension Backup {
  /// The registered containers (`registered`: container id and path) that `bundle` holds a
  /// snapshot of and that hold no mark of it: each is an older copy put back (a file-system
  /// restore, a sync) and may lack records the bundle holds, which `create` therefore never
  /// prunes. Containers that cannot be read, and snapshots without a token, are left out.
  package static func containersBehind(bundle: String, registered: [(id: String, path: String)]) -> [String] {
    guard let manifest = try? inspectManifest(bundle: bundle) else { return [] }
    return manifest.containers.compactMap { snapshot in
      guard let token = snapshot.snapshotToken, let path = registered.first(where: { $0.id == snapshot.id })?.path,
        let marks = try? QueueContainer.passedSnapshots(path: path), !marks.contains(token)
      else { return nil }
      return path
    }
  }
}
