// Fuzz target: an envelope's header and opening it (formats 1 and 2) with a fixed all-zero test key,
// as `Vault.open` does after its keyring check. Every input must throw `EnvelopeError` or open;
// nothing may trap or read outside the input. See Fuzz/README.md.
import Foundation
import FuzzSupport
import Vault
import VaultCrypto
import VaultKeys

enum EnvelopeTarget {
  /// The all-zero test key, one cipher object per suite (not a secret: it seals only fuzz seeds).
  static let keys: [UInt8: VersionKey] = {
    let zero = [UInt8](repeating: 0, count: SymmetricKey.byteCount)
    let material = try! zero.withUnsafeBytes { try SymmetricKey(copying: $0) }
    return [
      Envelope.suiteAES256GCM: try! VersionKey(material, suite: Envelope.suiteAES256GCM),
      Envelope.suiteXAES256GCMCommitted: try! VersionKey(material, suite: Envelope.suiteXAES256GCMCommitted),
    ]
  }()
  static let context = EnvelopeContext.app(Array("fuzz".utf8))

  static func run(_ input: UnsafeRawBufferPointer) {
    let header: Envelope.Header
    do {
      header = try Envelope.header(of: input)
    } catch {
      expect(error is EnvelopeError, error)
      return
    }
    do {
      let key = keys[header.suite]!
      if header.format == Envelope.format1 {
        _ = try context.format1Bytes.withUnsafeBytes { try Envelope.openFormat1(input, key: key, context: $0) }
      } else {
        _ = try Envelope.openFormat2(input, key: key, context: context)
      }
    } catch {
      expect(error is EnvelopeError, error)
    }
  }

  /// Writes valid envelopes of both formats, sealed with the test key, as seeds into `directory`.
  static func writeSeeds(into directory: String) throws {
    let keyring = KeyringID(bytes: Array(0..<8))!
    let plaintexts: [[UInt8]] = [
      [], Array("x".utf8), Array("a fuzz seed plaintext".utf8), Array(repeating: 0x41, count: 100),
    ]
    for (index, plaintext) in plaintexts.enumerated() {
      let one = try plaintext.withUnsafeBytes { plaintext in
        try context.format1Bytes.withUnsafeBytes {
          try Envelope.sealFormat1(
            plaintext, key: keys[Envelope.suiteAES256GCM]!, keyring: keyring, version: 1, context: $0)
        }
      }
      let random = [UInt8](repeating: UInt8(index), count: Envelope.randomByteCount)
      let two = try plaintext.withUnsafeBytes { plaintext in
        try random.withUnsafeBytes {
          try Envelope.sealFormat2(
            plaintext, key: keys[Envelope.suiteXAES256GCMCommitted]!, keyring: keyring, version: 2, random: $0,
            context: context)
        }
      }
      try Data(one).write(to: URL(fileURLWithPath: "\(directory)/format1-\(plaintext.count)"))
      try Data(two).write(to: URL(fileURLWithPath: "\(directory)/format2-\(plaintext.count)"))
    }
  }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
  EnvelopeTarget.run(UnsafeRawBufferPointer(start: data, count: size))
  return 0
}

@main enum Main {
  static func main() throws { exit(try FuzzMain.run(fuzz, seeds: EnvelopeTarget.writeSeeds)) }
}
