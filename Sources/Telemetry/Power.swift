import Foundation

/// What the system says about power, read from sysfs.
public struct PowerState: Equatable, Sendable {
  /// The platform profile is "low-power" (the power-saver profile).
  public var powerSaver: Bool
  /// The lowest battery charge, in percent, when a battery exists.
  public var batteryPercent: Int?
  /// Some battery is discharging (running on battery).
  public var onBattery: Bool

  /// Makes a state (tests make their own; the loop reads `PowerMonitor.read()`).
  ///
  /// - Parameters:
  ///   - powerSaver: the power-saver profile is on.
  ///   - batteryPercent: the lowest battery charge in percent; nil when there is no battery.
  ///   - onBattery: some battery is discharging.
  public init(powerSaver: Bool = false, batteryPercent: Int? = nil, onBattery: Bool = false) {
    self.powerSaver = powerSaver
    self.batteryPercent = batteryPercent
    self.onBattery = onBattery
  }
}

/// Reads the power state from a sysfs tree (`/sys` by default; tests give a directory of their own).
public struct PowerMonitor: Sendable {
  /// The root of the sysfs tree read (`/sys` unless a test gives its own).
  public let sysRoot: String

  /// Makes a monitor over `sysRoot`.
  ///
  /// - Parameter sysRoot: the sysfs root; `/sys` by default.
  public init(sysRoot: String = "/sys") { self.sysRoot = sysRoot }

  /// Reads the power state now: `firmware/acpi/platform_profile` (`low-power` is power-saver)
  /// and every `class/power_supply/*` of type `Battery` (its `capacity` and `status`).
  ///
  /// - Returns: the state; a file that cannot be read counts as not power-saver, no battery, not
  ///   discharging.
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
  /// What the interval is multiplied by when power is short (4 by default).
  public var stretch: Double
  /// The battery charge, in percent, at or below which a discharging battery stretches the
  /// interval (20 by default).
  public var lowBattery: Int

  /// Makes a policy.
  ///
  /// - Parameters:
  ///   - stretch: the factor applied to the interval when power is short (below 1, or NaN: 1).
  ///   - lowBattery: the charge, in percent, at or below which a discharging battery counts as low.
  public init(stretch: Double = 4, lowBattery: Int = 20) {
    self.stretch = stretch
    self.lowBattery = lowBattery
  }

  /// The loop's period for `state`.
  ///
  /// - Parameters:
  ///   - base: the configured interval, in seconds.
  ///   - state: the power state just read.
  /// - Returns: `base × stretch` in power-saver, or on a discharging battery at or below
  ///   `lowBattery` percent (an unknown charge counts as 100); else `base`. A stretch below 1, or
  ///   NaN, is taken as 1: short power never makes the loop run more often (a stretch of 0 made
  ///   it run as often as it could, an outside review).
  public func interval(base: TimeInterval, state: PowerState) -> TimeInterval {
    let low = state.onBattery && (state.batteryPercent ?? 100) <= lowBattery
    return state.powerSaver || low ? base * (stretch >= 1 ? stretch : 1) : base
  }
}
