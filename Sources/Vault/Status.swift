import Foundation
import VaultKeys

/// What `vault status` reports; its JSON form is part of the command-line contract.
public struct VaultStatus: Codable, Sendable, Equatable {
  /// One key version as `status` shows it: enough to judge whether a rotation is due or safe.
  public struct Version: Codable, Sendable, Equatable {
    /// The version number, as written in the header of every envelope it sealed.
    public var version: UInt32
    /// Whether the version seals, only opens, waits to be finished, or is retired.
    public var state: KeyState
    /// When the version was made (ISO 8601, UTC), as the manifest records it.
    public var createdAt: String
    /// Days since it was created (nil when the manifest's time cannot be read).
    public var ageDays: Double?
    /// When the version was retired and its key deleted; nil while it is not retired.
    public var retiredAt: String?
    /// Records sealed under this version across all registered containers.
    public var records: Int
    /// The envelope suite the version seals and opens: 2 (format 2), or 1 for a version made
    /// before format 2 (SECURITY.md, "Envelopes").
    public var suite: UInt8
    /// For a version kept decrypt-only, why it is kept (records sealed outside containers, records
    /// in a container, a container that is missing); empty for the active and retired versions.
    public var keptBecause: [String]

    enum CodingKeys: String, CodingKey {
      case version, state, records, suite
      case keptBecause = "kept_because"
      case createdAt = "created_at"
      case ageDays = "age_days"
      case retiredAt = "retired_at"
    }

    /// Writes the `status --json` form: snake-case keys, and `age_days` and `retired_at` written as
    /// `null` when absent, never left out, so scripts can rely on every key.
    ///
    /// - Parameter encoder: the encoder to write to.
    /// - Throws: the encoder's errors.
    public func encode(to encoder: any Encoder) throws {
      var container = encoder.container(keyedBy: CodingKeys.self)
      try container.encode(version, forKey: .version)
      try container.encode(state, forKey: .state)
      // Times in JSON are ISO 8601 UTC with milliseconds, whatever form the manifest keeps.
      try container.encode(jsonTimestamp(createdAt), forKey: .createdAt)
      // Absent is null, never omitted.
      try container.encode(ageDays, forKey: .ageDays)
      try container.encode(retiredAt.map(jsonTimestamp), forKey: .retiredAt)
      try container.encode(records, forKey: .records)
      try container.encode(suite, forKey: .suite)
      try container.encode(keptBecause, forKey: .keptBecause)
    }
  }

  /// The keyfile of a keyfile vault, so an operator can see where its keys are and whether the file
  /// is private.
  public struct Keyfile: Codable, Sendable, Equatable {
    /// The keyfile's absolute path, as the manifest records it.
    public var path: String
    /// Octal permission bits, e.g. "0600"; nil when the file is missing.
    public var mode: String?

    /// Encodes every key, a missing file's `mode` as null (never omitted).
    ///
    /// - Parameter encoder: the encoder to write to.
    /// - Throws: the encoder's errors.
    public func encode(to encoder: any Encoder) throws {
      var container = encoder.container(keyedBy: CodingKeys.self)
      try container.encode(path, forKey: .path)
      try container.encode(mode, forKey: .mode)
    }

    enum CodingKeys: String, CodingKey { case path, mode }
  }

  /// The vault's id in hex: the `KeyringID` every envelope names.
  public var vaultID: String
  /// The home directory the status was taken from.
  public var home: String
  /// Where the keys are kept.
  public var store: KeyStoreKind
  /// The version new records are sealed under.
  public var activeVersion: UInt32
  /// Every version the manifest still lists, in the manifest's order.
  public var versions: [Version]
  /// A registered container and its records per key version (nil when its file is missing).
  public struct Container: Codable, Sendable, Equatable {
    /// Whether a container's records were counted.
    public enum State: String, Codable, Sendable {
      /// Counted: `records` holds the counts.
      case ok
      /// No file at its path.
      case missing
      /// There, but not counted (refused as unsafe to open, or failed to read): the caller said why.
      case unreadable
      /// Something else is at its path (another container, another vault's, an empty file, not a
      /// container): not counted, and its records may be gone; the caller said what is there.
      case replaced
    }

    /// The container's absolute path, as registered.
    public var path: String
    /// The container id recorded at registration (nil for one registered before ids existed).
    public var id: String?
    /// Whether its records were counted (`ok`), its file is missing, or it is there and was not
    /// counted (`unreadable`).
    public var state: State
    /// Records per key version (the version in decimal as the key); nil when the file is missing or
    /// was not counted.
    public var records: [String: Int]?

    /// Encodes every key, an absent `id` or `records` as null (never omitted).
    ///
    /// - Parameter encoder: the encoder to write to.
    /// - Throws: the encoder's errors.
    public func encode(to encoder: any Encoder) throws {
      var container = encoder.container(keyedBy: CodingKeys.self)
      try container.encode(path, forKey: .path)
      try container.encode(id, forKey: .id)
      try container.encode(state, forKey: .state)
      try container.encode(records, forKey: .records)
    }

    /// Decodes the `status --json` form; `state`, absent from the JSON of releases before it, is
    /// then `ok` when `records` were counted and `missing` otherwise, as those releases meant.
    ///
    /// - Parameter decoder: the decoder to read from.
    /// - Throws: the decoder's errors.
    public init(from decoder: any Decoder) throws {
      let values = try decoder.container(keyedBy: CodingKeys.self)
      path = try values.decode(String.self, forKey: .path)
      id = try values.decodeIfPresent(String.self, forKey: .id)
      records = try values.decodeIfPresent([String: Int].self, forKey: .records)
      state = try values.decodeIfPresent(State.self, forKey: .state) ?? (records == nil ? .missing : .ok)
    }

    init(path: String, id: String?, state: State, records: [String: Int]?) {
      (self.path, self.id, self.state, self.records) = (path, id, state, records)
    }

    enum CodingKeys: String, CodingKey { case path, id, state, records }
  }

  /// Whether the manifest's MAC was checked: `verified`, or `unverified` (the key store could
  /// not be read, e.g. a locked keyring), or `legacy` (written by a release before MACs; upgraded
  /// on the next open with keys).
  public var integrity: String

  /// The keyfile, for a keyfile vault; nil for another store.
  public var keyfile: Keyfile?
  /// Every container registered with the vault, whose records a rotation re-seals.
  public var containers: [Container]
  /// Versions that sealed records outside containers (`Vault.seal`), so a rotation keeps their keys.
  public var externalSealVersions: [UInt32]
  /// What the operator should act on (today: an active version that still seals format 1).
  public var warnings: [String]

  enum CodingKeys: String, CodingKey {
    case home, store, versions, keyfile, containers, integrity, warnings
    case vaultID = "vault_id"
    case activeVersion = "active_version"
    case externalSealVersions = "external_seal_versions"
  }

  /// Encodes every key; `keyfile` is null for a vault whose keys are not in a keyfile (never
  /// omitted, so scripts can rely on every key).
  ///
  /// - Parameter encoder: the encoder to write to.
  /// - Throws: the encoder's errors.
  public func encode(to encoder: any Encoder) throws {
    var container = encoder.container(keyedBy: CodingKeys.self)
    try container.encode(vaultID, forKey: .vaultID)
    try container.encode(home, forKey: .home)
    try container.encode(store, forKey: .store)
    try container.encode(activeVersion, forKey: .activeVersion)
    try container.encode(versions, forKey: .versions)
    try container.encode(integrity, forKey: .integrity)
    try container.encode(keyfile, forKey: .keyfile)
    try container.encode(containers, forKey: .containers)
    try container.encode(externalSealVersions, forKey: .externalSealVersions)
    try container.encode(warnings, forKey: .warnings)
  }
}

extension Vault {
  /// The vault's state from its manifest as this process last read it, with `counts` (records per
  /// version, per container path; nil for a container whose file is missing). Reads no key.
  ///
  /// - Parameters:
  ///   - counts: records per key version, keyed by container path, as the caller counted them (a
  ///     container missing from it shows nil records and adds nothing to the totals).
  ///   - uncounted: paths of containers that are there but could not be counted (shown
  ///     `unreadable`, not `missing`).
  /// - Returns: the status, with `integrity` `verified` (an open vault's manifest was checked).
  public func status(counts: [String: [UInt32: Int]?] = [:], uncounted: Set<String> = []) -> VaultStatus {
    Self.describe(
      home: home, manifest: manifest, counts: counts, uncounted: uncounted, integrity: "verified", now: clock())
  }

  /// The status of a vault from its manifest alone, without reading any key (so it works while the
  /// keyring is locked); for a keyfile vault it looks only at the keyfile's permission bits.
  ///
  /// - Parameters:
  ///   - home: the home to report.
  ///   - manifest: the manifest to describe, e.g. from `Vault.inspect(home:resolver:)`.
  ///   - counts: records per key version, keyed by container path (nil for a missing file).
  ///   - uncounted: paths of containers that are there but could not be counted (refused as unsafe
  ///     to open, or failed to read): shown `unreadable`, not `missing`.
  ///   - replaced: paths where something other than the registered container is (counted as not
  ///     there: shown `replaced`).
  ///   - integrity: what is known of the manifest's MAC, shown as given (`verified`,
  ///     `unverified: …`, `legacy`).
  ///   - now: the time ages are measured at.
  /// - Returns: the status.
  public static func describe(
    home: String, manifest: Manifest, counts: [String: [UInt32: Int]?] = [:], uncounted: Set<String> = [],
    replaced: Set<String> = [], integrity: String, now: Date = Date()
  ) -> VaultStatus {
    var totals: [UInt32: Int] = [:]
    for case let perVersion? in counts.values {
      for (version, count) in perVersion { totals[version, default: 0] += count }
    }
    var keyfile: VaultStatus.Keyfile?
    if manifest.store.kind == .keyfile, let path = manifest.store.keyfile {
      keyfile = .init(path: path, mode: KeyfileStore(path: path).mode.map { "0" + String($0, radix: 8) })
    }
    return VaultStatus(
      vaultID: manifest.vaultID, home: home, store: manifest.store.kind, activeVersion: manifest.activeVersion,
      versions: manifest.versions.map {
        .init(
          version: $0.version, state: $0.state, createdAt: $0.createdAt,
          ageDays: RotationSchedule.ageDays(of: $0.createdAt, now: now), retiredAt: $0.retiredAt,
          records: totals[$0.version] ?? 0, suite: $0.effectiveSuite,
          keptBecause: $0.state == .decryptOnly
            ? keptBecause($0.version, manifest: manifest, counts: counts, uncounted: uncounted.union(replaced)) : [])
      },
      integrity: integrity, keyfile: keyfile,
      containers: manifest.containers.map { container in
        let perVersion = counts[container.path] ?? nil
        return .init(
          path: container.path, id: container.id,
          state: perVersion != nil
            ? .ok
            : replaced.contains(container.path)
              ? .replaced : uncounted.contains(container.path) ? .unreadable : .missing,
          records: perVersion.map { Dictionary(uniqueKeysWithValues: $0.map { (String($0.key), $0.value) }) })
      },
      externalSealVersions: manifest.externalSealVersions, warnings: warnings(manifest, home: home))
  }

  /// Why `version` (decrypt-only) is kept, as the next rotation would see it from these counts.
  static func keptBecause(
    _ version: UInt32, manifest: Manifest, counts: [String: [UInt32: Int]?], uncounted: Set<String> = []
  ) -> [String] {
    var reasons: [String] = []
    // Rotation retires a version only on counts from registered containers (see `Vault.rotate`).
    if manifest.containers.isEmpty { reasons.append(noContainerToCountReason) }
    if manifest.externalSealVersions.contains(version) { reasons.append(externalSealReason(version)) }
    for container in manifest.containers {
      switch counts[container.path] {
      case .some(.some(let perVersion)):
        if let count = perVersion[version], count > 0 {
          reasons.append("\(count) records under it in \(container.path)")
        }
      case .some(.none) where uncounted.contains(container.path):
        reasons.append("container \(container.path) could not be read, so its records cannot be counted")
      case .some(.none):
        reasons.append("container \(container.path) is missing, so its records cannot be counted")
      case .none:
        break
      }
    }
    if reasons.isEmpty { reasons.append("nothing needs it now: the next rotation retires it") }
    return reasons
  }

  /// Why rotation keeps every older version of a vault with no registered container.
  static let noContainerToCountReason = "no container is registered, so no count can prove it unused"

  /// Why a version pinned by `seal` is kept, and the way to release it: re-seal the envelopes,
  /// then release the pin.
  static func externalSealReason(_ version: UInt32) -> String {
    "it sealed records outside any container (vault seal), which rotation cannot count; re-seal them under "
      + "the active version (vault reseal), then release it (vault unpin \(version))"
  }

  /// The warnings `status` and `doctor` show for `manifest`, as sentences.
  ///
  /// - Parameters:
  ///   - manifest: the manifest to judge.
  ///   - home: the vault's home, to look for a keyfile move that stopped part-way; nil: not looked for.
  /// - Returns: one sentence per thing to act on (see `statusWarnings(_:home:)`); empty when there
  ///   is none.
  public static func warnings(_ manifest: Manifest, home: String? = nil) -> [String] {
    statusWarnings(manifest, home: home).map(\.description)
  }

  /// The things to act on in `manifest`, most urgent first.
  ///
  /// - Parameters:
  ///   - manifest: the manifest to judge.
  ///   - home: the vault's home, to look for a keyfile move that stopped part-way; nil: not looked for.
  /// - Returns: a keyfile move that stopped part-way, an unfinished rotation (after a compromise,
  ///   or another, a version still pending included), then an active version that still seals
  ///   format 1; empty when there is none of these.
  public static func statusWarnings(_ manifest: Manifest, home: String? = nil) -> [StatusWarning] {
    var warnings: [StatusWarning] = []
    if let home, let move = stoppedMove(home: home) {
      let current = manifest.store.keyfile ?? ""
      let finishing = move.old != current && !sameFile(move.old, current)
      warnings.append(
        .unfinishedKeyfileMove(from: move.old, to: finishing ? current : move.new, manifestChanged: finishing))
    }
    if let version = manifest.unfinishedCompromise {
      warnings.append(.unfinishedCompromise(version: version))
    } else if let version = manifest.resealing {
      warnings.append(.unfinishedRotation(version: version))
    } else if let pending = manifest.versions.last(where: { $0.state == .pending }) {
      // Stopped before its new version was made active (the next rotation or open finishes that).
      warnings.append(.unfinishedRotation(version: pending.version))
    }
    if let active = manifest.record(manifest.activeVersion), active.effectiveSuite == Envelope.suiteAES256GCM {
      warnings.append(.sealsFormatOne(version: active.version))
    }
    return warnings
  }
}

/// Something `status` and `doctor` tell the operator to act on.
public enum StatusWarning: Sendable, Equatable, CustomStringConvertible {
  /// A rotation after a compromise to `version` (pending or active) has not finished: the
  /// compromised keys still exist, and only a rotation after a compromise may go on.
  case unfinishedCompromise(version: UInt32)
  /// A rotation added `version` and has not made it active, or made it active and has not
  /// re-sealed every record: it is running now, or it was stopped or killed. The versions before it keep their keys until a rotation finishes (the
  /// next one resumes it). New cases may come: switch with a `default`.
  case unfinishedRotation(version: UInt32)
  /// The active version `version` seals envelope format 1: rotate to get a format-2 key.
  case sealsFormatOne(version: UInt32)
  /// A keyfile move from `from` to `to` (nil: not recorded) stopped part-way: before the manifest
  /// named the new place (the vault still uses `from`, and an unused copy may be at `to`), or
  /// after it (`manifestChanged`: the vault uses `to`, and `from` still holds every key). The same
  /// move run again finishes it; a rotation first undoes the first kind and finishes the second.
  case unfinishedKeyfileMove(from: String, to: String?, manifestChanged: Bool)

  /// The warning as a sentence (it names no command: an app has none of the CLI's).
  public var description: String {
    switch self {
    case .unfinishedCompromise(let version):
      "a rotation after a compromise to version \(version) has not finished: the compromised keys still exist; "
        + "finish it with a rotation after a compromise"
    case .unfinishedRotation(let version):
      "the rotation to version \(version) has not finished (it is running, or it was stopped or killed): the "
        + "versions before it keep their keys until it does; unless it is running, rotate again to resume it"
    case .unfinishedKeyfileMove(let from, let to, true):
      "a keyfile move stopped part-way: the vault uses \(to ?? "its new keyfile"), and the old keyfile \(from) still "
        + "holds every key; run the same move again to finish it (which removes the old file)"
    case .unfinishedKeyfileMove(let from, let to, false):
      "a keyfile move from \(from)" + (to.map { " to \($0)" } ?? "")
        + " stopped part-way: the vault still uses \(from), and the copy the move made holds its keys too; run the same "
        + "move again to finish it (a rotation removes the copy first)"
    case .sealsFormatOne(let version):
      "key version \(version) seals envelope format 1 (AES-256-GCM with random 96-bit nonces: at most "
        + "2^32 records per key, no key commitment, contexts without container ids); rotate the vault to "
        + "make a format-2 key and re-seal every container record under it"
    }
  }
}
