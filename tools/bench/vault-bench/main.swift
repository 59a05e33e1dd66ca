// Seal/open throughput of vault's envelopes, for tools/bench-crypto.sh, which runs
// `openssl speed -evp aes-256-gcm` beside it and reports the ratios.
//
//   vault-bench SECONDS SIZE...    prints "seal SIZE BYTES_PER_SECOND" and "open SIZE BYTES_PER_SECOND"
import Foundation
import Vault
import VaultKeys

let arguments = CommandLine.arguments.dropFirst()
guard let seconds = arguments.first.flatMap(Double.init), arguments.count > 1 else {
  FileHandle.standardError.write(Data("usage: vault-bench SECONDS SIZE...\n".utf8))
  exit(64)
}
let sizes = arguments.dropFirst().compactMap { Int($0) }

let home = NSTemporaryDirectory() + "vault-bench-\(getpid())"
defer { try? FileManager.default.removeItem(atPath: home) }
let vault = try Vault.create(home: home, store: StoreDescriptor(kind: .memory), resolver: .fixed(InMemoryKeyStore()))
let context = Array("queue:bench|id:00000000-0000-0000-0000-000000000000".utf8)

/// Runs `body` in batches until `seconds` have passed; returns bytes per second.
func measure(_ size: Int, _ body: () throws -> Void) rethrows -> Double {
  for _ in 0..<1000 { try body() }  // warm up: pools, page faults, CPU frequency
  var operations = 0
  let start = DispatchTime.now().uptimeNanoseconds
  var elapsed = 0.0
  repeat {
    for _ in 0..<1000 { try body() }
    operations += 1000
    elapsed = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
  } while elapsed < seconds
  return Double(operations * size) / elapsed
}

for size in sizes {
  let plaintext = [UInt8](repeating: 0x5A, count: size)
  var sink = 0
  let sealRate = try measure(size) { sink &+= try vault.seal(plaintext, context: context).count }
  let envelope = try vault.seal(plaintext, context: context)
  let openRate = try measure(size) { sink &+= try vault.open(envelope, context: context).count }
  print("seal \(size) \(Int(sealRate))")
  print("open \(size) \(Int(openRate))")
  if sink == 42 { print("") }  // keeps the work from being optimised away
}
