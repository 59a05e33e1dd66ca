/// A fixed-size buffer for secrets that is overwritten with zeros when released.
///
/// Used for key material and anything else that must not outlive its owner in memory. The bytes
/// live in pages excluded from core dumps (`MADV_DONTDUMP`) and locked in RAM (`mlock`) where
/// RLIMIT_MEMLOCK allows; small buffers share pages (see `SecureMemory`). It has exactly one
/// owner; copies of the bytes are the caller's responsibility.
public final class SecureBytes: @unchecked Sendable {
  // The buffer is written only during initialisation; afterwards it is read-only, so
  // sharing between threads is safe.
  private let buffer: UnsafeMutableRawBufferPointer
  private let allocation: SecureMemory.Allocation

  /// Allocates `count` zeroed bytes and lets `initializer` fill them.
  ///
  /// - Parameters:
  ///   - count: the size of the buffer, fixed for its life.
  ///   - initializer: writes the secret into the buffer; the pointer must not escape.
  /// - Throws: whatever `initializer` throws; the buffer is then zeroed and released.
  public init(count: Int, _ initializer: (UnsafeMutableRawBufferPointer) throws -> Void) rethrows {
    let allocation = SecureMemory.allocate(count)
    let buffer = UnsafeMutableRawBufferPointer(start: allocation.base, count: count)
    do {
      try initializer(buffer)
    } catch {
      SecureMemory.release(allocation)
      throw error
    }
    // Stored only now: an initializer that throws after every stored property is set runs
    // `deinit`, which released the memory a second time (the slot was then handed to two buffers
    // at once; a wrong backup passphrase did it, and another thread's key bytes were overwritten).
    self.allocation = allocation
    self.buffer = buffer
  }

  /// Copies `bytes` into a new zeroizing buffer. The caller still owns, and should clear, the
  /// original.
  ///
  /// - Parameter bytes: the secret to copy.
  public convenience init(copying bytes: UnsafeRawBufferPointer) {
    self.init(count: bytes.count) { $0.copyMemory(from: bytes) }
  }

  deinit { SecureMemory.release(allocation) }

  /// The size of the buffer in bytes: what a key type checks before taking ownership.
  public var count: Int { buffer.count }

  /// Calls `body` with the bytes; the pointer must not escape.
  ///
  /// - Parameter body: reads the bytes.
  /// - Returns: what `body` returns.
  /// - Throws: whatever `body` throws.
  public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
    try body(UnsafeRawBufferPointer(buffer))
  }
}

extension SecureBytes: Equatable {
  /// Constant-time comparison of contents, so comparing secrets leaks nothing through timing.
  ///
  /// - Parameters:
  ///   - lhs: one buffer.
  ///   - rhs: the other.
  /// - Returns: true when both hold the same bytes.
  public static func == (lhs: SecureBytes, rhs: SecureBytes) -> Bool {
    lhs.withUnsafeBytes { a in rhs.withUnsafeBytes { b in constantTimeEquals(a, b) } }
  }
}

extension SecureBytes: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
  /// The size only, never the bytes: a buffer printed by accident shows no secret.
  public var description: String { "SecureBytes(\(count) bytes, redacted)" }
  /// The same as `description`, so `debugPrint` and the debugger show no secret either.
  public var debugDescription: String { description }
  /// A mirror with no children, so `dump` and reflection show no secret.
  public var customMirror: Mirror { Mirror(self, children: []) }
}
