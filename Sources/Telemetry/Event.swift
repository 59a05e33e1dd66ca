import Foundation
import Vault
import VaultQueue

/// A JSON value for event payloads: strings, numbers, booleans, null, arrays and objects.
///
/// Numbers keep their text (`JSONNumber`), so a payload parsed with `init(parsing:)` and sent with
/// `serialized()` carries every number exactly as written. Codable is kept for convenience but goes
/// through Int64, UInt64 or Double, so it may round numbers that do not fit those.
public indirect enum JSONValue: Codable, Equatable, Sendable {
  /// JSON `null`: a field present without a value.
  case null
  /// `true` or `false`.
  case bool(Bool)
  /// A number, kept as its text so it is sent exactly as written.
  case number(JSONNumber)
  /// A string (any Unicode; escaped on output only where JSON requires it).
  case string(String)
  /// An ordered list of values.
  case array([JSONValue])
  /// An object; serialized with its keys sorted by their UTF-8 bytes.
  case object([String: JSONValue])

  /// A number from a Double (`3` for whole values below 10^15, else the shortest form that reads
  /// back as the same Double). NaN and infinities, which JSON cannot express, become `null`.
  ///
  /// - Parameter value: the number.
  /// - Returns: `.number`, or `.null` for NaN and infinities.
  public static func number(_ value: Double) -> JSONValue {
    JSONNumber(value).map(JSONValue.number) ?? .null
  }

  /// A number from an integer, exactly.
  ///
  /// - Parameter value: the number.
  /// - Returns: `.number` holding its decimal text.
  public static func number(_ value: Int) -> JSONValue { .number(JSONNumber(value)) }

  /// Decodes any JSON value through `Decoder`; numbers go through Int64, UInt64 or Double and may
  /// be rounded (use `init(parsing:limits:)` to keep them exact).
  ///
  /// - Parameter decoder: the decoder holding one value.
  /// - Throws: `DecodingError` when the value is none of JSON's kinds.
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

  /// Encodes the value through `Encoder`; a number that is not an Int64 or UInt64 is encoded as
  /// the nearest Double (use `serialized()` to keep it exact).
  ///
  /// - Parameter encoder: the encoder to write to.
  /// - Throws: what the encoder throws (JSONEncoder refuses a number too large for a Double).
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
public struct TelemetryEvent: Codable, Equatable, Sendable, CustomStringConvertible, CustomDebugStringConvertible,
  CustomReflectable
{
  /// The event's id (its record id in the queue), for the collector to deduplicate by.
  public var id: UUID
  /// ISO 8601 in UTC with milliseconds, e.g. 2026-11-30T10:15:02.123Z.
  public var ts: String
  /// What happened, as the app names it (`note_added`).
  public var type: String
  /// The event's data, a JSON object; its numbers are sent exactly as held.
  public var payload: [String: JSONValue]
  /// The session the event belongs to (`session_id` on the wire).
  public var sessionID: String

  enum CodingKeys: String, CodingKey {
    case id, ts, type, payload
    case sessionID = "session_id"
  }

  /// `TelemetryEvent(ID, type: T, ts: TS, payload: N keys)`: printing an event never shows its
  /// payload's values (an app's data).
  public var description: String {
    "TelemetryEvent(\(id.uuidString.lowercased()), type: \(type), ts: \(ts), payload: \(payload.count) keys)"
  }

  /// The same as `description`.
  public var debugDescription: String { description }

  /// What `dump` and debuggers show: the metadata and the payload's keys' count only.
  public var customMirror: Mirror {
    Mirror(
      self, children: ["id": id, "ts": ts, "type": type, "payloadKeys": payload.count, "sessionID": sessionID],
      displayStyle: .struct)
  }

  /// Makes an event stamped with `date`.
  ///
  /// - Parameters:
  ///   - id: the event's id (`Telemetry.log` draws one with `SecureRandom.uuid()`; Foundation's
  ///     `UUID()` can repeat itself when /dev/urandom cannot be opened, so there is no default).
  ///   - date: when it happened; written as `ts`, ISO 8601 in UTC with milliseconds.
  ///   - type: what happened (not checked here; `Telemetry.log` allows 1–128 characters).
  ///   - payload: the event's JSON object.
  ///   - sessionID: the session it belongs to.
  public init(id: UUID, date: Date, type: String, payload: [String: JSONValue], sessionID: String) {
    self.id = id
    self.ts = Self.format(date)
    self.type = type
    self.payload = payload
    self.sessionID = sessionID
  }

  static func format(_ date: Date) -> String { millisecondTimestamp(date) }

  /// Reads an event from its JSON form (`id`, `ts`, `type`, `payload`, `session_id`).
  ///
  /// - Parameter decoder: the decoder holding the object.
  /// - Throws: `DecodingError` when a field is missing or of the wrong type, or the id is not a UUID.
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

  /// Writes the JSON form through `Encoder`, the id in lowercase. Payload numbers go through
  /// `JSONValue.encode(to:)` and may be rounded; the queue and the wire use the exact writer.
  ///
  /// - Parameter encoder: the encoder to write to.
  /// - Throws: what the encoder throws.
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
  ///
  /// The same bytes as `JSONValue.object` of the five members `serialized()`, written without
  /// building that dictionary: its hashing, the keys' sort and the output's regrowth cost a `log`
  /// about 12,000 of its 139,000 instructions (callgrind). The members go in the order that sorts
  /// their names' UTF-8 bytes.
  func encoded() throws -> [UInt8] {
    var output: [UInt8] = []
    output.reserveCapacity(256 + type.utf8.count)
    output.append(contentsOf: #"{"id":"#.utf8)
    JSONValue.write(string: id.lowercased, into: &output)
    output.append(contentsOf: #","payload":"#.utf8)
    JSONValue.object(payload).write(into: &output)
    output.append(contentsOf: #","session_id":"#.utf8)
    JSONValue.write(string: sessionID, into: &output)
    output.append(contentsOf: #","ts":"#.utf8)
    JSONValue.write(string: ts, into: &output)
    output.append(contentsOf: #","type":"#.utf8)
    JSONValue.write(string: type, into: &output)
    output.append(UInt8(ascii: "}"))
    return output
  }
}

extension UUID {
  // The wire and the queue use lowercase ids, the same text.
  var lowercased: String { recordText }
}

// Literals, so a payload reads as JSON does: `["screen": "home", "taps": 3, "ok": true]`.
extension JSONValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral,
  ExpressibleByBooleanLiteral, ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral, ExpressibleByNilLiteral
{
  /// A string literal, as `.string`.
  ///
  /// - Parameter value: the string.
  public init(stringLiteral value: String) { self = .string(value) }
  /// An integer literal, as `.number`, exactly.
  ///
  /// - Parameter value: the integer.
  public init(integerLiteral value: Int) { self = .number(JSONNumber(value)) }
  /// A float literal, as `JSONValue.number(_:)` with a Double writes it; one JSON cannot express
  /// (none can be written as a literal) becomes `null`.
  ///
  /// - Parameter value: the number.
  public init(floatLiteral value: Double) { self = .number(value) }
  /// A Boolean literal, as `.bool`.
  ///
  /// - Parameter value: the Boolean.
  public init(booleanLiteral value: Bool) { self = .bool(value) }
  /// An array literal, as `.array`.
  ///
  /// - Parameter elements: the values, in order.
  public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
  /// An object literal; a key given twice keeps its last value (as many JSON parsers do; vault's
  /// own, `init(parsing:limits:)`, refuses duplicate keys).
  ///
  /// - Parameter elements: the keys and values.
  public init(dictionaryLiteral elements: (String, JSONValue)...) {
    self = .object(Dictionary(elements, uniquingKeysWith: { _, last in last }))
  }
  /// A `nil` literal, as `.null`.
  ///
  /// - Parameter nilLiteral: nothing.
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
