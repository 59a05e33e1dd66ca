import VaultKeys

/// Failures of vault-level operations (creating, opening, rotating). Envelope, key store and
/// manifest failures are thrown as their own types.
public enum VaultError: Error, Equatable, Sendable, CustomStringConvertible {
  /// `Vault.create` found a manifest in `home`: an existing vault is never overwritten.
  case alreadyExists(home: String)
  /// `Vault.create` found other files in `home` but no manifest: likely a vault whose manifest was
  /// lost, whose data a new vault would strand.
  case homeNotEmpty(home: String)
  /// A keyfile is already at the path a new vault or a keyfile move would write: it may hold
  /// another vault's only keys.
  case keyfileExists(path: String)
  /// The Secret Service holds keys of vaults (`vaultIDs`) at `home` whose manifest is gone: creating a
  /// new vault there would orphan them for good.
  case orphanedKeys(home: String, vaultIDs: [String])
  /// The manifest expects a key the store does not hold (a deleted or replaced keyfile, a reset
  /// keyring); no new key is made in its place.
  case keyMissing(version: UInt32, store: KeyStoreKind)
  /// A new key version failed its seal/open self-test and was not made active.
  case roundTripFailed(version: UInt32)
  /// The manifest names no usable active version, so nothing can be sealed.
  case noActiveKey
  /// The store has no integrity key for a vault whose manifest is signed: the store was reset or
  /// belongs to another vault, so the manifest cannot be verified.
  case integrityKeyMissing(store: KeyStoreKind)
  /// The store's key for `version` does not match the key-check value the manifest recorded: a
  /// swapped key is refused rather than used.
  case keyCheckFailed(version: UInt32)
  /// Finishing a pending version found a key in the store that this vault did not record; it is
  /// not adopted.
  case unexpectedKeyItem(version: UInt32, store: KeyStoreKind)
  /// No key version is left to rotate to; the records must move to a new vault.
  case versionsExhausted(highest: UInt32)
  /// `Vault.moveKeyfile` was asked to move the keyfile of a vault that keeps its keys elsewhere.
  case notAKeyfileVault(home: String)
  /// A container would be registered in the keyfile's directory, so every copy of the data would
  /// carry its keys.
  case containerBesideKeyfile(container: String, keyfile: String)
  /// The store's integrity key verifies neither the manifest nor the store's own copy of it: the
  /// integrity-key item was replaced, not the manifest.
  case integrityKeyMismatch(store: KeyStoreKind)
  /// The keyfile moved since this process opened the vault; it must open it again before writing.
  case storeMoved(home: String)
  /// `Vault.releaseSealPin(version:)` was asked to release the active version: every seal pins it
  /// again, so the pin can only be released once a rotation has made another version active.
  case sealPinOnActiveVersion(version: UInt32)
  /// The manifest names no such key version (it was never made).
  case unknownVersion(version: UInt32)
  /// The key version was retired and its key deleted; nothing keeps it any more.
  case versionRetired(version: UInt32)
  /// The key version is not pinned for envelopes sealed outside containers (`pinned` are the
  /// versions that are), so there is no pin to release.
  case versionNotPinned(version: UInt32, pinned: [UInt32])
  /// A restore into `home` stopped before it finished (the home holds its marker): the home is not a
  /// vault until that restore, of vault `vaultID` (nil when the marker is unreadable), is run again.
  case restoreUnfinished(home: String, vaultID: String?)
  /// A rerun of a stopped restore into `home` named another key store than the one it began writing
  /// keys into (`store`, at `keyfile` for a keyfile).
  case restoreStoreDiffers(home: String, store: KeyStoreKind, keyfile: String?)
  /// A restore into a new home found key version `version` of the bundle's vault already in `store`:
  /// the vault the bundle was taken from (or an earlier restore of it) keeps its keys there, and
  /// they are never overwritten. `home` is that vault's home as the store's copy of its manifest
  /// names it (nil when the store holds no copy that verifies).
  case restoreKeysPresent(store: KeyStoreKind, version: UInt32, home: String?)
  /// `Vault.recoverManifest` found no usable copy of `home`'s manifest in the stores it looked in
  /// (`searched`); `unsearched` names stores it could not look in, and `unused` what it found but
  /// did not take, each with why; `elsewhere` the Secret Service vaults whose items name only homes
  /// that no longer hold them (a home moved here would be one of them: its items name its old path).
  case noManifestCopy(home: String, searched: [String], unsearched: [String], unused: [String], elsewhere: [String])
  /// `Vault.recoverManifest` found the home's manifest sound (vault `vaultID`), but the container
  /// at `container` records vault `containerVault`: one of the two is not this home's, and a
  /// container's word is not authenticated, so nothing is replaced.
  case manifestContradicted(home: String, vaultID: String, container: String, containerVault: String)
  /// `Vault.recoverManifest` found copies naming `home` from more than one vault or store
  /// (`copies`, each "vault ID in STORE" and what the home's containers say of it), and takes none
  /// of them unasked.
  case manifestCopiesDiffer(home: String, vaultIDs: [String], copies: [String])
  /// `Vault.recoverManifest` found one copy (`copy`, of vault `vaultID`) and takes it only when
  /// named; `reason` says why: no container inside the home records its vault, some stores could
  /// not be searched (`unsearched`), or it was found only through the damaged manifest's keyfile.
  case unconfirmedManifestCopy(home: String, vaultID: String, copy: String, unsearched: [String], reason: String)
  /// `Vault.recoverManifest` was given a search that cannot match anything (`reason` says why).
  case invalidManifestSearch(reason: String)
  /// The keyfile at `keyfile`, in the default keyfile directory, holds keys of vault `vaultID`,
  /// whose manifest copy names `home`: that vault lived there and lost its manifest, and a new
  /// vault there would leave it behind.
  case orphanedKeyfile(home: String, keyfile: String, vaultID: String)
  /// `Vault.recoverManifest` found the home's manifest sound, but it is vault `vaultID`'s with its
  /// keys in `store`, not the vault or store the search named.
  case intactManifestDiffers(home: String, vaultID: String, store: KeyStoreKind)
  /// The only copy of the home's manifest is in the keyfile at `keyfile`, but names the vault's
  /// keyfile as `named`: the keyfile was moved by hand.
  case keyfileMoved(keyfile: String, named: String)
  /// `init` or `restore` was given an existing directory as the new home that is not the user's
  /// own (another user's, sticky as /tmp is, or writable by others): a new home is made private
  /// (0700), which must never happen to a directory others use.
  case sharedDirectory(home: String, mode: UInt32, owner: UInt32)
  /// A keyfile move that stopped part-way left `path` (its copy, or the old keyfile), which cannot
  /// be looked at or read (`reason`) to tell whether it holds this vault's keys: nothing that
  /// deletes keys goes on while it may keep them.
  case stoppedMoveUnclear(path: String, reason: String)
  /// The keyfile the manifest names, which holds the vault's keys, is not there: moved, renamed or
  /// deleted (no key was made in its place).
  case keyfileMissing(path: String)
  /// `Vault.recoverManifest` was given a home that does not exist: a manifest is written back only
  /// into the directory that holds its vault's containers.
  case homeMissing(home: String)
  /// Key `version` is the one a rotation after a compromise replaces, and that rotation's new
  /// version could not be made active when the vault was opened (no room to record it: a full disk
  /// or a read-only file system): the vault reads under the old key and seals nothing under it.
  case compromisedVersionActive(version: UInt32)

  /// A sentence for a person that names the fix; it names no vault command (the CLI adds its own).
  public var description: String {
    switch self {
    case .alreadyExists(let home):
      "a vault already exists at \(home); nothing was changed"
    case .homeNotEmpty(let home):
      "\(home) is not empty and holds no vault manifest; if a vault lived here, write its manifest back from the "
        + "copy its key store keeps (or restore it from a backup) instead of creating a new vault over its data"
    case .keyfileExists(let path):
      "a keyfile already exists at \(path) and may hold the only copy of another vault's keys; "
        + "nothing was changed (choose another keyfile path, or restore that vault's manifest)"
    case .orphanedKeys(let home, let ids):
      "the Secret Service already holds keys for a vault at \(home) (vault id \(ids.joined(separator: ", "))) "
        + "but its manifest is missing; write it back from the copy the Secret Service keeps (or restore it from a "
        + "backup) rather than creating a new vault; only if that vault is gone for good, remove its items first "
        + "(" + ids.map { "secret-tool clear vault-id \($0)" }.joined(separator: "; ") + ")"
    case .keyMissing(let version, let store):
      "key version \(version) is missing from the \(store.rawValue) store although the manifest expects it; "
        + Self.anotherServiceHint(store) + "restore the key store from a backup (no new key was made)"
    case .roundTripFailed(let version):
      "key version \(version) failed its seal/open self-test; it was not activated"
    case .noActiveKey: "the manifest names no active key version"
    case .integrityKeyMissing(let store):
      "the \(store.rawValue) store has no integrity key for this vault although its manifest is signed; "
        + Self.anotherServiceHint(store)
        + "the key store was reset or belongs to another vault: restore it from a backup (nothing was changed)"
    case .keyCheckFailed(let version):
      "the key store's item for version \(version) is not the key this vault recorded "
        + "(its key-check value differs); refusing to use it. Restore the key store from a backup"
    case .unexpectedKeyItem(let version, let store):
      "the \(store.rawValue) store already holds an item for key version \(version) that this vault did not record; "
        + "refusing to adopt it. Remove the stray item (or restore the matching manifest) and retry"
    case .integrityKeyMismatch(let store):
      "the \(store.rawValue) store's integrity key verifies neither the vault manifest nor the store's own copy "
        + "of it: the integrity-key item was replaced or a stray one added; remove the stray item "
        + "(or restore the key store). The manifest itself was not changed"
    case .storeMoved(let home):
      "the keys of the vault at \(home) moved (its keyfile was moved) since this process opened it; "
        + "open the vault again (nothing was written)"
    case .containerBesideKeyfile(let container, let keyfile):
      "refusing a container at \(container): it would sit beside the vault's keyfile \(keyfile), so every copy "
        + "of the data would carry its keys; put the container in another directory (nothing was created)"
    case .notAKeyfileVault(let home):
      "the vault at \(home) does not keep its keys in a keyfile; there is no keyfile to move"
    case .versionsExhausted(let highest):
      "key versions are exhausted (highest is \(highest)); this vault cannot rotate again. "
        + "Move its records to a new vault"
    case .sealPinOnActiveVersion(let version):
      "key version \(version) is the active version: every seal pins it again, so its pin cannot be released; "
        + "rotate first, re-seal its envelopes under the new version, then release the pin (nothing was changed)"
    case .unknownVersion(let version):
      "this vault has no key version \(version); nothing was changed"
    case .versionRetired(let version):
      "key version \(version) is already retired (its key is deleted); there is no pin to release"
    case .versionNotPinned(let version, let pinned):
      "key version \(version) is not kept for envelopes sealed outside containers (pinned: "
        + (pinned.isEmpty ? "none" : pinned.map(String.init).joined(separator: ", "))
        + "); nothing was changed"
    case .restoreUnfinished(let home, let vaultID):
      "a restore into \(home) did not finish"
        + (vaultID.map { " (vault \($0))" } ?? "")
        + ", so it holds no usable vault yet; run the same restore of that vault's bundle into it again to finish "
        + "it (it takes up what the stopped one wrote, keys included: removing the home instead would leave them "
        + "in the key store)"
    case .restoreStoreDiffers(let home, let store, let keyfile):
      "the stopped restore into \(home) began writing keys into the \(store.rawValue) store"
        + (keyfile.map { " at \($0)" } ?? "")
        + "; run it again with that store to finish it (nothing was changed)"
    case .noManifestCopy(let home, let searched, let unsearched, let unused, let elsewhere)
    where unsearched.isEmpty && unused.isEmpty:
      "no key store holds a copy of the manifest of a vault at \(home) (looked in \(searched.joined(separator: "; "))). "
        + "Nothing was changed." + Self.movedHint(elsewhere)
        + " If the vault keeps its keys somewhere else (a keyfile at another path), name that store; if its keys are "
        + "gone too, its records cannot be opened: restore a backup of the vault into a new home"
    case .noManifestCopy(let home, let searched, let unsearched, let unused, let elsewhere):
      "no usable copy of the manifest of a vault at \(home) was found"
        + (searched.isEmpty ? "" : " (looked in \(searched.joined(separator: "; ")))") + ". Nothing was changed."
        + (unused.isEmpty ? "" : " Found but not taken: \(unused.joined(separator: "; ")).")
        + (unsearched.isEmpty
          ? ""
          : " Could not search: \(unsearched.joined(separator: "; ")); the home's copy may be there: make it "
            + "searchable (a desktop session's D-Bus for the Secret Service; a private 0600 keyfile) and run again.")
        + Self.movedHint(elsewhere)
    case .manifestCopiesDiffer(let home, _, let copies):
      "more than one key store copy could be the manifest of \(home): \(copies.joined(separator: "; ")). Nothing was "
        + "changed; name the vault whose records the home holds (what a container records is only a hint: it is not "
        + "authenticated)"
    case .unconfirmedManifestCopy(let home, _, let copy, _, let reason):
      "one copy of a manifest naming \(home) was found, \(copy), but \(reason). Nothing was changed; if it is this "
        + "home's vault, name it to take its copy"
    case .invalidManifestSearch(let reason):
      "the search for a manifest copy cannot match anything: \(reason); nothing was changed"
    case .orphanedKeyfile(let home, let keyfile, let vaultID):
      "the keyfile \(keyfile) holds the keys of vault \(vaultID), whose manifest copy names \(home) as its home; "
        + "nothing was changed. If that vault lost its manifest here, write it back from the keyfile's copy; if it was "
        + "moved elsewhere, open it once at its new home (which records the move) and run this again; only if it is "
        + "gone for good, move its keyfile away first: mv \(ShellWord.quoted(keyfile)) "
        + "\(ShellWord.quoted(keyfile + ".retired"))"
    case .intactManifestDiffers(let home, let vaultID, let store):
      "the manifest in \(home) verifies, and is vault \(vaultID)'s with its keys in the \(store.rawValue) store, not "
        + "the vault or store asked for; nothing was changed. Only if this manifest is the wrong one for the home, "
        + "move it aside and run again"
    case .manifestContradicted(let home, let vaultID, let container, let other):
      "the manifest in \(home) verifies (vault \(vaultID)), but the container \(container) records vault \(other); "
        + "nothing was changed. If that container was replaced, put this vault's back (a container's vault id is not "
        + "authenticated, so it never decides); only if the manifest is the wrong one for the home, move it aside and "
        + "run again"
    case .keyfileMoved(let keyfile, let named):
      "the keyfile \(keyfile) keeps this home's manifest, which names the vault's keyfile as \(named); nothing was "
        + "changed. Move the keyfile back: mv \(ShellWord.quoted(keyfile)) \(ShellWord.quoted(named))"
    case .sharedDirectory(let home, let mode, let owner):
      "\(home) is not a directory of your own (mode \(octal(mode)), owned by uid \(owner)): a new vault's home is "
        + "made private (mode 0700), which would lock others out of a directory they use; nothing was changed. Keep "
        + "the vault in a directory of your own, such as \(ShellWord.quoted(home + "/vault"))"
    case .stoppedMoveUnclear(let path, let reason):
      "a keyfile move stopped part-way and left \(path), which cannot be read to tell whether it holds this "
        + "vault's keys (\(reason)); nothing was changed. The keyfile in use is fine. Make it readable again, or, "
        + "if it is that move's leftover, delete it yourself (it may hold keys): a rotation deletes keys only "
        + "once no such copy may keep them"
    case .keyfileMissing(let path):
      "the keyfile \(path), which holds this vault's keys, is not there (moved, renamed or deleted); nothing was "
        + "changed and no key was made. If it was moved, put it back there; if it was deleted, restore it from a "
        + "backup"
    case .homeMissing(let home):
      "the vault home \(home) does not exist; nothing was changed. A lost manifest is written back into the home "
        + "that holds its vault's containers: if the home was moved, name its new place; if it was deleted, its "
        + "records went with it, and a backup bundle restores them"
    case .compromisedVersionActive(let version):
      "key version \(version) is the one an unfinished rotation after a compromise replaces, and that rotation's "
        + "new key could not be made active (no room to record it: the disk is full or read-only); nothing was "
        + "sealed. Reading works meanwhile; free space, then finish the rotation after the compromise"
    case .restoreKeysPresent(let store, let version, let home):
      "the \(store.rawValue) store already holds key version \(version) of this bundle's vault: the vault it was "
        + "taken from (or an earlier restore of it) keeps its keys there"
        + (home.map { ", with its home at \($0)" } ?? "")
        + ", and they are never overwritten; merge the bundle into that vault's home instead (a second home of the "
        + "same vault would share its keys and its backups' names), or restore into another key store (nothing "
        + "was changed)"
    }
  }

  /// The Secret Service vaults whose items name only homes that no longer hold them (at most five),
  /// for a home that may have been moved from one of those; "" when there are none.
  private static func movedHint(_ elsewhere: [String]) -> String {
    guard !elsewhere.isEmpty else { return "" }
    let shown = elsewhere.prefix(5).joined(separator: "; ")
    let more = elsewhere.count > 5 ? " and \(elsewhere.count - 5) more" : ""
    return " The Secret Service holds the keys of vaults whose homes no longer hold them: \(shown)\(more); if this "
      + "home was moved from one of those, name that vault."
  }

  /// For the Secret Service: the service answering may not be the one holding the keys (another
  /// keyring daemon, another login's keyring, another D-Bus session), which a restore would not fix.
  private static func anotherServiceHint(_ store: KeyStoreKind) -> String {
    guard store == .secretService else { return "" }
    // A daemon that dies is restarted by D-Bus activation at the next call, with the bus's
    // environment: where that differs from the session's (XDG_DATA_HOME), it reads other keyring
    // files and holds none of these keys (seen in fault injection: "missing" after a SIGKILL).
    return "if the Secret Service answering here is not the one that kept your keys (another keyring daemon, "
      + "such as one D-Bus started by itself after yours stopped, which may read other keyring files; another "
      + "login; another D-Bus session), run vault where that one answers; otherwise "
  }
}

extension VaultError: CodedError {
  /// `vault.` and the case, in kebab case: stable across releases.
  public var code: String {
    switch self {
    case .alreadyExists: "vault.already-exists"
    case .homeNotEmpty: "vault.home-not-empty"
    case .keyfileExists: "vault.keyfile-exists"
    case .orphanedKeys: "vault.orphaned-keys"
    case .keyMissing: "vault.key-missing"
    case .roundTripFailed: "vault.round-trip-failed"
    case .noActiveKey: "vault.no-active-key"
    case .integrityKeyMissing: "vault.integrity-key-missing"
    case .keyCheckFailed: "vault.key-check-failed"
    case .unexpectedKeyItem: "vault.unexpected-key-item"
    case .versionsExhausted: "vault.versions-exhausted"
    case .notAKeyfileVault: "vault.not-a-keyfile-vault"
    case .containerBesideKeyfile: "vault.container-beside-keyfile"
    case .integrityKeyMismatch: "vault.integrity-key-mismatch"
    case .storeMoved: "vault.store-moved"
    case .sealPinOnActiveVersion: "vault.seal-pin-on-active-version"
    case .unknownVersion: "vault.unknown-version"
    case .versionRetired: "vault.version-retired"
    case .versionNotPinned: "vault.version-not-pinned"
    case .restoreUnfinished: "vault.restore-unfinished"
    case .restoreStoreDiffers: "vault.restore-store-differs"
    case .restoreKeysPresent: "vault.restore-keys-present"
    case .noManifestCopy: "vault.no-manifest-copy"
    case .manifestCopiesDiffer: "vault.manifest-copies-differ"
    case .unconfirmedManifestCopy: "vault.unconfirmed-manifest-copy"
    case .intactManifestDiffers: "vault.intact-manifest-differs"
    case .invalidManifestSearch: "vault.invalid-manifest-search"
    case .orphanedKeyfile: "vault.orphaned-keyfile"
    case .manifestContradicted: "vault.manifest-contradicted"
    case .keyfileMoved: "vault.keyfile-moved"
    case .homeMissing: "vault.home-missing"
    case .keyfileMissing: "vault.keyfile-missing"
    case .sharedDirectory: "vault.shared-directory"
    case .stoppedMoveUnclear: "vault.stopped-move-unclear"
    case .compromisedVersionActive: "vault.compromised-version-active"
    }
  }
}
