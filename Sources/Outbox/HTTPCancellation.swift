import Foundation

/// Process-wide: ends HTTP exchanges early when the process is asked to stop (SIGTERM, SIGINT,
/// SIGHUP). After `cancelAll()`, an exchange in progress returns `.unreachable(kind: "cancelled")`
/// within a fraction of a second and a new one returns it at once, so a deliverer can give back
/// its claim and exit. A cancelled exchange never acks: the server may or may not have the record,
/// and it stays queued (at-least-once).
public enum HTTPCancellation {
  private static let state = CancellationState()

  /// Asks every HTTP exchange of this process to end now. Not async-signal-safe: call it from a
  /// signal handler's dispatch source, not from the handler itself.
  public static func cancelAll() { state.cancel() }

  /// True once `cancelAll()` was called.
  public static var isCancelled: Bool { state.isCancelled }
}

private final class CancellationState: @unchecked Sendable {
  private let lock = NSLock()
  private var cancelled = false
  func cancel() { lock.withLock { cancelled = true } }
  var isCancelled: Bool { lock.withLock { cancelled } }
}
