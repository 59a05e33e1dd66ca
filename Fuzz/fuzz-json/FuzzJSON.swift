// Fuzz target: the strict JSON parser `JSONValue(parsing:)` that `telemetry log --payload` and
// `Telemetry.log` use. Every input must parse or throw `JSONParseError`; a value that parses must
// serialize to text that parses back to the same value. See Fuzz/README.md.
import Foundation
import FuzzSupport
import Telemetry

enum JSONTarget {
  /// Small limits, so the depth and size checks are reached by short inputs too.
  static let limits = JSONLimits(maxBytes: 4096, maxDepth: 16)

  static func run(_ input: UnsafeRawBufferPointer) {
    let value: JSONValue
    do {
      value = try JSONValue(parsing: Array(input), limits: limits)
    } catch {
      // Typed throws: the only error is JSONParseError.
      return
    }
    let text = value.serialized()
    guard let again = try? JSONValue(parsing: text, limits: JSONLimits(maxBytes: 1 << 20, maxDepth: 16)),
      again == value
    else {
      fatalError("a parsed value did not serialize to JSON that parses back to it")
    }
  }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
  JSONTarget.run(UnsafeRawBufferPointer(start: data, count: size))
  return 0
}

@main enum Main {
  static func main() throws { exit(try FuzzMain.run(fuzz)) }
}
