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
    /// A severity, least to most: `trace` (a pass starts), `debug` (counts per pass, each
    /// delivery), `info` (not used by the loops), `notice` (each retry scheduled), `warning`
    /// (parking and review), `error` (a failed pass or step), `critical` (not used by the loops);
    /// `logLevel` passes on its level and those after it.
    case trace, debug, info, notice, warning, error, critical

    /// Orders levels by severity: `trace` is the least severe, `critical` the most.
    ///
    /// - Parameters:
    ///   - lhs: a level.
    ///   - rhs: another level.
    /// - Returns: true when `lhs` is less severe than `rhs`.
    public static func < (lhs: Level, rhs: Level) -> Bool { lhs.rawValue < rhs.rawValue }

    /// The level's name in lowercase (`notice`), as swift-log spells it.
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

  /// Makes a logger that passes messages of `logLevel` and above to `handler`.
  ///
  /// - Parameters:
  ///   - label: names the component in every message.
  ///   - logLevel: the least severe level passed on.
  ///   - handler: where messages go; it is called on the thread that logs (the delivery loop's
  ///     thread, or a task running an outbox pass), so it must not block.
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
  ///
  /// - Parameter label: the new label.
  /// - Returns: a logger with `label`, this logger's level and handler.
  public func labelled(_ label: String) -> DeliveryLogger {
    DeliveryLogger(label: label, logLevel: logLevel, handler)
  }

  /// Hands the message to the handler when `level` is at least `logLevel`; the message and the
  /// metadata are built only then.
  ///
  /// - Parameters:
  ///   - level: the message's severity.
  ///   - message: the message; evaluated only when it is passed on.
  ///   - metadata: key-value context (ids, counts, kinds); evaluated only when it is passed on.
  public func log(
    level: Level, _ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata = [:]
  ) {
    guard let handler, level >= logLevel else { return }
    handler.log(level: level, message: message(), metadata: metadata(), label: label)
  }

  /// Logs at `.trace`, as `log(level:_:metadata:)`.
  ///
  /// - Parameters:
  ///   - message: the message; evaluated only when it is passed on.
  ///   - metadata: key-value context; evaluated only when it is passed on.
  public func trace(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata = [:]) {
    log(level: .trace, message(), metadata: metadata())
  }
  /// Logs at `.debug`, as `log(level:_:metadata:)`.
  ///
  /// - Parameters:
  ///   - message: the message; evaluated only when it is passed on.
  ///   - metadata: key-value context; evaluated only when it is passed on.
  public func debug(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata = [:]) {
    log(level: .debug, message(), metadata: metadata())
  }
  /// Logs at `.info`, as `log(level:_:metadata:)`.
  ///
  /// - Parameters:
  ///   - message: the message; evaluated only when it is passed on.
  ///   - metadata: key-value context; evaluated only when it is passed on.
  public func info(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata = [:]) {
    log(level: .info, message(), metadata: metadata())
  }
  /// Logs at `.notice`, as `log(level:_:metadata:)`.
  ///
  /// - Parameters:
  ///   - message: the message; evaluated only when it is passed on.
  ///   - metadata: key-value context; evaluated only when it is passed on.
  public func notice(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata = [:]) {
    log(level: .notice, message(), metadata: metadata())
  }
  /// Logs at `.warning`, as `log(level:_:metadata:)`.
  ///
  /// - Parameters:
  ///   - message: the message; evaluated only when it is passed on.
  ///   - metadata: key-value context; evaluated only when it is passed on.
  public func warning(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata = [:]) {
    log(level: .warning, message(), metadata: metadata())
  }
  /// Logs at `.error`, as `log(level:_:metadata:)`.
  ///
  /// - Parameters:
  ///   - message: the message; evaluated only when it is passed on.
  ///   - metadata: key-value context; evaluated only when it is passed on.
  public func error(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata = [:]) {
    log(level: .error, message(), metadata: metadata())
  }
  /// Logs at `.critical`, as `log(level:_:metadata:)`.
  ///
  /// - Parameters:
  ///   - message: the message; evaluated only when it is passed on.
  ///   - metadata: key-value context; evaluated only when it is passed on.
  public func critical(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata = [:]) {
    log(level: .critical, message(), metadata: metadata())
  }
}

/// Where a `DeliveryLogger` sends messages: the app's backend.
public protocol DeliveryLogHandler: Sendable {
  /// Takes one message the logger passed on (its level is at least the logger's `logLevel`).
  /// Called on the thread that logs: it must not block.
  ///
  /// - Parameters:
  ///   - level: the message's severity.
  ///   - message: the message: ids, counts and kinds, never a payload, token, header value or URL.
  ///   - metadata: key-value context (`id`, `error_kind`, `delivered`, …).
  ///   - label: the logger's label (`vault.outbox`, `vault.telemetry`).
  func log(level: DeliveryLogger.Level, message: String, metadata: DeliveryLogger.Metadata, label: String)
}

/// Keeps every message in memory: the in-memory twin for tests (and a debugging aid).
public final class InMemoryLogHandler: DeliveryLogHandler, @unchecked Sendable {
  /// One logged message.
  public struct Entry: Sendable, Equatable {
    /// The severity it was logged at.
    public var level: DeliveryLogger.Level
    /// The message, as the logger built it.
    public var message: String
    /// Its key-value context, for tests to match ids, kinds and counts against.
    public var metadata: DeliveryLogger.Metadata
    /// The label of the logger that logged it.
    public var label: String
  }

  private let lock = NSLock()
  private var kept: [Entry] = []

  /// Makes a handler that has kept nothing yet.
  public init() {}

  /// Keeps the message as an `Entry`; safe from any thread.
  ///
  /// - Parameters:
  ///   - level: the message's severity.
  ///   - message: the message.
  ///   - metadata: its key-value context.
  ///   - label: the logger's label.
  public func log(level: DeliveryLogger.Level, message: String, metadata: DeliveryLogger.Metadata, label: String) {
    lock.withLock { kept.append(Entry(level: level, message: message, metadata: metadata, label: label)) }
  }

  /// Every message so far, oldest first.
  public var entries: [Entry] { lock.withLock { kept } }
}
