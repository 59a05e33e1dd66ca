import Foundation
import Vault

/// POSTs each message as JSON `{"id": "<uuid>", "body": "<UTF-8 text, or base64 when not text>",
/// "encoding": "utf8"|"base64"}` to `endpoint` through `HTTPClient` (no redirects, one deadline,
/// bounded responses, nothing kept), and maps the status with `HTTPStatusPolicy`.
public final class HTTPJSONTransport: Transport {
  public let endpoint: URL
  private let client: HTTPClient

  /// - Parameters:
  ///   - endpoint: `https://`, or `http://` to a loopback address (see `EndpointPolicy`).
  ///   - timeout: the deadline of one whole exchange.
  ///   - allowInsecureHTTP: allow `http://` to other hosts (test networks only).
  ///   - certificateAuthorities: a PEM file of the only certificate authorities to trust.
  /// - Throws: `EndpointError` when the endpoint is refused.
  public init(
    endpoint: URL, timeout: TimeInterval = 15, allowInsecureHTTP: Bool = false, certificateAuthorities: String? = nil
  ) throws(EndpointError) {
    try EndpointPolicy.check(endpoint, allowInsecureHTTP: allowInsecureHTTP)
    self.endpoint = endpoint
    client = HTTPClient(timeout: timeout, certificateAuthorities: certificateAuthorities)
  }

  public func deliver(id: UUID, payload: [UInt8]) -> DeliveryResult {
    // Encoding holds the text (or its base64) and the JSON body while it grows; a failed
    // allocation traps. A body the address space (`ulimit -v`) cannot hold is not attempted: the
    // record waits, as for an unreachable server, which never counts toward parking.
    guard MemoryHeadroom.available(Self.encodingBytes(payload)) else { return .unreachable(kind: "local-memory") }
    let text = String(validating: payload, as: UTF8.self)
    let body: [String: String] = [
      "id": id.uuidString.lowercased(), "body": text ?? Data(payload).base64EncodedString(),
      "encoding": text == nil ? "base64" : "utf8",
    ]
    guard let data = try? JSONSerialization.data(withJSONObject: body, options: [.sortedKeys]) else {
      return .reject(kind: "encode")
    }
    let request = HTTPRequest(
      url: endpoint,
      headers: [("Content-Type", "application/json"), ("Idempotency-Key", id.uuidString.lowercased())],
      body: Array(data))
    switch client.send(request) {
    case .status(let status, let retryAfter): return HTTPStatusPolicy.result(status: status, retryAfter: retryAfter)
    case .unreachable(let kind): return .unreachable(kind: kind)
    }
  }

  /// An upper bound on what `deliver` allocates for `payload`: the larger of its text and base64
  /// forms, three times the largest JSON body it can become (JSONSerialization grows its output by
  /// doubling, so the old and the new buffer coexist) plus its copy handed to the client, and
  /// 16 MiB for the HTTP client (libcurl, OpenSSL's TLS state, a resolver thread).
  /// A JSON string escapes a quote, backslash or slash in 2 bytes and a control character in up to 6.
  static func encodingBytes(_ payload: [UInt8]) -> Int {
    var escaped = 0
    for byte in payload where byte < 0x20 || byte == 0x22 || byte == 0x5c || byte == 0x2f {
      escaped += byte < 0x20 ? 5 : 1
    }
    let base64 = (payload.count + 2) / 3 * 4
    let json = max(payload.count + escaped, base64 + payload.count / 76 * 2) + 256
    return max(payload.count, base64) + 4 * json + (16 << 20)
  }
}
