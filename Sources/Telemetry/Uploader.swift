import Foundation
import Outbox
import VaultCrypto

/// Gives the bearer token for uploads: `BearerTokenProvider` (module Outbox, where `HTTPBodyTransport`
/// takes one too) under the name telemetry has always used.
public typealias TokenProvider = BearerTokenProvider

/// Reads the token from a file each time it is asked (refreshing means reading it again).
public struct TokenFile: TokenProvider {
  public let path: String
  public init(path: String) { self.path = path }

  public func token(refresh: Bool) throws -> String {
    guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
      throw TelemetryError.tokenUnavailable(path: path)
    }
    return text.trimmingCharacters(in: .whitespacesAndNewlines)
  }
}

/// What the server (or the network) said about one batch.
public enum SendResult: Sendable, Equatable {
  case status(Int, retryAfter: String?)
  case transport(kind: String)
}

/// Sends one batch. The real one is `HTTPBatchSender`; tests may script one.
public protocol BatchSender: Sendable {
  func send(_ batch: TelemetryBatch, token: String) -> SendResult
}

/// POSTs gzip JSON batches to `/v1/telemetry/batch` through `HTTPClient` (no redirects, one
/// deadline, bounded responses, nothing kept), with `Content-Type: application/json`,
/// `Content-Encoding: gzip`, `Authorization: Bearer …` and `Idempotency-Key`.
public final class HTTPBatchSender: BatchSender {
  public let endpoint: URL
  private let client: HTTPClient

  /// - Parameters:
  ///   - endpoint: `https://`, or `http://` to a loopback address (see `EndpointPolicy`).
  ///   - timeout: the deadline of one whole exchange.
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
  public init() {}
  public func send(_ batch: TelemetryBatch, token: String) -> SendResult { .transport(kind: "not-sending") }
}

/// Telemetry failures, by kind.
public enum TelemetryError: CodedError, Equatable, CustomStringConvertible {
  case tokenUnavailable(path: String)
  case invalidType
  case invalidPayload
  case netlink(errno: Int32)

  public var description: String {
    switch self {
    case .tokenUnavailable(let path): "cannot read the bearer token from \(path); check the file and its permissions"
    case .invalidType: "an event type must be 1–128 characters"
    case .invalidPayload: "the payload must be a JSON object"
    case .netlink(let code): "cannot watch network changes (rtnetlink: \(String(cString: strerror(code))))"
    }
  }

  public var errorDescription: String? { description }

  public var code: String {
    switch self {
    case .tokenUnavailable: "telemetry.token-unavailable"
    case .invalidType: "telemetry.invalid-type"
    case .invalidPayload: "telemetry.invalid-payload"
    case .netlink: "telemetry.netlink"
    }
  }
}
