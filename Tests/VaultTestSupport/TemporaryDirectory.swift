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
