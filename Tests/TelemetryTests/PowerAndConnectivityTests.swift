import Foundation
import Vault
import VaultKeys
import VaultQueue
import VaultTestSupport
import XCTest

@testable import Telemetry

final class PowerTests: XCTestCase {
  private func sysfs(profile: String?, batteries: [(capacity: Int, status: String)]) throws -> String {
    let root = TemporaryDirectory()
    retained.append(root)
    if let profile {
      try FileManager.default.createDirectory(atPath: root.sub("firmware/acpi"), withIntermediateDirectories: true)
      try (profile + "\n").write(toFile: root.sub("firmware/acpi/platform_profile"), atomically: true, encoding: .utf8)
    }
    let ac = root.sub("class/power_supply/AC")
    try FileManager.default.createDirectory(atPath: ac, withIntermediateDirectories: true)
    try "Mains\n".write(toFile: ac + "/type", atomically: true, encoding: .utf8)
    for (index, battery) in batteries.enumerated() {
      let path = root.sub("class/power_supply/BAT\(index)")
      try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
      try "Battery\n".write(toFile: path + "/type", atomically: true, encoding: .utf8)
      try "\(battery.capacity)\n".write(toFile: path + "/capacity", atomically: true, encoding: .utf8)
      try "\(battery.status)\n".write(toFile: path + "/status", atomically: true, encoding: .utf8)
    }
    return root.path
  }

  private var retained: [TemporaryDirectory] = []

  func testReadsProfileAndBatteries() throws {
    let state = PowerMonitor(
      sysRoot: try sysfs(profile: "low-power", batteries: [(80, "Discharging"), (15, "Charging")])
    ).read()
    XCTAssertEqual(state, PowerState(powerSaver: true, batteryPercent: 15, onBattery: true))
    XCTAssertEqual(PowerMonitor(sysRoot: try sysfs(profile: nil, batteries: [])).read(), PowerState())
    XCTAssertEqual(PowerMonitor(sysRoot: "/nonexistent").read(), PowerState(), "no sysfs means no stretching")
  }

  func testPolicyStretchesOnlyInPowerSaverOrOnALowBattery() {
    let policy = PowerPolicy(stretch: 4, lowBattery: 20)
    XCTAssertEqual(policy.interval(base: 60, state: PowerState()), 60)
    XCTAssertEqual(policy.interval(base: 60, state: PowerState(powerSaver: true)), 240)
    XCTAssertEqual(policy.interval(base: 60, state: PowerState(batteryPercent: 15, onBattery: true)), 240)
    XCTAssertEqual(policy.interval(base: 60, state: PowerState(batteryPercent: 15, onBattery: false)), 60, "charging")
    XCTAssertEqual(policy.interval(base: 60, state: PowerState(batteryPercent: 50, onBattery: true)), 60)
    XCTAssertEqual(policy.interval(base: 60, state: PowerState(batteryPercent: 20, onBattery: true)), 240)
  }

  /// A stretch below 1 (or NaN) never makes short power run the loop more often: a stretch of 0
  /// made the loop run as often as it could in power-saver (an outside review).
  func testAStretchBelowOneIsOne() {
    for stretch in [0, -1, 0.5, .nan, -.infinity] {
      XCTAssertEqual(PowerPolicy(stretch: stretch).interval(base: 60, state: PowerState(powerSaver: true)), 60)
    }
    XCTAssertEqual(PowerPolicy(stretch: 1.5).interval(base: 60, state: PowerState(powerSaver: true)), 90)
  }
}

final class ConnectivityTests: XCTestCase {
  private func proc(_ route: String, _ ipv6: String = "") throws -> (TemporaryDirectory, String) {
    let root = TemporaryDirectory()
    try FileManager.default.createDirectory(atPath: root.sub("net"), withIntermediateDirectories: true)
    try route.write(toFile: root.sub("net/route"), atomically: true, encoding: .utf8)
    try ipv6.write(toFile: root.sub("net/ipv6_route"), atomically: true, encoding: .utf8)
    return (root, root.path)
  }

  let header = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"

  private func v4(_ iface: String, _ destination: String, _ gateway: String, _ mask: String, metric: Int = 0) -> String
  {
    "\(iface)\t\(destination)\t\(gateway)\t\(gateway == "00000000" ? "0001" : "0003")\t0\t0\t\(metric)\t\(mask)\t0\t0\t0\n"
  }

  private func v6(_ iface: String, _ destination: String, _ prefix: String, flags: String = "00000001") -> String {
    "\(destination) \(prefix) 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 \(flags)     \(iface)\n"
  }

  private func snapshot(
    _ routes: [String], _ ipv6: [String] = [], addresses: [(interface: String, address: String)] = []
  ) throws -> ConnectivityMonitor.Snapshot {
    let (root, path) = try proc(header + routes.joined(), ipv6.joined())
    defer { _ = root }
    return ConnectivityMonitor.snapshot(procRoot: path, addresses: addresses)
  }

  /// Online means a usable default route: a bridge's route (docker0, virbr0) alone is not online.
  func testOnlyAUsableDefaultRouteCountsAsOnline() throws {
    XCTAssertFalse(try snapshot([v4("lo", "0000007F", "00000000", "000000FF")]).hasDefaultRoute)
    let bridge = try snapshot([v4("docker0", "000011AC", "00000000", "0000FFFF")])
    XCTAssertFalse(bridge.hasDefaultRoute, "a bridge is not a way out")
    XCTAssertFalse(bridge.routes.isEmpty, "but it is a usable route (to the bridge)")
    XCTAssertTrue(try snapshot([v4("eth0", "00000000", "0102A8C0", "00000000", metric: 100)]).hasDefaultRoute)
    let zero = String(repeating: "0", count: 32)
    XCTAssertTrue(try snapshot([], [v6("eth0", zero, "00", flags: "00000003")]).hasDefaultRoute)
    let prefix = try snapshot([], [v6("eth0", "20010db8000000000000000000000000", "40")])
    XCTAssertFalse(prefix.hasDefaultRoute)
    XCTAssertFalse(prefix.routes.isEmpty)
    // A namespace's unreachable ::/0 through lo, link-local and multicast routes are not usable.
    let unusable = try snapshot(
      [],
      [
        v6("lo", zero, "00", flags: "00200200"), v6("eth0", "fe800000000000000000000000000000", "40"),
        v6("eth0", "ff000000000000000000000000000000", "08"), v6("eth0", zero, "00", flags: "00000201"),
      ])
    XCTAssertEqual(unusable, ConnectivityMonitor.Snapshot())
  }

  /// Issue 9 item 9: a bridge that was up all along hid the real link's return. Now any change of
  /// usable routes, or of the addresses on their interfaces, wakes delivery.
  func testEveryChangeThatMayLetDeliveryThroughWakes() throws {
    let bridge = v4("br-x", "00630A0A", "00000000", "00FFFFFF")
    let wifiDefault = v4("wlan0", "00000000", "0101A8C0", "00000000", metric: 600)
    let wifiSubnet = v4("wlan0", "0001A8C0", "00000000", "00FFFFFF", metric: 600)
    let bridgeOnly = try snapshot([bridge])
    XCTAssertTrue(bridgeOnly.shouldWake(on: try snapshot([bridge, v4("vc0", "0007D50A", "00000000", "00FFFFFF")])))
    XCTAssertTrue(
      bridgeOnly.shouldWake(on: try snapshot([bridge, wifiDefault, wifiSubnet])), "a default route appears")
    let home = try snapshot([wifiDefault, wifiSubnet], addresses: [("wlan0", "192.168.1.23")])
    XCTAssertTrue(
      home.shouldWake(on: try snapshot([v4("wlan0", "00000000", "FE01A8C0", "00000000", metric: 600), wifiSubnet])),
      "another gateway")
    XCTAssertTrue(
      home.shouldWake(
        on: try snapshot([wifiDefault, wifiSubnet, v4("tun0", "00000000", "00000000", "00000000", metric: 50)])),
      "a VPN's default route")
    XCTAssertTrue(
      home.shouldWake(on: try snapshot([wifiDefault, wifiSubnet], addresses: [("wlan0", "192.168.1.77")])),
      "a new address on the interface with the default route")
    XCTAssertFalse(
      home.shouldWake(
        on: try snapshot([wifiDefault, wifiSubnet], addresses: [("wlan0", "192.168.1.23"), ("eth1", "10.0.0.5")])),
      "an address on an interface without a route")
    XCTAssertFalse(
      home.shouldWake(on: try snapshot([wifiDefault, wifiSubnet], addresses: [("wlan0", "192.168.1.23")])))
    XCTAssertFalse(home.shouldWake(on: try snapshot([])), "going offline wakes nothing")
    XCTAssertFalse(
      home.shouldWake(
        on: try snapshot(
          [wifiDefault, wifiSubnet], [v6("wlan0", "fe800000000000000000000000000000", "40")],
          addresses: [("wlan0", "192.168.1.23")])),
      "a link-local route appearing leads nowhere new")
    XCTAssertFalse(
      home.shouldWake(
        on: try snapshot(
          [wifiDefault, wifiSubnet, v4("wlan0", "0000FEA9", "00000000", "0000FFFF", metric: 1000)],
          addresses: [("wlan0", "192.168.1.23")])),
      "nor an IPv4 link-local one (169.254.0.0/16, NetworkManager's)")
    XCTAssertEqual(
      try snapshot([v4("eth0", "0000FEA9", "00000000", "0000FFFF", metric: 1000)]), ConnectivityMonitor.Snapshot(),
      "a link-local route alone is no usable route")
    XCTAssertFalse(
      try snapshot([v4("eth0", "0000FEA8", "00000000", "0000FFFF")]).routes.isEmpty, "168.254.0.0/16 is usable")
  }

  func testRealAddressesAreListedWithoutLinkLocalOnes() {
    let addresses = ConnectivityMonitor.interfaceAddresses()
    XCTAssertTrue(addresses.contains { $0.interface == "lo" && $0.address == "127.0.0.1" }, "\(addresses)")
    XCTAssertFalse(addresses.contains { $0.address.lowercased().hasPrefix("fe80") })
    XCTAssertFalse(addresses.contains { $0.address.hasPrefix("169.254.") })
  }

  func testTheMonitorOpensAndClosesARealNetlinkSocket() throws {
    let monitor = ConnectivityMonitor {}
    try monitor.start()
    monitor.stop()
  }
}

final class TelemetryLoopTests: XCTestCase {
  func testTheBackgroundLoopDeliversOnStartOnTriggerAndStops() throws {
    let temporary = TemporaryDirectory()
    let vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(InMemoryKeyStore()))
    let container = try QueueContainer(path: temporary.sub("home/q.sqlite"), vault: vault)
    let sender = ScriptedSender()
    let telemetry = Telemetry(
      container: container, configuration: TelemetryConfiguration(interval: 3600), tokens: CountingTokens(),
      sender: sender)
    try telemetry.log(type: "before_start")
    let passes = PassLog()
    try telemetry.start(power: PowerMonitor(sysRoot: "/nonexistent"), watchConnectivity: true) { passes.add($0) }
    defer { telemetry.stop() }
    try wait { passes.delivered == 1 }
    try telemetry.log(type: "after_start")
    telemetry.trigger(resetBackoff: true)
    try wait { passes.delivered == 2 }
    telemetry.stop()
    try telemetry.log(type: "after_stop")
    Thread.sleep(forTimeInterval: 0.2)
    XCTAssertEqual(passes.delivered, 2, "a stopped loop sends nothing")
    XCTAssertEqual(try container.count(queue: Telemetry.queueName, state: .pending), 1)
  }

  /// stop() must end the loop even when a pass (which schedules the next timer) is running.
  func testStopEndsAFastLoopForGood() throws {
    let temporary = TemporaryDirectory()
    let vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(InMemoryKeyStore()))
    let container = try QueueContainer(path: temporary.sub("home/q.sqlite"), vault: vault)
    let telemetry = Telemetry(
      container: container, configuration: TelemetryConfiguration(interval: 0.02), tokens: CountingTokens(),
      sender: ScriptedSender())
    let passes = PassCounter()
    for _ in 0..<5 {
      try telemetry.start(power: PowerMonitor(sysRoot: "/nonexistent"), watchConnectivity: true) { _ in passes.add() }
      Thread.sleep(forTimeInterval: 0.1)
      telemetry.stop()
      let atStop = passes.value
      Thread.sleep(forTimeInterval: 0.3)
      XCTAssertEqual(passes.value, atStop, "no pass after stop() returned")
    }
    XCTAssertGreaterThan(passes.value, 5)
  }

  /// stop() while a pass is sending: the pass finishes, no timer is armed, nothing crashes.
  func testStopDuringASlowPass() throws {
    final class SlowSender: BatchSender, @unchecked Sendable {
      func send(_ batch: TelemetryBatch, token: String) -> SendResult {
        Thread.sleep(forTimeInterval: 0.3)
        return .status(200, retryAfter: nil)
      }
    }
    let temporary = TemporaryDirectory()
    let vault = try Vault.create(
      home: temporary.sub("home"), store: StoreDescriptor(kind: .memory), resolver: .fixed(InMemoryKeyStore()))
    let container = try QueueContainer(path: temporary.sub("home/q.sqlite"), vault: vault)
    let telemetry = Telemetry(
      container: container, configuration: TelemetryConfiguration(interval: 0.05), tokens: CountingTokens(),
      sender: SlowSender())
    let passes = PassCounter()
    for round in 0..<3 {
      try telemetry.log(type: "tap", payload: ["round": .number(Double(round))])
      try telemetry.start(power: PowerMonitor(sysRoot: "/nonexistent"), watchConnectivity: false) { _ in passes.add() }
      Thread.sleep(forTimeInterval: 0.1)  // the first pass is inside the slow send
      telemetry.stop()
      let atStop = passes.value
      Thread.sleep(forTimeInterval: 0.3)
      XCTAssertEqual(passes.value, atStop)
    }
    XCTAssertEqual(try container.count(queue: Telemetry.queueName, state: .pending), 0)
  }

  func testAStoppedMonitorReleasesItsThreadAndCanStartAgain() throws {
    let monitor = ConnectivityMonitor {}
    for _ in 0..<20 {
      try monitor.start()
      let started = Date()
      monitor.stop()
      XCTAssertLessThan(Date().timeIntervalSince(started), 2, "stop() wakes the reader instead of waiting for an event")
    }
  }

  func testEventsRoundTripThroughJSON() throws {
    let event = TelemetryEvent(
      id: UUID(), date: Date(timeIntervalSince1970: 1_800_000_000.123), type: "t",
      payload: [
        "s": .string("x"), "n": .number(1.5), "i": .number(3), "b": .bool(false), "z": .null,
        "a": .array([.number(1), .string("y")]), "o": .object(["k": .bool(true)]),
      ], sessionID: "s1")
    let json = try event.encoded()
    XCTAssertEqual(try JSONDecoder().decode(TelemetryEvent.self, from: Data(json)), event)
    let text = String(decoding: json, as: UTF8.self)
    XCTAssertTrue(text.contains(#""ts":"2027-01-15T08:00:00.123Z""#), text)
    XCTAssertTrue(text.contains(#""i":3"#), "whole numbers have no fraction: \(text)")
    XCTAssertTrue(text.contains(#""id":"\#(event.id.uuidString.lowercased())""#))
    XCTAssertThrowsError(
      try JSONDecoder().decode(
        TelemetryEvent.self, from: Data(#"{"id":"nope","ts":"","type":"","payload":{},"session_id":""}"#.utf8)))
  }

  private func wait(_ condition: () -> Bool) throws {
    let deadline = Date() + 10
    while !condition() {
      guard Date() < deadline else { return XCTFail("not reached within 10 s") }
      Thread.sleep(forTimeInterval: 0.02)
    }
  }
}

final class PassCounter: @unchecked Sendable {
  private let lock = NSLock()
  private var count = 0
  func add() { lock.withLock { count += 1 } }
  var value: Int { lock.withLock { count } }
}

final class PassLog: @unchecked Sendable {
  private let lock = NSLock()
  private var total = 0
  func add(_ report: FlushReport) { lock.withLock { total += report.delivered } }
  var delivered: Int { lock.withLock { total } }
}
