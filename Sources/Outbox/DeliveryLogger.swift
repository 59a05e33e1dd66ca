import Foundation

/// A logger an app hands to the outbox and telemetry, shaped like swift-log's `Logger` (a label,
/// a level, a message and string metadata) so an app can forward it to swift-log, os_log or
/// journald in a few lines. The default, `DeliveryLogger.disabled`, logs nothing.
///
/// What the library logs: record ids, counts, error kinds, due times. Never a payload, a token, a
/// header value or a URL.
public struct DeliveryLogger: Sendable {
  /// From the most detailed to the most severe, as swift-log's `Logger.Level`.
  public enum Level: Int, Sendable, Comparable, CaseIterable, CustomStringConvertible {
    case trace, debug, info, notice, warning, error, critical

    public static func < (lhs: Level, rhs: Level) -> Bool { lhs.rawValue < rhs.rawValue }

    public var description: String {
      switch self {
      case .trace: "trace"
      case .debug: "debug"
      case .info: "info"
      case .notice: "notice"
      case .warning: "warning"
      case .error: "error"
      case .critical: "critical"
      }
    }
  }

  /// Key-value context of one message (`id`, `error_kind`, `delivered`, …).
  public typealias Metadata = [String: String]

  /// Names the component that logs (`vault.outbox`, `vault.telemetry`).
  public var label: String
  /// Messages below this level are neither built nor handed to the handler.
  public var logLevel: Level
  private let handler: (any DeliveryLogHandler)?

  /// - Parameters:
  ///   - label: names the component in every message.
  ///   - logLevel: the least severe level passed on.
  ///   - handler: where messages go; it is called on the delivery loop's thread, so it must not block.
  public init(label: String, logLevel: Level = .info, handler: any DeliveryLogHandler) {
    self.label = label
    self.logLevel = logLevel
    self.handler = handler
  }

  /// Logs nothing (the default of every loop).
  public static let disabled = DeliveryLogger(label: "", logLevel: .critical, nil)

  private init(label: String, logLevel: Level, _ handler: (any DeliveryLogHandler)?) {
    self.label = label
    self.logLevel = logLevel
    self.handler = handler
  }

  /// The same handler and level under another label (the outbox and telemetry share one logger).
  public func labelled(_ label: String) -> DeliveryLogger {
    DeliveryLogger(label: label, logLevel: logLevel, handler)
  }

  /// Hands the message to the handler when `level` is at least `logLevel`; the message and the
  /// metadata are built only then.
  public func log(
    level: Level, _ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata = [:]
  ) {
    guard let handler, level >= logLevel else { return }
    handler.log(level: level, message: message(), metadata: metadata(), label: label)
  }

  public func trace(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata = [:]) {
    log(level: .trace, message(), metadata: metadata())
  }
  public func debug(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata = [:]) {
    log(level: .debug, message(), metadata: metadata())
  }
  public func info(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata = [:]) {
    log(level: .info, message(), metadata: metadata())
  }
  public func notice(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata = [:]) {
    log(level: .notice, message(), metadata: metadata())
  }
  public func warning(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata = [:]) {
    log(level: .warning, message(), metadata: metadata())
  }
  public func error(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata = [:]) {
    log(level: .error, message(), metadata: metadata())
  }
  public func critical(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata = [:]) {
    log(level: .critical, message(), metadata: metadata())
  }
}

/// Where a `DeliveryLogger` sends messages: the app's backend.
public protocol DeliveryLogHandler: Sendable {
  func log(level: DeliveryLogger.Level, message: String, metadata: DeliveryLogger.Metadata, label: String)
}

/// Keeps every message in memory: the in-memory twin for tests (and a debugging aid).
public final class InMemoryLogHandler: DeliveryLogHandler, @unchecked Sendable {
  /// One logged message.
  public struct Entry: Sendable, Equatable {
    public var level: DeliveryLogger.Level
    public var message: String
    public var metadata: DeliveryLogger.Metadata
    public var label: String
  }

  private let lock = NSLock()
  private var kept: [Entry] = []

  public init() {}

  public func log(level: DeliveryLogger.Level, message: String, metadata: DeliveryLogger.Metadata, label: String) {
    lock.withLock { kept.append(Entry(level: level, message: message, metadata: metadata, label: label)) }
  }

  /// Every message so far, oldest first.
  public var entries: [Entry] { lock.withLock { kept } }
}
