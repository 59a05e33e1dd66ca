// Fuzz target: the armour decoder of `vault open` (`Armor.decode`, VaultCLI). Every input must
// decode or throw `ArmorError`; what decodes must armour again to text that decodes to the same
// envelope. See Fuzz/README.md.
import Foundation
import FuzzSupport
import VaultCLI

enum ArmorTarget {
  static func run(_ input: UnsafeRawBufferPointer) {
    let bytes = Array(input)
    _ = Armor.isArmored(bytes)
    let envelope: [UInt8]
    do {
      envelope = try Armor.decode(bytes)
    } catch {
      // Typed throws: the only error is ArmorError.
      return
    }
    guard (try? Armor.decode(Armor.encode(envelope))) == envelope else {
      fatalError("a decoded envelope did not armour back to itself")
    }
  }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
  ArmorTarget.run(UnsafeRawBufferPointer(start: data, count: size))
  return 0
}

@main enum Main {
  static func main() throws { exit(try FuzzMain.run(fuzz)) }
}
