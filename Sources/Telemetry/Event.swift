import Foundation

/// A JSON value for event payloads: strings, numbers, booleans, null, arrays and objects.
public indirect enum JSONValue: Codable, Equatable, Sendable {
  case null
  case bool(Bool)
  case number(Double)
  case string(String)
  case array([JSONValue])
  case object([String: JSONValue])

  public init(from decoder: any Decoder) throws {
    let container = try decoder.singleValueContainer()
    if container.decodeNil() {
      self = .null
    } else if let value = try? container.decode(Bool.self) {
      self = .bool(value)
    } else if let value = try? container.decode(Double.self) {
      self = .number(value)
    } else if let value = try? container.decode(String.self) {
      self = .string(value)
    } else if let value = try? container.decode([JSONValue].self) {
      self = .array(value)
    } else {
      self = .object(try container.decode([String: JSONValue].self))
    }
  }

  public func encode(to encoder: any Encoder) throws {
    var container = encoder.singleValueContainer()
    switch self {
    case .null: try container.encodeNil()
    case .bool(let value): try container.encode(value)
    case .number(let value):
      // Whole numbers go out without a fraction, as an integer-minded server expects.
      if value.rounded() == value, abs(value) < 1e15 {
        try container.encode(Int64(value))
      } else {
        try container.encode(value)
      }
    case .string(let value): try container.encode(value)
    case .array(let value): try container.encode(value)
    case .object(let value): try container.encode(value)
    }
  }
}

/// One telemetry event, as it travels in a batch and as it is sealed at rest (type and payload
/// included).
public struct TelemetryEvent: Codable, Equatable, Sendable {
  public var id: UUID
  /// ISO 8601 in UTC with milliseconds, e.g. 2026-11-30T10:15:02.123Z.
  public var ts: String
  public var type: String
  public var payload: [String: JSONValue]
  public var sessionID: String

  enum CodingKeys: String, CodingKey {
    case id, ts, type, payload
    case sessionID = "session_id"
  }

  public init(id: UUID = UUID(), date: Date, type: String, payload: [String: JSONValue], sessionID: String) {
    self.id = id
    self.ts = Self.format(date)
    self.type = type
    self.payload = payload
    self.sessionID = sessionID
  }

  static func format(_ date: Date) -> String {
    let formatter = ISO8601DateFormatter()
    formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
    formatter.timeZone = TimeZone(identifier: "UTC")
    return formatter.string(from: date)
  }

  public init(from decoder: any Decoder) throws {
    let values = try decoder.container(keyedBy: CodingKeys.self)
    guard let id = UUID(uuidString: try values.decode(String.self, forKey: .id)) else {
      throw DecodingError.dataCorruptedError(forKey: .id, in: values, debugDescription: "not a UUID")
    }
    self.id = id
    ts = try values.decode(String.self, forKey: .ts)
    type = try values.decode(String.self, forKey: .type)
    payload = try values.decode([String: JSONValue].self, forKey: .payload)
    sessionID = try values.decode(String.self, forKey: .sessionID)
  }

  public func encode(to encoder: any Encoder) throws {
    var values = encoder.container(keyedBy: CodingKeys.self)
    try values.encode(id.lowercased, forKey: .id)
    try values.encode(ts, forKey: .ts)
    try values.encode(type, forKey: .type)
    try values.encode(payload, forKey: .payload)
    try values.encode(sessionID, forKey: .sessionID)
  }

  /// The event's JSON, as sealed at rest and sent on the wire.
  func encoded() throws -> [UInt8] {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    return Array(try encoder.encode(self))
  }
}

extension UUID {
  // The wire and the queue use lowercase ids.
  var lowercased: String { uuidString.lowercased() }
}
