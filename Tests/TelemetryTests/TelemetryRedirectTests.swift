import Foundation
import Outbox
import Telemetry
import Vault
import VaultKeys
import VaultQueue
import VaultTestSupport
import XCTest

/// URLSession followed redirects: a 307 to another host received the bearer token and the batch,
/// 301/302/303 turned the POST into a GET, and in every case the events were acked and deleted
/// though nobody had them. Now a 3xx is a failure of its own kind and the token stays home.
final class TelemetryRedirectTests: XCTestCase {
  func testAFlushAnsweredWithARedirectAcksNothingAndSendsNothingElsewhere() throws {
    let temporary = TemporaryDirectory()
    let vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(InMemoryKeyStore()))
    let container = try QueueContainer(path: temporary.sub("home/queue.sqlite"), vault: vault)
    let elsewhere = try HostileServer(directory: temporary.path, mode: "ok", root: packageRoot())
    defer { elsewhere.stop() }
    for code in [301, 302, 303, 307, 308] {
      let redirector = try HostileServer(
        directory: temporary.path, mode: "redirect-\(code)", redirectTo: elsewhere.url("/steal").absoluteString,
        root: packageRoot())
      defer { redirector.stop() }
      let telemetry = Telemetry(
        container: container, tokens: StaticTokens(),
        sender: try HTTPBatchSender(endpoint: redirector.url("/v1/telemetry/batch"), timeout: 5))
      let id = try telemetry.log(type: "tap", payload: ["n": .string("\(code)")])
      let report = try telemetry.flush()
      XCTAssertEqual(report.delivered, 0, "\(code)")
      XCTAssertEqual(report.rejected, 1, "\(code): the event waits in review, never acked")
      let kept = try container.list(queue: Telemetry.queueName).first { $0.id == id }
      XCTAssertEqual(kept?.state, .review, "\(code)")
      XCTAssertEqual(kept?.errorKind, "http-\(code)-redirect-refused", "\(code)")
      XCTAssertEqual(redirector.requests.map(\.authorization), [true], "\(code): the token went only here")
    }
    XCTAssertTrue(elsewhere.requests.isEmpty, "nothing, and no token, reached the redirect's target")
  }
}
