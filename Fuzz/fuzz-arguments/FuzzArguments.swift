// Fuzz target: `vault`'s command-line parser (`Commands.parser.parse(raw:)`, VaultCLI) on raw
// argument bytes, as the kernel passes them: the input split at NUL bytes into arguments (invalid
// UTF-8 included). Every input must parse or throw `UsageError`. See Fuzz/README.md.
import Foundation
import FuzzSupport
import VaultCLI

enum ArgumentsTarget {
  static func run(_ input: UnsafeRawBufferPointer) {
    let raw = input.split(separator: 0, omittingEmptySubsequences: false).map { Array($0) }
    // Typed throws: the only error is UsageError.
    _ = try? Commands.parser.parse(raw: raw)
  }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
  ArgumentsTarget.run(UnsafeRawBufferPointer(start: data, count: size))
  return 0
}

@main enum Main {
  static func main() throws { exit(try FuzzMain.run(fuzz)) }
}
