import Foundation
import Vault

/// Sends each record's payload as the request body exactly as it was queued (an app's own JSON,
/// protobuf, form), with the app's headers, an `Idempotency-Key` (the record id) and, with a token
/// provider, `Authorization: Bearer …`, through `HTTPClient` (no redirects, one deadline, bounded
/// responses, nothing kept, plain HTTP only to loopback and never through a proxy, cancellable).
/// Statuses map through `HTTPStatusPolicy`; a 401 asks the provider for a fresh token and sends
/// once more.
public final class HTTPBodyTransport: SynchronousTransport {
  /// Where every message goes, checked by `EndpointPolicy` when the transport was made.
  public let endpoint: URL
  /// The HTTP method every request uses (`POST` unless the app chose another).
  public let method: String
  private let headers: [(name: String, value: String)]
  private let tokens: (any BearerTokenProvider)?
  private let client: HTTPClient

  /// Headers the transport owns: framing (a second Host or Content-Length would let a proxy and
  /// the server read different requests), or what it sets itself.
  static let reserved: Set<String> = [
    "host", "content-length", "transfer-encoding", "connection", "expect", "te", "upgrade", "trailer",
    "idempotency-key",
  ]

  /// Makes a transport once the endpoint, method and headers pass its checks.
  ///
  /// - Parameters:
  ///   - endpoint: `https://`, or `http://` to a loopback address (see `EndpointPolicy`).
  ///   - method: `POST` by default (`PUT`, `PATCH`: upper-case ASCII letters only).
  ///   - headers: sent with every request, in order (`Content-Type` and the like). Refused: names
  ///     that are empty or hold a colon, space, control character or non-ASCII byte; values with
  ///     CR, LF or another control character (tab allowed); the reserved names (`Host`, `Content-Length`,
  ///     `Transfer-Encoding`, `Connection`, `Expect`, `TE`, `Upgrade`, `Trailer`,
  ///     `Idempotency-Key`), and `Authorization` when `tokens` is given.
  ///   - tokens: gives the bearer token (asked before each request; once more with `refresh: true`
  ///     after a 401). A provider that throws leaves the record waiting (`token-unavailable`, never
  ///     counted toward parking).
  ///   - timeout: the deadline of one whole exchange, in seconds (held to 1 ms … 1 day; NaN is
  ///     30 s). Keep it under half the outbox's lease (60 s with the default lease): a message
  ///     still being sent when its lease ends may be sent again by another deliverer.
  ///   - allowInsecureHTTP: allow `http://` to other hosts (test networks only).
  ///   - certificateAuthorities: a PEM file of the only certificate authorities to trust.
  /// - Throws: `HTTPBodyTransportError` naming the refused part (a header by its position only).
  public init(
    endpoint: URL, method: String = "POST", headers: [(name: String, value: String)] = [],
    tokens: (any BearerTokenProvider)? = nil, timeout: TimeInterval = 15, allowInsecureHTTP: Bool = false,
    certificateAuthorities: String? = nil
  ) throws(HTTPBodyTransportError) {
    do {
      try EndpointPolicy.check(endpoint, allowInsecureHTTP: allowInsecureHTTP)
    } catch {
      throw .endpoint(error)
    }
    guard !method.isEmpty, method.utf8.allSatisfy({ (0x41...0x5a).contains($0) }) else { throw .invalidMethod }
    for (index, header) in headers.enumerated() {
      let name = Array(header.name.utf8)
      guard !name.isEmpty, !name.contains(where: { $0 <= 0x20 || $0 == 0x3a || $0 >= 0x7f }) else {
        throw .invalidHeaderName(index: index)
      }
      guard !header.value.utf8.contains(where: { ($0 < 0x20 && $0 != 0x09) || $0 == 0x7f }) else {
        throw .invalidHeaderValue(index: index)
      }
      let lowered = header.name.lowercased()
      if Self.reserved.contains(lowered) || (tokens != nil && lowered == "authorization") {
        throw .reservedHeader(name: lowered)
      }
    }
    self.endpoint = endpoint
    self.method = method
    self.headers = headers
    self.tokens = tokens
    client = HTTPClient(timeout: timeout, certificateAuthorities: certificateAuthorities)
  }

  /// Sends one message as the request body and maps the answer; after a 401, with a token
  /// provider, asks it for a fresh token and sends once more.
  ///
  /// - Parameters:
  ///   - id: the record's id, sent as `Idempotency-Key`.
  ///   - payload: the body, byte for byte.
  /// - Returns: the result of `HTTPStatusPolicy.result(for:bodyBytes:smallBody:)` (a 413 for a
  ///   body of at most 64 KiB is retried); `.unreachable(kind: "token-unavailable")` when the
  ///   token provider threw, or `"local-memory"` when the address space cannot hold the request,
  ///   both without sending and never counted toward parking.
  public func deliverSynchronously(id: UUID, payload: Data) -> DeliveryResult {
    // The body is one more copy of the payload, and the client needs room of its own (see
    // HTTPJSONTransport.encodingBytes); without it the record waits, never counted toward parking.
    guard MemoryHeadroom.available(payload.count + (16 << 20)) else { return .unreachable(kind: "local-memory") }
    let body = [UInt8](payload)
    var outcome = exchange(id: id, body: body, refresh: false)
    if case .status(401, _) = outcome, tokens != nil {
      outcome = exchange(id: id, body: body, refresh: true)
    }
    guard let outcome else { return .unreachable(kind: "token-unavailable") }
    return HTTPStatusPolicy.result(for: outcome, bodyBytes: body.count)
  }

  /// One request; nil when the token provider failed.
  private func exchange(id: UUID, body: [UInt8], refresh: Bool) -> HTTPOutcome? {
    var fields = headers
    if let tokens {
      guard let token = try? tokens.token(refresh: refresh) else { return nil }
      // A token with a line break in it is refused by HTTPClient (`invalid-header`), never sent.
      if !token.isEmpty { fields.append(("Authorization", "Bearer \(token)")) }
    }
    fields.append(("Idempotency-Key", id.uuidString.lowercased()))
    return client.send(HTTPRequest(url: endpoint, method: method, headers: fields, body: body))
  }
}

/// Why an `HTTPBodyTransport` was refused. A header is named by its position (and a reserved one
/// by its lowercase name), never by its value, which may be a secret.
public enum HTTPBodyTransportError: CodedError, Equatable {
  /// The endpoint was refused by `EndpointPolicy`; its code is the `EndpointError`'s.
  case endpoint(EndpointError)
  /// The method is empty or holds anything but upper-case ASCII letters.
  case invalidMethod
  /// The header at `index` (from 0) has an empty name, or one with a colon, space, control
  /// character or non-ASCII byte.
  case invalidHeaderName(index: Int)
  /// The header at `index` (from 0) has CR, LF or another control character (tab aside) in its value.
  case invalidHeaderValue(index: Int)
  /// A header the transport sets itself or that frames the request (`name` in lowercase), or
  /// `authorization` when a token provider is given.
  case reservedHeader(name: String)

  /// `http-body.` and the case in kebab case, or the endpoint error's code: stable across releases.
  public var code: String {
    switch self {
    case .endpoint(let error): error.code
    case .invalidMethod: "http-body.invalid-method"
    case .invalidHeaderName: "http-body.invalid-header-name"
    case .invalidHeaderValue: "http-body.invalid-header-value"
    case .reservedHeader: "http-body.reserved-header"
    }
  }

  /// A sentence naming what was refused (a header by its position, counted from 1), never a value.
  public var description: String {
    switch self {
    case .endpoint(let error): error.description
    case .invalidMethod: "the HTTP method must be upper-case letters (POST, PUT, …)"
    case .invalidHeaderName(let index):
      "header \(index + 1) has an invalid name (empty, or a colon, space or control character in it)"
    case .invalidHeaderValue(let index):
      "header \(index + 1) has a line break or another control character in its value"
    case .reservedHeader(let name):
      "the header \(name) is set by the transport (framing, the idempotency key, or the token) and cannot be given"
    }
  }
}
