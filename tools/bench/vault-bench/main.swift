// Seal/open throughput of vault's envelopes, for tools/bench-crypto.sh, which runs
// `openssl speed -evp aes-256-gcm` beside it and reports the ratios.
//
//   vault-bench [--only seal|open] SECONDS SIZE...
//                                  prints "context BYTES" (the encoded context every seal here
//                                  hashes and authenticates, for the C floor to use the same), then
//                                  "seal SIZE BYTES_PER_SECOND" and "open SIZE BYTES_PER_SECOND"
//                                  (bytes per second of CPU time, as `openssl speed` counts)
import Foundation
import Vault
import VaultKeys

var arguments = CommandLine.arguments.dropFirst()
// `--only seal` or `--only open` measures one operation, for a profiler (perf record).
var only: String?
if arguments.first == "--only", arguments.count > 1 {
  only = arguments.dropFirst().first
  arguments = arguments.dropFirst(2)
}
guard let seconds = arguments.first.flatMap(Double.init), arguments.count > 1,
  only.map({ ["seal", "open"].contains($0) }) ?? true
else {
  FileHandle.standardError.write(Data("usage: vault-bench [--only seal|open] SECONDS SIZE...\n".utf8))
  exit(64)
}
let sizes = arguments.dropFirst().compactMap { Int($0) }

let home = NSTemporaryDirectory() + "vault-bench-\(getpid())"
defer { try? FileManager.default.removeItem(atPath: home) }
let vault = try Vault.create(home: home, store: StoreDescriptor(kind: .memory), resolver: .fixed(InMemoryKeyStore()))
let context = Array("queue:bench|id:00000000-0000-0000-0000-000000000000".utf8)
// `Vault.seal(_:context:)` binds the app's bytes under the "app" domain (SECURITY.md, format 2's E).
print("context \(EnvelopeContext.app(context).encoded.count)")

/// Nanoseconds of CPU time (user and system) this thread has used.
func threadCPUNanoseconds() -> UInt64 {
  var now = timespec()
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now)
  return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
}

/// Runs `body` in batches until `seconds` of wall-clock time have passed; returns bytes per
/// second of this thread's CPU time. That is how `openssl speed` measures too (it stops on a
/// wall-clock alarm and divides by its user CPU time): on a machine shared with other builds, a
/// wall-clock rate here against OpenSSL's CPU-time rate understated vault by the share of the CPU
/// the others took (2-3× under a load of 8). System time counts here, and not in OpenSSL's
/// figure: the seal's getrandom(2) and file lock are its own cost.
func measure(_ size: Int, _ body: () throws -> Void) rethrows -> Double {
  for _ in 0..<1000 { try body() }  // warm up: pools, page faults, CPU frequency
  var operations = 0
  let start = DispatchTime.now().uptimeNanoseconds
  let startCPU = threadCPUNanoseconds()
  var elapsed = 0.0
  repeat {
    for _ in 0..<1000 { try body() }
    operations += 1000
    elapsed = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
  } while elapsed < seconds
  return Double(operations * size) / (Double(threadCPUNanoseconds() - startCPU) / 1e9)
}

for size in sizes {
  let plaintext = [UInt8](repeating: 0x5A, count: size)
  var sink = 0
  if only != "open" {
    let sealRate = try measure(size) { sink &+= try vault.seal(plaintext, context: context).count }
    print("seal \(size) \(Int(sealRate))")
  }
  if only != "seal" {
    let envelope = try vault.seal(plaintext, context: context)
    let openRate = try measure(size) { sink &+= try vault.open(envelope, context: context).count }
    print("open \(size) \(Int(openRate))")
  }
  if sink == 42 { print("") }  // keeps the work from being optimised away
}
