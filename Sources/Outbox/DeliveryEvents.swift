import Foundation

/// What a delivery loop did with records, as an app observes it (`Outbox.events()`,
/// `Telemetry.events()`). Ids and kinds only: never a payload, a token or a URL.
public enum DeliveryEvent: Sendable, Equatable {
  /// The receiver has these records (it answered 2xx); they are deleted, unless this deliverer's
  /// lease on one ended meanwhile (then whoever claimed it since settles it).
  case delivered(ids: [UUID])
  /// These records wait for another attempt at `nextAttempt` (the container's clock), after a
  /// failure of `errorKind` (`http-503`, `connection-refused`, `timed-out`, …).
  case retried(ids: [UUID], errorKind: String, nextAttempt: Date)
  /// These records were refused by the server `attemptCeiling` times over at least `parkAfter`;
  /// they wait for `resend`.
  case parked(ids: [UUID], errorKind: String)
  /// The receiver refused these records for good (or they can never be sent); kept for review.
  case rejected(ids: [UUID], errorKind: String)
  /// A pass, or a step of one, failed (storage, the token provider): what it claimed and did not
  /// settle is given back (or comes back when its lease ends), and the loop goes on. `errorCode` is the error's `code` (see `CodedError`), else its type's name (and its case's, for a case that carries values).
  case loopError(errorCode: String)
}

/// Fans delivery events out to every stream an app asked for. Each stream keeps at most its own
/// `limit` of undelivered events, dropping the oldest beyond it (`bufferingNewest`), so a stream
/// nobody reads costs a bounded amount of memory; drops are counted.
package final class DeliveryEventHub: @unchecked Sendable {
  private let lock = NSLock()
  private var continuations: [Int: AsyncStream<DeliveryEvent>.Continuation] = [:]
  private var next = 0
  private var dropped = 0

  package init() {}

  /// An outbox or telemetry dropped without `stop()` ends its streams too: a `for await` over one
  /// would otherwise wait forever for events that can no longer come.
  deinit { finishAll() }

  package func stream(bufferingNewest limit: Int) -> AsyncStream<DeliveryEvent> {
    let (stream, continuation) = AsyncStream.makeStream(
      of: DeliveryEvent.self, bufferingPolicy: .bufferingNewest(max(1, limit)))
    let token = lock.withLock { () -> Int in
      next += 1
      continuations[next] = continuation
      return next
    }
    continuation.onTermination = { [weak self] _ in
      guard let self else { return }
      _ = self.lock.withLock { self.continuations.removeValue(forKey: token) }
    }
    return stream
  }

  package func publish(_ event: DeliveryEvent) {
    let targets = lock.withLock { Array(continuations.values) }
    var lost = 0
    for continuation in targets {
      if case .dropped = continuation.yield(event) { lost += 1 }
    }
    if lost > 0 { lock.withLock { dropped += lost } }
  }

  /// Events dropped so far because a stream's buffer was full (summed over streams).
  package var droppedCount: Int { lock.withLock { dropped } }

  /// Ends every stream (after `stop()`: a `for await` over them finishes).
  package func finishAll() {
    let targets = lock.withLock { () -> [AsyncStream<DeliveryEvent>.Continuation] in
      defer { continuations = [:] }
      return Array(continuations.values)
    }
    for continuation in targets { continuation.finish() }
  }
}
