import VaultKeys

/// What `Vault.checkForOrphanedKeys` could look at.
public enum OrphanCheck: Equatable, Sendable {
  /// Nothing of another vault at this home was found.
  case clear
  /// The Secret Service could not be asked (no session bus, or no provider on it), so its items
  /// were not searched; the reason says why. Tell the user: it is not an error.
  case secretServiceSkipped(reason: KeyStoreError)
}

extension Vault {
  /// Looks for keys that a vault at `home` left behind when its manifest was lost, so `init`
  /// refuses to start a new vault there (the old data would become unreadable by anyone who
  /// then restores the home) and says to restore the manifest instead.
  ///
  /// "Orphaned keys" means, whatever store the new vault will use:
  /// - Secret Service key items whose `home` attribute is `home` (records alone do not count:
  ///   see `SecretServiceStore.keyringIDs(forHome:)`). The search works
  ///   while the collection is locked (locked items are found with their attributes), so `auto`
  ///   falling back to a keyfile because of a lock still refuses.
  /// - A keyfile at the path the new vault would use. This function does not look for it:
  ///   `Vault.create` does, and refuses it as `VaultError.keyfileExists` (unless an `init` killed
  ///   before it stored a key left it: `Vault.isKeyfileLeftByKilledInit`). Keyfiles do not record
  ///   their home, so a keyfile elsewhere (the default `<vault id>.keys` of the lost vault, under a
  ///   different id) is not found.
  ///
  /// The Secret Service is found through `resolver` (its `.secretService` store); a resolver
  /// that makes no `SecretServiceStore` (tests with in-memory stores) makes this `.clear`.
  ///
  /// - Parameters:
  ///   - home: the home a new vault is about to be created in (made absolute against the working
  ///     directory).
  ///   - resolver: makes the Secret Service store that is searched.
  /// - Returns: `.clear`, or `.secretServiceSkipped` when there is no session bus or provider.
  /// - Throws: `VaultError.orphanedKeys` when items for `home` exist; the Secret Service's error
  ///   when it is there but cannot answer (timed out, failed), since then nobody can tell.
  public static func checkForOrphanedKeys(home: String, resolver: KeyStoreResolver = .system()) throws
    -> OrphanCheck
  {
    let home = absolutePath(home)
    guard
      let secretService = try resolver.store(for: StoreDescriptor(kind: .secretService), home: home)
        as? SecretServiceStore
    else { return .clear }
    let orphans: [String]
    do {
      orphans = try secretService.keyringIDs(forHome: home)
    } catch let error as KeyStoreError {
      switch error {
      case .noSessionBus, .noProvider, .libraryMissing: return .secretServiceSkipped(reason: error)
      default: throw error
      }
    }
    guard orphans.isEmpty else { throw VaultError.orphanedKeys(home: home, vaultIDs: orphans) }
    return .clear
  }
}
