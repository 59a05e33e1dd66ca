// C boundary: the home's lock file (open, fstat, flock) held open for seals.
import Glibc
import Synchronization
import VaultCrypto
import VaultKeys

/// The shared hold on the home's lock file that every `seal` takes, so that no rotation (which
/// takes the exclusive lock) runs while a seal is under way.
///
/// The file stays open for the vault's life: opening and closing it on every seal cost about a
/// third of a small seal (a path walk, a file allocation, its release). A flock belongs to the
/// open file, not to a thread, so the threads of this process share one: the first of them to
/// begin a seal takes `LOCK_SH`, the last to finish gives it back. A rotation in this or another
/// process opens the file on its own and waits, as it did when each seal opened the file.
///
/// A lock file removed or replaced while it is open would lock nothing anyone else sees, so the
/// file is checked again (one `fstat`) after the manifest changed on disk, which is how a home
/// deleted and made again shows itself; checking it on every seal cost as much as the `stat`.
///
/// Thread-safe.
final class SealLock: Sendable {
  private let path: String
  // Not a `Mutex`: LockedValue says why (ThreadSanitizer).
  private let state = LockedValue<Held>(Held())

  private struct Held {
    var descriptor: Int32 = -1
    var holders = 0
  }
  /// Set by `recheckFile()`. An atomic, not a field under `state`: the first holder waits in
  /// flock while holding `state`, and a thread inside a rotation (holding the exclusive lock) that
  /// notices a manifest change must not wait for it, or the two would wait for each other.
  private let recheck = Atomic<Bool>(false)

  init(path: String) { self.path = path }

  deinit {
    state.withLock { held in
      if held.descriptor >= 0 { close(held.descriptor) }
    }
  }

  /// Runs `body` with the shared lock held (taken if no other thread of this process holds it).
  ///
  /// - Throws: `KeyStoreError.io` when the lock file cannot be opened or locked; what `body` throws.
  func withShared<T>(_ body: () throws -> T) throws -> T {
    try acquire()
    defer { release() }
    return try body()
  }

  private func acquire() throws {
    // Blocking in flock while holding the mutex is intended: only the first holder ever blocks
    // (when a rotation holds the exclusive lock), and every other seal would wait for it anyway.
    // Nothing a rotation does takes this mutex (`recheckFile` is an atomic store; a thread that
    // holds the exclusive lock seals without the shared hold), so a rotation never waits for it.
    try state.withLock { held in
      if held.holders > 0 {
        held.holders += 1
        return
      }
      if recheck.exchange(false, ordering: .acquiringAndReleasing), held.descriptor >= 0,
        !Self.isLinked(held.descriptor)
      {
        // The file was removed or replaced (a home deleted and made again): lock the one at `path`.
        close(held.descriptor)
        held.descriptor = -1
      }
      if held.descriptor < 0 {
        let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard descriptor >= 0 else { throw KeyStoreError.io(path: path, operation: "open lock", errno: errno) }
        held.descriptor = descriptor
      }
      // A wait for a rotation in another process is told to LockWait's observer.
      let code = LockWait.lock(held.descriptor, LOCK_SH)
      guard code == 0 else { throw KeyStoreError.io(path: path, operation: "lock", errno: code) }
      held.holders = 1
    }
  }

  /// Makes the next first holder check that the open file is still the one at `path`: called
  /// when the manifest changed on disk.
  func recheckFile() {
    recheck.store(true, ordering: .releasing)
  }

  private func release() {
    state.withLock { held in
      held.holders -= 1
      if held.holders == 0 { flock(held.descriptor, LOCK_UN) }
    }
  }

  /// Whether the open file still has a name (an unlinked lock file locks nothing anyone else sees).
  private static func isLinked(_ descriptor: Int32) -> Bool {
    var info = stat()
    return fstat(descriptor, &info) == 0 && info.st_nlink > 0
  }
}
