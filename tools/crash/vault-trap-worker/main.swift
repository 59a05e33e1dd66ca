// A test-only process that holds a known secret and then crashes, for the crash-output tests
// (Tests/VaultCLITests/CrashOutputTests.swift). It reads a 32-byte key and a plaintext from
// stdin, seals and opens the plaintext with the key through VaultCrypto (so the key sits in
// SecureBytes, OpenSSL's key schedule and the plaintext in heap buffers), loads both into
// registers and traps:
//
//   vault-trap-worker overflow [--harden]   an integer overflow (a bare ud2: SIGILL)
//   vault-trap-worker unwrap [--harden]     a force-unwrap of nil (runtime message, then SIGILL)
//   vault-trap-worker abort [--harden]      abort() (SIGABRT)
//   vault-trap-worker segv [--harden]       a write through a bad pointer (SIGSEGV)
//   vault-trap-worker memory                prints how the key's memory is marked, then exits 0
//
// --harden calls ProcessHardening.apply() first, as `vault` and `memo` do.
import Foundation
import Vault
import VaultCrypto
import VaultTestSupport

let arguments = Array(CommandLine.arguments.dropFirst())
guard let mode = arguments.first else {
  FileHandle.standardError.write(Data("usage: vault-trap-worker overflow|unwrap|abort|segv|memory [--harden]\n".utf8))
  exit(64)
}
if arguments.contains("--harden") { ProcessHardening.apply() }

/// All of stdin (the test writes the key, then the plaintext, then closes it).
func readStandardInput() -> [UInt8] {
  var bytes: [UInt8] = []
  var chunk = [UInt8](repeating: 0, count: 65536)
  while true {
    let count = chunk.withUnsafeMutableBytes { read(0, $0.baseAddress, $0.count) }
    if count < 0, errno == EINTR { continue }
    guard count > 0 else { break }
    bytes += chunk[0..<count]
  }
  return bytes
}

let input = readStandardInput()
guard input.count > SymmetricKey.byteCount else { exit(2) }
let key = try input.withUnsafeBytes { try SymmetricKey(copying: UnsafeRawBufferPointer(rebasing: $0[0..<32])) }
let plaintext = Array(input[32...])
let nonce = [UInt8](repeating: 7, count: 12)
let sealed = try AESGCM.seal(plaintext, using: key, nonce: nonce)
let opened = try AESGCM.open(ciphertext: sealed.ciphertext, tag: sealed.tag, using: key, nonce: nonce)
guard opened == plaintext else { exit(3) }

if mode == "memory" {
  key.withUnsafeBytes { bytes in
    let flags = MemoryMappings.flags(of: UnsafeRawPointer(bytes.baseAddress!))
    print("dontdump=\(flags?.dontDump == true ? 1 : 0) locked=\(flags?.locked == true ? 1 : 0)")
  }
  exit(0)
}

/// Traps with the key's words and a pointer to the plaintext in argument registers (and so in
/// the registers the runtime's backtracer would print, with the memory they point at).
@inline(never)
func crash(_ a: UInt64, _ b: UInt64, _ c: UInt64, _ d: UInt64, _ text: UnsafeRawPointer, _ mode: String) -> Int {
  switch mode {
  case "unwrap":
    let missing: Int? = a == 0x5eed ? Int(b) : nil
    return missing! + Int(truncatingIfNeeded: c ^ d) + Int(bitPattern: text)
  case "abort":
    if a != 0x5eed { abort() }
  case "segv":
    if a != 0x5eed { UnsafeMutablePointer<UInt64>(bitPattern: 8)!.pointee = b ^ c ^ d }
  default:
    break
  }
  // Integer overflow with the secrets as the last values computed, so the registers hold the
  // key's words and the plaintext's first bytes when the ud2 executes.
  let mixed = Int(truncatingIfNeeded: a ^ b ^ c ^ d)
  let head = Int(truncatingIfNeeded: text.loadUnaligned(as: UInt64.self) | 1)
  return head + Int.max + mixed
}

let words = key.withUnsafeBytes { bytes in (0..<4).map { bytes.load(fromByteOffset: $0 * 8, as: UInt64.self) } }
let result = opened.withUnsafeBytes { text in crash(words[0], words[1], words[2], words[3], text.baseAddress!, mode) }
print("not reached: \(result)")
exit(4)
