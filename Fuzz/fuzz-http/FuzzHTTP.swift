// Fuzz target: HTTP response handling. Each input is the raw bytes a server answers with; a
// loopback server in this process sends them (then closes) to `HTTPClient.send`, which reads them
// through libcurl and its header and body callbacks (status lines, Retry-After, the response
// limit); the outcome goes through `HTTPStatusPolicy` as a delivery would. Every input must give
// an outcome; nothing may trap, hang or read out of bounds. See Fuzz/README.md.
import Foundation
import FuzzSupport
import Outbox
import Synchronization

enum HTTPTarget {
  /// What the server answers the next connection with.
  static let response = Mutex<[UInt8]>([])
  static let client = HTTPClient(timeout: 2, responseLimit: 1024)
  static let request: HTTPRequest = {
    let port = LoopbackServer.start()
    return HTTPRequest(
      url: URL(string: "http://127.0.0.1:\(port)/ingest")!, headers: [("Content-Type", "application/json")],
      body: Array("{\"id\":1}".utf8))
  }()

  static func run(_ input: UnsafeRawBufferPointer) {
    let request = request
    response.withLock { $0 = Array(input) }
    let outcome = client.send(request)
    _ = HTTPStatusPolicy.result(for: outcome, bodyBytes: request.body.count)
    if case .status(_, let retryAfter?) = outcome {
      _ = HTTPStatusPolicy.parseRetryAfter(retryAfter)
    }
  }
}

/// A server on 127.0.0.1 that answers one connection at a time: it reads the request (headers and
/// a Content-Length body, so closing never resets the connection under the client), writes
/// `HTTPTarget.response` and closes.
enum LoopbackServer {
  /// Listens on an ephemeral port and serves on a thread of its own; returns the port.
  static func start() -> UInt16 {
    let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    precondition(listener >= 0, "socket failed")
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
        bind(listener, $0, length) == 0 && listen(listener, 16) == 0 && getsockname(listener, $0, &length) == 0
      }
    }
    precondition(bound, "bind or listen failed")
    let thread = Thread { serve(listener) }
    thread.start()
    return UInt16(bigEndian: address.sin_port)
  }

  static func serve(_ listener: Int32) {
    while true {
      let connection = accept(listener, nil, nil)
      if connection < 0 { continue }
      readRequest(connection)
      let bytes = HTTPTarget.response.withLock { $0 }
      var sent = 0
      while sent < bytes.count {
        let count = bytes[sent...].withUnsafeBytes { send(connection, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        if count <= 0 { break }
        sent += count
      }
      shutdown(connection, Int32(SHUT_WR))
      close(connection)
    }
  }

  /// Reads up to the end of the headers and then Content-Length bytes of body.
  static func readRequest(_ connection: Int32) {
    var received: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 4096)
    let end = Array("\r\n\r\n".utf8)
    var expected = Int.max
    while received.count < expected {
      let count = buffer.withUnsafeMutableBytes { recv(connection, $0.baseAddress, $0.count, 0) }
      if count <= 0 { return }
      received += buffer[..<count]
      if expected == .max, let headerEnd = firstRange(of: end, in: received) {
        let headers = String(decoding: received[..<headerEnd], as: UTF8.self).lowercased()
        let length = headers.split(separator: "\r\n").first { $0.hasPrefix("content-length:") }
          .flatMap { Int($0.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) }
        expected = headerEnd + end.count + (length ?? 0)
      }
    }
  }

  static func firstRange(of pattern: [UInt8], in bytes: [UInt8]) -> Int? {
    guard bytes.count >= pattern.count else { return nil }
    return (0...(bytes.count - pattern.count)).first { bytes[$0..<($0 + pattern.count)].elementsEqual(pattern) }
  }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
  HTTPTarget.run(UnsafeRawBufferPointer(start: data, count: size))
  return 0
}

@main enum Main {
  static func main() throws { exit(try FuzzMain.run(fuzz)) }
}
