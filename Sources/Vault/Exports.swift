// One `import Vault` is enough to create, open and use a vault: the key-store types an app names
// (`StoreDescriptor` to create one, `KeyStoreError` to handle a locked keyring, `InMemoryKeyStore`
// for unit tests) and the crypto types they use (`SymmetricKey`, `CryptoError`) come with it.
@_exported import VaultCrypto
@_exported import VaultKeys
