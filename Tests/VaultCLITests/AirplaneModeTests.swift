import Foundation
import VaultTestSupport
import XCTest

/// Airplane mode for real: the client runs in a network namespace whose real link is down (and
/// whose bridge, like docker0 on a laptop, is up all along); the mock telemetry server runs in
/// another namespace, reachable through a veth pair once the link is up. Events logged offline survive a SIGKILL of the delivering process and arrive soon after the
/// link returns, driven by the rtnetlink connectivity monitor.
final class AirplaneModeTests: XCTestCase {
  let suffix = String(UUID().uuidString.lowercased().prefix(6))
  var clientNamespace: String { "vtc-\(suffix)" }
  var serverNamespace: String { "vts-\(suffix)" }
  var temporary: TemporaryDirectory!
  let ip = FileManager.default.fileExists(atPath: "/usr/sbin/ip") ? "/usr/sbin/ip" : "/sbin/ip"

  override func setUpWithError() throws {
    try XCTSkipUnless(geteuid() == 0, "network namespaces need root (CI runs as root)")
    temporary = TemporaryDirectory()
  }

  override func tearDown() {
    if temporary != nil {
      _ = try? Spawn.run(ip, ["netns", "del", clientNamespace])
      _ = try? Spawn.run(ip, ["netns", "del", serverNamespace])
    }
    temporary = nil
  }

  private func sh(_ arguments: [String]) throws {
    let result = try Spawn.run(ip, arguments)
    XCTAssertEqual(result.status, 0, "ip \(arguments.joined(separator: " ")): \(result.error)")
  }

  private func inClient(_ arguments: [String]) throws -> Child {
    try Spawn.start(ip, ["netns", "exec", clientNamespace, vaultBinary()] + arguments)
  }

  func testEventsLoggedOfflineArriveSoonAfterTheLinkReturns() throws {
    let clientLink = "vc-\(suffix)"
    let serverLink = "vs-\(suffix)"
    try sh(["netns", "add", clientNamespace])
    try sh(["netns", "add", serverNamespace])
    try sh(["link", "add", clientLink, "type", "veth", "peer", "name", serverLink])
    try sh(["link", "set", clientLink, "netns", clientNamespace])
    try sh(["link", "set", serverLink, "netns", serverNamespace])
    try sh(["-n", serverNamespace, "addr", "add", "10.213.7.1/24", "dev", serverLink])
    try sh(["-n", serverNamespace, "link", "set", serverLink, "up"])
    try sh(["-n", serverNamespace, "link", "set", "lo", "up"])
    try sh(["-n", clientNamespace, "addr", "add", "10.213.7.2/24", "dev", clientLink])
    try sh(["-n", clientNamespace, "link", "set", "lo", "up"])
    // A bridge with an address and a port (as docker0 or virbr0 on a laptop with a container
    // running): a route that is up but leads nowhere. It must not hide the real link's return.
    try sh(["-n", clientNamespace, "link", "add", "br-x", "type", "bridge"])
    try sh(["-n", clientNamespace, "link", "add", "bx-a", "type", "veth", "peer", "name", "bx-b"])
    try sh(["-n", clientNamespace, "link", "set", "bx-a", "master", "br-x"])
    try sh(["-n", clientNamespace, "link", "set", "bx-a", "up"])
    try sh(["-n", clientNamespace, "link", "set", "bx-b", "up"])
    try sh(["-n", clientNamespace, "addr", "add", "10.99.7.1/24", "dev", "br-x"])
    try sh(["-n", clientNamespace, "link", "set", "br-x", "up"])
    // The client's real link stays down: airplane mode.

    let server = try TelemetryServer(
      directory: temporary.path, host: "10.213.7.1", root: packageRoot(),
      launcher: [ip, "netns", "exec", serverNamespace])
    defer { server.stop() }
    let home = temporary.sub("home")
    XCTAssertEqual(
      try vault(["--home", home, "init", "--store", "keyfile", "--keyfile", temporary.sub("k/k.keys")]).status, 0)
    let token = temporary.sub("token")
    try "test-token".write(toFile: token, atomically: true, encoding: .utf8)

    var ids: [String] = []
    for i in 0..<30 {
      let logged = try inClient(["--home", home, "telemetry", "log", "offline_event", "--payload", "{\"n\": \(i)}"])
        .finish()
      XCTAssertEqual(logged.status, 0, logged.error)
      ids.append(String(logged.outputText.dropFirst("logged ".count).prefix(36)))
    }
    let watch = [
      "--home", home, "telemetry", "watch", "--endpoint", server.endpoint.absoluteString, "--token-file", token,
      // Plain HTTP between two network namespaces: a test network, on purpose.
      "--allow-insecure-http",
    ]
    let first = try inClient(watch + ["--interval", "600"])
    Thread.sleep(forTimeInterval: 1.0)
    first.kill(SIGKILL)
    XCTAssertEqual(first.finish().status, 128 + SIGKILL)
    XCTAssertEqual(server.received.count, 0, "nothing could be sent while offline")

    let second = try inClient(watch + ["--interval", "600"])
    defer {
      second.kill(SIGKILL)
      _ = second.finish()
    }
    Thread.sleep(forTimeInterval: 1.0)
    let linkUp = Date()
    try sh(["-n", clientNamespace, "link", "set", clientLink, "up"])

    var arrived = Set<String>()
    while Date().timeIntervalSince(linkUp) < 30 {
      arrived = Set(server.received.filter { $0.status == 200 }.flatMap(\.ids))
      if arrived.isSuperset(of: ids) { break }
      Thread.sleep(forTimeInterval: 0.05)
    }
    let elapsed = Date().timeIntervalSince(linkUp)
    let all = server.received.filter { $0.status == 200 }.flatMap(\.ids)
    let duplicates = all.count - Set(all).count
    print(
      "airplane mode: \(ids.count) events arrived \(String(format: "%.2f", elapsed)) s after the link came up; duplicates \(duplicates)"
    )
    XCTAssertEqual(arrived.intersection(ids).count, ids.count, "every event logged offline reached the server")
    XCTAssertLessThan(elapsed, 10, "goal: under 10 s after the link returns")
    XCTAssertTrue(server.received.allSatisfy { $0.malformed == nil })
  }
}
