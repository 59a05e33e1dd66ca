import VaultKeys

/// Builds the key store a manifest names. The real one is chosen at the edge (CLI, app setup);
/// tests pass one that returns an in-memory store.
public struct KeyStoreResolver: Sendable {
  private let make: @Sendable (StoreDescriptor, String) throws -> any KeyStore

  /// Wraps a function that builds a store, for a resolver of your own (another backend, or a test
  /// double that counts what is asked of it).
  ///
  /// - Parameter make: called with the manifest's store descriptor and the vault's home each time a
  ///   vault is created or opened; what it throws, the vault call throws.
  public init(_ make: @escaping @Sendable (_ descriptor: StoreDescriptor, _ home: String) throws -> any KeyStore) {
    self.make = make
  }

  /// The key store for a vault whose manifest names `descriptor`.
  ///
  /// - Parameters:
  ///   - descriptor: the manifest's store (its kind and, for a keyfile, the path).
  ///   - home: the vault's home directory.
  /// - Returns: the store, not yet read.
  /// - Throws: whatever the resolver's function throws (`KeyStoreError` for the real backends).
  public func store(for descriptor: StoreDescriptor, home: String) throws -> any KeyStore {
    try make(descriptor, home)
  }

  /// The real backends: a keyfile at the manifest's path, or the Secret Service with `timeout`.
  /// The keyfile store refuses a keyfile inside `home` or beside a container the manifest lists.
  ///
  /// - Parameter timeout: seconds each Secret Service call may take before it fails as
  ///   `KeyStoreError.timedOut`.
  /// - Returns: a resolver whose stores throw `KeyStoreError.service` for a `.memory` descriptor (a
  ///   memory store cannot be reopened from a manifest).
  public static func system(secretServiceTimeout timeout: Double = 5) -> KeyStoreResolver {
    KeyStoreResolver { descriptor, home in
      switch descriptor.kind {
      case .keyfile:
        KeyfileStore(path: descriptor.keyfile ?? "") {
          // Read at each use, so a container registered since counts too.
          .init(home: home, containers: (try? ManifestFile.read(home: home))?.manifest.containers.map(\.path) ?? [])
        }
      case .secretService: SecretServiceStore(timeout: timeout, home: home)
      case .memory: throw KeyStoreError.service(detail: "a memory store cannot be reopened from a manifest")
      }
    }
  }

  /// Always returns `store`, whatever the manifest says (for tests).
  ///
  /// - Parameter store: the store every vault opened through this resolver uses.
  /// - Returns: the resolver.
  public static func fixed(_ store: any KeyStore) -> KeyStoreResolver { KeyStoreResolver { _, _ in store } }
}
