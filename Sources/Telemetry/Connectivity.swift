// System-call boundary: an rtnetlink socket (link, address and route changes), an eventfd to stop
// its reader, and /proc/net routes.
import CNetlink
import Foundation

/// Tells when the machine (or the network namespace the process is in) has a usable route, and
/// calls back the moment one appears, so delivery starts at once instead of at the next timer.
public final class ConnectivityMonitor: @unchecked Sendable {
  private let procRoot: String
  private let onOnline: @Sendable () -> Void
  private let lock = NSLock()
  private var active = false
  private var wake: Int32 = -1
  private var finished: DispatchSemaphore?

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

  /// Opens the netlink socket and starts watching. Calling it again while watching does nothing.
  public func start() throws {
    let claimed = lock.withLock { () -> Bool in
      guard !active else { return false }
      active = true
      return true
    }
    guard claimed else { return }
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
    let wakeFD = vault_eventfd()
    guard bound == 0, wakeFD >= 0 else {
      let code = errno
      close(fd)
      if wakeFD >= 0 { close(wakeFD) }
      lock.withLock { active = false }
      throw TelemetryError.netlink(errno: code)
    }
    let done = DispatchSemaphore(value: 0)
    lock.withLock {
      wake = wakeFD
      finished = done
    }
    // The reader owns the netlink socket and closes it itself, so no descriptor number is read
    // after it was closed and reused; the monitor owns the eventfd and closes it in stop(), after
    // the reader is gone. The reader holds the callback and paths, not the monitor.
    let procRoot = self.procRoot
    let onOnline = self.onOnline
    let thread = Thread {
      Self.run(socket: fd, wake: wakeFD, procRoot: procRoot, onOnline: onOnline)
      done.signal()
    }
    thread.name = "vault.connectivity"
    thread.start()
  }

  /// Stops watching and waits until the reading thread has closed its socket. Do not call it from
  /// the `onOnline` callback, which runs on that thread.
  public func stop() {
    let (wakeFD, done) = lock.withLock { () -> (Int32, DispatchSemaphore?) in
      defer {
        wake = -1
        finished = nil
        active = false
      }
      return (wake, finished)
    }
    guard wakeFD >= 0 else { return }
    var one: UInt64 = 1
    _ = write(wakeFD, &one, 8)
    done?.wait()
    close(wakeFD)
  }

  private static func run(socket fd: Int32, wake: Int32, procRoot: String, onOnline: @Sendable () -> Void) {
    defer { close(fd) }
    var lastOnline = hasRoute(procRoot: procRoot)
    var buffer = [UInt8](repeating: 0, count: 16_384)
    var descriptors = [
      pollfd(fd: fd, events: Int16(POLLIN), revents: 0), pollfd(fd: wake, events: Int16(POLLIN), revents: 0),
    ]
    while true {
      descriptors[0].revents = 0
      descriptors[1].revents = 0
      let ready = poll(&descriptors, 2, -1)
      if ready < 0, errno == EINTR { continue }
      if ready < 0 || descriptors[1].revents != 0 { return }  // stop() asked, or poll failed
      let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
      if count < 0, errno == EINTR || errno == EAGAIN { continue }
      // ENOBUFS: events were lost; fall through and judge by the routes as they are now.
      if count < 0, errno != ENOBUFS { return }
      if count == 0 { return }
      let online = hasRoute(procRoot: procRoot)
      if online && !lastOnline { onOnline() }
      lastOnline = online
    }
  }

  deinit { stop() }
}
