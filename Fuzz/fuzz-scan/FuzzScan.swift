// Fuzz target: the scanner's readers (SQLite database pages, WAL frames, rollback journals, and
// the gzip / zlib / ZIP / xz / bzip2 / zstd stream decoders, raw or in base64), through the public
// `Scanner` on a temporary file. The first input byte picks the file's name (which decides how a
// file without a SQLite magic is read); the rest is the file. See Fuzz/README.md.
import Foundation
import FuzzSupport
import VaultScan

enum ScanTarget {
  static let names = ["data", "app.db", "app.db-wal", "app.db-journal"]
  /// In /dev/shm when there is one: writing and unlinking a file on a disk per input made the
  /// kernel's writeback and discards a good part of each execution.
  static let directory: String = {
    var info = stat()
    let base = stat("/dev/shm", &info) == 0 && access("/dev/shm", W_OK) == 0 ? "/dev/shm/" : NSTemporaryDirectory()
    let path = base + "vault-fuzz-scan-\(getpid())"
    try! FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    atexit { try? FileManager.default.removeItem(atPath: ScanTarget.directory) }
    return path
  }()
  // libFuzzer calls the target from one thread only.
  nonisolated(unsafe) static let scanner: VaultScan.Scanner = {
    var scanner = VaultScan.Scanner(canaries: ["fuzz-canary-7f3a"])
    // Small, so a zip bomb among the inputs costs milliseconds, not a minute.
    scanner.inflateBudget = InflateBudget(baseBytes: 1 << 20, ratio: 16, seconds: 1)
    return scanner
  }()

  static func run(_ input: UnsafeRawBufferPointer) {
    guard let selector = input.first else { return }
    let path = directory + "/" + names[Int(selector) % names.count]
    try! Data(input.dropFirst()).write(to: URL(fileURLWithPath: path))
    defer { unlink(path) }
    do {
      _ = try scanner.scan([path])
    } catch {
      fatalError("scanning a regular file threw: \(error)")
    }
  }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
  ScanTarget.run(UnsafeRawBufferPointer(start: data, count: size))
  return 0
}

@main enum Main {
  static func main() throws { exit(try FuzzMain.run(fuzz)) }
}
