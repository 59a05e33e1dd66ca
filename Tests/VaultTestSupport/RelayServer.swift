import Foundation

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif

/// tools/relay_server.py on loopback, for tests. It exits when the test closes its stdin.
public final class RelayServer {
  public let port: Int
  public let recordPath: String
  private let child: Child

  /// - Parameter delay: seconds every POST /relay waits before it is answered (a slow server).
  public init(directory: String, mode: String = "ok", retryAfter: Int = 1, delay: Double = 0, root: String) throws {
    let portFile = directory + "/relay.port"
    recordPath = directory + "/relay.jsonl"
    child = try Spawn.start(
      "/usr/bin/env",
      [
        "python3", root + "/tools/relay_server.py", "--port-file", portFile, "--record", recordPath, "--mode", mode,
        "--retry-after", String(retryAfter), "--delay", String(delay), "--exit-on-stdin-eof",
      ])
    port = try waitForPort(portFile, server: "relay_server.py")
  }

  public var endpoint: URL { URL(string: "http://127.0.0.1:\(port)/relay")! }

  /// Switches the answer mode (ok, 500, 503, 429, 400).
  public func setMode(_ mode: String, retryAfter: Int = 1, delay: Double = 0) throws {
    postControl(
      "http://127.0.0.1:\(port)/control",
      "{\"mode\": \"\(mode)\", \"retry_after\": \(retryAfter), \"delay\": \(delay)}")
  }

  /// Every request received: id, body and the status it was answered with.
  public var received: [(id: String, body: String, status: Int)] {
    guard let text = try? String(contentsOfFile: recordPath, encoding: .utf8) else { return [] }
    return text.split(separator: "\n").compactMap { line in
      guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else { return nil }
      return (object["id"] as? String ?? "", object["body"] as? String ?? "", object["status"] as? Int ?? 0)
    }
  }

  public func stop() { _ = child.finish() }
}

/// Waits (up to 5 s) for a test server to write the port it listens on.
func waitForPort(_ portFile: String, server: String) throws -> Int {
  for _ in 0..<200 {
    if let text = try? String(contentsOfFile: portFile, encoding: .utf8), let value = Int(text) { return value }
    Thread.sleep(forTimeInterval: 0.025)
  }
  throw TestKeyringError.command(server, "did not start")
}
