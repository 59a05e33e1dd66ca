import Foundation
import Vault

/// Async forms of `log` and `flush`: each runs the synchronous call on a thread of its own, never
/// on one of Swift's concurrency pool, and means exactly what the synchronous call means.
///
/// In async code these forms are the ones Swift picks, so a call there needs `await`.
extension Telemetry {
  /// Seals the event and commits it to disk, without holding a thread of Swift's concurrency pool
  /// during the enqueue's fsync; returns its id.
  ///
  /// The same as the synchronous `log(type:payload:id:)`, run on a thread of its own.
  ///
  /// - Parameters:
  ///   - type: the event's type, 1–128 characters (`"screen_view"`).
  ///   - payload: the event's JSON object; empty by default.
  ///   - id: the event's id; a random one when nil. An id already queued is not stored again.
  /// - Returns: the event's id.
  /// - Throws: `CancellationError` when the task was cancelled before the log started (the event
  ///   was not stored; once started, it is stored and its id returned: a started fsync is not
  ///   undone); otherwise what the synchronous `log(type:payload:id:)` throws
  ///   (`TelemetryError.invalidType`, `QueueError`, `KeyStoreError`).
  @discardableResult
  public func log(type: String, payload: [String: JSONValue] = [:], id: UUID? = nil) async throws -> UUID {
    try await BlockingWork.run { try self.log(type: type, payload: payload, id: id) }
  }

  /// Logs an event whose payload is an app's own `Encodable` value, without holding a thread of
  /// Swift's concurrency pool during the enqueue's fsync. The value is encoded on the caller's
  /// thread (it need not be `Sendable`); only the durable enqueue runs elsewhere.
  ///
  /// - Parameters:
  ///   - type: the event's type, 1–128 characters (`"note_added"`).
  ///   - payload: a value that encodes to a JSON object (a struct with stored properties).
  ///   - id: the event's id; a random one when nil.
  /// - Returns: the event's id.
  /// - Throws: `TelemetryError.invalidPayload` when it does not encode to an object, the encoder's
  ///   or parser's error when it does not encode at all, and what the async
  ///   `log(type:payload:id:)` throws (`CancellationError` among them).
  @discardableResult
  public func log(type: String, encoding payload: some Encodable, id: UUID? = nil) async throws -> UUID {
    guard case .object(let fields) = try JSONValue(encoding: payload) else { throw TelemetryError.invalidPayload }
    return try await log(type: type, payload: fields, id: id)
  }

  /// One delivery pass, without holding a thread of Swift's concurrency pool while events are
  /// claimed, batches are posted (the network) and the results committed.
  ///
  /// The same as the synchronous `flush()`, run on a thread of its own. Passes run one at a time;
  /// a second caller waits for the first, on its own thread.
  ///
  /// - Returns: what the pass did, and how many events are still pending.
  /// - Throws: `CancellationError` when the task was cancelled before the pass started (nothing was
  ///   claimed or sent). A pass that has started is not stopped by cancellation: it runs to its
  ///   end and its report is returned (`HTTPCancellation.cancelAll()` is what ends a pass early,
  ///   for the whole process). Otherwise what the synchronous `flush()` throws.
  public func flush() async throws -> FlushReport {
    try await BlockingWork.run { try self.flush() }
  }
}
