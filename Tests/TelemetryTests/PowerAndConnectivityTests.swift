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

  func testOnlyANonLoopbackRouteCountsAsOnline() throws {
    let (a, offline) = try proc(header + "lo\t0000007F\t00000000\t0001\t0\t0\t0\t000000FF\t0\t0\t0\n")
    XCTAssertFalse(ConnectivityMonitor.hasRoute(procRoot: offline))
    let (b, online) = try proc(header + "eth0\t00000000\t0102A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n")
    XCTAssertTrue(ConnectivityMonitor.hasRoute(procRoot: online))
    let v6 =
      "20010db8000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0\n"
    let (c, onlineV6) = try proc(header, v6)
    XCTAssertTrue(ConnectivityMonitor.hasRoute(procRoot: onlineV6))
    let linkLocal =
      "fe800000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0\n"
    let (d, onlyLinkLocal) = try proc(header, linkLocal)
    XCTAssertFalse(ConnectivityMonitor.hasRoute(procRoot: onlyLinkLocal))
    _ = (a, b, c, d)
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
      date: Date(timeIntervalSince1970: 1_800_000_000.123), type: "t",
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
