// C boundary: libcurl's easy and multi interfaces (through CCurl's typed wrappers). Nothing else in
// the package talks to libcurl.
internal import CCurl
import Foundation

/// One HTTP request: a method, the configured endpoint, headers and a body. Nothing in it is ever
/// logged or put into an error.
public struct HTTPRequest: Sendable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
  /// Where the request goes; `http` or `https` only.
  public var url: URL
  /// The HTTP method (`POST` by default).
  public var method: String
  /// Header fields, sent in order; one holding CR, LF or another control character (tab aside)
  /// makes the client refuse the whole request (`invalid-header`).
  public var headers: [(name: String, value: String)]
  /// The body, sent as it is, with its length.
  public var body: [UInt8]

  /// `HTTPRequest(POST, headers: [Content-Type, Authorization], body: B bytes)`: printing a
  /// request never shows its URL (a query string may carry a key), its header values (a bearer
  /// token) or its body.
  public var description: String {
    "HTTPRequest(\(method), headers: [\(headers.map(\.name).joined(separator: ", "))], body: \(body.count) bytes)"
  }

  /// The same as `description`.
  public var debugDescription: String { description }

  /// What `dump` and debuggers show: the method, the header names and the body's size only.
  public var customMirror: Mirror {
    Mirror(
      self, children: ["method": method, "headerNames": headers.map(\.name), "bodyBytes": body.count],
      displayStyle: .struct)
  }

  /// Makes a request.
  ///
  /// - Parameters:
  ///   - url: where it goes.
  ///   - method: the HTTP method; `POST` by default.
  ///   - headers: header fields, in order.
  ///   - body: the body; empty by default.
  public init(url: URL, method: String = "POST", headers: [(name: String, value: String)] = [], body: [UInt8] = []) {
    self.url = url
    self.method = method
    self.headers = headers
    self.body = body
  }
}

/// What one HTTP exchange gave: the server's status (and its Retry-After header), or the kind of
/// network failure (never the request or its body).
public enum HTTPOutcome: Sendable, Equatable {
  /// A complete answer: its status and raw Retry-After header (a redirect comes back as its 3xx).
  case status(Int, retryAfter: String?)
  /// No answer; `kind` names why (`connection-refused`, `dns`, `timed-out`, `tls`,
  /// `tls-verification`, `cancelled`, `invalid-header`, …: the README's "Delivery over HTTP" lists them).
  case unreachable(kind: String)
}

/// The HTTP client shared by every transport (the outbox and telemetry cannot drift apart in how
/// they talk to servers), built on libcurl:
///
/// - **No redirects**: a 3xx comes back as a status; the token and the body go only to the URL given.
/// - **One deadline** (`timeout`) for the whole exchange: resolving, connecting, TLS, sending, the
///   answer.
/// - **Bounded responses**: the status line and headers (libcurl's own limit), and at most
///   `responseLimit` bytes of body, which is read only to be thrown away; nothing is decompressed
///   (no `Accept-Encoding` is sent, and a compressed body is not inflated).
/// - **TLS** through OpenSSL with peer and host verification on, TLS 1.2 or later; the system's
///   certificate authorities, or only those in `certificateAuthorities` (a PEM file) when given.
/// - **Nothing kept or written**: no cookies, no cache, no stored credentials, no files; HTTP and
///   HTTPS only. Proxies from the standard environment variables (`https_proxy`, `no_proxy`, …)
///   are used as libcurl uses them, for `https://` only: plain `http://` never goes through a
///   proxy.
/// - **Waiting costs nothing**: the calling thread sleeps in poll(2) until the network or
///   `HTTPCancellation` wakes it.
///
/// `send` blocks the calling thread; exchanges of one client run one at a time, each on a fresh
/// connection (none is kept for the next request). Thread-safe.
///
/// libcurl (`libcurl.so.4`) is loaded with dlopen by the first exchange, not linked: a process that
/// never sends never loads it. Where it cannot be loaded, every exchange is `client-unavailable`
/// (and tries to load it again); ``unavailableReason`` says why, before anything is claimed.
public final class HTTPClient: @unchecked Sendable {
  /// The deadline of one whole exchange.
  public let timeout: TimeInterval
  /// The most response-body bytes read before the exchange is cut short (its status still counts).
  public let responseLimit: Int
  /// A PEM file of the only certificate authorities trusted, or nil for the system's.
  public let certificateAuthorities: String?
  private let lock = NSLock()
  /// Made by the first exchange (nil until then, and while libcurl cannot be loaded); under `lock`.
  private var handles: CurlHandles?

  /// Makes a client; every exchange it makes follows the rules above.
  ///
  /// - Parameters:
  ///   - timeout: the deadline of one whole exchange, in seconds (held to 1 ms … 1 day; NaN
  ///     is 30 s).
  ///   - responseLimit: the most response-body bytes read (64 KiB by default).
  ///   - certificateAuthorities: a PEM file of the only certificate authorities to trust; nil for
  ///     the system's.
  public init(timeout: TimeInterval, responseLimit: Int = 64 * 1024, certificateAuthorities: String? = nil) {
    self.timeout = timeout
    self.responseLimit = responseLimit
    self.certificateAuthorities = certificateAuthorities
  }

  /// Why libcurl (`libcurl.so.4`, loaded with dlopen when a client first sends) cannot be used
  /// here, or nil when it can: the dynamic linker's message, or the function it lacks. Asking loads
  /// it, as the first exchange would; after a failure each ask (and each exchange) tries again.
  public static var unavailableReason: String? {
    guard vault_curl_load() == 0 else { return nil }
    let reason = withUnsafeTemporaryAllocation(of: CChar.self, capacity: 256) { buffer in
      vault_curl_load_error(buffer.baseAddress, buffer.count)
      return String(cString: buffer.baseAddress!)
    }
    return reason.isEmpty ? "unknown" : reason
  }

  /// Sends `request` and waits for the answer, at most `timeout` seconds (or until
  /// `HTTPCancellation.cancelAll()`). One client makes one exchange at a time: a call made while
  /// another is under way waits its turn first.
  ///
  /// - Parameter request: the request; nothing of it is logged or put into an outcome.
  /// - Returns: the status when a complete answer arrived, else `.unreachable` with the failure's
  ///   kind (`cancelled` at once after `cancelAll()`, `client-unavailable` when libcurl could
  ///   not start, `ca-file-unusable` when `certificateAuthorities` is not a regular file).
  public func send(_ request: HTTPRequest) -> HTTPOutcome {
    if HTTPCancellation.isCancelled { return .unreachable(kind: "cancelled") }
    return lock.withLock {
      if handles == nil { handles = CurlHandles() }
      guard let handles else { return .unreachable(kind: "client-unavailable") }
      return perform(request, handles)
    }
  }

  private func perform(_ request: HTTPRequest, _ handles: CurlHandles) -> HTTPOutcome {
    // A fresh easy handle per exchange, never one reset and reused: libcurl 7.88 (Debian 12) keeps
    // a pointer to the previous exchange's last header across curl_easy_reset, and a folded header
    // line in the next answer wrote through it (a heap use-after-free any server could trigger;
    // found by Fuzz/fuzz-http; curl issue 11101, fixed upstream in May 2023 by pull request 11103).
    guard let easy = vault_curl_easy_init() else { return .unreachable(kind: "client-unavailable") }
    defer { vault_curl_easy_cleanup(easy) }
    let exchange = Exchange(responseLimit: responseLimit)
    let context = Unmanaged.passRetained(exchange)
    defer { context.release() }
    var headers: UnsafeMutablePointer<curl_slist>?
    defer { vault_curl_slist_free_all(headers) }
    // A CR, LF or other control character in a header (a token read from a file, say) would
    // inject headers or a whole second request: such a request is never sent.
    for header in request.headers {
      let bytes = Array(header.name.utf8) + Array(header.value.utf8)
      guard !header.name.isEmpty, !bytes.contains(where: { $0 < 0x20 && $0 != 0x09 || $0 == 0x7f }),
        !header.name.utf8.contains(where: { $0 == 0x3a || $0 == 0x20 || $0 == 0x09 })
      else { return .unreachable(kind: "invalid-header") }
    }
    // "Expect:" switches off libcurl's wait for a 100-continue before larger bodies.
    for line in request.headers.map({ "\($0.name): \($0.value)" }) + ["Expect:"] {
      guard let appended = vault_curl_slist_append(headers, line) else { return .unreachable(kind: "local-memory") }
      headers = appended
    }
    // A timeout that is not a number is 30 s (Int(NaN) would trap); the rest 1 ms … 1 day.
    let milliseconds = Int(min(max(timeout.isNaN ? 30 : timeout, 0.001), 86_400) * 1000)
    var configured = true
    func set(_ result: CURLcode) { if result != CURLE_OK { configured = false } }
    set(vault_curl_set_string(easy, CURLOPT_URL, request.url.absoluteString))
    set(vault_curl_set_string(easy, CURLOPT_PROTOCOLS_STR, "http,https"))
    set(vault_curl_set_long(easy, CURLOPT_FOLLOWLOCATION, 0))
    // A fresh connection per exchange: libcurl 7.88 reuses a kept-alive connection that still has
    // unread bytes, so a stray answer to one request acked the next (review finding).
    set(vault_curl_set_long(easy, CURLOPT_FORBID_REUSE, 1))
    set(vault_curl_set_long(easy, CURLOPT_FRESH_CONNECT, 1))
    // Removing a transfer must not wait for a resolver thread stuck on a silent name server
    // (it held a 20 s deadline and a cancellation for 28 s).
    set(vault_curl_set_long(easy, CURLOPT_QUICK_EXIT, 1))
    // Plain HTTP never goes through a proxy: the loopback exception holds only because the bytes
    // (the token among them) never leave the machine.
    if request.url.scheme?.lowercased() == "http" { set(vault_curl_set_string(easy, CURLOPT_NOPROXY, "*")) }
    set(vault_curl_set_long(easy, CURLOPT_NOSIGNAL, 1))
    set(vault_curl_set_long(easy, CURLOPT_TIMEOUT_MS, milliseconds))
    set(vault_curl_set_long(easy, CURLOPT_CONNECTTIMEOUT_MS, milliseconds))
    set(vault_curl_set_long(easy, CURLOPT_HTTP_CONTENT_DECODING, 0))
    set(vault_curl_set_long(easy, CURLOPT_SSL_VERIFYPEER, 1))
    set(vault_curl_set_long(easy, CURLOPT_SSL_VERIFYHOST, 2))
    set(vault_curl_set_long(easy, CURLOPT_SSLVERSION, CURL_SSLVERSION_TLSv1_2))
    if let certificateAuthorities {
      // Only a regular file: OpenSSL would block forever reading a FIFO.
      var info = stat()
      guard stat(certificateAuthorities, &info) == 0, info.st_mode & S_IFMT == S_IFREG else {
        return .unreachable(kind: "ca-file-unusable")
      }
      set(vault_curl_set_string(easy, CURLOPT_CAINFO, certificateAuthorities))
      set(vault_curl_set_pointer(easy, CURLOPT_CAPATH, nil))
    }
    set(vault_curl_set_string(easy, CURLOPT_CUSTOMREQUEST, request.method))
    set(vault_curl_set_pointer(easy, CURLOPT_HTTPHEADER, headers))
    set(vault_curl_set_data_callback(easy, CURLOPT_HEADERFUNCTION, headerReceived))
    set(vault_curl_set_pointer(easy, CURLOPT_HEADERDATA, context.toOpaque()))
    set(vault_curl_set_data_callback(easy, CURLOPT_WRITEFUNCTION, bodyReceived))
    set(vault_curl_set_pointer(easy, CURLOPT_WRITEDATA, context.toOpaque()))
    guard configured else { return .unreachable(kind: "client-configuration") }
    return request.body.withUnsafeBufferPointer { body -> HTTPOutcome in
      // The body is sent from our buffer, which outlives the exchange (it ends inside this closure).
      if request.method != "GET" || !body.isEmpty {
        set(vault_curl_set_long(easy, CURLOPT_POST, 1))
        set(vault_curl_set_offset(easy, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(body.count)))
        set(vault_curl_set_pointer(easy, CURLOPT_POSTFIELDS, UnsafeMutableRawPointer(mutating: body.baseAddress)))
        // CURLOPT_POST resets the method; the custom one is set again after it.
        set(vault_curl_set_string(easy, CURLOPT_CUSTOMREQUEST, request.method))
      }
      guard configured else { return .unreachable(kind: "client-configuration") }
      let code = handles.run(easy)
      var status = 0
      if vault_curl_response_code(easy, &status) != CURLE_OK { status = 0 }
      var osErrno = 0
      if vault_curl_os_errno(easy, &osErrno) != CURLE_OK { osErrno = 0 }
      // libcurl refuses an answer that is not HTTP at all (no status line: HTTP/0.9 to it) with the
      // code it gives a URL of another scheme; to an http(s) URL it was the server's answer.
      if code == CURLE_UNSUPPORTED_PROTOCOL, ["http", "https"].contains(request.url.scheme?.lowercased() ?? "") {
        return .unreachable(kind: "malformed-response")
      }
      return Self.outcome(code: code, status: status, exchange: exchange, osErrno: Int32(clamping: osErrno))
    }
  }

  /// The status when a complete one arrived (also when we cut an over-long body short on purpose),
  /// else the failure's kind.
  static func outcome(code: CURLcode, status: Int, exchange: Exchange, osErrno: Int32 = 0) -> HTTPOutcome {
    if (code == CURLE_OK || (code == CURLE_WRITE_ERROR && exchange.bodyTooLong)) && (100..<600).contains(status)
      && exchange.headersComplete
    {
      return .status(status, retryAfter: exchange.retryAfter)
    }
    // A whole answer whose status is no HTTP status (600 to 999, which libcurl reads): it was
    // called `incomplete-response`, an answer cut off in its headers (an outside review).
    if code == CURLE_OK, exchange.headersComplete, status >= 600 { return .unreachable(kind: "malformed-response") }
    return .unreachable(kind: failureKind(code: code, osErrno: osErrno))
  }

  /// The readable kind of a failed exchange: every libcurl code maps to one of the kinds the README
  /// lists under "Delivery over HTTP", never to a number (operators and scripts match on these).
  ///
  /// - Parameters:
  ///   - code: what `curl_easy_perform` returned; `CURLE_OK` here means the answer was incomplete.
  ///   - osErrno: libcurl's `CURLINFO_OS_ERRNO` (tells a refused connection from an unreachable host).
  /// `failureKind(code:osErrno:)` for libcurl's result code given as its number (libcurl's
  /// documented `CURLE_…` values), so tests need not import libcurl's headers: a test module
  /// that does would own their socket declarations and hide `SOCK_STREAM` from its other files.
  package static func failureKind(rawCode: UInt32, osErrno: Int32) -> String {
    failureKind(code: CURLcode(rawValue: rawCode), osErrno: osErrno)
  }

  static func failureKind(code: CURLcode, osErrno: Int32) -> String {
    switch code {
    case CURLE_OK: return "incomplete-response"
    case CURLE_ABORTED_BY_CALLBACK: return "cancelled"
    case CURLE_OPERATION_TIMEDOUT: return "timed-out"
    case CURLE_COULDNT_RESOLVE_HOST: return "dns"
    case CURLE_COULDNT_RESOLVE_PROXY: return "proxy-dns"
    case CURLE_COULDNT_CONNECT:
      switch osErrno {
      case ECONNREFUSED: return "connection-refused"
      case ENETUNREACH: return "network-unreachable"
      case EHOSTUNREACH: return "host-unreachable"
      case ETIMEDOUT: return "timed-out"
      default: return "connection-failed"
      }
    case CURLE_INTERFACE_FAILED, CURLE_NO_CONNECTION_AVAILABLE, CURLE_QUIC_CONNECT_ERROR: return "connection-failed"
    case CURLE_PROXY: return "proxy"
    case CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CACERT_BADFILE, CURLE_SSL_CRL_BADFILE, CURLE_SSL_ISSUER_ERROR,
      CURLE_SSL_PINNEDPUBKEYNOTMATCH, CURLE_SSL_INVALIDCERTSTATUS:
      return "tls-verification"
    case CURLE_SSL_CONNECT_ERROR, CURLE_SSL_CERTPROBLEM, CURLE_SSL_CIPHER, CURLE_USE_SSL_FAILED,
      CURLE_SSL_SHUTDOWN_FAILED, CURLE_SSL_ENGINE_NOTFOUND, CURLE_SSL_ENGINE_SETFAILED, CURLE_SSL_ENGINE_INITFAILED,
      CURLE_SSL_CLIENTCERT:
      return "tls"
    case CURLE_GOT_NOTHING: return "empty-reply"
    case CURLE_SEND_ERROR, CURLE_SEND_FAIL_REWIND, CURLE_READ_ERROR, CURLE_UPLOAD_FAILED:
      return osErrno == ECONNRESET || osErrno == EPIPE ? "connection-reset" : "send"
    case CURLE_RECV_ERROR, CURLE_PARTIAL_FILE:
      return osErrno == ECONNRESET ? "connection-reset" : "receive"
    case CURLE_OUT_OF_MEMORY: return "local-memory"
    case CURLE_UNSUPPORTED_PROTOCOL, CURLE_URL_MALFORMAT: return "unsupported-url"
    case CURLE_WEIRD_SERVER_REPLY, CURLE_HTTP2, CURLE_HTTP2_STREAM, CURLE_HTTP3, CURLE_BAD_CONTENT_ENCODING,
      CURLE_CHUNK_FAILED, CURLE_WRITE_ERROR, CURLE_TOO_MANY_REDIRECTS, CURLE_RANGE_ERROR, CURLE_HTTP_RETURNED_ERROR:
      return "malformed-response"
    case CURLE_FILESIZE_EXCEEDED: return "response-too-large"
    case CURLE_FAILED_INIT, CURLE_NOT_BUILT_IN, CURLE_BAD_FUNCTION_ARGUMENT, CURLE_UNKNOWN_OPTION,
      CURLE_SETOPT_OPTION_SYNTAX, CURLE_RECURSIVE_API_CALL, CURLE_FUNCTION_NOT_FOUND, CURLE_AGAIN,
      CURLE_UNRECOVERABLE_POLL:
      return "client-configuration"
    // What is left belongs to protocols vault never speaks (FTP, TFTP, LDAP, SSH, RTSP) or to
    // authentication schemes it never asks libcurl for: still a word, never a number.
    default: return "network-error"
    }
  }
}

/// What the callbacks gather during one exchange.
final class Exchange {
  let responseLimit: Int
  var bodyBytes = 0
  var bodyTooLong = false
  var retryAfter: String?
  /// The blank line that ends the final header block arrived (a response cut off inside its
  /// headers never counts as an answer).
  var headersComplete = false

  init(responseLimit: Int) { self.responseLimit = responseLimit }
}

/// Header lines, one per call. A new status line (after a 100 Continue, say) starts over.
private let headerReceived: vault_curl_data_callback = { data, size, count, context in
  guard let data, let context else { return 0 }
  let exchange = Unmanaged<Exchange>.fromOpaque(context).takeUnretainedValue()
  let length = size * count
  let line = UnsafeRawBufferPointer(start: data, count: length)
  if line.starts(with: Array("HTTP/".utf8)) {
    exchange.retryAfter = nil
    exchange.headersComplete = false
  } else if line.elementsEqual([0x0d, 0x0a]) || line.elementsEqual([0x0a]) {
    exchange.headersComplete = true
  } else if line.count <= 256, let text = String(validating: line, as: UTF8.self),
    let colon = text.firstIndex(of: ":"),
    text[..<colon].trimmingCharacters(in: .whitespaces).lowercased() == "retry-after"
  {
    exchange.retryAfter = text[text.index(after: colon)...].trimmingCharacters(in: .whitespacesAndNewlines)
  }
  return length
}

/// Body bytes are counted and dropped; past the limit the exchange ends (returning less than was
/// given makes libcurl stop with CURLE_WRITE_ERROR).
private let bodyReceived: vault_curl_data_callback = { _, size, count, context in
  guard let context else { return 0 }
  let exchange = Unmanaged<Exchange>.fromOpaque(context).takeUnretainedValue()
  let length = size * count
  exchange.bodyBytes += length
  if exchange.bodyBytes > exchange.responseLimit {
    exchange.bodyTooLong = true
    return 0
  }
  return length
}

/// The multi handle each exchange's easy handle is driven through (one easy handle per exchange,
/// `HTTPClient.perform`), so the wait is curl_multi_poll: asleep until a socket is ready, the
/// deadline passes, or `HTTPCancellation` wakes it with curl_multi_wakeup.
final class CurlHandles {
  let multi: UnsafeMutableRawPointer

  init?() {
    guard CurlLibrary.ready, let multi = vault_curl_multi_init() else { return nil }
    self.multi = multi
  }

  /// Runs the exchange configured on `easy` to its end and returns libcurl's result for it.
  func run(_ easy: UnsafeMutableRawPointer) -> CURLcode {
    guard vault_curl_multi_add_handle(multi, easy) == CURLM_OK else { return CURLE_FAILED_INIT }
    // curl_multi_wakeup may be called from any thread; the registry calls it only until unregister.
    let waker = HTTPCancellation.register { [handle = MultiHandle(pointer: multi)] in
      _ = vault_curl_multi_wakeup(handle.pointer)
    }
    defer {
      HTTPCancellation.unregister(waker)
      vault_curl_multi_remove_handle(multi, easy)
    }
    var running: Int32 = 1
    while running > 0 {
      if HTTPCancellation.isCancelled { return CURLE_ABORTED_BY_CALLBACK }
      guard vault_curl_multi_perform(multi, &running) == CURLM_OK else { return CURLE_FAILED_INIT }
      if running == 0 { break }
      // libcurl never sleeps past its own next timeout (the exchange's deadline among them).
      guard vault_curl_multi_poll(multi, nil, 0, 1000, nil) == CURLM_OK else { return CURLE_FAILED_INIT }
    }
    var remaining: Int32 = 0
    while let message = vault_curl_multi_info_read(multi, &remaining) {
      if message.pointee.msg == CURLMSG_DONE { return message.pointee.data.result }
    }
    return CURLE_FAILED_INIT
  }

  deinit { vault_curl_multi_cleanup(multi) }
}

/// A multi handle as the cancellation registry holds it (curl_multi_wakeup is thread-safe).
private struct MultiHandle: @unchecked Sendable {
  let pointer: UnsafeMutableRawPointer
}

/// libcurl loaded (dlopen) and curl_global_init called before the first handle; the loader also
/// drops `SSLKEYLOGFILE` from the environment first (CCurl.h).
enum CurlLibrary {
  /// True once libcurl is loaded; a false answer is asked again next time.
  static var ready: Bool { vault_curl_load() != 0 }
}
