import Foundation

/// tools/hostile_http_server.py on loopback: one misbehaviour per server (endless bodies, gzip
/// bombs, trickled headers, redirects, …), over HTTP or HTTPS. It exits when the test closes its stdin.
public final class HostileServer {
  public let port: Int
  public let recordPath: String
  public let scheme: String
  private let child: Child

  public init(
    directory: String, mode: String, redirectTo: String? = nil, certificate: (cert: String, key: String)? = nil,
    root: String
  ) throws {
    let name = "hostile-\(mode)-\(UUID().uuidString.prefix(8))"
    let portFile = directory + "/\(name).port"
    recordPath = directory + "/\(name).jsonl"
    scheme = certificate == nil ? "http" : "https"
    var arguments = [
      "python3", root + "/tools/hostile_http_server.py", "--port-file", portFile, "--record", recordPath, "--mode",
      mode, "--exit-on-stdin-eof",
    ]
    if let redirectTo { arguments += ["--redirect-to", redirectTo] }
    if let certificate { arguments += ["--cert", certificate.cert, "--key", certificate.key] }
    child = try Spawn.start("/usr/bin/env", arguments)
    port = try waitForPort(portFile, server: "hostile_http_server.py")
  }

  /// The server's URL on `host` (default 127.0.0.1) with `path`.
  public func url(_ path: String = "/ingest", host: String = "127.0.0.1") -> URL {
    URL(string: "\(scheme)://\(host):\(port)\(path)")!
  }

  /// Every request received: method, path and whether it carried an Authorization header.
  public var requests: [(method: String, path: String, authorization: Bool)] {
    guard let text = try? String(contentsOfFile: recordPath, encoding: .utf8) else { return [] }
    return text.split(separator: "\n").compactMap { line in
      guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else { return nil }
      return (
        object["method"] as? String ?? "", object["path"] as? String ?? "", object["authorization"] as? Bool ?? false
      )
    }
  }

  public func stop() { _ = child.finish() }
}

/// A throwaway certificate authority and server certificates made with openssl(1), for HTTPS
/// tests on loopback: `server` is valid for 127.0.0.1 and localhost, `elsewhere` only for
/// another name (signed by the same authority).
public struct TestCertificates {
  public let authority: String
  public let server: (cert: String, key: String)
  public let elsewhere: (cert: String, key: String)

  public init(directory: String) throws {
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    let authority = directory + "/ca.pem"
    let authorityKey = directory + "/ca.key"
    try Self.openssl([
      "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", authorityKey,
      "-out", authority, "-days", "2", "-subj", "/CN=vault test authority",
    ])
    self.authority = authority
    server = try Self.issue("server", subjectAltName: "IP:127.0.0.1,DNS:localhost", directory, authority, authorityKey)
    elsewhere = try Self.issue("elsewhere", subjectAltName: "DNS:elsewhere.invalid", directory, authority, authorityKey)
  }

  private static func openssl(_ arguments: [String]) throws {
    let result = try Spawn.run("/usr/bin/openssl", arguments)
    guard result.status == 0 else { throw TestKeyringError.command("openssl", result.error) }
  }

  private static func issue(
    _ name: String, subjectAltName: String, _ directory: String, _ authority: String, _ authorityKey: String
  ) throws -> (cert: String, key: String) {
    do {
      let key = directory + "/\(name).key"
      let request = directory + "/\(name).csr"
      let cert = directory + "/\(name).pem"
      let extensions = directory + "/\(name).ext"
      try Data("subjectAltName=\(subjectAltName)\n".utf8).write(to: URL(fileURLWithPath: extensions))
      try openssl([
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", request,
        "-subj", "/CN=\(name)",
      ])
      try openssl([
        "x509", "-req", "-in", request, "-CA", authority, "-CAkey", authorityKey, "-CAcreateserial", "-out", cert,
        "-days", "2", "-extfile", extensions,
      ])
      return (cert, key)
    }
  }
}
