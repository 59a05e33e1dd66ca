import Foundation

/// A JSON value for event payloads: strings, numbers, booleans, null, arrays and objects.
///
/// Numbers keep their text (`JSONNumber`), so a payload parsed with `init(parsing:)` and sent with
/// `serialized()` carries every number exactly as written. Codable is kept for convenience but goes
/// through Int64, UInt64 or Double, so it may round numbers that do not fit those.
public indirect enum JSONValue: Codable, Equatable, Sendable {
  case null
  case bool(Bool)
  case number(JSONNumber)
  case string(String)
  case array([JSONValue])
  case object([String: JSONValue])

  /// A number from a Double (`3` for whole values below 10^15, else the shortest form that reads
  /// back as the same Double). NaN and infinities, which JSON cannot express, become `null`.
  public static func number(_ value: Double) -> JSONValue {
    JSONNumber(value).map(JSONValue.number) ?? .null
  }

  /// A number from an integer, exactly.
  public static func number(_ value: Int) -> JSONValue { .number(JSONNumber(value)) }

  public init(from decoder: any Decoder) throws {
    let container = try decoder.singleValueContainer()
    if container.decodeNil() {
      self = .null
    } else if let value = try? container.decode(Bool.self) {
      self = .bool(value)
    } else if let value = try? container.decode(Int64.self) {
      self = .number(JSONNumber(value))
    } else if let value = try? container.decode(UInt64.self) {
      self = .number(JSONNumber(value))
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
      if let integer = Int64(value.text) {
        try container.encode(integer)
      } else if let integer = UInt64(value.text) {
        try container.encode(integer)
      } else {
        try container.encode(value.doubleValue)
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

  /// The event's JSON, as sealed at rest and sent on the wire: compact, keys sorted, payload
  /// numbers exactly as held (not through JSONEncoder, which would turn them into Doubles).
  func encoded() throws -> [UInt8] {
    JSONValue.object([
      "id": .string(id.lowercased), "ts": .string(ts), "type": .string(type), "payload": .object(payload),
      "session_id": .string(sessionID),
    ]).serialized()
  }
}

extension UUID {
  // The wire and the queue use lowercase ids.
  var lowercased: String { uuidString.lowercased() }
}

// Literals, so a payload reads as JSON does: `["screen": "home", "taps": 3, "ok": true]`.
extension JSONValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral,
  ExpressibleByBooleanLiteral, ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral, ExpressibleByNilLiteral
{
  public init(stringLiteral value: String) { self = .string(value) }
  public init(integerLiteral value: Int) { self = .number(JSONNumber(value)) }
  /// A float literal; one JSON cannot express (none can be written as a literal) becomes `null`.
  public init(floatLiteral value: Double) { self = .number(value) }
  public init(booleanLiteral value: Bool) { self = .bool(value) }
  public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
  /// An object literal; a key given twice keeps its last value, as JSON parsers do.
  public init(dictionaryLiteral elements: (String, JSONValue)...) {
    self = .object(Dictionary(elements, uniquingKeysWith: { _, last in last }))
  }
  public init(nilLiteral: ()) { self = .null }
}

extension JSONValue {
  /// The JSON value an `Encodable` encodes to (through `JSONEncoder` and vault's strict parser),
  /// so an app's own payload type can be logged as it is.
  /// - Parameter value: any `Encodable`; its encoding must be a JSON object for an event payload.
  /// - Throws: `EncodingError` when it does not encode, `JSONParseError` when the result is not
  ///   within the parser's limits.
  public init(encoding value: some Encodable) throws {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    let data = try encoder.encode(value)
    self = try JSONValue(parsing: Array(data))
  }
}
