import Foundation

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif

/// What one HTTP exchange gave: the server's status (and its Retry-After header), or the kind of
/// network failure (never the request or its body).
public enum HTTPOutcome: Sendable, Equatable {
  case status(Int, retryAfter: String?)
  case unreachable(kind: String)
}

/// A URLSession that keeps nothing between requests (ephemeral: no cookies, no URL cache, no
/// credential storage), with a blocking `send` bounded by the timeout. Shared by every HTTP
/// transport, so the outbox and telemetry cannot drift apart in how they talk to servers.
public final class EphemeralHTTPClient: Sendable {
  public let timeout: TimeInterval
  private let session: URLSession

  public init(timeout: TimeInterval) {
    self.timeout = timeout
    let configuration = URLSessionConfiguration.ephemeral
    configuration.httpCookieStorage = nil
    configuration.httpShouldSetCookies = false
    configuration.urlCache = nil
    configuration.urlCredentialStorage = nil
    configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
    configuration.timeoutIntervalForRequest = timeout
    configuration.timeoutIntervalForResource = timeout
    // FoundationNetworking follows redirects by itself (a 301/302/303 turns the POST into a GET of
    // the new place, a 307 re-sends it with an empty body, and the bearer token goes along to any
    // host). Only an answer from the configured endpoint may ack a record: refuse every redirect,
    // so the 3xx itself comes back and is handled as a failure.
    session = URLSession(configuration: configuration, delegate: RefuseRedirects(), delegateQueue: nil)
  }

  /// Sends `request` and waits for the answer, at most the timeout (plus a little).
  public func send(_ request: URLRequest) -> HTTPOutcome {
    let done = DispatchSemaphore(value: 0)
    let box = OutcomeBox()
    let task = session.dataTask(with: request) { _, response, error in
      if let http = response as? HTTPURLResponse {
        box.set(.status(http.statusCode, retryAfter: http.value(forHTTPHeaderField: "Retry-After")))
      } else {
        // Named by kind only (the URLError code), never with the request.
        box.set(.unreachable(kind: "transport-\((error as? URLError)?.code.rawValue ?? -1)"))
      }
      done.signal()
    }
    if HTTPCancellation.isCancelled { return .unreachable(kind: "cancelled") }
    task.resume()
    let deadline = DispatchTime.now() + timeout + 5
    while done.wait(timeout: min(deadline, .now() + 0.1)) == .timedOut {
      if HTTPCancellation.isCancelled {
        task.cancel()
        return .unreachable(kind: "cancelled")
      }
      if DispatchTime.now() >= deadline {
        task.cancel()
        return .unreachable(kind: "timeout")
      }
    }
    return box.value ?? .unreachable(kind: "transport")
  }
}

/// Answers every redirect with "do not follow" (the stopgap until the libcurl client of issue 9).
private final class RefuseRedirects: NSObject, URLSessionTaskDelegate, @unchecked Sendable {
  func urlSession(
    _ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
    newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void
  ) {
    completionHandler(nil)
  }
}

private final class OutcomeBox: @unchecked Sendable {
  private let lock = NSLock()
  private var outcome: HTTPOutcome?
  func set(_ value: HTTPOutcome) { lock.withLock { outcome = value } }
  var value: HTTPOutcome? { lock.withLock { outcome } }
}
