import Foundation

/// Collects an async stream's elements as they come, for synchronous assertions (delivery events
/// of the outbox and of telemetry).
///
/// The collecting task is cancelled when the log goes away: a stream whose producer is dropped
/// without finishing it (an outbox a test never stops) would otherwise keep the task suspended,
/// and the task and the stream's storage holding each other, to the end of the process (a leak
/// LeakSanitizer reported from OutboxLoopTests).
public final class StreamLog<Element: Sendable>: @unchecked Sendable {
  /// What the task writes and the log reads; the task holds this, never the log itself.
  private final class Received: @unchecked Sendable {
    let lock = NSLock()
    var elements: [Element] = []
    var ended = false
  }

  private let received = Received()
  private let task: Task<Void, Never>

  public init(_ stream: AsyncStream<Element>) {
    task = Task { [received] in
      for await element in stream { received.lock.withLock { received.elements.append(element) } }
      received.lock.withLock { received.ended = true }
    }
  }

  deinit { task.cancel() }

  /// Everything received so far.
  public var all: [Element] { received.lock.withLock { received.elements } }
  /// Whether the stream has ended.
  public var finished: Bool { received.lock.withLock { received.ended } }
}
