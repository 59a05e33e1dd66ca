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

  /// Whether the manifest was written back (`recovered`) or left as it was (`intact`).
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
  /// names the store it was found in as the vault's store, and names `home` as its home. The
  /// home's containers record a vault id, which is not authenticated (whoever can write the home
  /// can plant a container), so they only ever stop a choice, never make one: copies of two vaults
  /// naming the home are never chosen between, and a copy that a container of the home
  /// contradicts is not taken; `search.vaultID` names the one to take in both cases. A copy of a
  /// home this one may have been moved from (its old place holds neither a manifest nor a
  /// container of that vault) is taken only when `search.vaultID` names it, too. A lone copy is
  /// taken unasked only when a container inside the home records its vault and every store could
  /// be searched, and not when it was found only through the keyfile a damaged manifest names, or
  /// beside a keyfile moved by hand that keeps this home's manifest. A keyfile inside the home is
  /// read only when `search.keyfile` names it, and one that holds no key is never a candidate.
  /// Nothing is generated: a home whose keys are gone too stays as it is, and the error says so.
  ///
  /// A Secret Service that is not there at all (no session bus, no provider: a server, an ssh
  /// login) stops only a copy that no container confirms; search a keyfile vault there with
  /// `ManifestSearch(store: .keyfile)`. Only `VaultError.noManifestCopy` with nothing unsearched
  /// and nothing unused means no key store holds the home's keys.
  ///
  /// Acts only when the manifest is missing or damaged (corrupt, over the size limit, failing its
  /// MAC, or naming a store that cannot verify it). A damaged file is kept beside the new one as
  /// `manifest.json.damaged-<UTC time>`. A manifest that verifies is never replaced. Everything
  /// else that stops a manifest from being read (another owner, a link, a mode, a newer release's
  /// format) is thrown unchanged: those files are not damaged, and are never replaced. Runs under
  /// the home's lock; the manifest is then opened as `open` does.
  ///
  /// - Parameters:
  ///   - home: the vault's home directory (made absolute against the working directory). It must
  ///     exist and pass the home's checks (the user's own, writable by nobody else).
  ///   - search: where to look (default: the Secret Service's items for `home`, and every
  ///     `<vault id>.keys` in `KeyfileStore.defaultPath`'s directory), and which vault to take.
  ///   - containers: reads which vault each container file records (VaultQueue's
  ///     `recoverManifest(home:search:resolver:clock:)` passes its queue containers' provider; an
  ///     app that imports only Vault passes a provider of its own, whose `probe` may return
  ///     `.missing` for every path: then no copy is taken without `search.vaultID` or `.keyfile`).
  ///   - resolver: builds the Secret Service store searched, and the store the recovered manifest names.
  ///   - clock: the time source for the damaged file's name and the open.
  /// - Returns: what was found and done.
  /// - Throws: `VaultError.invalidManifestSearch` when `search` cannot match anything (a vault id
  ///   that is not 16 hex digits, a keyfile with `.secretService`); `.orphanedKeyfile` never (that
  ///   is `create`'s); `.noManifestCopy` when no usable copy was found (it lists where it looked,
  ///   what it could not search and what it found but did not take, and why);
  ///   `.manifestCopiesDiffer` when copies of more than one vault (or store) could be the home's;
  ///   `.unconfirmedManifestCopy` when the one copy found is taken only when named (no container
  ///   in the home confirms it, or a store could not be searched); `.keyfileMoved` when the only copy is in a keyfile that has
  ///   moved from the path the copy names; `.manifestContradicted` when the home's manifest verifies
  ///   but a container records another vault; `.intactManifestDiffers` when it verifies but is not
  ///   the vault or store `search` names; `.homeMissing` when `home` does not exist;
  ///   `.restoreUnfinished`; `ManifestFile.Failure` for a
  ///   manifest that is not damaged but cannot be read; `KeyStoreError` when a store that must be
  ///   read cannot be (a locked keyring, a keyfile named in `search`); what `open` throws once the
  ///   manifest is back (a key missing from the store: the manifest stays written, as it is the
  ///   store's own copy).
  public static func recoverManifest(
    home: String, search: ManifestSearch = ManifestSearch(), containers: any ContainerProvider,
    resolver: KeyStoreResolver = .system(), clock: @escaping @Sendable () -> Date = Date.init
  ) throws -> ManifestRecovery {
    let home = absolutePath(home)
    if let id = search.vaultID, KeyringID(hex: id.lowercased()) == nil {
      throw VaultError.invalidManifestSearch(reason: "a vault id is 16 hex digits")
    }
    if search.keyfile != nil, search.store == .secretService {
      throw VaultError.invalidManifestSearch(reason: "a keyfile is not in the Secret Service")
    }
    try refuseUnfinishedRestore(home)
    var info = stat()
    if stat(home, &info) != 0, errno == ENOENT { throw VaultError.homeMissing(home: home) }
    try ManifestFile.checkHome(home)
    let lock = try FileLock(path: home + "/" + lockFileName)
    defer { lock.release() }
    let found = try ManifestFile.examine(home: home)
    var doubt: String?
    if case .readable(let signed) = found {
      doubt = try doubtAbout(signed, home: home, resolver: resolver)
      if doubt == nil {
        // Sound: never replaced on what a container says (its vault id is not authenticated: anyone
        // who can write the home can plant one), only reported.
        let evidence = ContainerEvidence(of: signed.manifest, home: home, containers: containers)
        if let (path, other) = evidence.contradiction(of: signed.manifest.vaultID) {
          throw VaultError.manifestContradicted(
            home: home, vaultID: signed.manifest.vaultID, container: path, containerVault: other)
        }
        try requireAsked(search, signed.manifest, home: home)
        return ManifestRecovery(outcome: .intact, manifest: signed.manifest, keptDamaged: nil)
      }
    }
    let copy = try findManifestCopy(
      home: home, search: search, hint: found.storeHint, doubt: doubt, containers: containers, resolver: resolver)
    let kept = found.isPresent ? try keepDamagedManifest(home: home, at: clock()) : nil
    // What a write killed before its rename left; under the lock none is a write in progress.
    try? removeStaleManifestTemporaries(home: home)
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

  /// Why a manifest that reads is not sound, or nil when it is: it must verify under the integrity
  /// key of the store it names. A format-1 manifest, which has no MAC, is left for `open` to
  /// upgrade. The store it names is only a claim of an unverified file: when that store cannot be
  /// read, the file counts as damaged.
  ///
  /// - Throws: a locked or timed-out Secret Service (the file may be sound: nobody can tell yet).
  private static func doubtAbout(_ signed: ManifestFile.Signed, home: String, resolver: KeyStoreResolver) throws
    -> String?
  {
    if signed.isLegacy { return nil }
    let named = signed.manifest.store
    let namedPlace = named.place
    do {
      let store = try resolver.store(for: named, home: home)
      guard let keyring = signed.manifest.keyringID,
        let integrityKey = try store.loadRecord(.integrityKey, keyring: keyring).map({ try SymmetricKey(storage: $0) })
      else {
        return
          "the manifest names \(namedPlace), which cannot verify it: \(try noIntegrityKeyError(signed.manifest, store: store))"
      }
      guard try signed.isAuthentic(under: integrityKey) else {
        return "the manifest fails its integrity check under \(namedPlace)"
      }
    } catch let error as KeyStoreError where error.stopsEveryStore {
      throw error
    } catch {
      return "the manifest names \(namedPlace), which cannot verify it: \(error)"
    }
    return nil
  }

  /// Refuses a manifest that is sound but is not the vault or store `search` asks for: the caller
  /// meant another vault, and nothing is changed.
  ///
  /// - Throws: `VaultError.intactManifestDiffers`.
  private static func requireAsked(_ search: ManifestSearch, _ manifest: Manifest, home: String) throws {
    let store = manifest.store
    let differs =
      (search.vaultID.map { $0.lowercased() != manifest.vaultID } ?? false)
      || (search.store.map { $0 != store.kind } ?? false)
      || (search.keyfile.map { store.kind != .keyfile || !sameFile(absolutePath($0), store.keyfile ?? "") } ?? false)
    if differs {
      throw VaultError.intactManifestDiffers(home: home, vaultID: manifest.vaultID, store: store.kind)
    }
  }

  /// What a manifest's containers record about which vault they belong to: the containers it
  /// registers (those inside the home it names followed to `home`, as a moved home's are) and
  /// `home`'s `queue.sqlite` (the container `vault init` makes). Only files that read as
  /// containers count; one that cannot be read tells nothing either way. A container's vault id is
  /// not authenticated (whoever can write the file can write it), so what it says only ever stops
  /// `recoverManifest` or informs the person choosing; it never chooses a copy.
  struct ContainerEvidence {
    /// The vault each container records, by path.
    let vaults: [String: String]
    /// The paths of `vaults` that lie inside the home.
    let inside: Set<String>

    init(of manifest: Manifest, home: String, containers: any ContainerProvider) {
      var paths = manifest.containers.map { container -> String in
        guard let old = manifest.home, container.path.hasPrefix(old + "/") else { return container.path }
        return home + container.path.dropFirst(old.count)
      }
      paths.append(home + "/queue.sqlite")
      var vaults: [String: String] = [:]
      for path in Set(paths) {
        if case .container(let keyring, _)? = try? containers.probe(path: path) { vaults[path] = keyring }
      }
      self.vaults = vaults
      inside = Set(vaults.keys.filter { $0.hasPrefix(home + "/") })
    }

    /// Whether a container inside the home records `vaultID`.
    func confirms(_ vaultID: String) -> Bool { inside.contains { vaults[$0] == vaultID } }

    /// The first container (by path) that records another vault than `vaultID`, and that vault.
    func contradiction(of vaultID: String) -> (path: String, vault: String)? {
      vaults.filter { $0.value != vaultID }.min { $0.key < $1.key }.map { ($0.key, $0.value) }
    }

    /// "PATH records vault ID" for each container, by path.
    var records: [String] { vaults.sorted { $0.key < $1.key }.map { "\($0.key) records vault \($0.value)" } }
  }

  /// A manifest copy kept in a key store, with where it was found.
  struct ManifestCopy {
    let signed: ManifestFile.Signed
    /// The store it was found in: the Secret Service, or the keyfile's absolute path.
    let store: StoreDescriptor
    /// Whether a container inside the home records this copy's vault.
    var confirmed = false
    /// A container of the home that records another vault, and that vault.
    var contradiction: (path: String, vault: String)?
    /// Found only because the damaged manifest named its keyfile: whoever writes the home chose it.
    var throughHint = false
    var bytes: [UInt8] { signed.bytes }
    var vaultID: String { signed.manifest.vaultID }
    var label: String {
      let place = "vault \(vaultID) in \(store.place)"
      let active = signed.manifest.record(signed.manifest.activeVersion)
      return place + " (key version \(signed.manifest.activeVersion)"
        + (active.map { " made \($0.createdAt)" } ?? "") + ")"
    }
    /// What the home's containers say of it, for a person choosing.
    var evidence: String {
      if let contradiction { return "\(contradiction.path) records vault \(contradiction.vault)" }
      return confirmed ? "a container here records this vault" : "no container here records a vault"
    }
  }

  /// The one copy of `home`'s manifest that `search` allows and nothing speaks against.
  ///
  /// Copies are found by the store they are in and checked by their MAC; the home's containers
  /// only stop a choice, never make one: two vaults' copies naming the home are never chosen
  /// between, a copy a container contradicts is not taken, nor one of a home this one may have
  /// been moved from, unless `search.vaultID` names it. A lone copy is taken unasked only when a
  /// container inside the home records its vault and every store could be searched, and a keyfile
  /// inside the home (which whoever writes the home controls) only when `search.keyfile` names it.
  static func findManifestCopy(
    home: String, search: ManifestSearch, hint: StoreDescriptor?, doubt: String?, containers: any ContainerProvider,
    resolver: KeyStoreResolver
  ) throws -> ManifestCopy {
    var searched: [String] = []
    var unused: [String] = doubt.map { ["the home's own manifest (\($0))"] } ?? []
    // Stores that could not be searched at all: the home's copy may be in one of them.
    var unsearched: [String] = []
    var copies: [ManifestCopy] = []
    var moved: (keyfile: String, named: String)?
    // Vaults whose Secret Service items name only homes that no longer hold them: a moved home's
    // items still name its old path. Told of when nothing is taken; they never stop a choice.
    var elsewhere: [String: Set<String>] = [:]
    // No Secret Service to ask here (a server, an ssh login): it stops only a copy nothing confirms.
    var noSecretService: String?
    let named = search.vaultID.map { $0.lowercased() }

    var hinted: String?

    func consider(_ signed: ManifestFile.Signed, from store: StoreDescriptor) {
      let manifest = signed.manifest
      if let named, named != manifest.vaultID { return }
      var copy = ManifestCopy(signed: signed, store: store)
      copy.throughHint = store.keyfile != nil && store.keyfile == hinted
      if store.kind == .keyfile, let path = store.keyfile {
        // Whoever can write the home can put a keyfile there, with a copy that verifies under the
        // integrity key they put beside it: only the person naming it makes it this vault's.
        if isInside(path, home), search.keyfile == nil {
          unused.append("\(copy.label): a keyfile inside the home is read only when it is named as the keyfile to read")
          return
        }
        guard manifest.store.kind == .keyfile, let keyfile = manifest.store.keyfile, keyfile.hasPrefix("/") else {
          unused.append("\(copy.label): it names another store")
          return
        }
        if !sameFile(keyfile, path) {
          var info = stat()
          if lstat(keyfile, &info) == 0 {
            // Something else is where the copy says the keyfile is: no `mv` may go over it.
            unused.append("\(copy.label): it names the keyfile \(keyfile), which is another file")
          } else {
            moved = (path, keyfile)
          }
          return
        }
      } else if manifest.store.kind != store.kind {
        unused.append("\(copy.label): it names another store")
        return
      }
      let evidence = ContainerEvidence(of: manifest, home: home, containers: containers)
      if let bound = manifest.home, !sameFile(bound, home) {
        // Another home's. Taken only as a home moved here, and only when named: its old place
        // must hold neither a manifest nor a container of this vault (else this is a copy of it).
        let live = !holdsNoVault(
          manifest.vaultID, at: bound, evidence: ContainerEvidence(of: manifest, home: bound, containers: containers))
        guard !live, named != nil else {
          unused.append(
            live
              ? "\(copy.label): its home is \(bound), which still holds this vault, so this home would be a copy of it "
                + "(use that home; its copy is refused here even when named; to make a vault of its own from it, back "
                + "up that home and restore the backup into a new home)"
              : "\(copy.label): its home was \(bound), which no longer holds this vault; if this home was moved from "
                + "there, name vault \(manifest.vaultID) to take it"
                + (evidence.records.isEmpty ? "" : " (here, \(evidence.records.joined(separator: ", ")))"))
          return
        }
      } else if manifest.home == nil, store.kind == .keyfile, search.keyfile == nil {
        // A copy from an older release names no home: the caller must name the keyfile.
        unused.append("\(copy.label): it names no home; name that keyfile to take it")
        return
      }
      copy.confirmed = evidence.confirms(manifest.vaultID)
      copy.contradiction = evidence.contradiction(of: manifest.vaultID)
      copies.append(copy)
    }

    if search.store != .keyfile, search.keyfile == nil {
      searched.append("the Secret Service's items for \(home)")
      do {
        let found = try secretServiceCopies(home: home, named: named, resolver: resolver)
        for (keyring, signed) in found.copies {
          guard let signed else {
            unused.append("vault \(keyring.hex) in the Secret Service: no authentic manifest copy")
            continue
          }
          consider(signed, from: StoreDescriptor(kind: .secretService))
        }
        elsewhere = found.gone
      } catch let error as KeyStoreError where error.meansNoSecretService && search.store != .secretService {
        searched.removeLast()
        noSecretService = "the Secret Service (\(error.absentServiceReason ?? ""))"
      }
    }
    if search.store != .secretService {
      let paths: [String]
      if let keyfile = search.keyfile {
        paths = [absolutePath(keyfile)]
        searched.append("the keyfile \(absolutePath(keyfile))")
      } else {
        let directory = KeyfileStore.defaultDirectory(environment: ProcessInfo.processInfo.environment)
        searched.append("the keyfiles in \(directory)")
        var names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        names = names.filter(isDefaultKeyfileName).sorted()
        var found = names.map { directory + "/" + $0 }
        // Only an absolute path: a relative one would be read from wherever `vault` runs.
        if let keyfile = hint?.keyfile, hint?.kind == .keyfile, keyfile.hasPrefix("/"), !isInside(keyfile, home),
          !found.contains(where: { sameFile($0, keyfile) })
        {
          searched.append("the keyfile \(keyfile) the damaged manifest names")
          found.append(keyfile)
          hinted = keyfile
        }
        paths = found
      }
      for path in paths {
        do {
          let (copy, holdsKeys) = try keyfileManifest(path)
          guard let signed = copy else {
            unused.append("the keyfile \(path): no authentic manifest copy")
            continue
          }
          guard holdsKeys else {
            // What an `init` killed before its first key leaves: nothing was ever sealed under it.
            unused.append("the keyfile \(path): it holds no key (an init killed before its first key left it)")
            continue
          }
          consider(signed, from: StoreDescriptor(kind: .keyfile, keyfile: path))
        } catch {
          // A keyfile named on purpose must be read; one of many in the directory may be anyone's.
          if search.keyfile != nil { throw error }
          if case KeyStoreError.io(_, _, ENOENT) = error {
            // Named only by the damaged manifest (or gone since the directory was listed): no store here.
            unused.append("the keyfile \(path): there is no such file")
          } else {
            unsearched.append("the keyfile \(path) (\(error))")
          }
        }
      }
    }
    let distinct = copies.reduce(into: [ManifestCopy]()) { kept, copy in
      if !kept.contains(where: { $0.vaultID == copy.vaultID && $0.store == copy.store }) { kept.append(copy) }
    }
    if distinct.count > 1 {
      // Containers do not choose (a planted one could choose for an attacker): the person does.
      throw VaultError.manifestCopiesDiffer(
        home: home, vaultIDs: distinct.map(\.vaultID), copies: distinct.map { "\($0.label): \($0.evidence)" })
    }
    if let copy = distinct.first {
      if let contradiction = copy.contradiction, named == nil, search.keyfile == nil {
        unused.append(
          "\(copy.label): \(contradiction.path) records vault \(contradiction.vault); if that container is not this "
            + "home's own, name vault \(copy.vaultID) to take the copy")
      } else {
        // Taken unasked only when a container inside the home records its vault and every store
        // could be searched; otherwise the person names it. (A keyfile kept outside the default
        // directory is never searched, so a dead vault's copy naming this path could stand alone.)
        // (Vaults that may have moved here from a home that no longer holds them do not stop it: a
        // keyring keeps the items of every home ever deleted, and each would stop every recovery.)
        guard copy.confirmed && unsearched.isEmpty && !copy.throughHint || named != nil || search.keyfile != nil else {
          let blocking = unsearched + (copy.confirmed ? [] : noSecretService.map { [$0] } ?? [])
          let reason =
            !blocking.isEmpty
            ? "\(blocking.joined(separator: "; ")) could not be searched, and the home's vault may be there (make that "
              + "searchable and run again)"
            : copy.throughHint
              ? "it was found only through the keyfile the damaged manifest names, and whoever can write the home "
                + "can point that anywhere"
              : "no container in the home records its vault (a vault removed from this path leaves such a copy, and "
                + "a keyfile kept outside the default directory is not searched)"
          throw VaultError.unconfirmedManifestCopy(
            home: home, vaultID: copy.vaultID, copy: copy.label, unsearched: blocking, reason: reason)
        }
        // A keyfile moved by hand that keeps this home's manifest may be the home's own vault: its
        // copy cannot be taken from where it is, and no other copy is taken unasked beside it.
        if let moved, named == nil, search.keyfile == nil {
          throw VaultError.keyfileMoved(keyfile: moved.keyfile, named: moved.named)
        }
        return copy
      }
    }
    if let moved { throw VaultError.keyfileMoved(keyfile: moved.keyfile, named: moved.named) }
    throw VaultError.noManifestCopy(
      home: home, searched: searched, unsearched: unsearched + (noSecretService.map { [$0] } ?? []), unused: unused,
      elsewhere: try movedVaults(elsewhere, home: home, resolver: resolver))
  }

  /// The manifest copies the Secret Service holds for vaults whose key items name `home` (and for
  /// vault `named`, wherever its items say its home is), each nil when it is absent or does not
  /// verify under the integrity key beside it; and, unless a vault is named, the vaults whose items
  /// name only homes that no longer exist (a home moved elsewhere keeps its items' old path).
  private static func secretServiceCopies(home: String, named: String?, resolver: KeyStoreResolver) throws
    -> (copies: [(KeyringID, ManifestFile.Signed?)], gone: [String: Set<String>])
  {
    guard
      let store = try resolver.store(for: StoreDescriptor(kind: .secretService), home: home) as? SecretServiceStore
    else { return ([], [:]) }
    let forHome = Set(try store.keyringIDs(forHome: home))
    let ids = forHome.union(named.map { [$0] } ?? [])
    let copies = try ids.sorted().compactMap { KeyringID(hex: $0) }.compactMap {
      keyring -> (KeyringID, ManifestFile.Signed?)? in
      let (held, copy) = try storedCopy(in: store, keyring: keyring)
      // A vault named by the caller that the Secret Service does not hold is not a finding here.
      if !forHome.contains(keyring.hex), !held { return nil }
      return (keyring, copy)
    }
    guard named == nil else { return (copies, [:]) }
    let gone = try store.homesByVault().filter { id, homes in
      !ids.contains(id) && !homes.isEmpty
        && homes.allSatisfy { holdsNoVault(id, at: $0, evidence: nil) }
    }
    return (copies, gone)
  }

  /// Of the Secret Service vaults in `candidates` (id → the homes their items name), those whose
  /// manifest copy verifies, newest key version first, as "vault ID (stored for HOME)": the ones a
  /// home moved here could be. Items with no copy (strays, another program's) are left out.
  private static func movedVaults(_ candidates: [String: Set<String>], home: String, resolver: KeyStoreResolver)
    throws -> [String]
  {
    guard !candidates.isEmpty,
      let store = try resolver.store(for: StoreDescriptor(kind: .secretService), home: home) as? SecretServiceStore
    else { return [] }
    var found: [(line: String, made: String)] = []
    for (id, homes) in candidates {
      guard let keyring = KeyringID(hex: id), let signed = try storedCopy(in: store, keyring: keyring).copy else {
        continue
      }
      let made = signed.manifest.record(signed.manifest.activeVersion)?.createdAt ?? ""
      found.append(("vault \(id) (stored for \(homes.sorted().joined(separator: ", ")))", made))
    }
    return found.sorted { ($0.made, $0.line) > ($1.made, $1.line) }.map(\.line)
  }

  /// The manifest copy in the keyfile at `path`, nil when it has none that verifies under the
  /// file's own integrity key. Read directly (no store): a keyfile inside the home is read too,
  /// and `open` then says to move it.
  ///
  /// - Throws: `KeyStoreError` when the file cannot be read or is not a private keyfile.
  static func keyfileCopy(_ path: String) throws -> ManifestFile.Signed? { try keyfileManifest(path).copy }

  /// The manifest copy in the keyfile at `path` (as `keyfileCopy`), and whether the file holds any
  /// key version (an `init` killed before its first key left one that holds none).
  ///
  /// - Parameter requirePrivate: refuse a file or directory others may read or write, or a file
  ///   with another name (as a keyfile store does). Only a check that can refuse and never picks
  ///   a copy may pass false.
  /// - Throws: `KeyStoreError` when the file cannot be read, or is not a private keyfile when
  ///   `requirePrivate`.
  static func keyfileManifest(_ path: String, requirePrivate: Bool = true) throws
    -> (copy: ManifestFile.Signed?, holdsKeys: Bool)
  {
    let contents = try keyfileContents(path, requirePrivate: requirePrivate)
    let copy = authenticCopy(
      contents.records[KeyStoreRecord.manifestMirror.rawValue],
      integrityKey: contents.records[KeyStoreRecord.integrityKey.rawValue], keyring: contents.keyring, source: path)
    return (copy, !contents.keys.isEmpty)
  }

  /// Everything the keyfile at `path` holds, read directly (no store), under the vault id the file
  /// itself names.
  ///
  /// - Parameter requirePrivate: as for `keyfileManifest`.
  /// - Throws: `KeyStoreError` when the file is missing, cannot be read or parsed, or is not a
  ///   private keyfile when `requirePrivate`.
  static func keyfileContents(_ path: String, requirePrivate: Bool) throws -> KeyfileContents {
    guard let file = try SecureFile.read(path, requirePrivate: requirePrivate) else {
      throw KeyStoreError.io(path: path, operation: "open", errno: ENOENT)
    }
    // The vault id sits at bytes 4..<12 of both formats; the parse checks all the rest.
    guard let keyring = file.withUnsafeBytes({ $0.count >= 12 ? KeyringID(bytes: Array($0[4..<12])) : nil }) else {
      throw KeyStoreError.corruptKeyfile(path: path, reason: "too short")
    }
    return try file.withUnsafeBytes { try KeyfileContents(parsing: $0, path: path, expecting: keyring) }
  }

  /// The keyfiles in the default keyfile directory (`<vault id>.keys`) that hold keys of a vault
  /// whose manifest copy names `home`: a vault that lived there and lost its manifest. A file
  /// others may read (mode 0640, say) counts as well: the vault refuses to use it until its mode
  /// is fixed, but its keys are still that vault's, and this check only ever refuses. Files that
  /// cannot be read are passed over (nobody can tell whose they are).
  ///
  /// - Returns: each keyfile's path and vault id.
  static func keyfilesNaming(home: String) -> [(path: String, vaultID: String)] {
    let directory = KeyfileStore.defaultDirectory(environment: ProcessInfo.processInfo.environment)
    let names = ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).filter(isDefaultKeyfileName)
    return names.sorted().compactMap { name in
      let path = directory + "/" + name
      guard let (copy, holdsKeys) = try? keyfileManifest(path, requirePrivate: false), holdsKeys, let copy,
        let named = copy.manifest.home, named == home || sameFile(named, home)
      else { return nil }
      return (path, copy.manifest.vaultID)
    }
  }

  /// The manifest copy `store` keeps for `keyring` when it verifies under the integrity key beside
  /// it, and whether the store holds either record at all.
  ///
  /// - Throws: the store's error when it cannot be read.
  static func storedCopy(in store: any KeyStore, keyring: KeyringID) throws
    -> (held: Bool, copy: ManifestFile.Signed?)
  {
    let integrity = try store.loadRecord(.integrityKey, keyring: keyring)
    let mirror = try store.loadRecord(.manifestMirror, keyring: keyring)
    let copy = authenticCopy(mirror, integrityKey: integrity, keyring: keyring, source: store.kind.rawValue)
    return (integrity != nil || mirror != nil, copy)
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

  /// Whether the directory `place`, named as vault `vaultID`'s home, holds nothing of that vault
  /// now: it is gone, empty, or holds another vault's manifest, and no container inside it records
  /// that vault (`evidence`, gathered for `place`, when there is a manifest to list them). A place
  /// that holds files but no manifest may be that vault's home having lost its own: it counts as
  /// holding it.
  static func holdsNoVault(_ vaultID: String, at place: String, evidence: ContainerEvidence?) -> Bool {
    var info = stat()
    guard stat(place, &info) == 0 else { return true }
    if evidence?.confirms(vaultID) == true { return false }
    if ManifestFile.exists(home: place) {
      return (try? ManifestFile.read(home: place).manifest.vaultID).map { $0 != vaultID } ?? false
    }
    let entries = (try? FileManager.default.contentsOfDirectory(atPath: place)) ?? []
    return entries.isEmpty
  }

  /// Whether `path` lies inside the directory `home` (symbolic links resolved).
  package static func isInside(_ path: String, _ home: String) -> Bool {
    let directory = ((absolutePath(path) as NSString).deletingLastPathComponent as NSString).resolvingSymlinksInPath
    let resolvedHome = (home as NSString).resolvingSymlinksInPath
    return directory == resolvedHome || directory.hasPrefix(resolvedHome + "/")
  }

  /// Whether `name` is what `KeyfileStore.defaultPath` names a keyfile: 16 lowercase hex digits
  /// and `.keys`.
  static func isDefaultKeyfileName(_ name: String) -> Bool {
    guard name.hasSuffix(".keys") else { return false }
    return KeyringID(hex: String(name.dropLast(5))).map { $0.hex + ".keys" == name } ?? false
  }

  /// `date` as `20261205T081500Z`: sortable, and safe in a file name.
  package static func compactTimestamp(_ date: Date) -> String {
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
  /// Whether a store that holds what is asked cannot answer now (a locked keyring, a Secret
  /// Service that timed out): nothing can be decided until it does.
  var stopsEveryStore: Bool {
    switch self {
    case .locked, .timedOut: true
    default: false
    }
  }

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

extension StoreDescriptor {
  /// Where the keys are, for a sentence: "the keyfile PATH" or "the Secret Service".
  package var place: String { kind == .keyfile ? "the keyfile \(keyfile ?? "")" : "the Secret Service" }
}
