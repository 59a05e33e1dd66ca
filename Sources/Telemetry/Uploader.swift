import Foundation
import Outbox
import VaultCrypto

/// Gives the bearer token for uploads: `BearerTokenProvider` (module Outbox, where `HTTPBodyTransport`
/// takes one too) under the name telemetry has always used.
public typealias TokenProvider = BearerTokenProvider

/// Reads the token from a file each time it is asked (refreshing means reading it again).
public struct TokenFile: TokenProvider {
  /// The file holding the token (surrounding whitespace and newlines are trimmed off).
  public let path: String
  /// Makes a provider that reads `path` on every request for a token.
  ///
  /// - Parameter path: the token file; it need not exist yet.
  public init(path: String) { self.path = path }

  /// Reads the file again; `refresh` changes nothing, since every call reads it.
  ///
  /// - Parameter refresh: true after a 401 (ignored: the file is always read afresh).
  /// - Returns: the file's text, trimmed of whitespace and newlines.
  /// - Throws: `TelemetryError.tokenUnavailable` when the file cannot be read as UTF-8, and
  ///   `TelemetryError.tokenMalformed` when it holds no token, or more than one line or word (a
  ///   local mistake that retrying would only repeat).
  public func token(refresh: Bool) throws -> String {
    guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
      throw TelemetryError.tokenUnavailable(path: path)
    }
    let token = text.trimmingCharacters(in: .whitespacesAndNewlines)
    // One token on one line: no inner whitespace or control characters (they cannot go in a header).
    guard !token.isEmpty,
      !token.unicodeScalars.contains(where: {
        $0.properties.isWhitespace || $0.properties.generalCategory == .control
      })
    else { throw TelemetryError.tokenMalformed(path: path) }
    return token
  }
}

/// What the server (or the network) said about one batch.
public enum SendResult: Sendable, Equatable {
  /// The server answered: its status and raw Retry-After header (a redirect comes back as its 3xx).
  case status(Int, retryAfter: String?)
  /// No answer; `kind` names why (`connection-refused`, `timed-out`, `not-sending`, …). Never
  /// counts toward
  /// parking.
  case transport(kind: String)
}

/// Sends one batch. The real one is `HTTPBatchSender`; tests may script one.
public protocol BatchSender: Sendable {
  /// Sends `batch` once and reports the answer; blocks until there is one. Must not log or keep
  /// the body or the token.
  ///
  /// - Parameters:
  ///   - batch: the gzip body and the ids it carries (`idempotencyKey` for the header).
  ///   - token: the bearer token; empty when the provider gave none.
  /// - Returns: the status, or the kind of network failure.
  func send(_ batch: TelemetryBatch, token: String) -> SendResult
}

/// POSTs gzip JSON batches to `endpoint`, exactly as given (by convention
/// `https://collector/v1/telemetry/batch`), through `HTTPClient` (no redirects, one deadline,
/// bounded responses, nothing kept), with `Content-Type: application/json`,
/// `Content-Encoding: gzip`, `Authorization: Bearer …` (when the token is not empty) and
/// `Idempotency-Key`.
public final class HTTPBatchSender: BatchSender {
  /// Where batches are POSTed, checked by `EndpointPolicy` when the sender was made.
  public let endpoint: URL
  private let client: HTTPClient

  /// Makes a sender to `endpoint` once `EndpointPolicy` accepts it.
  ///
  /// - Parameters:
  ///   - endpoint: `https://`, or `http://` to a loopback address (see `EndpointPolicy`).
  ///   - timeout: the deadline of one whole exchange, in seconds (held to 1 ms … 1 day; NaN is
  ///     30 s). Keep it under half telemetry's lease on a batch (300 s), 150 s: a batch
  ///     still being sent when its lease ends may be sent again by another deliverer.
  ///   - allowInsecureHTTP: allow `http://` to other hosts (test networks only).
  ///   - certificateAuthorities: a PEM file of the only certificate authorities to trust.
  /// - Throws: `EndpointError` when the endpoint is refused.
  public init(
    endpoint: URL, timeout: TimeInterval = 20, allowInsecureHTTP: Bool = false, certificateAuthorities: String? = nil
  ) throws(EndpointError) {
    try EndpointPolicy.check(endpoint, allowInsecureHTTP: allowInsecureHTTP)
    self.endpoint = endpoint
    client = HTTPClient(timeout: timeout, certificateAuthorities: certificateAuthorities)
  }

  /// POSTs the batch with its headers and reports the answer.
  ///
  /// - Parameters:
  ///   - batch: the gzip body and its ids.
  ///   - token: the bearer token; no `Authorization` header when it is empty.
  /// - Returns: the status, or `.transport` with `HTTPClient`'s failure kind.
  public func send(_ batch: TelemetryBatch, token: String) -> SendResult {
    var headers: [(name: String, value: String)] = [("Content-Type", "application/json"), ("Content-Encoding", "gzip")]
    if !token.isEmpty { headers.append(("Authorization", "Bearer \(token)")) }
    headers.append(("Idempotency-Key", batch.idempotencyKey))
    switch client.send(HTTPRequest(url: endpoint, headers: headers, body: batch.body)) {
    case .status(let status, let retryAfter): return .status(status, retryAfter: retryAfter)
    case .unreachable(let kind): return .transport(kind: kind)
    }
  }
}

/// For processes that only log: a sender that never sends (each attempt is "unreachable", which
/// never counts toward parking).
public struct NoBatchSender: BatchSender {
  /// Makes a sender that never sends.
  public init() {}
  /// Sends nothing.
  ///
  /// - Parameters:
  ///   - batch: ignored.
  ///   - token: ignored.
  /// - Returns: `.transport(kind: "not-sending")`, so the events wait.
  public func send(_ batch: TelemetryBatch, token: String) -> SendResult { .transport(kind: "not-sending") }
}

/// Telemetry failures, by kind.
public enum TelemetryError: CodedError, Equatable, CustomStringConvertible {
  /// `TokenFile` could not read its file (missing, unreadable, not UTF-8).
  case tokenUnavailable(path: String)
  /// `TokenFile`'s file holds no token, or more than one line or word.
  case tokenMalformed(path: String)
  /// An event type that is empty or longer than 128 characters.
  case invalidType
  /// An `Encodable` payload that does not encode to a JSON object.
  case invalidPayload
  /// A payload whose arrays and objects nest deeper than `limit` levels (the payload object itself
  /// is level 1), as `JSONLimits.maxDepth` refuses in parsed JSON; nothing was stored.
  case payloadTooDeep(limit: Int)
  /// The rtnetlink socket (or its wake-up eventfd) could not be opened or bound; `errno` says why.
  case netlink(errno: Int32)

  /// A sentence naming what failed and what to check; never a token or a payload.
  public var description: String {
    switch self {
    case .tokenUnavailable(let path): "cannot read the bearer token from \(path); check the file and its permissions"
    case .tokenMalformed(let path):
      "the token file \(path) must hold one bearer token on one line (it is empty, or holds spaces, several lines "
        + "or control characters); nothing was sent"
    case .invalidType: "an event type must be 1–128 characters, without control characters"
    case .invalidPayload: "the payload must be a JSON object"
    case .payloadTooDeep(let limit):
      "the payload nests arrays and objects more than \(limit) levels deep; nothing was stored"
    case .netlink(let code): "cannot watch network changes (rtnetlink: \(String(cString: strerror(code))))"
    }
  }

  /// The same as `description`, for `localizedDescription`.
  public var errorDescription: String? { description }

  /// `telemetry.` and the case in kebab case: stable across releases.
  public var code: String {
    switch self {
    case .tokenUnavailable: "telemetry.token-unavailable"
    case .tokenMalformed: "telemetry.token-malformed"
    case .invalidType: "telemetry.invalid-type"
    case .invalidPayload: "telemetry.invalid-payload"
    case .payloadTooDeep: "telemetry.payload-too-deep"
    case .netlink: "telemetry.netlink"
    }
  }
}
