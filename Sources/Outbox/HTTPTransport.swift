import Foundation
import Vault

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
    // Encoding holds the text (or its base64), the JSON body while it grows, and the HTTP client's
    // threads start on the first request; a failed allocation traps. A body the address space
    // (`ulimit -v`) cannot hold is not attempted: the record waits, as for an unreachable server,
    // which never counts toward parking.
    guard MemoryHeadroom.available(Self.encodingBytes(payload)) else { return .unreachable(kind: "local-memory") }
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

  /// An upper bound on what `deliver` allocates for `payload`: the larger of its text and base64
  /// forms, three times the largest JSON body it can become (JSONSerialization grows its output by
  /// doubling, so the old and the new buffer coexist), and 16 MiB for the HTTP client's threads.
  /// A JSON string escapes a quote, backslash or slash in 2 bytes and a control character in up to 6.
  static func encodingBytes(_ payload: [UInt8]) -> Int {
    var escaped = 0
    for byte in payload where byte < 0x20 || byte == 0x22 || byte == 0x5c || byte == 0x2f {
      escaped += byte < 0x20 ? 5 : 1
    }
    let base64 = (payload.count + 2) / 3 * 4
    let json = max(payload.count + escaped, base64 + payload.count / 76 * 2) + 256
    return max(payload.count, base64) + 3 * json + (16 << 20)
  }

  func perform(_ request: URLRequest) -> DeliveryResult {
    switch client.send(request) {
    case .status(let status, let retryAfter): HTTPStatusPolicy.result(status: status, retryAfter: retryAfter)
    case .unreachable(let kind): .unreachable(kind: kind)
    }
  }
}
