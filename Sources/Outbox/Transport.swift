import Foundation

/// What a transport says about one delivery attempt.
public enum DeliveryResult: Sendable, Equatable {
  /// The receiver has it (2xx): the record is deleted.
  case delivered
  /// The server said try again later (408, 429, 5xx); `after` is its Retry-After, if any.
  case retry(kind: String, after: TimeInterval?)
  /// The receiver refused it for good (other 4xx): kept for review, never retried automatically.
  case reject(kind: String)
  /// The receiver could not be reached (no route, refused, timed out): try again later; this
  /// never counts toward parking.
  case unreachable(kind: String)
}

/// Delivers one message. Implementations must not log or throw payload contents.
public protocol Transport: Sendable {
  func deliver(id: UUID, payload: [UInt8]) -> DeliveryResult
}

/// The delivery rules for HTTP status codes, shared by every HTTP transport.
public enum HTTPStatusPolicy {
  /// Maps a response to a result. `retryAfter` is the raw Retry-After header value.
  public static func result(status: Int, retryAfter: String?, now: Date = Date()) -> DeliveryResult {
    switch status {
    case 200..<300: return .delivered
    case 429, 503: return .retry(kind: "http-\(status)", after: parseRetryAfter(retryAfter, now: now))
    case 408, 500..<600: return .retry(kind: "http-\(status)", after: nil)
    // A redirect is never followed (the token and the body stay with the configured endpoint):
    // the record is kept for review, never acked, never retried blindly at the same place.
    case 300..<400: return .reject(kind: "http-\(status)-redirect-refused")
    default: return .reject(kind: "http-\(status)")
    }
  }

  /// Retry-After as delay-seconds or an HTTP date (RFC 9110 §10.2.3); nil when absent or unparseable.
  public static func parseRetryAfter(_ value: String?, now: Date = Date()) -> TimeInterval? {
    guard let value = value?.trimmingCharacters(in: .whitespaces), !value.isEmpty else { return nil }
    if let seconds = Int(value) { return TimeInterval(max(0, seconds)) }
    let formatter = DateFormatter()
    formatter.locale = Locale(identifier: "en_US_POSIX")
    formatter.timeZone = TimeZone(identifier: "GMT")
    formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
    guard let date = formatter.date(from: value) else { return nil }
    return max(0, date.timeIntervalSince(now))
  }
}
