import Foundation
import VaultCrypto

/// Where a transport may send records and tokens: `https://` anywhere, `http://` only to a
/// loopback address (127.0.0.0/8, ::1, `localhost`) unless the caller opts in to plain HTTP on
/// purpose (a test network); no other scheme, no credentials inside the URL.
public enum EndpointPolicy {
  /// Checks `url` before any transport is built on it.
  ///
  /// - Parameters:
  ///   - url: the endpoint.
  ///   - allowInsecureHTTP: accept `http://` to any host (test networks only).
  /// - Throws: `EndpointError`, naming the reason and the fix: `.unsupportedScheme` (not `http`
  ///   or `https`), `.noHost`, `.credentialsInURL` (a user name or password in it), or
  ///   `.insecureHTTP` (`http://` to a host that is not loopback, without `allowInsecureHTTP`).
  public static func check(_ url: URL, allowInsecureHTTP: Bool = false) throws(EndpointError) {
    guard let scheme = url.scheme?.lowercased(), scheme == "https" || scheme == "http" else {
      throw .unsupportedScheme
    }
    guard let host = url.host, !host.isEmpty else { throw .noHost }
    guard url.user == nil, url.password == nil else { throw .credentialsInURL }
    if scheme == "http", !allowInsecureHTTP, !isLoopback(host) { throw .insecureHTTP }
  }

  /// True for `localhost`, 127.0.0.0/8, ::1 and IPv4-mapped loopback (with or without brackets).
  ///
  /// - Parameter host: a URL's host, as `URL.host` gives it.
  /// - Returns: false for anything else, including `localhost.` (it goes to DNS) and a host with a
  ///   NUL, `%` or control character in it.
  public static func isLoopback(_ host: String) -> Bool {
    var name = host.lowercased()
    if name.hasPrefix("["), name.hasSuffix("]") { name = String(name.dropFirst().dropLast()) }
    // No NUL, percent sign or control character (inet_pton stops at a NUL: "127.0.0.1%00.evil").
    guard !name.utf8.contains(where: { $0 < 0x21 || $0 == 0x25 || $0 == 0x7f }) else { return false }
    // Exactly "localhost", which libcurl answers itself with a loopback address; "localhost."
    // goes to DNS, which may answer anything.
    if name == "localhost" { return true }
    var v4 = in_addr()
    if inet_pton(AF_INET, name, &v4) == 1 { return UInt32(bigEndian: v4.s_addr) >> 24 == 127 }
    var v6 = in6_addr()
    guard inet_pton(AF_INET6, name, &v6) == 1 else { return false }
    let bytes = withUnsafeBytes(of: v6) { Array($0) }
    if bytes[0..<15].allSatisfy({ $0 == 0 }) && bytes[15] == 1 { return true }
    // ::ffff:127.x.y.z
    return bytes[0..<10].allSatisfy({ $0 == 0 }) && bytes[10] == 0xff && bytes[11] == 0xff && bytes[12] == 127
  }
}

/// Why an endpoint URL was refused. The URL itself is not repeated (it may carry a secret).
public enum EndpointError: CodedError, Equatable, CustomStringConvertible {
  /// The scheme is neither `https` nor `http`.
  case unsupportedScheme
  /// The URL names no host.
  case noHost
  /// The URL carries a user name or password (the token is sent separately, in a header).
  case credentialsInURL
  /// Plain `http://` to a host that is not loopback, without `allowInsecureHTTP`.
  case insecureHTTP

  /// A sentence naming the reason and the fix, never the URL.
  public var description: String {
    switch self {
    case .unsupportedScheme: "the endpoint must be an https:// URL (http:// only to a loopback address)"
    case .noHost: "the endpoint URL has no host"
    case .credentialsInURL:
      "the endpoint URL carries a user name or password; remove it (the bearer token is sent separately)"
    case .insecureHTTP:
      "plain http:// would send the token and the records unencrypted to another machine; use https://, "
        + "or opt in for a test network (allowInsecureHTTP: true)"
    }
  }

  /// The same as `description`, for `localizedDescription`.
  public var errorDescription: String? { description }

  /// `endpoint.` and the case in kebab case: stable across releases.
  public var code: String {
    switch self {
    case .unsupportedScheme: "endpoint.unsupported-scheme"
    case .noHost: "endpoint.no-host"
    case .credentialsInURL: "endpoint.credentials-in-url"
    case .insecureHTTP: "endpoint.insecure-http"
    }
  }
}
