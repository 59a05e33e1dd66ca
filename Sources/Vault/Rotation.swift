import Foundation
import VaultKeys

/// A store of sealed records that takes part in rotation (the queue containers implement it).
///
/// The coordinator calls these in protocol order: raise the minimum seal version (so no writer
/// adds records under an older key), re-seal every older record, then count records per version.
public protocol SealedContainer {
  /// A stable name for reports (the container's path).
  var name: String { get }
  /// Makes writers in every process seal under at least `version` from now on.
  func raiseMinimumSealVersion(to version: UInt32) throws
  /// Re-seals every record under a version older than `version`, in bounded transactions.
  /// Idempotent and resumable. Returns how many records it re-sealed.
  func reseal(with vault: Vault, to version: UInt32) throws -> Int
  /// Records per key version, including parked and dead-letter rows.
  func recordCounts() throws -> [UInt32: Int]
}

/// What a rotation did.
public struct RotationReport: Sendable, Equatable, Codable {
  /// The version active when the rotation began (equal to `newVersion` when resuming an
  /// interrupted rotation).
  public var previousVersion: UInt32
  public var newVersion: UInt32
  public var resealed: [String: Int]
  public var retired: [UInt32]
  /// Older versions kept as decrypt-only, and why (for example: no containers to prove them unused).
  public var keptVersions: [UInt32]
  public var seconds: Double

  enum CodingKeys: String, CodingKey {
    case previousVersion = "previous_version"
    case newVersion = "new_version"
    case resealed, retired
    case keptVersions = "kept_versions"
    case seconds
  }
}

extension Vault {
  /// Rotates the vault's key (crash-safe and multi-process-safe).
  ///
  /// Under the home's exclusive lock: finishes a rotation that stopped part-way, or adds version
  /// n+1 as pending, stores and self-tests its key, and makes it active (older versions become
  /// decrypt-only). Then each container raises its minimum seal version and re-seals.
  ///
  /// A version is retired (its key deleted from the store) only when `retireUnused` is set, at
  /// least one container was checked, every container reports zero records under it, and it never
  /// sealed anything outside a container (`sealExternal`), since such envelopes cannot be counted.
  public func rotate(containers: [any SealedContainer] = [], retireUnused: Bool = false) throws -> RotationReport {
    try rotate(retireUnused: retireUnused) { _ in containers }
  }

  /// Rotates, asking `containers` for the containers to re-seal once the manifest lock is held
  /// (given the freshly read manifest), so a container registered just before cannot be missed.
  /// Versions are retired only when the containers cover every container the manifest registers.
  public func rotate(
    retireUnused: Bool, containers openContainers: (Manifest) throws -> [any SealedContainer]
  ) throws -> RotationReport {
    let started = Date()
    return try withManifestLock {
      let containers = try openContainers(manifest)
      let previous = manifest.activeVersion
      // Refuse before recording anything when the store cannot take a key (locked, no provider…).
      try store.checkWritable()
      let resuming = manifest.resealing != nil && manifest.resealing == manifest.activeVersion
      if !resuming, !manifest.versions.contains(where: { $0.state == .pending }) {
        var next = manifest
        let version = (next.versions.map(\.version).max() ?? 0) + 1
        next.versions.append(KeyVersionRecord(version: version, state: .pending, createdAt: timestamp(clock())))
        try ManifestFile.save(next, home: home)
        try reload()
      }
      try completePendingVersion()
      let active = manifest.activeVersion
      if manifest.resealing != active {
        var next = manifest
        next.resealing = active
        try save(next)
      }

      var resealed: [String: Int] = [:]
      for container in containers {
        try container.raiseMinimumSealVersion(to: active)
        resealed[container.name] = try container.reseal(with: self, to: active)
      }

      var inUse = Set<UInt32>()
      for container in containers {
        for (version, count) in try container.recordCounts() where count > 0 { inUse.insert(version) }
      }
      let older = manifest.versions.filter { $0.version != active && $0.state == .decryptOnly }.map(\.version)
      var retired: [UInt32] = []
      // Retire only when every registered container was counted (re-read under the lock).
      let covered = Set(manifest.containers).isSubset(of: Set(containers.map(\.name)))
      if retireUnused, !containers.isEmpty, covered {
        let external = Set(manifest.externalSealVersions)
        for version in older where !inUse.contains(version) && !external.contains(version) {
          // Manifest first: a crash after this leaves an orphaned key, never a "retired" key still in use.
          var next = manifest
          next.setState(.retired, of: version)
          if let index = next.versions.firstIndex(where: { $0.version == version }) {
            next.versions[index].retiredAt = timestamp(clock())
          }
          try ManifestFile.save(next, home: home)
          try reload()
          _ = try store.deleteKey(keyring: keyringID, version: version)
          retired.append(version)
        }
      }
      // A crash between marking a version retired and deleting its key leaves the key behind;
      // delete any such leftovers now (the manifest already proves them unused).
      let stored = Set(try store.storedVersions(keyring: keyringID))
      for record in manifest.versions where record.state == .retired && stored.contains(record.version) {
        _ = try store.deleteKey(keyring: keyringID, version: record.version)
      }
      var finished = manifest
      finished.resealing = nil
      try save(finished)
      return RotationReport(
        previousVersion: previous, newVersion: active, resealed: resealed, retired: retired,
        keptVersions: older.filter { !retired.contains($0) }, seconds: Date().timeIntervalSince(started))
    }
  }
}

extension Vault {
  /// Registers a container so rotation re-seals and counts its records. Idempotent; takes the
  /// manifest lock only when the container is new.
  public func registerContainer(_ path: String) throws {
    let path = absolutePath(path)
    if manifest.containers.contains(path) { return }
    try withManifestLock {
      guard !manifest.containers.contains(path) else { return }
      var next = manifest
      next.containers.append(path)
      try save(next)
    }
  }

  /// Seals a record that will live outside any container (a file, another database): under the
  /// manifest lock, records the active version as used outside containers, so rotation never
  /// retires it, and seals under exactly that version. Use this, not `seal`, for such records.
  public func sealExternal(_ plaintext: [UInt8], context: [UInt8]) throws -> [UInt8] {
    try withManifestLock {
      let version = manifest.activeVersion
      if !manifest.externalSealVersions.contains(version) {
        var next = manifest
        next.externalSealVersions.append(version)
        try save(next)
      }
      let envelope = try seal(plaintext, context: context)
      guard try Envelope.header(of: envelope).version == version else { throw VaultError.noActiveKey }
      return envelope
    }
  }
}
