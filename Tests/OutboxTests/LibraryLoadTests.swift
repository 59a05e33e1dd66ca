import Foundation
import VaultTestSupport
import XCTest

@testable import Outbox

/// libcurl is loaded with dlopen on first use (Sources/CCurl, Sources/CDynamicLibrary). Run alone
/// (`tools/test.sh LibraryLoadTests`, or under `tools/sanitize.sh thread LibraryLoadTests`) this is
/// that first use, from many threads at once.
final class LibraryLoadTests: XCTestCase {
  func testFirstUseFromManyThreadsLoadsLibcurlOnceAndEveryThreadCanSend() throws {
    let server = try LoopbackHTTPServer(otherwise: .init(status: 204))
    defer { server.stop() }
    let url = URL(string: "http://127.0.0.1:\(server.port)/load")!
    let start = DispatchSemaphore(value: 0)
    let done = DispatchGroup()
    let results = Results()
    for _ in 0..<8 {
      done.enter()
      Thread.detachNewThread {
        start.wait()
        // Each asks whether libcurl loads, then sends: whichever comes first loads it.
        let reason = HTTPClient.unavailableReason
        let outcome = HTTPClient(timeout: 10).send(HTTPRequest(url: url, body: Array("x".utf8)))
        results.append("\(reason ?? "loaded") \(outcome)")
        done.leave()
      }
    }
    for _ in 0..<8 { start.signal() }
    XCTAssertEqual(done.wait(timeout: .now() + 60), .success)
    let seen = results.lines
    XCTAssertEqual(seen.count, 8)
    for line in seen { XCTAssertEqual(line, "loaded status(204, retryAfter: nil)") }
    XCTAssertEqual(HTTPClient.unavailableReason, nil)
  }
}

/// What each thread saw, behind a lock.
private final class Results: @unchecked Sendable {
  private let lock = NSLock()
  private var kept: [String] = []

  func append(_ line: String) { lock.withLock { kept.append(line) } }
  var lines: [String] { lock.withLock { kept } }
}
