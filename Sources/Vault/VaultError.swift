import VaultKeys

/// Failures of vault-level operations (creating, opening, rotating). Envelope, key store and
/// manifest failures are thrown as their own types.
public enum VaultError: Error, Equatable, Sendable, CustomStringConvertible {
  case alreadyExists(home: String)
  case homeNotEmpty(home: String)
  case keyfileExists(path: String)
  case orphanedKeys(home: String, vaultIDs: [String])
  case keyMissing(version: UInt32, store: KeyStoreKind)
  case roundTripFailed(version: UInt32)
  case noActiveKey
  case integrityKeyMissing(store: KeyStoreKind)
  case keyCheckFailed(version: UInt32)
  case unexpectedKeyItem(version: UInt32, store: KeyStoreKind)
  case versionsExhausted(highest: UInt32)
  case notAKeyfileVault(home: String)
  case containerBesideKeyfile(container: String, keyfile: String)
  case integrityKeyMismatch(store: KeyStoreKind)
  case storeMoved(home: String)

  public var description: String {
    switch self {
    case .alreadyExists(let home):
      "a vault already exists at \(home); nothing was changed"
    case .homeNotEmpty(let home):
      "\(home) is not empty and holds no vault manifest; if a vault lived here, restore its manifest.json "
        + "from a backup instead of creating a new vault over its data"
    case .keyfileExists(let path):
      "a keyfile already exists at \(path) and may hold the only copy of another vault's keys; "
        + "nothing was changed (choose another keyfile path, or restore that vault's manifest)"
    case .orphanedKeys(let home, let ids):
      "the Secret Service already holds keys for a vault at \(home) (vault id \(ids.joined(separator: ", "))) "
        + "but its manifest is missing; restore manifest.json from a backup rather than creating a new vault"
    case .keyMissing(let version, let store):
      "key version \(version) is missing from the \(store.rawValue) store although the manifest expects it; "
        + "restore the key store from a backup (no new key was made)"
    case .roundTripFailed(let version):
      "key version \(version) failed its seal/open self-test; it was not activated"
    case .noActiveKey: "the manifest names no active key version"
    case .integrityKeyMissing(let store):
      "the \(store.rawValue) store has no integrity key for this vault although its manifest is signed; "
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
    }
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
    }
  }
}
