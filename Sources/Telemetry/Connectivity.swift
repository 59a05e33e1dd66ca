// System-call boundary: an rtnetlink socket (link, address and route changes) and /proc/net routes.
import CNetlink
import Foundation

/// Tells when the machine (or the network namespace the process is in) has a usable route, and
/// calls back the moment one appears, so delivery starts at once instead of at the next timer.
public final class ConnectivityMonitor: @unchecked Sendable {
  private let procRoot: String
  private let onOnline: @Sendable () -> Void
  private let lock = NSLock()
  private var socket: Int32 = -1
  private var thread: Thread?
  private var lastOnline = false

  /// - Parameters:
  ///   - procRoot: where `net/route` and `net/ipv6_route` are read (tests may point elsewhere).
  ///   - onOnline: called (on the monitor's thread) each time the state changes to online.
  public init(procRoot: String = "/proc", onOnline: @escaping @Sendable () -> Void) {
    self.procRoot = procRoot
    self.onOnline = onOnline
  }

  /// True when a route through a non-loopback interface exists.
  public var isOnline: Bool { Self.hasRoute(procRoot: procRoot) }

  static func hasRoute(procRoot: String) -> Bool {
    // /proc/net/route: Iface Destination Gateway Flags … (hex); RTF_UP is 0x1.
    if let text = try? String(contentsOfFile: procRoot + "/net/route", encoding: .utf8) {
      for line in text.split(separator: "\n").dropFirst() {
        let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
        guard fields.count > 3, fields[0] != "lo", let flags = Int(fields[3], radix: 16) else { continue }
        if flags & 0x1 != 0 { return true }
      }
    }
    // /proc/net/ipv6_route: … flags (field 9) … device (field 10); skip lo and link-local-only routes.
    if let text = try? String(contentsOfFile: procRoot + "/net/ipv6_route", encoding: .utf8) {
      for line in text.split(separator: "\n") {
        let fields = line.split(separator: " ", omittingEmptySubsequences: true)
        guard fields.count >= 10, fields[9] != "lo", !fields[0].hasPrefix("fe80"), !fields[0].hasPrefix("ff") else {
          continue
        }
        if let flags = Int(fields[8], radix: 16), flags & 0x1 != 0 { return true }
      }
    }
    return false
  }

  /// Opens the netlink socket and starts watching. Safe to call once.
  public func start() throws {
    let fd = Glibc.socket(AF_NETLINK, Int32(SOCK_RAW.rawValue) | Int32(SOCK_CLOEXEC.rawValue), NETLINK_ROUTE)
    guard fd >= 0 else { throw TelemetryError.netlink(errno: errno) }
    var address = sockaddr_nl()
    address.nl_family = sa_family_t(AF_NETLINK)
    address.nl_groups = vault_rtnetlink_groups()
    let bound = withUnsafePointer(to: &address) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
        bind(fd, $0, socklen_t(MemoryLayout<sockaddr_nl>.size))
      }
    }
    guard bound == 0 else {
      let code = errno
      close(fd)
      throw TelemetryError.netlink(errno: code)
    }
    lock.withLock {
      socket = fd
      lastOnline = isOnline
    }
    let thread = Thread { [weak self] in self?.run(fd) }
    thread.name = "vault.connectivity"
    self.thread = thread
    thread.start()
  }

  /// Stops watching (the socket is shut down, which ends the reading thread).
  public func stop() {
    lock.withLock {
      if socket >= 0 {
        shutdown(socket, Int32(SHUT_RDWR))
        close(socket)
        socket = -1
      }
    }
  }

  private func run(_ fd: Int32) {
    var buffer = [UInt8](repeating: 0, count: 16_384)
    while true {
      let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
      if count < 0, errno == EINTR { continue }
      if count < 0, errno == ENOBUFS { continue }  // events were lost: re-evaluate below anyway
      if count <= 0 { return }
      // Any link, address or route message may change the answer; routes are the judge.
      let online = isOnline
      let becameOnline = lock.withLock { () -> Bool in
        defer { lastOnline = online }
        return online && !lastOnline
      }
      if becameOnline { onOnline() }
    }
  }

  deinit { stop() }
}
