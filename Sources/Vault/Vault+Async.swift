import Foundation

/// Async forms of the calls that can block: each runs the synchronous call on a thread of its own
/// (`BlockingWork`), never on one of Swift's concurrency pool, and means exactly what it does.
///
/// In async code these forms are the ones Swift picks, so a call there needs `await`.
/// Cancellation never interrupts a call that has started; a task cancelled before the call
/// started gets `CancellationError` and nothing was done.
extension Vault {
  /// Opens the vault in `home` and loads its active key, without holding a thread of Swift's
  /// concurrency pool while the key store answers (a Secret Service call may take until its
  /// timeout) or while the manifest lock is waited for (a rotation in another process).
  ///
  /// The same as the synchronous `open(home:resolver:clock:)`, run on a thread of its own.
  ///
  /// - Parameters:
  ///   - home: the home directory (made absolute against the working directory).
  ///   - resolver: builds the key store the manifest names.
  ///   - clock: the time source for manifest writes (finishing a pending version, rotations).
  /// - Returns: the open vault, its active key loaded and checked.
  /// - Throws: `CancellationError` when the task was cancelled before the open started (an open
  ///   that has started is finished, and its vault returned); otherwise what the synchronous
  ///   `open(home:resolver:clock:)` throws (`ManifestFile.Failure`, `KeyStoreError`, `VaultError`).
  public static func open(
    home: String, resolver: KeyStoreResolver = .system(), clock: @escaping @Sendable () -> Date = Date.init
  ) async throws -> Vault {
    try await BlockingWork.run { try Vault.open(home: home, resolver: resolver, clock: clock) }
  }

  /// Seals `plaintext` bound to `context`, without holding a thread of Swift's concurrency pool
  /// while the key is first read from the key store or while a rotation holds the vault's lock
  /// (a seal waits for it, which can take minutes on a big container).
  ///
  /// The same as the synchronous `seal(_:context:)`, run on a thread of its own.
  ///
  /// - Parameters:
  ///   - plaintext: the record, any size up to the memory available (it is held twice).
  ///   - context: what the record is for; must not be empty.
  /// - Returns: the envelope: `plaintext.count + 89` bytes (format 2), or `+ 45` while the
  ///   active key version is one made before format 2.
  /// - Throws: `CancellationError` when the task was cancelled before the seal started (a seal that
  ///   has started is finished, and its envelope returned); otherwise what the synchronous
  ///   `seal(_:context:)` throws (`EnvelopeError.emptyContext`, `KeyStoreError`, `VaultError`).
  public func seal(_ plaintext: some DataProtocol & Sendable, context: String) async throws -> Data {
    try await BlockingWork.run { try self.seal(plaintext, context: context) }
  }

  /// Seals `plaintext` bound to a context given as bytes, without holding a thread of Swift's
  /// concurrency pool; the same as the synchronous `seal(_:context:)` with byte arrays.
  ///
  /// - Parameters:
  ///   - plaintext: the record.
  ///   - context: what the record is for, as bytes; must not be empty.
  /// - Returns: the envelope (`plaintext.count + 89` bytes, or `+ 45` under a pre-format-2 key).
  /// - Throws: `CancellationError` when the task was cancelled before the seal started; otherwise
  ///   what the synchronous form throws.
  public func seal(_ plaintext: [UInt8], context: [UInt8]) async throws -> [UInt8] {
    try await BlockingWork.run { try self.seal(plaintext, context: context) }
  }

  /// Opens an envelope made by `seal(_:context:)` with the same context, without holding a thread
  /// of Swift's concurrency pool while a key is read from the key store or the manifest is
  /// reloaded.
  ///
  /// The same as the synchronous `open(_:context:)`, run on a thread of its own.
  ///
  /// - Parameters:
  ///   - envelope: the bytes `seal` returned, unchanged.
  ///   - context: the context it was sealed with.
  /// - Returns: the plaintext. Nothing is returned unless every check passed.
  /// - Throws: `CancellationError` when the task was cancelled before the open started; otherwise
  ///   what the synchronous `open(_:context:)` throws (`EnvelopeError`, `KeyStoreError`,
  ///   `VaultError`, `ManifestFile.Failure`).
  public func open(_ envelope: some DataProtocol & Sendable, context: String) async throws -> Data {
    try await BlockingWork.run { try self.open(envelope, context: context) }
  }

  /// Opens an envelope sealed with a context given as bytes, without holding a thread of Swift's
  /// concurrency pool; the same as the synchronous `open(_:context:)` with byte arrays.
  ///
  /// - Parameters:
  ///   - envelope: the bytes `seal` returned, unchanged.
  ///   - context: the context it was sealed with, byte for byte.
  /// - Returns: the plaintext.
  /// - Throws: `CancellationError` when the task was cancelled before the open started; otherwise
  ///   what the synchronous form throws.
  public func open(_ envelope: [UInt8], context: [UInt8]) async throws -> [UInt8] {
    try await BlockingWork.run { try self.open(envelope, context: context) }
  }
}
