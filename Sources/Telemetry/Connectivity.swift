// System-call boundary: an rtnetlink socket (link, address and route changes), an eventfd to stop
// its reader, /proc/net routes and getifaddrs.
internal import CNetlink
import Foundation
import Outbox

/// Wakes delivery the moment the network changes in a way that may let it through: a default
/// route appears, goes, or moves (another gateway, interface or metric: a VPN, a new Wi-Fi), any
/// other usable route changes (a link with an on-link collector comes up), or an address changes on
/// an interface that carries a usable route. A route that was already up elsewhere (docker0,
/// virbr0) no longer hides a reconnect, as "any route up" did.
///
/// Usable: up, not a reject route, not through `lo`, and for IPv6 not link-local or multicast.
/// Netlink sends bursts of messages per change; the monitor waits until the burst has been quiet
/// for 0.1 s (0.4 s at most after its first message), compares routes and addresses with what it
/// saw before, and calls back once if they differ and at least one usable route is left.
public final class ConnectivityMonitor: NetworkWatch, @unchecked Sendable {
  private let procRoot: String
  private let addresses: @Sendable () -> [(interface: String, address: String)]
  private let onChange: @Sendable () -> Void
  private let lock = NSLock()
  private var active = false
  private var wake: Int32 = -1
  private var finished: DispatchSemaphore?

  /// How long a burst of netlink messages must be quiet before the monitor judges it.
  static let quiet: UInt64 = 100_000_000
  /// The longest a wake is held back by a burst that goes on.
  static let longestHold: UInt64 = 400_000_000

  /// Makes a monitor; nothing is watched until `start()`.
  ///
  /// - Parameters:
  ///   - procRoot: where `net/route` and `net/ipv6_route` are read (tests may point elsewhere).
  ///   - addresses: the interfaces' addresses (`getifaddrs` by default; tests pass their own).
  ///   - onChange: called (on the monitor's thread) after each change that may let delivery through.
  public init(
    procRoot: String = "/proc",
    addresses: @escaping @Sendable () -> [(interface: String, address: String)] = ConnectivityMonitor
      .interfaceAddresses,
    onChange: @escaping @Sendable () -> Void
  ) {
    self.procRoot = procRoot
    self.addresses = addresses
    self.onChange = onChange
  }

  /// True when a usable default route (IPv4 or IPv6) exists. A route to a local bridge alone is
  /// not being online. (Delivery does not wait for this: a collector on the local link, reached
  /// without a default route, is still tried on every wake and timer.)
  public var isOnline: Bool { Self.snapshot(procRoot: procRoot, addresses: []).hasDefaultRoute }

  /// The usable routes and the addresses of the interfaces they go through, as the monitor compares them.
  struct Snapshot: Equatable {
    /// One entry per usable route: interface, destination/prefix, gateway, metric.
    var routes: Set<String> = []
    /// One entry per address on an interface that carries a usable route.
    var addresses: Set<String> = []
    var hasDefaultRoute = false

    /// Whether a monitor that saw `self` should wake delivery on seeing `next`.
    func shouldWake(on next: Snapshot) -> Bool { next != self && !next.routes.isEmpty }
  }

  static func snapshot(procRoot: String, addresses: [(interface: String, address: String)]) -> Snapshot {
    var snapshot = Snapshot()
    var interfaces: Set<Substring> = []
    let rtfUp = 0x1
    let rtfReject = 0x200
    let rtfCache = 0x0100_0000
    // /proc/net/route: Iface Destination Gateway Flags RefCnt Use Metric Mask … (hex).
    if let text = try? String(contentsOfFile: procRoot + "/net/route", encoding: .utf8) {
      for line in text.split(separator: "\n").dropFirst() {
        let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
        guard fields.count > 7, fields[0] != "lo", let flags = Int(fields[3], radix: 16),
          let destination = UInt32(fields[1], radix: 16)
        else { continue }
        // 169.254.0.0/16 (RFC 3927), which NetworkManager and avahi route on links with no
        // address yet: it leads nowhere new, as IPv6 link-local below. The kernel writes the
        // address's bytes, in network order, as one number in this machine's order.
        let linkLocal = withUnsafeBytes(of: destination) { $0[0] == 169 && $0[1] == 254 }
        guard flags & rtfUp != 0, flags & rtfReject == 0, !linkLocal else { continue }
        snapshot.routes.insert("\(fields[0]) \(fields[1])/\(fields[7]) via \(fields[2]) metric \(fields[6])")
        interfaces.insert(fields[0])
        if fields[1] == "00000000", fields[7] == "00000000" { snapshot.hasDefaultRoute = true }
      }
    }
    // /proc/net/ipv6_route: dest prefix src prefix next-hop metric refcnt use flags device (hex).
    if let text = try? String(contentsOfFile: procRoot + "/net/ipv6_route", encoding: .utf8) {
      for line in text.split(separator: "\n") {
        let fields = line.split(separator: " ", omittingEmptySubsequences: true)
        guard fields.count >= 10, fields[9] != "lo", let flags = Int(fields[8], radix: 16) else { continue }
        let destination = fields[0]
        let linkLocal = ["fe8", "fe9", "fea", "feb"].contains { destination.hasPrefix($0) }
        guard flags & rtfUp != 0, flags & (rtfReject | rtfCache) == 0, !linkLocal, !destination.hasPrefix("ff") else {
          continue
        }
        snapshot.routes.insert("\(fields[9]) \(destination)/\(fields[1]) via \(fields[4]) metric \(fields[5])")
        interfaces.insert(fields[9])
        if fields[1] == "00", destination.allSatisfy({ $0 == "0" }) { snapshot.hasDefaultRoute = true }
      }
    }
    for (interface, address) in addresses where interfaces.contains(Substring(interface)) {
      snapshot.addresses.insert("\(interface) \(address)")
    }
    return snapshot
  }

  /// The IPv4 and IPv6 addresses of every interface, as text (link-local ones, 169.254.0.0/16 and
  /// fe80::/10, left out: they come and go with links and lead nowhere).
  public static let interfaceAddresses: @Sendable () -> [(interface: String, address: String)] = {
    var list: UnsafeMutablePointer<ifaddrs>?
    guard getifaddrs(&list) == 0 else { return [] }
    defer { freeifaddrs(list) }
    var found: [(interface: String, address: String)] = []
    var entry = list
    while let current = entry?.pointee {
      defer { entry = current.ifa_next }
      guard let address = current.ifa_addr, let name = current.ifa_name else { continue }
      let family = Int32(address.pointee.sa_family)
      guard family == AF_INET || family == AF_INET6 else { continue }
      var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
      let converted =
        family == AF_INET
        ? address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) {
          var raw = $0.pointee.sin_addr
          return inet_ntop(AF_INET, &raw, &text, socklen_t(text.count)) != nil
        }
        : address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) {
          var raw = $0.pointee.sin6_addr
          return inet_ntop(AF_INET6, &raw, &text, socklen_t(text.count)) != nil
        }
      guard converted else { continue }
      let textual = String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
      if ["fe8", "fe9", "fea", "feb", "169.254."].contains(where: { textual.lowercased().hasPrefix($0) }) { continue }
      found.append((String(cString: name), textual))
    }
    return found
  }

  /// Opens the netlink socket and starts watching. Calling it again while watching does nothing.
  ///
  /// - Throws: `TelemetryError.netlink` when the netlink socket or its wake-up eventfd cannot be
  ///   opened or bound; the monitor is then not watching.
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
    let addresses = self.addresses
    let onChange = self.onChange
    let thread = Thread {
      Self.run(socket: fd, wake: wakeFD, procRoot: procRoot, addresses: addresses, onChange: onChange)
      done.signal()
    }
    thread.name = "vault.connectivity"
    thread.start()
  }

  /// Stops watching and waits until the reading thread has closed its socket. Do not call it from
  /// the `onChange` callback, which runs on that thread.
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

  private static func run(
    socket fd: Int32, wake: Int32, procRoot: String,
    addresses: @Sendable () -> [(interface: String, address: String)], onChange: @Sendable () -> Void
  ) {
    defer { close(fd) }
    var last = snapshot(procRoot: procRoot, addresses: addresses())
    var buffer = [UInt8](repeating: 0, count: 16_384)
    var descriptors = [
      pollfd(fd: fd, events: Int16(POLLIN), revents: 0), pollfd(fd: wake, events: Int16(POLLIN), revents: 0),
    ]
    // While a burst is being collected: when its first and its latest message came (monotonic ns).
    var burst: (first: UInt64, latest: UInt64)?
    while true {
      descriptors[0].revents = 0
      descriptors[1].revents = 0
      var timeout: Int32 = -1
      if let burst {
        let deadline = min(burst.latest + quiet, burst.first + longestHold)
        let now = DispatchTime.now().uptimeNanoseconds
        timeout = deadline > now ? Int32((deadline - now + 999_999) / 1_000_000) : 0
      }
      let ready = poll(&descriptors, 2, timeout)
      if ready < 0, errno == EINTR { continue }
      if ready < 0 || descriptors[1].revents != 0 { return }  // stop() asked, or poll failed
      if ready == 0 {
        // The burst is over (or held long enough): judge the network as it is now.
        burst = nil
        let current = snapshot(procRoot: procRoot, addresses: addresses())
        if last.shouldWake(on: current) { onChange() }
        last = current
        continue
      }
      let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
      if count < 0, errno == EINTR || errno == EAGAIN { continue }
      // ENOBUFS: messages were lost; it is a change all the same, judged by the routes as they are.
      if count < 0, errno != ENOBUFS { return }
      if count == 0 { return }
      let now = DispatchTime.now().uptimeNanoseconds
      burst = (burst?.first ?? now, now)
    }
  }

  deinit { stop() }
}

/// The rtnetlink monitor as a `NetworkChangeSource`, for any delivery loop (`Telemetry.start`,
/// `Outbox.start(network:)`): each watch is a `ConnectivityMonitor` of its own.
public struct RouteChangeSource: NetworkChangeSource {
  /// Where each monitor reads `net/route` and `net/ipv6_route` (`/proc` unless a test gives its own).
  public let procRoot: String
  /// Where each monitor reads the interfaces' addresses (`getifaddrs` unless a test gives its own).
  public let addresses: @Sendable () -> [(interface: String, address: String)]

  /// Makes a source whose watches read routes under `procRoot` and addresses from `addresses`.
  ///
  /// - Parameters:
  ///   - procRoot: where `net/route` and `net/ipv6_route` are read (tests may point elsewhere).
  ///   - addresses: the interfaces' addresses (`getifaddrs` by default; tests pass their own).
  public init(
    procRoot: String = "/proc",
    addresses: @escaping @Sendable () -> [(interface: String, address: String)] = ConnectivityMonitor
      .interfaceAddresses
  ) {
    self.procRoot = procRoot
    self.addresses = addresses
  }

  /// Starts a `ConnectivityMonitor` that calls `onChange` after each change that may let delivery
  /// through.
  ///
  /// - Parameter onChange: called on the monitor's thread; it must return quickly.
  /// - Returns: the running monitor; stop it to stop watching.
  /// - Throws: `TelemetryError.netlink` when the netlink socket cannot be opened.
  public func watch(_ onChange: @escaping @Sendable () -> Void) throws -> any NetworkWatch {
    let monitor = ConnectivityMonitor(procRoot: procRoot, addresses: addresses, onChange: onChange)
    try monitor.start()
    return monitor
  }
}
