import Foundation
import Outbox
import XCTest

/// Hands out "tok-N", N the number of refreshes so far.
final class RefreshingTokens: BearerTokenProvider, @unchecked Sendable {
  private let lock = NSLock()
  private var refreshes = 0
  func token(refresh: Bool) throws -> String {
    lock.withLock {
      if refresh { refreshes += 1 }
      return "tok-\(refreshes)"
    }
  }
}

struct NoToken: BearerTokenProvider {
  struct Unavailable: Error {}
  func token(refresh: Bool) throws -> String { throw Unavailable() }
}

/// The transport for an app's own body, against a real server on loopback.
final class HTTPBodyTransportTests: XCTestCase {
  /// The body arrives byte for byte as queued, with the app's headers, the record id as
  /// Idempotency-Key and the token; a 401 is answered with a fresh token once.
  func testThePayloadIsTheBodyByteForByteWithTheAppsHeaders() throws {
    let server = try LoopbackHTTPServer([.init(status: 401)])
    defer { server.stop() }
    let transport = try HTTPBodyTransport(
      endpoint: server.url("/ingest"), method: "PUT",
      headers: [("Content-Type", "application/x-protobuf"), ("X-App-Version", "7\t(build 3)")],
      tokens: RefreshingTokens(), timeout: 5)
    let payload = Data([0x00, 0x0a, 0x0d, 0xff, 0x7b] + Array("{\"not\":\"wrapped\"}".utf8) + [0x00])
    let id = UUID()
    XCTAssertEqual(transport.deliverSynchronously(id: id, payload: payload), .delivered)
    let requests = server.requests
    XCTAssertEqual(requests.count, 2)
    for request in requests {
      XCTAssertEqual(request.method, "PUT")
      XCTAssertEqual(request.target, "/ingest")
      XCTAssertEqual(request.body, [UInt8](payload), "exactly the payload, nothing wrapped or re-encoded")
      XCTAssertEqual(request.header("Content-Type"), "application/x-protobuf")
      XCTAssertEqual(request.header("X-App-Version"), "7\t(build 3)")
      XCTAssertEqual(request.header("Content-Length"), String(payload.count))
      XCTAssertEqual(request.header("Idempotency-Key"), id.uuidString.lowercased())
    }
    XCTAssertEqual(requests.map { $0.header("Authorization") }, ["Bearer tok-0", "Bearer tok-1"])
  }

  /// The async face of the same transport, and statuses by the shared policy.
  func testStatusesMapAsForTheJSONTransportThroughTheAsyncFace() async throws {
    let server = try LoopbackHTTPServer([
      .init(status: 503, headers: [("Retry-After", "4")]), .init(status: 422),
      .init(status: 308, headers: [("Location", "/x")]),
    ])
    defer { server.stop() }
    let transport: any Transport = try HTTPBodyTransport(endpoint: server.url(), timeout: 5)
    let first = await transport.deliver(id: UUID(), payload: Data("a".utf8))
    XCTAssertEqual(first, .retry(kind: "http-503", after: 4))
    let second = await transport.deliver(id: UUID(), payload: Data("b".utf8))
    XCTAssertEqual(second, .reject(kind: "http-422"))
    let third = await transport.deliver(id: UUID(), payload: Data("c".utf8))
    XCTAssertEqual(third, .reject(kind: "http-308-redirect-refused"))
    XCTAssertEqual(server.requests.count, 3, "the redirect was not followed")
    XCTAssertNil(server.requests[0].header("Authorization"), "no token provider, no Authorization")
  }

  /// A provider that fails leaves the record waiting without counting toward parking.
  func testATokenProviderThatFailsLeavesTheRecordWaiting() throws {
    let server = try LoopbackHTTPServer()
    defer { server.stop() }
    let transport = try HTTPBodyTransport(endpoint: server.url(), tokens: NoToken(), timeout: 5)
    XCTAssertEqual(
      transport.deliverSynchronously(id: UUID(), payload: Data("x".utf8)), .unreachable(kind: "token-unavailable"))
    XCTAssertTrue(server.requests.isEmpty)
  }

  /// Header injection and framing overrides are refused when the transport is built; the error
  /// names the header's position, never its value.
  func testHeadersThatCouldInjectOrReframeAreRefused() {
    let url = URL(string: "https://collector.example/ingest")!
    func refusal(_ headers: [(name: String, value: String)], tokens: (any BearerTokenProvider)? = nil)
      -> HTTPBodyTransportError?
    {
      do {
        _ = try HTTPBodyTransport(endpoint: url, headers: headers, tokens: tokens)
        return nil
      } catch {
        return error
      }
    }
    XCTAssertEqual(
      refusal([("Content-Type", "text/plain"), ("X-Key", "SECRET\r\nX-Injected: 1")]), .invalidHeaderValue(index: 1))
    XCTAssertEqual(refusal([("X-Key", "SECRET\nmore")]), .invalidHeaderValue(index: 0))
    XCTAssertEqual(refusal([("X-Bad\r\nX-Injected", "1")]), .invalidHeaderName(index: 0))
    XCTAssertEqual(refusal([("X Bad", "1")]), .invalidHeaderName(index: 0))
    XCTAssertEqual(refusal([("", "1")]), .invalidHeaderName(index: 0))
    XCTAssertEqual(refusal([("Host", "elsewhere.example")]), .reservedHeader(name: "host"))
    XCTAssertEqual(refusal([("content-length", "0")]), .reservedHeader(name: "content-length"))
    XCTAssertEqual(refusal([("Transfer-Encoding", "chunked")]), .reservedHeader(name: "transfer-encoding"))
    XCTAssertEqual(refusal([("Idempotency-Key", "mine")]), .reservedHeader(name: "idempotency-key"))
    XCTAssertEqual(
      refusal([("Authorization", "Basic x")], tokens: RefreshingTokens()), .reservedHeader(name: "authorization"))
    XCTAssertNil(refusal([("Authorization", "Basic x")]), "without a provider the app may authorize itself")
    XCTAssertNil(refusal([("Content-Type", "application/json; charset=utf-8")]))
    let error = refusal([("X-Key", "SECRET\r\n")])
    XCTAssertFalse(error?.errorDescription?.contains("SECRET") ?? true)
    XCTAssertEqual(error?.code, "http-body.invalid-header-value")
  }

  /// The endpoint rules of every transport: plain HTTP only to loopback, no credentials in the URL.
  func testTheEndpointRulesHold() {
    XCTAssertThrowsError(try HTTPBodyTransport(endpoint: URL(string: "http://10.1.2.3/ingest")!)) {
      XCTAssertEqual($0 as? HTTPBodyTransportError, .endpoint(.insecureHTTP))
    }
    XCTAssertThrowsError(try HTTPBodyTransport(endpoint: URL(string: "https://u:p@collector.example/")!)) {
      XCTAssertEqual(($0 as? HTTPBodyTransportError)?.code, "endpoint.credentials-in-url")
    }
    XCTAssertThrowsError(try HTTPBodyTransport(endpoint: URL(string: "https://collector.example/")!, method: "P OST"))
    XCTAssertNoThrow(try HTTPBodyTransport(endpoint: URL(string: "http://10.1.2.3/ingest")!, allowInsecureHTTP: true))
  }
}

/// Every public error of Outbox has a stable code and reads as the CLI prints it.
final class OutboxErrorTests: XCTestCase {
  func testErrorsHaveStableCodesAndTheirDescriptionAsText() {
    let all: [EndpointError] = [.unsupportedScheme, .noHost, .credentialsInURL, .insecureHTTP]
    XCTAssertEqual(
      all.map(\.code),
      ["endpoint.unsupported-scheme", "endpoint.no-host", "endpoint.credentials-in-url", "endpoint.insecure-http"])
    for error in all {
      XCTAssertEqual(error.errorDescription, error.description)
      XCTAssertEqual((error as any Error).localizedDescription, error.description)
      XCTAssertFalse(error.description.contains("run `"), "no command-line advice: \(error)")
    }
    let header = HTTPBodyTransportError.reservedHeader(name: "host")
    XCTAssertEqual((header as any Error).localizedDescription, header.errorDescription)
  }
}
