import Foundation

#if canImport(Glibc)
  import Glibc
#endif

/// A real HTTP/1.1 server on 127.0.0.1 (an ephemeral port) that keeps every request byte for byte
/// (method, path, headers, body, arrival time) and answers from a script. One connection at a
/// time, `Connection: close`: enough for a transport that sends one request per exchange.
final class LoopbackHTTPServer: @unchecked Sendable {
  struct Request {
    var method: String
    var target: String
    var headers: [(name: String, value: String)]
    var body: [UInt8]
    var arrived: Date

    /// The first header of that name (case-insensitive).
    func header(_ name: String) -> String? { headers.first { $0.name.lowercased() == name.lowercased() }?.value }
  }

  struct Answer {
    var status: Int
    var headers: [(name: String, value: String)] = []
    /// When set, the whole response byte for byte instead of one made from the status and headers.
    var raw: [UInt8]? = nil
  }

  let port: Int
  private let listener: Int32
  private let lock = NSLock()
  private var script: [Answer]
  private let otherwise: Answer
  private var kept: [Request] = []
  private var stopping = false
  private let finished = DispatchSemaphore(value: 0)

  init(_ script: [Answer] = [], otherwise: Answer = Answer(status: 200)) throws {
    self.script = script
    self.otherwise = otherwise
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw POSIXError(.EIO) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = 0
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
        bind(fd, $0, length) == 0 && listen(fd, 16) == 0 && getsockname(fd, $0, &length) == 0
      }
    }
    guard bound else {
      close(fd)
      throw POSIXError(.EADDRNOTAVAIL)
    }
    listener = fd
    port = Int(UInt16(bigEndian: address.sin_port))
    let thread = Thread { [self] in
      serve()
      finished.signal()
    }
    thread.start()
  }

  /// The endpoint URL for `path` (and an optional query, which the server ignores).
  func url(_ path: String = "/relay") -> URL { URL(string: "http://127.0.0.1:\(port)\(path)")! }

  var requests: [Request] { lock.withLock { kept } }

  func stop() {
    lock.withLock { stopping = true }
    shutdown(listener, Int32(SHUT_RDWR))
    finished.wait()
    close(listener)
  }

  private func serve() {
    while true {
      var descriptor = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
      let ready = poll(&descriptor, 1, 100)
      if lock.withLock({ stopping }) { return }
      if ready <= 0 { continue }
      let connection = accept(listener, nil, nil)
      if connection < 0 { continue }
      handle(connection)
      close(connection)
    }
  }

  private func handle(_ connection: Int32) {
    var timeout = timeval(tv_sec: 5, tv_usec: 0)
    setsockopt(connection, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    var received: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 65_536)
    let separator: [UInt8] = [13, 10, 13, 10]
    var headerEnd: Int?
    while headerEnd == nil {
      let count = recv(connection, &buffer, buffer.count, 0)
      if count <= 0 { return }
      received += buffer[..<count]
      headerEnd = Self.find(separator, in: received)
    }
    guard let headerEnd else { return }
    let head = String(decoding: received[..<headerEnd], as: UTF8.self)
    var lines = head.components(separatedBy: "\r\n")
    let requestLine = lines.removeFirst().split(separator: " ")
    guard requestLine.count >= 2 else { return }
    let headers = lines.compactMap { line -> (name: String, value: String)? in
      guard let colon = line.firstIndex(of: ":") else { return nil }
      return (String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
    }
    let length = Int(headers.first { $0.name.lowercased() == "content-length" }?.value ?? "0") ?? 0
    var body = Array(received[(headerEnd + 4)...])
    while body.count < length {
      let count = recv(connection, &buffer, buffer.count, 0)
      if count <= 0 { break }
      body += buffer[..<count]
    }
    let request = Request(
      method: String(requestLine[0]), target: String(requestLine[1]), headers: headers, body: body, arrived: Date())
    let answer = lock.withLock { () -> Answer in
      kept.append(request)
      return script.isEmpty ? otherwise : script.removeFirst()
    }
    var response = "HTTP/1.1 \(answer.status) Scripted\r\nContent-Length: 0\r\nConnection: close\r\n"
    for header in answer.headers { response += "\(header.name): \(header.value)\r\n" }
    response += "\r\n"
    let bytes = answer.raw ?? Array(response.utf8)
    _ = bytes.withUnsafeBytes { send(connection, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
  }

  private static func find(_ needle: [UInt8], in haystack: [UInt8]) -> Int? {
    guard haystack.count >= needle.count else { return nil }
    for start in 0...(haystack.count - needle.count)
    where haystack[start..<(start + needle.count)].elementsEqual(needle) {
      return start
    }
    return nil
  }
}
