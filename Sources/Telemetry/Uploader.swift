import Foundation
import Outbox

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif

/// Gives the bearer token for uploads. The app implements it; `refresh: true` is asked once after
/// the server answers 401.
public protocol TokenProvider: Sendable {
  func token(refresh: Bool) throws -> String
}

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

/// POSTs gzip JSON batches to `/v1/telemetry/batch` over an ephemeral URLSession (no cookies, no
/// URL cache, no credential storage), with `Content-Type: application/json`,
/// `Content-Encoding: gzip`, `Authorization: Bearer …` and `Idempotency-Key`.
public final class HTTPBatchSender: BatchSender {
  public let endpoint: URL
  private let client: EphemeralHTTPClient

  public init(endpoint: URL, timeout: TimeInterval = 20) {
    self.endpoint = endpoint
    client = EphemeralHTTPClient(timeout: timeout)
  }

  public func send(_ batch: TelemetryBatch, token: String) -> SendResult {
    var request = URLRequest(url: endpoint, timeoutInterval: client.timeout)
    request.httpMethod = "POST"
    request.setValue("application/json", forHTTPHeaderField: "Content-Type")
    request.setValue("gzip", forHTTPHeaderField: "Content-Encoding")
    if !token.isEmpty { request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
    request.setValue(batch.idempotencyKey, forHTTPHeaderField: "Idempotency-Key")
    request.httpBody = Data(batch.body)
    switch client.send(request) {
    case .status(let status, let retryAfter): return .status(status, retryAfter: retryAfter)
    case .unreachable(let kind): return .transport(kind: kind)
    }
  }
}

/// Telemetry failures, by kind.
public enum TelemetryError: Error, Equatable, Sendable, CustomStringConvertible {
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
}
