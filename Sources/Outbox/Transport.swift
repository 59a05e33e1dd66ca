import Foundation
import Vault
import VaultQueue

/// What a transport says about one delivery attempt.
///
/// Each kind names what happened (`http-503`, `connection-refused`), never a content: it is stored
/// with the record, listed, published and logged in the clear, cut before its first character
/// outside ASCII letters, digits, `-`, `.` and `_` (and to 64 bytes).
public enum DeliveryResult: Sendable, Equatable {
  /// The receiver has it (2xx): the record is deleted.
  case delivered
  /// The server said try again later (408, 429, 5xx, or 413 for a small body); `after` is its
  /// Retry-After, if any. Counts toward parking.
  case retry(kind: String, after: TimeInterval?)
  /// The receiver refused it for good (other 4xx): kept for review, never retried automatically.
  case reject(kind: String)
  /// The receiver could not be reached (no route, refused, timed out): try again later; this
  /// never counts toward parking.
  case unreachable(kind: String)

  /// The same result with its kind cut to a name, as the container stores it: a kind is kept,
  /// listed, published in events and logged in the clear, so everything from its first character
  /// outside letters, digits, `-`, `.` and `_` is dropped (`invalid: <a field>` → `invalid`).
  package var withNamedKind: DeliveryResult {
    switch self {
    case .delivered: .delivered
    case .retry(let kind, let after): .retry(kind: ErrorKindText.sanitized(kind), after: after)
    case .reject(let kind): .reject(kind: ErrorKindText.sanitized(kind))
    case .unreachable(let kind): .unreachable(kind: ErrorKindText.sanitized(kind))
    }
  }
}

/// Delivers one message. Implementations must not log or throw payload contents.
///
/// `deliver` is async so that a transport built on an async client never holds a thread while it
/// waits. A transport whose work blocks a thread (`HTTPClient` sleeps in poll(2)) conforms to
/// `SynchronousTransport` instead, which runs it away from Swift's concurrency pool.
public protocol Transport: Sendable {
  /// Attempts delivery of one record; called at most once at a time per record, possibly at once
  /// for different records of different passes.
  /// - Parameters:
  ///   - id: the record's id (stable across retries: send it as an idempotency key).
  ///   - payload: the record's bytes, exactly as `Outbox.send` took them.
  /// - Returns: what the receiver said, which decides ack, retry, parking or review.
  func deliver(id: UUID, payload: Data) async -> DeliveryResult
}

/// A transport whose delivery blocks the calling thread (a blocking client, a file write). Its
/// `deliver` runs `deliverSynchronously` on a thread of its own, never one of Swift's concurrency
/// pool (two cores make a pool of two threads: two slow servers would stall every task).
public protocol SynchronousTransport: Transport {
  /// Attempts delivery of one record, blocking the calling thread until there is an answer.
  ///
  /// - Parameters:
  ///   - id: the record's id (stable across retries: send it as an idempotency key).
  ///   - payload: the record's bytes, exactly as `Outbox.send` took them.
  /// - Returns: what the receiver said, which decides ack, retry, parking or review.
  func deliverSynchronously(id: UUID, payload: Data) -> DeliveryResult
}

extension SynchronousTransport {
  /// Runs `deliverSynchronously(id:payload:)` on a dispatch queue of its own (`BlockingWork`, the
  /// helper the vault's and the container's async calls share) and awaits it, so the blocking wait
  /// never holds a thread of Swift's concurrency pool. Cancellation is not looked at: a delivery
  /// is cut short by `HTTPCancellation`.
  ///
  /// - Parameters:
  ///   - id: the record's id.
  ///   - payload: the record's bytes.
  /// - Returns: what `deliverSynchronously(id:payload:)` returned.
  public func deliver(id: UUID, payload: Data) async -> DeliveryResult {
    await BlockingWork.run { self.deliverSynchronously(id: id, payload: payload) }
  }
}

/// The delivery rules for HTTP status codes, shared by every HTTP transport.
public enum HTTPStatusPolicy {
  /// Maps a response to a result: 2xx delivered; 429 and 503 retried after their Retry-After;
  /// 408 and other 5xx retried with backoff; 401 and 403 retried with backoff (refused
  /// credentials are a configuration to fix, not a bad record: never to review); 3xx rejected
  /// (`http-3xx-redirect-refused`, never followed); anything else rejected (`http-<status>`).
  ///
  /// - Parameters:
  ///   - status: the HTTP status code.
  ///   - retryAfter: the raw Retry-After header value, if any (read only for 429 and 503).
  ///   - now: the time an HTTP-date Retry-After is measured from.
  /// - Returns: the result; retry and reject kinds are `http-<status>`.
  public static func result(status: Int, retryAfter: String?, now: Date = Date()) -> DeliveryResult {
    switch status {
    case 200..<300: return .delivered
    case 429, 503: return .retry(kind: "http-\(status)", after: parseRetryAfter(retryAfter, now: now))
    case 408, 500..<600: return .retry(kind: "http-\(status)", after: nil)
    // The token or the client was refused: every record would be refused alike until someone
    // fixes the configuration, so none is judged by it (the outbox also ends its pass).
    case 401, 403: return .retry(kind: "http-\(status)", after: nil)
    // A redirect is never followed (the token and the body stay with the configured endpoint):
    // the record is kept for review, never acked, never retried blindly at the same place.
    case 300..<400: return .reject(kind: "http-\(status)-redirect-refused")
    default: return .reject(kind: "http-\(status)")
    }
  }

  /// Maps one exchange of a record's request: a 413 for a body of at most `smallBody` bytes is the
  /// server's fault (a small message cannot really be too large), retried with backoff rather
  /// than sent to review; the rest as `result(status:retryAfter:now:)`.
  ///
  /// - Parameters:
  ///   - outcome: what the exchange gave: a status, or a network failure's kind.
  ///   - bodyBytes: the size of the request body that was sent.
  ///   - smallBody: the largest body for which a 413 is retried (64 KiB by default).
  /// - Returns: the result; a network failure is `.unreachable` with the client's kind.
  public static func result(for outcome: HTTPOutcome, bodyBytes: Int, smallBody: Int = 64 * 1024) -> DeliveryResult {
    switch outcome {
    case .status(413, let retryAfter) where bodyBytes <= smallBody:
      return .retry(kind: "http-413", after: parseRetryAfter(retryAfter))
    case .status(let status, let retryAfter): return result(status: status, retryAfter: retryAfter)
    case .unreachable(let kind): return .unreachable(kind: kind)
    }
  }

  /// Retry-After as delay-seconds or an HTTP date (RFC 9110 §10.2.3); nil when absent, unparseable,
  /// 0, or a date not in the future (no time to wait: the backoff decides).
  ///
  /// - Parameters:
  ///   - value: the header's value, if any.
  ///   - now: the time an HTTP date is measured from.
  /// - Returns: the delay in seconds, above 0 (not capped here: the queue caps it at
  ///   `maximumRetryAfter`), or nil.
  public static func parseRetryAfter(_ value: String?, now: Date = Date()) -> TimeInterval? {
    guard let value = value?.trimmingCharacters(in: .whitespaces), !value.isEmpty else { return nil }
    // delay-seconds is digits alone (RFC 9110, 10.2.3): "-5" and "+5" are not a delay. 0 (or a
    // date already past) names no time to wait: nil, so the backoff decides, as without the header.
    // Taken as "at once", a server answering every request so had a message retried at once for a
    // day until it parked (an outside review: 769 requests in 10 s for one message).
    if value.utf8.allSatisfy({ (0x30...0x39).contains($0) }) {
      return Int(value).flatMap { $0 > 0 ? TimeInterval($0) : nil }
    }
    // An HTTP date is printable ASCII. Anything else never reaches DateFormatter, which traps on
    // some of it (a combining mark after a digit: "Incorrect range", found by Fuzz/fuzz-http), so a
    // server's 429 or 503 could crash the process that delivers to it.
    guard value.utf8.allSatisfy({ (0x20...0x7e).contains($0) }) else { return nil }
    let formatter = DateFormatter()
    formatter.locale = Locale(identifier: "en_US_POSIX")
    formatter.timeZone = TimeZone(identifier: "GMT")
    formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
    guard let date = formatter.date(from: value), date > now else { return nil }
    return date.timeIntervalSince(now)
  }
}
