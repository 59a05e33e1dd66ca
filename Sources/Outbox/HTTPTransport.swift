import Foundation

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif

/// POSTs each message as JSON `{"id": "<uuid>", "body": "<UTF-8 text, or base64 when not text>",
/// "encoding": "utf8"|"base64"}` to `endpoint`, over an ephemeral session (no cookies, no cache,
/// no stored credentials), and maps the status with `HTTPStatusPolicy`.
public final class HTTPJSONTransport: Transport {
  public let endpoint: URL
  private let session: URLSession
  private let timeout: TimeInterval

  public init(endpoint: URL, timeout: TimeInterval = 15) {
    self.endpoint = endpoint
    self.timeout = timeout
    let configuration = URLSessionConfiguration.ephemeral
    configuration.httpCookieStorage = nil
    configuration.httpShouldSetCookies = false
    configuration.urlCache = nil
    configuration.urlCredentialStorage = nil
    configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
    configuration.timeoutIntervalForRequest = timeout
    session = URLSession(configuration: configuration)
  }

  public func deliver(id: UUID, payload: [UInt8]) -> DeliveryResult {
    var request = URLRequest(url: endpoint, timeoutInterval: timeout)
    request.httpMethod = "POST"
    request.setValue("application/json", forHTTPHeaderField: "Content-Type")
    request.setValue(id.uuidString.lowercased(), forHTTPHeaderField: "Idempotency-Key")
    let text = String(validating: payload, as: UTF8.self)
    let body: [String: String] = [
      "id": id.uuidString.lowercased(), "body": text ?? Data(payload).base64EncodedString(),
      "encoding": text == nil ? "base64" : "utf8",
    ]
    guard let data = try? JSONSerialization.data(withJSONObject: body, options: [.sortedKeys]) else {
      return .reject(kind: "encode")
    }
    request.httpBody = data
    return perform(request)
  }

  func perform(_ request: URLRequest) -> DeliveryResult {
    let done = DispatchSemaphore(value: 0)
    let outcome = Outcome()
    let task = session.dataTask(with: request) { _, response, error in
      if let http = response as? HTTPURLResponse {
        outcome.set(
          HTTPStatusPolicy.result(status: http.statusCode, retryAfter: http.value(forHTTPHeaderField: "Retry-After")))
      } else {
        // Transport errors are named by kind only (URLError code), never with the request.
        outcome.set(.unreachable(kind: "transport-\((error as? URLError)?.code.rawValue ?? -1)"))
      }
      done.signal()
    }
    task.resume()
    if done.wait(timeout: .now() + timeout + 5) == .timedOut {
      task.cancel()
      return .unreachable(kind: "timeout")
    }
    return outcome.value ?? .unreachable(kind: "transport")
  }
}

private final class Outcome: @unchecked Sendable {
  private let lock = NSLock()
  private var result: DeliveryResult?
  func set(_ value: DeliveryResult) { lock.withLock { result = value } }
  var value: DeliveryResult? { lock.withLock { result } }
}
