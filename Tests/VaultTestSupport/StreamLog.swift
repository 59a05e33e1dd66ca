import Foundation

/// Collects an async stream's elements as they come, for synchronous assertions (delivery events
/// of the outbox and of telemetry).
public final class StreamLog<Element: Sendable>: @unchecked Sendable {
  private let lock = NSLock()
  private var elements: [Element] = []
  private var ended = false

  public init(_ stream: AsyncStream<Element>) {
    Task {
      for await element in stream { self.lock.withLock { self.elements.append(element) } }
      self.lock.withLock { self.ended = true }
    }
  }

  /// Everything received so far.
  public var all: [Element] { lock.withLock { elements } }
  /// Whether the stream has ended.
  public var finished: Bool { lock.withLock { ended } }
}
