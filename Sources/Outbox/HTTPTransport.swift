import Foundation
import Vault

/// POSTs each message as JSON `{"id": "<uuid>", "body": "<UTF-8 text, or base64 when not text>",
/// "encoding": "utf8"|"base64"}` to `endpoint` through `HTTPClient` (no redirects, one deadline,
/// bounded responses, nothing kept), and maps the status with `HTTPStatusPolicy`.
public final class HTTPJSONTransport: SynchronousTransport {
  /// Where every message is POSTed, checked by `EndpointPolicy` when the transport was made.
  public let endpoint: URL
  private let client: HTTPClient

  /// Makes a transport to `endpoint` once `EndpointPolicy` accepts it.
  ///
  /// - Parameters:
  ///   - endpoint: `https://`, or `http://` to a loopback address (see `EndpointPolicy`).
  ///   - timeout: the deadline of one whole exchange, in seconds (held to 1 ms … 1 day; NaN is
  ///     30 s). Keep it under half the outbox's lease (60 s with the default lease): a message
  ///     still being sent when its lease ends may be sent again by another deliverer.
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

  /// POSTs one message as JSON with `Idempotency-Key: <id>` and maps the answer.
  ///
  /// - Parameters:
  ///   - id: the record's id: the JSON's `id` and the idempotency key.
  ///   - data: the message, sent as UTF-8 text when it is valid UTF-8, else as base64.
  /// - Returns: the result of `HTTPStatusPolicy.result(for:bodyBytes:smallBody:)`, or
  ///   `.unreachable(kind: "local-memory")`, without sending, when the address space cannot hold
  ///   the request (never counted toward parking).
  public func deliverSynchronously(id: UUID, payload data: Data) -> DeliveryResult {
    // Encoding holds a copy of the payload, the base64 form (for binary payloads) and the JSON
    // body; a failed allocation traps. A body the address space (`ulimit -v`) cannot hold is not
    // attempted: the record waits, as for an unreachable server, which never counts toward parking.
    guard MemoryHeadroom.available(data.count) else { return .unreachable(kind: "local-memory") }
    let payload = [UInt8](data)
    // One scan of the payload decides text or base64, for the bound and for the body alike.
    let text = Self.isText(payload)
    guard MemoryHeadroom.available(Self.encodingBytes(payload, isText: text)) else {
      return .unreachable(kind: "local-memory")
    }
    let request = HTTPRequest(
      url: endpoint,
      headers: [("Content-Type", "application/json"), ("Idempotency-Key", id.uuidString.lowercased())],
      body: Self.body(id: id, payload: payload, isText: text))
    return HTTPStatusPolicy.result(
      for: client.send(request), bodyBytes: request.body.count, smallBody: Self.smallBody)
  }

  /// A body at most this large refused with 413 is the server's fault, not the message's (64 KiB,
  /// as for a telemetry event alone in a batch).
  static let smallBody = 64 * 1024

  /// `{"body":…,"encoding":"utf8"|"base64","id":"…"}`, written straight into one buffer of the
  /// right size (JSONSerialization grew its output by doubling and its result was copied again).
  static func body(id: UUID, payload: [UInt8], isText text: Bool) -> [UInt8] {
    let content = text ? payload : Array(Data(payload).base64EncodedData())
    var json: [UInt8] = []
    json.reserveCapacity(escapedCount(content) + 96)
    json += Array(#"{"body":""#.utf8)
    appendEscaped(content, to: &json)
    json += Array(#"","encoding":""#.utf8) + Array((text ? "utf8" : "base64").utf8)
    json += Array(#"","id":""#.utf8) + Array(id.uuidString.lowercased().utf8) + Array(#""}"#.utf8)
    return json
  }

  /// A JSON string's content: `"` and `\` escaped, control characters as `\u00XX`, the rest
  /// (valid UTF-8) as it is.
  static func appendEscaped(_ bytes: [UInt8], to json: inout [UInt8]) {
    let hex = Array("0123456789abcdef".utf8)
    for byte in bytes {
      switch byte {
      case 0x22, 0x5c: json += [0x5c, byte]
      case 0..<0x20: json += [0x5c, 0x75, 0x30, 0x30, hex[Int(byte >> 4)], hex[Int(byte & 0xf)]]
      default: json.append(byte)
      }
    }
  }

  static func escapedCount(_ bytes: [UInt8]) -> Int {
    var count = bytes.count
    for byte in bytes where byte < 0x20 || byte == 0x22 || byte == 0x5c { count += byte < 0x20 ? 5 : 1 }
    return count
  }

  /// True when `bytes` are valid UTF-8 (checked without building a String).
  static func isText(_ bytes: [UInt8]) -> Bool {
    var decoder = UTF8()
    var iterator = bytes.makeIterator()
    while true {
      switch decoder.decode(&iterator) {
      case .scalarValue: continue
      case .emptyInput: return true
      case .error: return false
      }
    }
  }

  /// An upper bound on what `deliver` allocates for `payload`, beyond the payload itself: the
  /// JSON body of a text payload (sized exactly, once); for a binary one, Foundation's copy, its
  /// base64 form twice (Data, then bytes) and the body; and 16 MiB for the HTTP client (libcurl,
  /// OpenSSL's TLS state, a resolver thread).
  static func encodingBytes(_ payload: [UInt8], isText: Bool) -> Int {
    let body = isText ? escapedCount(payload) : payload.count + 3 * ((payload.count + 2) / 3 * 4)
    return body + 96 + (16 << 20)
  }
}
