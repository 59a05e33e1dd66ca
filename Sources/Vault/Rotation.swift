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
  /// least one container was checked, and every container reports zero records under it.
  /// Envelopes kept outside containers (for example from `vault seal`) cannot be counted, which is
  /// why retiring is opt-in.
  public func rotate(containers: [any SealedContainer] = [], retireUnused: Bool = false) throws -> RotationReport {
    let started = Date()
    return try withManifestLock {
      let previous = manifest.activeVersion
      // Refuse before recording anything when the store cannot take a key (locked, no provider…).
      try store.checkWritable()
      if !manifest.versions.contains(where: { $0.state == .pending }) {
        var next = manifest
        let version = (next.versions.map(\.version).max() ?? 0) + 1
        next.versions.append(KeyVersionRecord(version: version, state: .pending, createdAt: timestamp(clock())))
        try ManifestFile.save(next, home: home)
        try reload()
      }
      try completePendingVersion()
      let active = manifest.activeVersion

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
      if retireUnused, !containers.isEmpty {
        for version in older where !inUse.contains(version) {
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
      return RotationReport(
        previousVersion: previous, newVersion: active, resealed: resealed, retired: retired,
        keptVersions: older.filter { !retired.contains($0) }, seconds: Date().timeIntervalSince(started))
    }
  }
}
