import Foundation

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif

/// tools/telemetry_server.py on loopback (or any host address), for tests. It exits when the test
/// closes its stdin.
public final class TelemetryServer {
  public let port: Int
  public let host: String
  public let recordPath: String
  private let child: Child

  public init(
    directory: String, mode: String = "ok", token: String = "test-token", host: String = "127.0.0.1",
    root: String, launcher: [String] = [], recordBodies: Bool = false
  ) throws {
    let portFile = directory + "/telemetry.port"
    recordPath = directory + "/telemetry.jsonl"
    self.host = host
    let command =
      launcher + [
        "/usr/bin/env", "python3", root + "/tools/telemetry_server.py", "--host", host, "--port-file", portFile,
        "--record", recordPath, "--mode", mode, "--token", token, "--exit-on-stdin-eof",
      ] + (recordBodies ? ["--record-bodies"] : [])
    child = try Spawn.start(command[0], Array(command.dropFirst()))
    port = try waitForPort(portFile, server: "telemetry_server.py")
  }

  public var endpoint: URL { URL(string: "http://\(host):\(port)/v1/telemetry/batch")! }

  /// Switches the answer mode (ok, 429, 503, 500, 400, 401, 403, 404, 413, hang, drop).
  public func setMode(_ mode: String) {
    postControl("http://\(host):\(port)/control", "{\"mode\": \"\(mode)\"}")
  }

  /// Each request: its status, the event ids it carried, and what was malformed (nil when nothing).
  public var received: [(status: Int, ids: [String], malformed: String?)] {
    guard let text = try? String(contentsOfFile: recordPath, encoding: .utf8) else { return [] }
    return text.split(separator: "\n").compactMap { line in
      guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else { return nil }
      return (object["status"] as? Int ?? 0, object["ids"] as? [String] ?? [], object["malformed"] as? String)
    }
  }

  /// The gunzipped body of each request, byte for byte (only with `recordBodies`).
  public var bodies: [String] {
    guard let text = try? String(contentsOfFile: recordPath, encoding: .utf8) else { return [] }
    return text.split(separator: "\n").compactMap { line in
      let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
      return object?["body"] as? String
    }
  }

  public func stop() { _ = child.finish() }
}

/// POSTs `body` to a mock server's control URL and waits (10 s at most) for its answer.
///
/// Through python's urllib rather than URLSession: FoundationNetworking leaks the libcurl URL
/// handle of every request (`_EasyHandle.set(url:)`, curl_url_set), which LeakSanitizer reports
/// from the test process (tools/sanitize.sh address).
public func postControl(_ url: String, _ body: String) {
  let script = """
    import sys, urllib.request
    request = urllib.request.Request(sys.argv[1], data=sys.argv[2].encode(), method="POST")
    urllib.request.urlopen(request, timeout=10).read()
    """
  _ = try? Spawn.run("/usr/bin/env", ["python3", "-c", script, url, body])
}
