import Foundation

/// What the system says about power, read from sysfs.
public struct PowerState: Equatable, Sendable {
  /// The platform profile is "low-power" (the power-saver profile).
  public var powerSaver: Bool
  /// The lowest battery charge, in percent, when a battery exists.
  public var batteryPercent: Int?
  /// Some battery is discharging (running on battery).
  public var onBattery: Bool

  public init(powerSaver: Bool = false, batteryPercent: Int? = nil, onBattery: Bool = false) {
    self.powerSaver = powerSaver
    self.batteryPercent = batteryPercent
    self.onBattery = onBattery
  }
}

/// Reads the power state from a sysfs tree (`/sys` by default; tests give a directory of their own).
public struct PowerMonitor: Sendable {
  public let sysRoot: String

  public init(sysRoot: String = "/sys") { self.sysRoot = sysRoot }

  public func read() -> PowerState {
    var state = PowerState()
    if let profile = Self.text(sysRoot + "/firmware/acpi/platform_profile") {
      state.powerSaver = profile == "low-power"
    }
    let supplies = sysRoot + "/class/power_supply"
    for name in (try? FileManager.default.contentsOfDirectory(atPath: supplies)) ?? [] {
      let base = supplies + "/" + name
      guard Self.text(base + "/type") == "Battery" else { continue }
      if let capacity = Self.text(base + "/capacity").flatMap(Int.init) {
        state.batteryPercent = min(state.batteryPercent ?? 100, capacity)
      }
      if Self.text(base + "/status") == "Discharging" { state.onBattery = true }
    }
    return state
  }

  static func text(_ path: String) -> String? {
    (try? String(contentsOfFile: path, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines)
  }
}

/// How power stretches the periodic flush: in power-saver, or on a battery at or below
/// `lowBattery` percent, the interval is multiplied by `stretch`. It never drops data, and an
/// explicit flush or a connectivity trigger is never delayed by it.
public struct PowerPolicy: Equatable, Sendable {
  public var stretch: Double
  public var lowBattery: Int

  public init(stretch: Double = 4, lowBattery: Int = 20) {
    self.stretch = stretch
    self.lowBattery = lowBattery
  }

  public func interval(base: TimeInterval, state: PowerState) -> TimeInterval {
    let low = state.onBattery && (state.batteryPercent ?? 100) <= lowBattery
    return state.powerSaver || low ? base * stretch : base
  }
}
