// Fuzz target: keyfile bytes through `KeyfileContents(parsing:)`, as `KeyfileStore` reads them.
// The file ends in a SHA-256 of the rest, which random bytes almost never match, so each input is
// parsed twice: as it is, and with that checksum appended (what reaches the field parsers). The
// expected keyring is the one the input names, so the parse goes past the keyring check. A file
// that parses must serialize and parse back to the same contents. See Fuzz/README.md.
import Foundation
import FuzzSupport
import VaultCrypto
import VaultKeys

enum KeyfileTarget {
  static func run(_ input: UnsafeRawBufferPointer) {
    let keyring = KeyringID(bytes: input.count >= 12 ? Array(input[4..<12]) : Array(repeating: 0, count: 8))!
    parse(input, keyring: keyring)
    var sealed = Array(input)
    sealed += try! SHA256.hash(input)
    sealed.withUnsafeBytes { parse($0, keyring: keyring) }
  }

  static func parse(_ bytes: UnsafeRawBufferPointer, keyring: KeyringID) {
    let contents: KeyfileContents
    do {
      contents = try KeyfileContents(parsing: bytes, path: "keys", expecting: keyring)
    } catch {
      expect(error is KeyStoreError, error)
      return
    }
    do {
      let again = try contents.serialized(path: "keys").withUnsafeBytes {
        try KeyfileContents(parsing: $0, path: "keys", expecting: keyring)
      }
      guard again.keys == contents.keys, again.records == contents.records else {
        fatalError("a keyfile did not serialize back to the same contents")
      }
    } catch KeyStoreError.keyfileTooLarge {
      // A format-1 file near the read limit grows by the record count when rewritten.
    } catch {
      fatalError("a keyfile that parsed did not survive serializing: \(type(of: error))")
    }
  }

  /// Writes keyfiles made by the real serializer (format 2 with keys and records, an empty one)
  /// and a format-1 one built by hand, all holding all-zero test keys, as seeds into `directory`.
  static func writeSeeds(into directory: String) throws {
    let keyring = KeyringID(bytes: Array(0..<8))!
    let zero = try [UInt8](repeating: 0, count: SymmetricKey.byteCount).withUnsafeBytes {
      try SymmetricKey(copying: $0)
    }
    var contents = KeyfileContents(keyring: keyring)
    try write(contents, to: "\(directory)/empty")
    contents.keys = [1: zero, 2: zero]
    try write(contents, to: "\(directory)/keys")
    contents.records = [
      "integrity-key": SecureBytes(count: 32) { $0.initializeMemory(as: UInt8.self, repeating: 0) },
      "manifest": Array("{\"format\":3}".utf8).withUnsafeBytes { SecureBytes(copying: $0) },
    ]
    try write(contents, to: "\(directory)/records")
    var one: [UInt8] = Array("VKF".utf8) + [1] + Array(0..<8) + [0, 0, 0, 1] + [0, 0, 0, 7]
    one += [UInt8](repeating: 0, count: SymmetricKey.byteCount)
    one += try one.withUnsafeBytes { try SHA256.hash($0) }
    try Data(one).write(to: URL(fileURLWithPath: "\(directory)/format1"))
  }

  static func write(_ contents: KeyfileContents, to path: String) throws {
    let bytes = try contents.serialized(path: "keys").withUnsafeBytes { Data($0) }
    try bytes.write(to: URL(fileURLWithPath: path))
  }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
  KeyfileTarget.run(UnsafeRawBufferPointer(start: data, count: size))
  return 0
}

@main enum Main {
  static func main() throws { exit(try FuzzMain.run(fuzz, seeds: KeyfileTarget.writeSeeds)) }
}
