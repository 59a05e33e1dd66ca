import Foundation
import VaultCrypto
import VaultKeys

/// Which key stores `Vault.recoverManifest` may take a home's manifest from.
public struct ManifestSearch: Sendable, Equatable {
  /// Only this keyfile (a keyfile kept somewhere other than the default directory). Nil looks at
  /// every `<vault id>.keys` in the default keyfile directory and in the Secret Service.
  public var keyfile: String?
  /// Only this kind of store; nil looks in both.
  public var store: KeyStoreKind?
  /// Only this vault's copy; nil takes the one vault found (two or more are refused).
  public var vaultID: String?

  /// Names where to look; the defaults look everywhere vault keeps keys by default.
  ///
  /// - Parameters:
  ///   - keyfile: the one keyfile to read, or nil.
  ///   - store: the one kind of store to look in, or nil.
  ///   - vaultID: the vault whose copy is wanted, or nil.
  public init(keyfile: String? = nil, store: KeyStoreKind? = nil, vaultID: String? = nil) {
    self.keyfile = keyfile
    self.store = store
    self.vaultID = vaultID
  }
}

/// What `Vault.recoverManifest` found and did.
public struct ManifestRecovery: Sendable, Equatable {
  /// Whether the manifest was written back or was already sound.
  public enum Outcome: String, Sendable {
    /// The key store's copy was written to the home.
    case recovered
    /// The home's manifest verified under its key store; nothing was changed.
    case intact
  }

  public let outcome: Outcome
  /// The vault the manifest describes.
  public let vaultID: String
  /// Where its keys are: the Secret Service, or the keyfile's path.
  public let store: StoreDescriptor
  /// The manifest's active key version.
  public let activeVersion: UInt32
  /// The containers the manifest registers, as paths.
  public let containers: [String]
  /// Where the damaged manifest it replaced was kept, or nil when there was none.
  public let keptDamaged: String?
}

extension Vault {
  /// Writes a lost or damaged manifest back into `home` from the copy the vault's key store keeps.
  ///
  /// Every manifest write goes to the key store first and to the home second, so the store's copy
  /// is never older than the home's file and is signed with the same integrity key. A copy is taken
  /// only when it verifies under the integrity key stored beside it, belongs to that store's vault,
  /// names `home` as its home and names the store it was found in as the vault's store. Nothing is
  /// generated: a home whose keys are gone too stays as it is, and the error says so.
  ///
  /// Acts only when the manifest is missing or damaged (corrupt, over the size limit, or failing
  /// its MAC). A damaged file is kept beside the new one as `manifest.json.damaged-<UTC time>`.
  /// Everything else that stops a manifest from being read (another owner, a link, a mode, a
  /// newer release's format) is thrown unchanged: those files are not damaged, and are never
  /// replaced. Runs under the home's lock; the manifest is then opened as `open` does.
  ///
  /// - Parameters:
  ///   - home: the vault's home directory (made absolute against the working directory). It must
  ///     exist and pass the home's checks (the user's own, writable by nobody else).
  ///   - search: where to look (default: the Secret Service's items for `home`, and every
  ///     `<vault id>.keys` in `KeyfileStore.defaultPath`'s directory).
  ///   - resolver: builds the Secret Service store searched, and the store the recovered manifest names.
  ///   - clock: the time source for the damaged file's name and the open.
  /// - Returns: what was found and done.
  /// - Throws: `VaultError.noManifestCopy` when no store holds a usable copy (it lists where it
  ///   looked and what it could not read); `.manifestCopiesDiffer` when copies of more than one
  ///   vault (or store) name `home`; `.keyfileMoved` when the only copy is in a keyfile that has
  ///   moved from the path the copy names; `.restoreUnfinished`; `ManifestFile.Failure` for a
  ///   manifest that is not damaged but cannot be read; `KeyStoreError` when a store that must be
  ///   read cannot be (a locked keyring holding this home's items, a keyfile named in `search`);
  ///   what `open` throws once the manifest is back (a key missing from the store: the manifest
  ///   stays written, as it is the store's own copy).
  public static func recoverManifest(
    home: String, search: ManifestSearch = ManifestSearch(), resolver: KeyStoreResolver = .system(),
    clock: @escaping @Sendable () -> Date = Date.init
  ) throws -> ManifestRecovery {
    let home = absolutePath(home)
    try refuseUnfinishedRestore(home)
    try ManifestFile.checkHome(home)
    let lock = try FileLock(path: home + "/" + lockFileName)
    defer { lock.release() }
    let found = try ManifestFile.examine(home: home)
    if case .readable(let signed) = found, try isIntact(signed, home: home, resolver: resolver) {
      return ManifestRecovery(outcome: .intact, manifest: signed.manifest, keptDamaged: nil)
    }
    let copy = try findManifestCopy(home: home, search: search, hint: found.storeHint, resolver: resolver)
    let kept = found.isPresent ? try keepDamagedManifest(home: home, at: clock()) : nil
    try ManifestFile.write(copy.bytes, home: home)
    lock.release()
    let vault = try open(home: home, resolver: resolver, clock: clock)
    return ManifestRecovery(outcome: .recovered, manifest: vault.manifest, keptDamaged: kept)
  }

  /// Gives the damaged manifest a second name, `manifest.json.damaged-<UTC time>` (with a number
  /// after it when that is taken), so that at every point the home holds a manifest file, the old
  /// one or the new, and the old one stays for whoever wants to see what happened to it.
  ///
  /// - Returns: the new name's path.
  /// - Throws: `KeyStoreError.io` when the link cannot be made.
  private static func keepDamagedManifest(home: String, at date: Date) throws -> String {
    let base = ManifestFile.path(home: home) + ".damaged-" + compactTimestamp(date)
    for attempt in 1...100 {
      let path = attempt == 1 ? base : base + "-\(attempt)"
      if link(ManifestFile.path(home: home), path) == 0 {
        try SecureFile.syncDirectory(home)
        return path
      }
      guard errno == EEXIST else {
        throw KeyStoreError.io(path: path, operation: "keep the damaged manifest", errno: errno)
      }
    }
    throw KeyStoreError.io(path: base, operation: "keep the damaged manifest", errno: EEXIST)
  }

  /// Whether a manifest that reads verifies under the integrity key of the store it names (a
  /// format-1 manifest, which has no MAC, is left for `open` to upgrade).
  ///
  /// - Throws: `VaultError.keyMissing` or `.integrityKeyMissing` when that store holds no integrity
  ///   key (as `open` does: nothing could tell which copy is right); the store's error when it
  ///   cannot be read.
  private static func isIntact(_ signed: ManifestFile.Signed, home: String, resolver: KeyStoreResolver) throws
    -> Bool
  {
    if signed.isLegacy { return true }
    let store = try resolver.store(for: signed.manifest.store, home: home)
    guard let keyring = signed.manifest.keyringID,
      let integrityKey = try store.loadRecord(.integrityKey, keyring: keyring).map({ try SymmetricKey(storage: $0) })
    else { throw try noIntegrityKeyError(signed.manifest, store: store) }
    return try signed.isAuthentic(under: integrityKey)
  }

  /// A manifest copy kept in a key store, with where it was found.
  struct ManifestCopy {
    let signed: ManifestFile.Signed
    /// The store it was found in: the Secret Service, or the keyfile's absolute path.
    let store: StoreDescriptor
    var bytes: [UInt8] { signed.bytes }
    var vaultID: String { signed.manifest.vaultID }
    var label: String {
      store.kind == .keyfile
        ? "vault \(vaultID) in the keyfile \(store.keyfile ?? "")" : "vault \(vaultID) in the Secret Service"
    }
  }

  /// The one usable copy of `home`'s manifest that `search` allows.
  static func findManifestCopy(
    home: String, search: ManifestSearch, hint: StoreDescriptor?, resolver: KeyStoreResolver
  ) throws -> ManifestCopy {
    var searched: [String] = []
    var skipped: [String] = []
    var copies: [ManifestCopy] = []
    var moved: (keyfile: String, named: String)?

    func consider(_ signed: ManifestFile.Signed, from store: StoreDescriptor) {
      let manifest = signed.manifest
      if let wanted = search.vaultID, wanted.lowercased() != manifest.vaultID { return }
      let copy = ManifestCopy(signed: signed, store: store)
      // An older manifest has no home; the Secret Service found its items by `home` all the
      // same, and a keyfile named on purpose is the caller's word for it.
      guard manifest.home.map({ sameFile($0, home) }) ?? (store.kind == .secretService || search.keyfile != nil)
      else {
        skipped.append("\(copy.label) (the manifest of \(manifest.home.map { "the home \($0)" } ?? "another home"))")
        return
      }
      if store.kind == .keyfile, let path = store.keyfile {
        guard manifest.store.kind == .keyfile, let named = manifest.store.keyfile else {
          skipped.append("\(copy.label) (a copy that names another store)")
          return
        }
        if !sameFile(named, path) {
          var info = stat()
          if lstat(named, &info) == 0 {
            // Something else is where the copy says the keyfile is: no `mv` may go over it.
            skipped.append("\(copy.label) (it names the keyfile \(named), which is another file)")
          } else {
            moved = (path, named)
          }
          return
        }
      } else if manifest.store.kind != store.kind {
        skipped.append("\(copy.label) (a copy that names another store)")
        return
      }
      copies.append(copy)
    }

    if search.store != .keyfile, search.keyfile == nil {
      searched.append("the Secret Service's items for \(home)")
      do {
        for (keyring, signed) in try secretServiceCopies(home: home, resolver: resolver) {
          guard let signed else {
            skipped.append("vault \(keyring.hex) in the Secret Service (no authentic manifest copy)")
            continue
          }
          consider(signed, from: StoreDescriptor(kind: .secretService))
        }
      } catch let error as KeyStoreError where error.meansNoSecretService && search.store != .secretService {
        skipped.append("the Secret Service (\(error.absentServiceReason ?? ""))")
      }
    }
    if search.store != .secretService {
      let paths: [String]
      if let keyfile = search.keyfile {
        paths = [absolutePath(keyfile)]
      } else {
        let directory = KeyfileStore.defaultDirectory(environment: ProcessInfo.processInfo.environment)
        searched.append("the keyfiles in \(directory)")
        var names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        names = names.filter(isDefaultKeyfileName).sorted()
        var found = names.map { directory + "/" + $0 }
        if let keyfile = hint?.keyfile, hint?.kind == .keyfile, !found.contains(where: { sameFile($0, keyfile) }) {
          searched.append("the keyfile \(keyfile) the damaged manifest names")
          found.append(keyfile)
        }
        paths = found
      }
      for path in paths {
        do {
          guard let signed = try keyfileCopy(path) else {
            skipped.append("the keyfile \(path) (no authentic manifest copy)")
            continue
          }
          consider(signed, from: StoreDescriptor(kind: .keyfile, keyfile: path))
        } catch {
          // A keyfile named on purpose must be read; one of many in the directory may be anyone's.
          if search.keyfile != nil { throw error }
          skipped.append("the keyfile \(path) (\(error))")
        }
      }
      if let keyfile = search.keyfile { searched.append("the keyfile \(absolutePath(keyfile))") }
    }
    let distinct = copies.reduce(into: [ManifestCopy]()) { kept, copy in
      if !kept.contains(where: { $0.vaultID == copy.vaultID && $0.store == copy.store }) { kept.append(copy) }
    }
    if distinct.count > 1 {
      throw VaultError.manifestCopiesDiffer(home: home, copies: distinct.map(\.label))
    }
    if let copy = distinct.first { return copy }
    if let moved { throw VaultError.keyfileMoved(keyfile: moved.keyfile, named: moved.named) }
    throw VaultError.noManifestCopy(home: home, searched: searched, skipped: skipped)
  }

  /// The manifest copies the Secret Service holds for vaults whose key items name `home`, each nil
  /// when it is absent or does not verify under the integrity key beside it.
  private static func secretServiceCopies(home: String, resolver: KeyStoreResolver) throws
    -> [(KeyringID, ManifestFile.Signed?)]
  {
    guard
      let store = try resolver.store(for: StoreDescriptor(kind: .secretService), home: home) as? SecretServiceStore
    else { return [] }
    return try store.keyringIDs(forHome: home).compactMap { KeyringID(hex: $0) }.map { keyring in
      let integrity = try store.loadRecord(.integrityKey, keyring: keyring)
      let mirror = try store.loadRecord(.manifestMirror, keyring: keyring)
      return (keyring, authenticCopy(mirror, integrityKey: integrity, keyring: keyring, source: "Secret Service"))
    }
  }

  /// The manifest copy in the keyfile at `path`, nil when it has none that verifies under the
  /// file's own integrity key. Read directly (no store): a keyfile inside the home is read too,
  /// and `open` then says to move it.
  ///
  /// - Throws: `KeyStoreError` when the file cannot be read or is not a private keyfile.
  static func keyfileCopy(_ path: String) throws -> ManifestFile.Signed? {
    guard let file = try SecureFile.read(path, requirePrivate: true) else {
      throw KeyStoreError.io(path: path, operation: "open", errno: ENOENT)
    }
    // The vault id sits at bytes 4..<12 of both formats; the parse checks all the rest.
    guard let keyring = file.withUnsafeBytes({ $0.count >= 12 ? KeyringID(bytes: Array($0[4..<12])) : nil }) else {
      throw KeyStoreError.corruptKeyfile(path: path, reason: "too short")
    }
    let contents = try file.withUnsafeBytes { try KeyfileContents(parsing: $0, path: path, expecting: keyring) }
    return authenticCopy(
      contents.records[KeyStoreRecord.manifestMirror.rawValue],
      integrityKey: contents.records[KeyStoreRecord.integrityKey.rawValue], keyring: keyring, source: path)
  }

  /// `mirror` parsed, when it is a signed manifest of `keyring` that verifies under `integrityKey`.
  private static func authenticCopy(
    _ mirror: SecureBytes?, integrityKey: SecureBytes?, keyring: KeyringID, source: String
  ) -> ManifestFile.Signed? {
    guard let mirror, let integrityKey, let key = try? SymmetricKey(storage: integrityKey),
      let signed = try? ManifestFile.parse(mirror.withUnsafeBytes { Array($0) }, path: source),
      !signed.isLegacy, (try? signed.isAuthentic(under: key)) == true, signed.manifest.vaultID == keyring.hex
    else { return nil }
    return signed
  }

  /// Whether `name` is what `KeyfileStore.defaultPath` names a keyfile: 16 lowercase hex digits
  /// and `.keys`.
  static func isDefaultKeyfileName(_ name: String) -> Bool {
    guard name.hasSuffix(".keys") else { return false }
    return KeyringID(hex: String(name.dropLast(5))).map { $0.hex + ".keys" == name } ?? false
  }

  /// `date` as `20261205T081500Z`: sortable, and safe in a file name.
  static func compactTimestamp(_ date: Date) -> String {
    let formatter = ISO8601DateFormatter()
    formatter.formatOptions = [.withYear, .withMonth, .withDay, .withTime, .withTimeZone]
    return formatter.string(from: date)
  }
}

extension ManifestRecovery {
  init(outcome: Outcome, manifest: Manifest, keptDamaged: String?) {
    self.init(
      outcome: outcome, vaultID: manifest.vaultID, store: manifest.store, activeVersion: manifest.activeVersion,
      containers: manifest.containers.map(\.path), keptDamaged: keptDamaged)
  }
}

extension KeyStoreError {
  /// Whether this says there is no Secret Service to ask here (no session bus, no provider, no
  /// libsecret), rather than that one answered with a failure.
  package var meansNoSecretService: Bool { absentServiceReason != nil }

  /// Why there is no Secret Service to ask, in a few words and with no advice (for a note that
  /// the Secret Service was skipped); nil for any other error.
  package var absentServiceReason: String? {
    switch self {
    case .noSessionBus: "no D-Bus session bus"
    case .noProvider: "no Secret Service provider"
    case .libraryMissing: "libsecret could not be loaded"
    default: nil
    }
  }
}
