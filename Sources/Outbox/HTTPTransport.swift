import Foundation

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif

/// POSTs each message as JSON `{"id": "<uuid>", "body": "<UTF-8 text, or base64 when not text>",
/// "encoding": "utf8"|"base64"}` to `endpoint`, over an ephemeral session (no cookies, no cache,
/// no stored credentials), and maps the status with `HTTPStatusPolicy`.
public final class HTTPJSONTransport: Transport {
  public let endpoint: URL
  private let client: EphemeralHTTPClient

  public init(endpoint: URL, timeout: TimeInterval = 15) {
    self.endpoint = endpoint
    client = EphemeralHTTPClient(timeout: timeout)
  }

  public func deliver(id: UUID, payload: [UInt8]) -> DeliveryResult {
    var request = URLRequest(url: endpoint, timeoutInterval: client.timeout)
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
    switch client.send(request) {
    case .status(let status, let retryAfter): HTTPStatusPolicy.result(status: status, retryAfter: retryAfter)
    case .unreachable(let kind): .unreachable(kind: kind)
    }
  }
}
