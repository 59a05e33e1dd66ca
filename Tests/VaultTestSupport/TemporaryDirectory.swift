import Foundation

/// A fresh directory under /tmp, removed when the test case ends.
public final class TemporaryDirectory {
  public let path: String

  public init() {
    var template = Array("/tmp/vault-test.XXXXXX".utf8CString)
    path = template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)) }
  }

  public func sub(_ name: String) -> String { path + "/" + name }

  deinit { try? FileManager.default.removeItem(atPath: path) }
}

/// A clock tests move by hand.
public final class TestClock: @unchecked Sendable {
  private let lock = NSLock()
  private var current: Date
  private var elapsed: TimeInterval = 0

  public init(_ start: Date = Date(timeIntervalSince1970: 1_800_000_000)) { current = start }

  public var now: Date { lock.withLock { current } }
  /// Time passes: the wall clock and the monotonic clock move together.
  public func advance(_ seconds: TimeInterval) {
    lock.withLock {
      current += seconds
      elapsed += max(seconds, 0)
    }
  }
  /// The wall clock is set (NTP, a person, a bad RTC): it moves, no time passes.
  public func step(_ seconds: TimeInterval) { lock.withLock { current += seconds } }
  public var function: @Sendable () -> Date { { [self] in now } }
  /// Seconds that really passed (`advance`, never `step`), as a monotonic clock sees them.
  public var monotonic: TimeInterval { lock.withLock { elapsed } }
  /// `monotonic` in whole milliseconds.
  public var milliseconds: Int64 { Int64((monotonic * 1000).rounded()) }
}

/// Reads every file in `directory` (the database, -wal, -shm, -journal) and reports whether
/// `needle` appears in any of them, as bytes.
public func directoryContains(_ directory: String, _ needle: String) -> Bool {
  let bytes = Array(needle.utf8)
  guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return false }
  for name in names {
    guard let data = FileManager.default.contents(atPath: directory + "/" + name) else { continue }
    if data.range(of: Data(bytes)) != nil { return true }
  }
  return false
}

/// The package's root directory (where Package.swift is), found from this source file.
public func packageRoot(file: String = #filePath) -> String {
  var url = URL(fileURLWithPath: file)
  while url.path != "/" {
    url.deleteLastPathComponent()
    if FileManager.default.fileExists(atPath: url.path + "/Package.swift") { return url.path }
  }
  return FileManager.default.currentDirectoryPath
}
