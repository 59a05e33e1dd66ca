import Dispatch
import Synchronization

/// Work that blocks a thread (a file lock, an fsync, a Secret Service call, a network exchange),
/// run on a thread of its own and awaited, so it never holds a thread of Swift's concurrency pool:
/// on two cores that pool has two threads, and two blocked calls would stall every task.
///
/// Every call gets a serial dispatch queue of its own. Serial queues are overcommit queues, which
/// get a thread at once however many are blocked; a concurrent queue is not, and on Linux it runs
/// on the same root queue as Swift's pool (measured on two cores: six 0.3 s sleeps on one
/// concurrent queue ran two at a time, 0.9 s in all, and a task started meanwhile waited 0.5 s for
/// a thread; six serial queues finished together in 0.3 s and the task started at once). The cost
/// is one thread per call in progress; the calls on one container take turns on its connection
/// anyway.
package enum BlockingWork {
  /// Set on every queue this helper makes, so a test can tell that work ran on one of them.
  private static let marker = DispatchSpecificKey<Bool>()

  /// True when the calling code runs inside `run`, on a queue of this helper (never on a thread of
  /// Swift's concurrency pool).
  package static var isCurrent: Bool { DispatchQueue.getSpecific(key: marker) ?? false }

  private static func makeQueue() -> DispatchQueue {
    let queue = DispatchQueue(label: "vault.blocking")
    queue.setSpecific(key: marker, value: true)
    return queue
  }

  /// Runs `work` on a queue of its own and returns what it returned or throws what it threw.
  ///
  /// Cancellation: a task cancelled before `work` starts gets `CancellationError` at once and
  /// `work` never runs (nothing was done). Once `work` has started it runs to the end and its
  /// result is returned even if the task is cancelled meanwhile: what it wrote (a committed
  /// transaction, an fsync) is not undone, and the caller learns that it happened.
  ///
  /// - Parameter work: the blocking call.
  /// - Returns: what `work` returned.
  /// - Throws: `CancellationError` when the task was cancelled before `work` started; otherwise
  ///   what `work` threw.
  package static func run<Value: Sendable>(_ work: @escaping @Sendable () throws -> Value) async throws -> Value {
    let ticket = Ticket<Value>()
    return try await withTaskCancellationHandler {
      try await withCheckedThrowingContinuation { continuation in
        guard ticket.wait(continuation) else { return }
        makeQueue().async {
          guard let continuation = ticket.start() else { return }
          continuation.resume(with: Result { try work() })
        }
      }
    } onCancel: {
      ticket.cancel()
    }
  }

  /// Runs `work` on a queue of its own and returns what it returned; cancellation is not looked at
  /// (for work that reports its own outcome, such as a delivery attempt).
  ///
  /// - Parameter work: the blocking call.
  /// - Returns: what `work` returned.
  package static func run<Value: Sendable>(_ work: @escaping @Sendable () -> Value) async -> Value {
    await withCheckedContinuation { continuation in makeQueue().async { continuation.resume(returning: work()) } }
  }
}

/// One call of `BlockingWork.run`: whoever moves it out of `waiting` first (the queue starting the
/// work, or the task's cancellation) decides how the continuation is resumed, exactly once.
private final class Ticket<Value: Sendable>: Sendable {
  private enum Phase {
    /// Not yet handed a continuation (the cancellation handler can run before the operation).
    case new
    case waiting(CheckedContinuation<Value, any Error>)
    case started
    case cancelled
  }

  private let phase = Mutex<Phase>(.new)

  /// Takes the continuation; false (after resuming it with `CancellationError`) when the task was
  /// already cancelled, in which case nothing is to be queued.
  func wait(_ continuation: CheckedContinuation<Value, any Error>) -> Bool {
    let cancelled = phase.withLock { phase -> Bool in
      if case .cancelled = phase { return true }
      phase = .waiting(continuation)
      return false
    }
    if cancelled { continuation.resume(throwing: CancellationError()) }
    return !cancelled
  }

  /// The continuation to resume with the work's result; nil when cancellation came first.
  func start() -> CheckedContinuation<Value, any Error>? {
    phase.withLock { phase in
      guard case .waiting(let continuation) = phase else { return nil }
      phase = .started
      return continuation
    }
  }

  /// Resumes a waiting call with `CancellationError`; does nothing once the work has started.
  func cancel() {
    let waiting = phase.withLock { phase -> CheckedContinuation<Value, any Error>? in
      switch phase {
      case .new:
        phase = .cancelled
        return nil
      case .waiting(let continuation):
        phase = .cancelled
        return continuation
      case .started, .cancelled:
        return nil
      }
    }
    waiting?.resume(throwing: CancellationError())
  }
}
