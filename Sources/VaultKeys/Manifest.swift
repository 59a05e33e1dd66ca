import Foundation
import VaultCrypto

/// The state of one key version.
public enum KeyState: String, Codable, Sendable {
  /// Generated and stored, not yet proven by a round trip; nothing is sealed under it.
  case pending
  /// New records are sealed under it. Exactly one version is active.
  case active
  /// Opens old records; seals nothing.
  case decryptOnly = "decrypt-only"
  /// Proven unused everywhere; its material has been deleted from the store.
  case retired

  /// Whether a version in this state may have records sealed under it, so its key must be kept,
  /// loaded and backed up: an active or decrypt-only version (a pending one has sealed nothing
  /// yet, a retired one is proven unused).
  public var isLive: Bool { self == .active || self == .decryptOnly }
}

/// One key version as recorded in the manifest.
public struct KeyVersionRecord: Codable, Sendable, Equatable {
  /// The version number, as written in the header of every envelope it sealed.
  public var version: UInt32
  /// What the version may do now: seal, only open, wait to be finished, or nothing (retired).
  public var state: KeyState
  /// When the version was made (ISO 8601, UTC): what a rotation schedule measures its age from.
  public var createdAt: String
  /// When the version was retired; nil while it is not.
  public var retiredAt: String?
  /// The key-check value: the first 16 bytes of HMAC-SHA256(key, "vault key check v1"), in hex.
  /// A key store item whose key does not produce it is not this version's key. Nil only for
  /// versions made by a release before key-check values (filled in when the key is next loaded).
  public var check: String?
  /// The envelope suite this version seals and opens (SECURITY.md, "Envelopes"): 2 for versions
  /// made by this release, nil for versions made before suites were recorded, which are suite 1.
  /// Fixed when the version is made; an envelope of another suite is refused under it.
  public var suite: UInt8?
  /// Fields written by a newer release, kept as they are on every rewrite.
  var unknown: [String: JSONValue] = [:]

  enum CodingKeys: String, CodingKey, CaseIterable {
    case version, state, check, suite
    case createdAt = "created_at"
    case retiredAt = "retired_at"
  }

  /// The suite versions made by this release use.
  public static let currentSuite: UInt8 = 2
  /// The suites this release can seal and open under.
  public static let knownSuites: ClosedRange<UInt8> = 1...2

  /// A version record as a vault writes it when it adds a version.
  ///
  /// - Parameters:
  ///   - version: the version number.
  ///   - state: its state.
  ///   - createdAt: when it was made (ISO 8601, UTC).
  ///   - check: its key-check value, or nil when not known yet.
  ///   - suite: its envelope suite; nil means suite 1 (a version from before suites were recorded).
  public init(version: UInt32, state: KeyState, createdAt: String, check: String? = nil, suite: UInt8? = currentSuite) {
    self.version = version
    self.state = state
    self.createdAt = createdAt
    self.check = check
    self.suite = suite
  }

  /// The suite in effect: the recorded one, or 1 for a version from before suites were recorded.
  public var effectiveSuite: UInt8 { suite ?? 1 }

  /// Reads the JSON form, keeping fields it does not know so a rewrite preserves what a newer
  /// release added.
  ///
  /// - Parameter decoder: the decoder to read from.
  /// - Throws: `DecodingError` when a required field is missing or has the wrong type.
  public init(from decoder: any Decoder) throws {
    let values = try decoder.container(keyedBy: CodingKeys.self)
    version = try values.decode(UInt32.self, forKey: .version)
    state = try values.decode(KeyState.self, forKey: .state)
    createdAt = try values.decode(String.self, forKey: .createdAt)
    retiredAt = try values.decodeIfPresent(String.self, forKey: .retiredAt)
    check = try values.decodeIfPresent(String.self, forKey: .check)
    suite = try values.decodeIfPresent(UInt8.self, forKey: .suite)
    unknown = try JSONValue.unknownFields(in: decoder, known: CodingKeys.allCases.map(\.rawValue))
  }

  /// Writes the JSON form (snake-case keys, absent optionals left out), with the unknown fields
  /// read kept as they were.
  ///
  /// - Parameter encoder: the encoder to write to.
  /// - Throws: the encoder's errors.
  public func encode(to encoder: any Encoder) throws {
    var values = encoder.container(keyedBy: CodingKeys.self)
    try values.encode(version, forKey: .version)
    try values.encode(state, forKey: .state)
    try values.encode(createdAt, forKey: .createdAt)
    try values.encodeIfPresent(retiredAt, forKey: .retiredAt)
    try values.encodeIfPresent(check, forKey: .check)
    try values.encodeIfPresent(suite, forKey: .suite)
    try JSONValue.encode(unknown, to: encoder)
  }

  /// The key-check value of `key` (see `check`).
  ///
  /// - Parameter key: the version's key.
  /// - Returns: 32 lowercase hex characters; they say nothing usable about the key.
  /// - Throws: `CryptoError.library` when OpenSSL fails.
  public static func checkValue(of key: SymmetricKey) throws -> String {
    try labelledCheck(of: key, label: "vault key check v1")
  }

  /// The first 16 bytes of HMAC-SHA256(`key`, `label`), in lowercase hex: tells keys apart and
  /// says nothing usable about them (the key-check value; a home's identity, under its integrity
  /// key).
  ///
  /// - Parameters:
  ///   - key: the key.
  ///   - label: a fixed text naming what the value is for, so that values for two uses differ.
  /// - Returns: 32 lowercase hex characters.
  /// - Throws: `CryptoError.library` when OpenSSL fails.
  package static func labelledCheck(of key: SymmetricKey, label: String) throws -> String {
    let code = try HMACSHA256.authenticationCode(Array(label.utf8), key: key)
    return code.prefix(16).map { String(format: "%02x", $0) }.joined()
  }
}

/// A container registered with the vault: rotation re-seals and counts its records, and refuses to
/// run when the file at `path` is not the container with `id`.
public struct ContainerRecord: Codable, Sendable, Equatable {
  /// The container file's absolute path, as registered.
  public var path: String
  /// The random id the container keeps in its own metadata. Nil only for a container registered by
  /// a release before container ids (adopted from the file the next time it is opened).
  public var id: String?
  var unknown: [String: JSONValue] = [:]

  enum CodingKeys: String, CodingKey, CaseIterable { case path, id }

  /// A container record as `Vault.registerContainer(_:id:)` writes it.
  ///
  /// - Parameters:
  ///   - path: the container file's absolute path.
  ///   - id: the container's own random id (nil only for containers registered before ids).
  public init(path: String, id: String?) {
    self.path = path
    self.id = id
  }

  /// Reads the JSON form, keeping fields it does not know so a rewrite preserves what a newer
  /// release added.
  ///
  /// - Parameter decoder: the decoder to read from.
  /// - Throws: `DecodingError` when a required field is missing or has the wrong type.
  public init(from decoder: any Decoder) throws {
    let values = try decoder.container(keyedBy: CodingKeys.self)
    path = try values.decode(String.self, forKey: .path)
    id = try values.decodeIfPresent(String.self, forKey: .id)
    unknown = try JSONValue.unknownFields(in: decoder, known: CodingKeys.allCases.map(\.rawValue))
  }

  /// Writes the JSON form, with the unknown fields read kept as they were.
  ///
  /// - Parameter encoder: the encoder to write to.
  /// - Throws: the encoder's errors.
  public func encode(to encoder: any Encoder) throws {
    var values = encoder.container(keyedBy: CodingKeys.self)
    try values.encode(path, forKey: .path)
    try values.encodeIfPresent(id, forKey: .id)
    try JSONValue.encode(unknown, to: encoder)
  }
}

/// Where the vault's key material lives.
public struct StoreDescriptor: Codable, Sendable, Equatable {
  /// Which backend holds the keys.
  public var kind: KeyStoreKind
  /// The keyfile's absolute path, for `.keyfile`.
  public var keyfile: String?

  /// Names a store for `Vault.create`.
  ///
  /// - Parameters:
  ///   - kind: the backend.
  ///   - keyfile: for `.keyfile`, the keyfile's path; nil picks the default path for the new vault.
  public init(kind: KeyStoreKind, keyfile: String? = nil) {
    self.kind = kind
    self.keyfile = keyfile
  }
}

/// Non-secret metadata of a vault: its keyring id, key versions and their states, where the keys
/// live, and the containers that hold records sealed under them. Stored as `manifest.json` (0600)
/// in the vault home, authenticated with the vault's integrity key (see `ManifestFile`).
public struct Manifest: Codable, Sendable, Equatable {
  /// Format 2 adds the MAC, the epoch, container ids, key-check values and compacted history.
  /// Format 3 is format 2 with a version of suite 2 in it: it is written as soon as one exists, so
  /// a release that knows only suite 1 (and reads only formats 1 and 2) refuses the manifest
  /// instead of sealing format-1 envelopes under a suite-2 key. A reader refuses any other format
  /// except 1, which it upgrades.
  public static let currentFormat = 3
  /// The format of a manifest whose versions are all suite 1: what the release before suites reads.
  public static let suiteOneFormat = 2

  /// The format this manifest is written in: 3 once any version is suite 2, else 2.
  public var writtenFormat: Int {
    versions.contains { $0.effectiveSuite >= 2 } ? Self.currentFormat : Self.suiteOneFormat
  }
  /// The manifest's file name in the vault home: what marks a directory as a vault.
  public static let fileName = "manifest.json"
  /// Retired versions listed individually; older retired versions are only implied by
  /// `highestVersion`, so the manifest stays small however often the vault rotates.
  public static let retiredHistoryLimit = 8

  /// The format this manifest was read in or will be written in (see `currentFormat`).
  public var format: Int
  /// The vault's id in hex (see `keyringID`): what every envelope names in its header.
  public var vaultID: String
  /// The absolute path of the vault home this manifest belongs to. A copy of the manifest in
  /// another directory would otherwise act on the same keys under a different lock.
  public var home: String?
  /// Incremented by every write. A manifest whose epoch is below the newest one the key store has
  /// seen is a stale copy (restored from a backup, or rolled back) and is superseded.
  public var epoch: UInt64
  /// Where the vault's keys live.
  public var store: StoreDescriptor
  /// The version new records are sealed under.
  public var activeVersion: UInt32
  /// The highest version ever made. Versions are never reused; one at or below it that is not
  /// listed was retired and compacted away.
  public var highestVersion: UInt32
  /// Every version still listed: all but retired versions compacted out of the history.
  public var versions: [KeyVersionRecord]
  /// Containers whose records rotation re-seals and counts.
  public var containers: [ContainerRecord]
  /// Key versions that sealed records outside any container (`vault seal`). Rotation cannot count
  /// those records, so it never retires these versions (except a rotation after a compromise).
  public var externalSealVersions: [UInt32]
  /// Set while a rotation to this version has not yet finished re-sealing and retiring; a rerun of
  /// `rotate` resumes it instead of making yet another version.
  public var resealing: UInt32?
  /// Set while a rotation after a compromise that made this version active has not finished
  /// (stopped before retiring, or an old key had to be kept): only a rotation after a compromise
  /// may go on (with a fresh key); an ordinary rotation refuses, so it can never quietly keep the
  /// compromised key. A release that does not know the field keeps it on rewrite.
  public var unfinishedCompromise: UInt32?
  var unknown: [String: JSONValue] = [:]

  enum CodingKeys: String, CodingKey, CaseIterable {
    case format, store, versions, containers, resealing, epoch, home
    case unfinishedCompromise = "unfinished_compromise"
    case vaultID = "vault_id"
    case activeVersion = "active_version"
    case highestVersion = "highest_version"
    case externalSealVersions = "external_seal_versions"
  }

  /// Reads the JSON form, keeping fields it does not know so a rewrite preserves what a newer
  /// release added. Whether the format is one this release reads is `ManifestFile`'s check.
  ///
  /// - Parameter decoder: the decoder to read from.
  /// - Throws: `DecodingError` when a required field is missing or has the wrong type.
  public init(from decoder: any Decoder) throws {
    let values = try decoder.container(keyedBy: CodingKeys.self)
    format = try values.decode(Int.self, forKey: .format)
    vaultID = try values.decode(String.self, forKey: .vaultID)
    home = try values.decodeIfPresent(String.self, forKey: .home)
    epoch = try values.decodeIfPresent(UInt64.self, forKey: .epoch) ?? 0
    store = try values.decode(StoreDescriptor.self, forKey: .store)
    activeVersion = try values.decode(UInt32.self, forKey: .activeVersion)
    versions = try values.decode([KeyVersionRecord].self, forKey: .versions)
    highestVersion =
      try values.decodeIfPresent(UInt32.self, forKey: .highestVersion) ?? versions.map(\.version).max() ?? 0
    if let records = try? values.decode([ContainerRecord].self, forKey: .containers) {
      containers = records
    } else {
      // Format 1 listed bare paths.
      containers = try values.decode([String].self, forKey: .containers).map { ContainerRecord(path: $0, id: nil) }
    }
    externalSealVersions = try values.decodeIfPresent([UInt32].self, forKey: .externalSealVersions) ?? []
    resealing = try values.decodeIfPresent(UInt32.self, forKey: .resealing)
    unfinishedCompromise = try values.decodeIfPresent(UInt32.self, forKey: .unfinishedCompromise)
    unknown = try JSONValue.unknownFields(in: decoder, known: CodingKeys.allCases.map(\.rawValue))
  }

  /// Writes the JSON form, with the unknown fields read kept as they were.
  ///
  /// - Parameter encoder: the encoder to write to.
  /// - Throws: the encoder's errors.
  public func encode(to encoder: any Encoder) throws {
    var values = encoder.container(keyedBy: CodingKeys.self)
    try values.encode(format, forKey: .format)
    try values.encode(vaultID, forKey: .vaultID)
    try values.encodeIfPresent(home, forKey: .home)
    try values.encode(epoch, forKey: .epoch)
    try values.encode(store, forKey: .store)
    try values.encode(activeVersion, forKey: .activeVersion)
    try values.encode(highestVersion, forKey: .highestVersion)
    try values.encode(versions, forKey: .versions)
    try values.encode(containers, forKey: .containers)
    try values.encode(externalSealVersions, forKey: .externalSealVersions)
    try values.encodeIfPresent(resealing, forKey: .resealing)
    try values.encodeIfPresent(unfinishedCompromise, forKey: .unfinishedCompromise)
    try JSONValue.encode(unknown, to: encoder)
  }

  package init(vaultID: KeyringID, store: StoreDescriptor, createdAt: String, home: String? = nil) {
    format = Self.currentFormat
    self.vaultID = vaultID.hex
    self.home = home
    epoch = 0
    self.store = store
    activeVersion = 1
    highestVersion = 1
    versions = [
      KeyVersionRecord(version: 1, state: .pending, createdAt: createdAt, suite: KeyVersionRecord.currentSuite)
    ]
    containers = []
    externalSealVersions = []
  }

  /// `vaultID` parsed; nil when it is not 16 hex characters (a corrupt manifest).
  public var keyringID: KeyringID? { KeyringID(hex: vaultID) }

  /// The record of `version`, if the manifest still lists it.
  ///
  /// - Parameter version: the key version.
  /// - Returns: its record, or nil for a version never made or compacted away.
  public func record(_ version: UInt32) -> KeyVersionRecord? { versions.first { $0.version == version } }

  /// The registered container at `path`, if any.
  ///
  /// - Parameter path: an absolute path, compared as a string (not resolved).
  /// - Returns: its record, or nil when no container is registered at exactly that path.
  public func container(at path: String) -> ContainerRecord? { containers.first { $0.path == path } }

  /// Whether `version` was made and later retired (listed as retired, or compacted away).
  ///
  /// - Parameter version: the key version.
  /// - Returns: true when its key is gone (or should be) for good.
  public func isRetired(_ version: UInt32) -> Bool {
    if let record = record(version) { return record.state == .retired }
    return version >= 1 && version <= highestVersion
  }

  package mutating func setState(_ state: KeyState, of version: UInt32) {
    guard let index = versions.firstIndex(where: { $0.version == version }) else { return }
    versions[index].state = state
  }

  /// Keeps only the newest `retiredHistoryLimit` retired versions listed; `highestVersion` keeps
  /// the rest implied. External-seal pins of retired versions are dropped (nothing can use them).
  package mutating func compactRetiredHistory() {
    let retired = versions.filter { $0.state == .retired }.map(\.version).sorted()
    let dropped = Set(retired.dropLast(Self.retiredHistoryLimit))
    versions.removeAll { dropped.contains($0.version) }
    let pinned = externalSealVersions.filter { !isRetired($0) }
    externalSealVersions = pinned
  }

  /// Checks the invariants every reader relies on; returns the first broken one.
  func invariantViolation() -> String? {
    guard keyringID != nil else { return "bad vault_id" }
    var seen = Set<UInt32>()
    for record in versions {
      guard record.version >= 1 else { return "key version 0 is not valid" }
      guard seen.insert(record.version).inserted else { return "key version \(record.version) is listed twice" }
      guard record.version <= highestVersion else {
        return "key version \(record.version) is above highest_version \(highestVersion)"
      }
      guard KeyVersionRecord.knownSuites.contains(record.effectiveSuite) else {
        return "key version \(record.version) has unknown suite \(record.effectiveSuite)"
      }
    }
    guard let active = record(activeVersion) else { return "active version \(activeVersion) is not listed" }
    guard active.state == .active || active.state == .pending else {
      return "active version \(activeVersion) is \(active.state.rawValue)"
    }
    guard versions.filter({ $0.state == .active }).count <= 1 else { return "more than one active version" }
    var paths = Set<String>()
    for container in containers {
      guard container.path.hasPrefix("/") else { return "container path is not absolute" }
      guard paths.insert(container.path).inserted else { return "a container is listed twice" }
    }
    let ids = containers.compactMap(\.id)
    guard Set(ids).count == ids.count else { return "two containers share one id" }
    if store.kind == .keyfile, store.keyfile == nil { return "keyfile store without a keyfile path" }
    return nil
  }
}

/// Reading, signing and writing `manifest.json`.
///
/// File format 2 is the manifest's JSON ("the body", pretty-printed, ending in `\n}`) with one
/// more member spliced in before its closing brace:
///
/// ```
/// <body without its final "\n}"> ,\n  "mac" : "<64 hex digits>"\n}\n
/// ```
///
/// where the MAC is HMAC-SHA256 under the vault's integrity key of the ASCII label
/// `vault manifest v2`, a NUL byte, then the body's exact bytes. The file stays valid JSON (an
/// older release reads `format: 2` and refuses it) and the MAC covers the very bytes on disk, so
/// no canonical re-encoding is needed to verify it.
public enum ManifestFile {
  /// The largest manifest accepted; compaction keeps real ones to a few kilobytes.
  package static let byteLimit = 256 * 1024

  /// Why a manifest could not be read or trusted. Nothing is changed and no key is made when one is
  /// thrown.
  public enum Failure: Error, Equatable, Sendable, CustomStringConvertible {
    /// No manifest in `home`: no vault there, or its manifest was lost.
    case missing(home: String)
    /// The file is not a manifest vault wrote (`reason` says what is wrong).
    case corrupt(path: String, reason: String)
    /// A format this release does not read: written by a newer release.
    case unsupportedFormat(path: String, format: Int)
    /// The file is larger than any manifest vault writes, so it is not read.
    case tooLarge(path: String, bytes: Int)
    /// The MAC does not verify, or is absent from a vault that has an integrity key.
    case unauthenticated(path: String)
    /// The manifest belongs to another user (`owner`) than the one running (`expected`): vault is
    /// run as the wrong user. The file is fine; nothing was read from it.
    case wrongOwner(path: String, owner: UInt32, expected: UInt32)
    /// The manifest's mode (`mode`) lets group or others change it. The file is not damaged by that;
    /// it is refused until its mode is private.
    case openToOthers(path: String, mode: UInt32)
    /// The vault's home directory belongs to another user (`owner`, not `expected`) or lets group or
    /// others (`mode`) replace or delete the files in it. `init` makes it 0700.
    case unsafeHome(home: String, mode: UInt32, owner: UInt32, expected: UInt32)
    /// The manifest's path holds a symbolic link (to `target`; nil when it leads to no regular file:
    /// dangling, a loop, itself, a device, FIFO or directory). vault never reads its manifest through one: whoever controls the
    /// link would choose which file is trusted. Nothing was read through it.
    case symbolicLink(path: String, target: String?)
    /// The manifest's path holds something other than a file (`kind`: a directory, a FIFO, a socket
    /// or a device). Nothing was read from it.
    case notAFile(path: String, kind: String)
    /// The manifest belongs to another vault than the key store's copy.
    case mismatchedMirror(path: String)
    /// The manifest was written for another vault home, which still holds the vault (a copy).
    case copiedHome(path: String, home: String)

    /// A sentence for a person that says what to restore; it names no vault command.
    public var description: String {
      switch self {
      case .missing(let home):
        "no vault at \(home) (\(Manifest.fileName) is missing): if a vault lived here, its key store keeps a copy "
          + "of its manifest to write back; otherwise create one"
      case .corrupt(let path, let reason):
        "the vault manifest \(path) is corrupt (\(reason)); its key store keeps a copy to write back (or restore it "
          + "from a backup). Nothing was changed and no key was made"
      case .unsupportedFormat(let path, let format):
        "the vault manifest \(path) has format \(format), which this version of vault does not understand; upgrade vault"
      case .tooLarge(let path, let bytes):
        "the vault manifest \(path) is \(bytes) bytes, over the \(ManifestFile.byteLimit)-byte limit; "
          + "it is not one vault wrote. Its key store keeps a copy to write back (or restore it from a backup)"
      case .unauthenticated(let path):
        "the vault manifest \(path) fails its integrity check (it was modified, replaced or had its MAC removed "
          + "by something other than vault); nothing was changed. Its key store keeps a copy to write back (or "
          + "restore it from a backup: vault then supersedes an older copy with the newest one its key store holds)"
      case .copiedHome(let path, let home):
        "the vault manifest \(path) belongs to the vault home \(home), which still holds that vault; a copied home "
          + "would act on the same keys under another lock. Use --home \(ShellWord.quoted(home)) (nothing was changed)"
      case .mismatchedMirror(let path):
        "the vault manifest \(path) and the copy in the key store belong to different vaults; "
          + "check that --home and the key store belong together"
      case .wrongOwner(let path, let owner, let expected) where SecureFile.isInDirectoryOf(expected, path):
        // The home is the user's: running as the file's owner would be refused there (review).
        "the vault manifest \(path) belongs to uid \(owner), while its home is yours (uid \(expected)); nothing was "
          + "changed. If vault wrote it while run as uid \(owner), give it back: "
          + "\(SecureFile.chown(to: expected)) \(ShellWord.quoted(path)) (it is authenticated: a manifest anyone changed is refused after that)"
      case .wrongOwner(let path, let owner, let expected):
        Self.notYours("the vault manifest \(path)", owner: owner, expected: expected)
      case .unsafeHome(let home, _, let owner, let expected) where owner != expected:
        Self.notYours("the vault home \(home)", owner: owner, expected: expected)
      case .unsafeHome(let home, let mode, _, _):
        "the vault home \(home) has mode \(octal(mode)), which lets others replace or delete the vault's files; "
          + "nothing was changed. Run: chmod 700 \(ShellWord.quoted(home))"
      case .symbolicLink(let path, let target?):
        "the vault manifest \(path) is a symbolic link to \(ShellWord.quoted(target)), which vault never reads "
          + "through (whoever controls a link would choose the manifest trusted); nothing was read or changed. "
          + "If that is this vault's manifest, put the file itself in the link's place: mv "
          + "\(ShellWord.quoted(Self.resolved(target, beside: path))) \(ShellWord.quoted(path))"
      case .symbolicLink(let path, nil):
        "the vault manifest \(path) is a symbolic link that leads to no regular file (it dangles, loops, or leads to "
          + "a device, FIFO or directory), and vault never "
          + "reads its manifest through a link; nothing was read or changed. Remove the link and put the manifest "
          + "file itself in its place"
      case .notAFile(let path, let kind):
        "the vault manifest \(path) is \(kind), not a regular file; nothing was read or changed. Move it aside and "
          + "restore \(Manifest.fileName) from a backup"
      case .openToOthers(let path, let mode):
        "the vault manifest \(path) has mode \(octal(mode)), which lets others change it; nothing was changed. "
          + "Run: chmod 600 \(ShellWord.quoted(path))"
      }
    }

    /// `subject` (the manifest or the home) belongs to `owner`, not to the user running: whom to
    /// run as. Root is never told to take a user's vault: the user would lose access to their data.
    static func notYours(_ subject: String, owner: UInt32, expected: UInt32) -> String {
      let whose =
        expected == 0 ? "belongs to uid \(owner), not root" : "is owned by uid \(owner), not by you (uid \(expected))"
      return "\(subject) \(whose); nothing was changed. Run as uid \(owner), the vault's owner"
    }

    /// A link's `target` as a path from the working directory: a relative one is relative to the
    /// directory holding the link at `path`.
    static func resolved(_ target: String, beside path: String) -> String {
      target.hasPrefix("/") ? target : (path as NSString).deletingLastPathComponent + "/" + target
    }
  }

  /// A manifest as read from disk, with what is needed to verify it.
  package struct Signed: Sendable {
    public let manifest: Manifest
    /// The body bytes and MAC; nil for a format-1 manifest, which has none.
    let body: [UInt8]?
    let mac: [UInt8]?
    /// The exact file bytes (a format-2 manifest's bytes are what the key store mirrors).
    public let bytes: [UInt8]

    public var isLegacy: Bool { mac == nil }

    /// Whether the MAC verifies under `key` (false for a format-1 manifest).
    public func isAuthentic(under key: SymmetricKey) throws -> Bool {
      guard let body, let mac else { return false }
      return try HMACSHA256.isValid(mac, for: ManifestFile.macInput(body), key: key)
    }
  }

  package static func path(home: String) -> String { home + "/" + Manifest.fileName }

  package static func exists(home: String) -> Bool {
    var info = stat()
    return lstat(path(home: home), &info) == 0
  }

  /// Reads and parses the manifest in `home` without verifying its MAC (the key store may be
  /// locked). Refuses a file that is not a regular file owned by the user with mode 0600 or
  /// stricter, or larger than `byteLimit`.
  package static func read(home: String) throws -> Signed {
    let path = path(home: home)
    guard let bytes = try readPrivate(path) else { throw Failure.missing(home: home) }
    // After the manifest, so that a home without one is `missing`, and root meeting a user's vault
    // hears about the manifest whose owner to run as.
    try checkHome(home)
    return try parse(bytes, path: path)
  }

  /// What is at a home's manifest path, for recovering it from the key store's copy.
  package enum Examined {
    /// No file there.
    case missing
    /// A file that is not a manifest vault could have written (corrupt, too large, or a format-2
    /// manifest without its MAC): replaceable by an authentic copy.
    case damaged
    /// A manifest that parses; its MAC is not checked yet.
    case readable(Signed)

    package var isPresent: Bool {
      if case .missing = self { return false }
      return true
    }

    /// The store a readable manifest names (a hint where its authentic copy is; not trusted).
    package var storeHint: StoreDescriptor? {
      if case .readable(let signed) = self { return signed.manifest.store }
      return nil
    }
  }

  /// Reads the manifest in `home` as `read` does, telling a missing or damaged file from one that
  /// must not be replaced: every other failure (another owner, a mode, a link, not a file, a newer
  /// release's format) is thrown.
  package static func examine(home: String) throws -> Examined {
    do {
      return .readable(try read(home: home))
    } catch let failure as Failure {
      switch failure {
      case .missing: return .missing
      case .corrupt, .tooLarge, .unauthenticated: return .damaged
      default: throw failure
      }
    }
  }

  /// Whoever may write the home can delete or replace the manifest and the containers in it, so
  /// it must be the user's own and writable by nobody else, as the manifest must be.
  package static func checkHome(_ home: String) throws {
    var info = stat()
    guard stat(home, &info) == 0 else {
      throw KeyStoreError.io(path: home, operation: "stat the vault home", errno: errno)
    }
    let me = geteuid()
    guard info.st_uid == me, info.st_mode & 0o022 == 0 else {
      throw Failure.unsafeHome(home: home, mode: UInt32(info.st_mode), owner: info.st_uid, expected: me)
    }
  }

  /// Parses manifest file bytes (from disk or from the key store's mirror).
  package static func parse(_ bytes: [UInt8], path: String) throws -> Signed {
    var body = bytes
    var mac: [UInt8]?
    if let split = splitMAC(bytes) {
      body = split.body
      mac = split.mac
    }
    let manifest: Manifest
    do {
      manifest = try JSONDecoder().decode(Manifest.self, from: Data(body))
    } catch {
      throw Failure.corrupt(path: path, reason: "not valid manifest JSON")
    }
    switch (manifest.format, mac) {
    case (Manifest.suiteOneFormat...Manifest.currentFormat, .some): break
    case (Manifest.suiteOneFormat...Manifest.currentFormat, nil): throw Failure.unauthenticated(path: path)
    case (1, nil): break
    case (1, .some): throw Failure.corrupt(path: path, reason: "a format-1 manifest cannot carry a MAC")
    default: throw Failure.unsupportedFormat(path: path, format: manifest.format)
    }
    if let violation = manifest.invariantViolation() { throw Failure.corrupt(path: path, reason: violation) }
    return Signed(manifest: manifest, body: mac == nil ? nil : body, mac: mac, bytes: bytes)
  }

  /// The file bytes of `manifest` (made current-format) signed with `key`.
  package static func sign(_ manifest: Manifest, key: SymmetricKey) throws -> [UInt8] {
    var manifest = manifest
    manifest.format = manifest.writtenFormat
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
    let body = [UInt8](try encoder.encode(manifest))
    guard body.count >= 2, body.suffix(2) == Array("\n}".utf8) else {
      throw Failure.corrupt(path: Manifest.fileName, reason: "unexpected JSON layout")
    }
    let mac = try HMACSHA256.authenticationCode(macInput(body), key: key)
    let file: [UInt8] = Array(body[..<(body.count - 2)]) + macPrefix + Array(hex(mac).utf8) + macSuffix
    guard file.count <= byteLimit else { throw Failure.tooLarge(path: Manifest.fileName, bytes: file.count) }
    return file
  }

  /// Replaces the manifest in `home` with `bytes` atomically (0600, fsynced, directory fsynced).
  package static func write(_ bytes: [UInt8], home: String) throws {
    try bytes.withUnsafeBytes { try SecureFile.atomicWrite(path(home: home), bytes: $0, mode: 0o600) }
  }

  // MARK: - Plumbing

  private static let macPrefix = Array(",\n  \"mac\" : \"".utf8)
  private static let macSuffix = Array("\"\n}\n".utf8)

  static func macInput(_ body: [UInt8]) -> [UInt8] { Array("vault manifest v2".utf8) + [0] + body }

  /// Splits a format-2 file into its body and MAC; nil when it has no MAC member in that layout.
  private static func splitMAC(_ bytes: [UInt8]) -> (body: [UInt8], mac: [UInt8])? {
    let total = macPrefix.count + 64 + macSuffix.count
    guard bytes.count > total, bytes.suffix(macSuffix.count).elementsEqual(macSuffix) else { return nil }
    let prefixStart = bytes.count - total
    guard bytes[prefixStart..<(prefixStart + macPrefix.count)].elementsEqual(macPrefix) else { return nil }
    let hexDigits = bytes[(prefixStart + macPrefix.count)..<(bytes.count - macSuffix.count)]
    guard let mac = unhex(hexDigits) else { return nil }
    return (Array(bytes[..<prefixStart]) + Array("\n}".utf8), mac)
  }

  static func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }

  private static func unhex(_ digits: ArraySlice<UInt8>) -> [UInt8]? {
    guard digits.count % 2 == 0 else { return nil }
    var out: [UInt8] = []
    var index = digits.startIndex
    while index < digits.endIndex {
      guard let high = hexValue(digits[index]), let low = hexValue(digits[index + 1]) else { return nil }
      out.append(high << 4 | low)
      index += 2
    }
    return out
  }

  private static func hexValue(_ digit: UInt8) -> UInt8? {
    switch digit {
    case UInt8(ascii: "0")...UInt8(ascii: "9"): digit - UInt8(ascii: "0")
    case UInt8(ascii: "a")...UInt8(ascii: "f"): digit - UInt8(ascii: "a") + 10
    default: nil
    }
  }

  /// Reads the manifest file, refusing anything that is not a private regular file of ours.
  /// Returns nil when it does not exist.
  private static func readPrivate(_ path: String) throws -> [UInt8]? {
    let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
    if fd < 0 {
      if errno == ENOENT { return nil }
      if errno == ELOOP {
        // A target that leads to no regular file (dangling, a loop, itself, /dev/zero) is named as such: a
        // `mv` of it would move nothing.
        let target = linkTarget(path)
        var info = stat()
        let leads = target.map {
          stat(Failure.resolved($0, beside: path), &info) == 0 && info.st_mode & S_IFMT == S_IFREG
        }
        throw Failure.symbolicLink(path: path, target: leads == true ? target : nil)
      }
      let code = errno
      // Another user's home (0700) is closed to us: name its owner rather than "Permission denied".
      if code == EACCES { try checkHome((path as NSString).deletingLastPathComponent) }
      // A socket cannot be opened (ENXIO): say what is there rather than the errno's text.
      var info = stat()
      if lstat(path, &info) == 0, info.st_mode & S_IFMT != S_IFREG {
        throw Failure.notAFile(path: path, kind: SecureFile.kind(info.st_mode))
      }
      throw KeyStoreError.io(path: path, operation: "open the vault manifest", errno: code)
    }
    defer { close(fd) }
    var info = stat()
    guard fstat(fd, &info) == 0 else {
      throw KeyStoreError.io(path: path, operation: "stat the vault manifest", errno: errno)
    }
    guard info.st_mode & S_IFMT == S_IFREG else {
      throw Failure.notAFile(path: path, kind: SecureFile.kind(info.st_mode))
    }
    try ManifestFile.checkPrivate(path, info: info)
    let size = Int(info.st_size)
    guard size <= byteLimit else { throw Failure.tooLarge(path: path, bytes: size) }
    var bytes = [UInt8](repeating: 0, count: size)
    var done = 0
    while done < size {
      let n = bytes.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress! + done, size - done) }
      if n < 0, errno == EINTR { continue }
      guard n > 0 else {
        throw KeyStoreError.io(path: path, operation: "read the vault manifest", errno: n < 0 ? errno : EIO)
      }
      done += n
    }
    return bytes
  }

  /// What a link at `path` points to, or nil when it cannot be read (removed since).
  private static func linkTarget(_ path: String) -> String? {
    var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
    let count = readlink(path, &buffer, buffer.count - 1)
    guard count > 0 else { return nil }
    return String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
  }

  /// The manifest decides which keys may be deleted: like a private key, it must be the user's
  /// own file and writable by nobody else.
  static func checkPrivate(_ path: String, info: stat) throws {
    let me = geteuid()
    guard info.st_uid == me else { throw Failure.wrongOwner(path: path, owner: info.st_uid, expected: me) }
    guard info.st_mode & 0o022 == 0 else { throw Failure.openToOthers(path: path, mode: UInt32(info.st_mode)) }
  }
}

/// A JSON value kept verbatim: fields a newer release wrote survive a rewrite by this one.
enum JSONValue: Codable, Sendable, Equatable {
  case null
  case bool(Bool)
  case number(Double)
  case string(String)
  case array([JSONValue])
  case object([String: JSONValue])

  init(from decoder: any Decoder) throws {
    let value = try decoder.singleValueContainer()
    if value.decodeNil() {
      self = .null
    } else if let bool = try? value.decode(Bool.self) {
      self = .bool(bool)
    } else if let number = try? value.decode(Double.self) {
      self = .number(number)
    } else if let string = try? value.decode(String.self) {
      self = .string(string)
    } else if let array = try? value.decode([JSONValue].self) {
      self = .array(array)
    } else {
      self = .object(try value.decode([String: JSONValue].self))
    }
  }

  func encode(to encoder: any Encoder) throws {
    var value = encoder.singleValueContainer()
    switch self {
    case .null: try value.encodeNil()
    case .bool(let bool): try value.encode(bool)
    case .number(let number): try value.encode(number)
    case .string(let string): try value.encode(string)
    case .array(let array): try value.encode(array)
    case .object(let object): try value.encode(object)
    }
  }

  struct AnyKey: CodingKey {
    var stringValue: String
    var intValue: Int? { nil }
    init(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
  }

  /// The members of the object being decoded whose names are not in `known`.
  static func unknownFields(in decoder: any Decoder, known: [String]) throws -> [String: JSONValue] {
    let all = try decoder.container(keyedBy: AnyKey.self)
    var unknown: [String: JSONValue] = [:]
    for key in all.allKeys where !known.contains(key.stringValue) {
      unknown[key.stringValue] = try all.decode(JSONValue.self, forKey: key)
    }
    return unknown
  }

  static func encode(_ fields: [String: JSONValue], to encoder: any Encoder) throws {
    guard !fields.isEmpty else { return }
    var all = encoder.container(keyedBy: AnyKey.self)
    for (name, value) in fields { try all.encode(value, forKey: AnyKey(stringValue: name)) }
  }
}

/// An exclusive advisory lock (flock) on a file in the vault home, held until released or deinit.
/// Init, rotation and any other manifest change take it so that processes do not interleave.
package final class FileLock {
  private var fd: Int32

  /// Blocks until the lock on `path` is taken (the file is created 0600 if needed): exclusive, or
  /// `shared` with other shared holders (and never with an exclusive one). A wait for another
  /// process is told to `LockWait`'s observer.
  package init(path: String, shared: Bool = false) throws {
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
    guard fd >= 0 else { throw KeyStoreError.io(path: path, operation: "open lock", errno: errno) }
    let code = LockWait.lock(fd, shared ? LOCK_SH : LOCK_EX)
    guard code == 0 else {
      close(fd)
      throw KeyStoreError.io(path: path, operation: "lock", errno: code)
    }
  }

  package func release() {
    guard fd >= 0 else { return }
    flock(fd, LOCK_UN)
    close(fd)
    fd = -1
  }

  deinit { release() }
}

extension ManifestFile.Failure: CodedError {
  /// `manifest.` and the case, in kebab case: stable across releases.
  public var code: String {
    switch self {
    case .missing: "manifest.missing"
    case .corrupt: "manifest.corrupt"
    case .unsupportedFormat: "manifest.unsupported-format"
    case .tooLarge: "manifest.too-large"
    case .unauthenticated: "manifest.unauthenticated"
    case .mismatchedMirror: "manifest.mismatched-mirror"
    case .symbolicLink: "manifest.symbolic-link"
    case .notAFile: "manifest.not-a-file"
    case .copiedHome: "manifest.copied-home"
    case .wrongOwner: "manifest.wrong-owner"
    case .openToOthers: "manifest.open-to-others"
    case .unsafeHome: "manifest.unsafe-home"
    }
  }
}
