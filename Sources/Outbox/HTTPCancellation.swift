import Foundation

/// Process-wide: ends HTTP exchanges early when the process is asked to stop (SIGTERM, SIGINT,
/// SIGHUP). After `cancelAll()`, an exchange in progress returns `.unreachable(kind: "cancelled")`
/// at once (its wait is woken, not polled) and a new one returns it without connecting, so a
/// deliverer can give back its claim and exit. A cancelled exchange never acks: the server may or
/// may not have the record, and it stays queued (at-least-once).
public enum HTTPCancellation {
  private static let state = CancellationState()

  /// Asks every HTTP exchange of this process to end now. Not async-signal-safe: call it from a
  /// signal handler's dispatch source, not from the handler itself.
  public static func cancelAll() { state.cancel() }

  /// True once `cancelAll()` was called.
  public static var isCancelled: Bool { state.isCancelled }

  /// Registers `wake` to be called by `cancelAll()` while an exchange waits; returns the token
  /// for `unregister`. Once `unregister` returns, `wake` is never called again.
  static func register(_ wake: @escaping @Sendable () -> Void) -> Int { state.register(wake) }

  static func unregister(_ token: Int) { state.unregister(token) }

  /// For tests, which cancel and go on in the same process.
  static func reset() { state.reset() }
}

private final class CancellationState: @unchecked Sendable {
  private let lock = NSLock()
  private var cancelled = false
  private var wakers: [Int: @Sendable () -> Void] = [:]
  private var nextToken = 0

  func cancel() {
    // Wakers run under the lock, so none runs after its exchange unregistered (and freed its handle).
    lock.withLock {
      cancelled = true
      for wake in wakers.values { wake() }
    }
  }

  var isCancelled: Bool { lock.withLock { cancelled } }

  func register(_ wake: @escaping @Sendable () -> Void) -> Int {
    lock.withLock {
      nextToken += 1
      wakers[nextToken] = wake
      return nextToken
    }
  }

  func unregister(_ token: Int) { lock.withLock { _ = wakers.removeValue(forKey: token) } }

  func reset() { lock.withLock { cancelled = false } }
}
