import VaultKeys

/// Builds the key store a manifest names. The real one is chosen at the edge (CLI, app setup);
/// tests pass one that returns an in-memory store.
public struct KeyStoreResolver: Sendable {
  private let make: @Sendable (StoreDescriptor, String) throws -> any KeyStore

  public init(_ make: @escaping @Sendable (_ descriptor: StoreDescriptor, _ home: String) throws -> any KeyStore) {
    self.make = make
  }

  public func store(for descriptor: StoreDescriptor, home: String) throws -> any KeyStore {
    try make(descriptor, home)
  }

  /// The real backends: a keyfile at the manifest's path, or the Secret Service with `timeout`.
  /// The keyfile store refuses a keyfile inside `home` or beside a container the manifest lists.
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
  public static func fixed(_ store: any KeyStore) -> KeyStoreResolver { KeyStoreResolver { _, _ in store } }
}
