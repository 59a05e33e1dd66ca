// C boundary: the standard descriptors through read(2), write(2), fstat(2), fcntl(2), poll(2), and
// mmap(2) for the address-space probe. Public: `vault`, memo and any app reading its standard input
// get the same checks; the command lines word the failures for their own users.
import Glibc

/// Standard input read, and standard output and error written, so that every failure is an error
/// the caller can report instead of a trap.
///
/// FileHandle's `readDataToEndOfFile` and `write` trap on EISDIR, EBADF, ENOSPC and EPIPE, and an
/// array that grows past what `ulimit -v` allows traps too. These functions use the system calls
/// directly, retry after EINTR, wait (with poll(2)) on a descriptor left non-blocking, and check the
/// address space before each buffer they allocate. A standard descriptor that `ProcessHardening`
/// found closed at start (and pointed at /dev/null) counts as closed, not as an empty input or a
/// working output. Safe to call from any thread; two concurrent calls on one stream interleave.
public enum StandardStreamIO {
  /// Why standard input could not be read in full.
  public enum ReadFailure: Error, Equatable, Sendable {
    /// Standard input is not open, or was closed at start (see `ProcessHardening`).
    case closed
    /// Standard input is open for writing only (`0>FILE`): read(2) gives EBADF, yet it is not closed.
    case notReadable
    /// Standard input is a directory (`< DIR`).
    case directory
    /// Standard input holds more than the limit given to `readAll(limit:)`. A regular file is
    /// refused before any of it is read; a pipe is read up to the limit and the rest left unread.
    case tooLarge
    /// A buffer of `bytes` could not be had under the address-space limit (`ulimit -v`).
    case outOfMemory(bytes: Int)
    /// Any other failure of read(2) or fstat(2): `errno` is its code (EIO, …), which `strerror` names.
    case failed(errno: Int32)
  }

  /// Why standard output or standard error could not be written.
  public enum WriteFailure: Error, Equatable, Sendable {
    /// The stream is not open, or was closed at start (see `ProcessHardening`).
    case closed
    /// The stream is open for reading only (`1<FILE`): write(2) gives EBADF, yet it is not closed.
    case notWritable
    /// Any other failure of write(2): `errno` is its code (ENOSPC, EPIPE, EFBIG under `ulimit -f`
    /// with SIGXFSZ ignored, EIO, …), which `strerror` names.
    case failed(errno: Int32)
  }

  /// An output stream of the process.
  public enum Output: Sendable {
    /// Standard output (descriptor 1).
    case standardOutput
    /// Standard error (descriptor 2).
    case standardError

    var descriptor: Int32 {
      switch self {
      case .standardOutput: STDOUT_FILENO
      case .standardError: STDERR_FILENO
      }
    }
  }

  /// Reads all of standard input, refusing more than `limit` bytes.
  ///
  /// A regular file says how large it is, so one over the limit is refused before any of it is
  /// read; a pipe or terminal is read until it ends or passes `limit`. The buffer grows by
  /// doubling, as Array would, but each new buffer is checked against the address space first
  /// (`MemoryHeadroom`), since a failed allocation traps. Blocks until the input ends.
  ///
  /// - Parameter limit: the most bytes to accept; the buffer never grows past it.
  /// - Returns: the bytes read, empty when the input was empty.
  /// - Throws: `ReadFailure`: `.closed`, `.notReadable` or `.directory` for an input that cannot
  ///   be read, `.tooLarge` past `limit`, `.outOfMemory` when the buffer would not fit under
  ///   `ulimit -v`, `.failed` for any other error of the system call.
  public static func readAll(limit: Int) throws(ReadFailure) -> [UInt8] {
    guard !ProcessHardening.closedStandardStreams.contains(STDIN_FILENO) else { throw .closed }
    var info = stat()
    guard fstat(STDIN_FILENO, &info) == 0 else { throw readFailure(errno: errno) }
    if info.st_mode & S_IFMT == S_IFDIR { throw .directory }
    let known = info.st_mode & S_IFMT == S_IFREG ? Int(info.st_size) : nil
    if let known, known > limit { throw .tooLarge }
    var bytes: [UInt8] = []
    // One byte more than a file's size, so reading its end needs no second buffer.
    try reserve(&bytes, min(limit, known.map { $0 + 1 } ?? 65536))
    var scratch = [UInt8](repeating: 0, count: 1 << 20)
    while true {
      let got = scratch.withUnsafeMutableBytes { read(STDIN_FILENO, $0.baseAddress, $0.count) }
      if got < 0 {
        let code = errno
        if code == EINTR { continue }
        if code == EAGAIN || code == EWOULDBLOCK {
          var poller = pollfd(fd: STDIN_FILENO, events: Int16(POLLIN), revents: 0)
          _ = poll(&poller, 1, -1)
          continue
        }
        throw readFailure(errno: code)
      }
      if got == 0 { return bytes }
      if bytes.count + got > limit { throw .tooLarge }
      if bytes.count + got > bytes.capacity {
        try reserve(&bytes, min(limit, max(bytes.capacity * 2, bytes.count + got)))
      }
      bytes.append(contentsOf: scratch[0..<got])
    }
  }

  /// Writes all of `bytes` to standard output or standard error.
  ///
  /// Retries after EINTR and short writes, and waits on a non-blocking descriptor. A reader that
  /// went away is `.failed(errno: EPIPE)` only when SIGPIPE is ignored (`signal(SIGPIPE, SIG_IGN)`);
  /// otherwise the signal ends the process first. Part of `bytes` may have been written when it
  /// throws.
  ///
  /// - Parameters:
  ///   - bytes: what to write.
  ///   - output: the stream to write to.
  /// - Throws: `WriteFailure`: `.closed` or `.notWritable` for a stream that cannot be written,
  ///   `.failed` for any other error of write(2) (a full disk, a closed pipe, `ulimit -f`).
  public static func write(_ bytes: [UInt8], to output: Output) throws(WriteFailure) {
    let fd = output.descriptor
    guard !ProcessHardening.closedStandardStreams.contains(fd) else { throw .closed }
    if let failure = writeAll(fd, bytes) { throw failure }
  }

  /// Writes all of `bytes` to `fd`; nil when everything was written, else why not.
  private static func writeAll(_ fd: Int32, _ bytes: [UInt8]) -> WriteFailure? {
    bytes.withUnsafeBytes { buffer in
      var offset = 0
      while offset < buffer.count {
        let written = Glibc.write(fd, buffer.baseAddress! + offset, buffer.count - offset)
        if written >= 0 {
          offset += written
          continue
        }
        switch errno {
        case EINTR: continue
        case EAGAIN, EWOULDBLOCK:
          var poller = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
          _ = poll(&poller, 1, -1)
        case EBADF: return isOpen(fd) ? .notWritable : .closed
        case let code: return .failed(errno: code)
        }
      }
      return nil
    }
  }

  private static func readFailure(errno code: Int32) -> ReadFailure {
    switch code {
    case EBADF: isOpen(STDIN_FILENO) ? .notReadable : .closed
    case EISDIR: .directory
    default: .failed(errno: code)
    }
  }

  /// EBADF from read(2) or write(2) also means "open, but not in that direction".
  private static func isOpen(_ fd: Int32) -> Bool { fcntl(fd, F_GETFL) != -1 }

  /// Grows `bytes` to hold `capacity` bytes, first making sure the address space has room for the
  /// new buffer beside the old one (an array that cannot be allocated traps; this throws).
  private static func reserve(_ bytes: inout [UInt8], _ capacity: Int) throws(ReadFailure) {
    guard capacity > bytes.capacity else { return }
    guard MemoryHeadroom.available(capacity + bytes.capacity) else { throw .outOfMemory(bytes: capacity) }
    bytes.reserveCapacity(capacity)
  }
}

/// Whether the address space has room for more, under `ulimit -v`.
///
/// Swift traps when an allocation fails, so code that is about to allocate in proportion to its
/// input (a record from standard input or the network) asks first and reports a clear error
/// instead. Both checks reserve nothing: the answer can be stale by the time the caller allocates.
public enum MemoryHeadroom {
  /// Whether `bytes` more bytes of address space can be had now.
  ///
  /// Makes a probe reservation that takes no memory (PROT_NONE, MAP_NORESERVE) and releases it at
  /// once. A yes is not a promise (another thread may allocate in between), but a no is certain.
  ///
  /// - Parameter bytes: the size of the allocation about to be made; 0 or less is always available.
  /// - Returns: whether a region of that size fits in the address space left.
  public static func available(_ bytes: Int) -> Bool {
    guard bytes > 0 else { return true }
    let probe = mmap(nil, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
    guard let probe, probe != MAP_FAILED else { return false }
    munmap(probe, bytes)
    return true
  }

  /// Whether a record of `bytes` can be sealed and stored in a queue container
  /// (`QueueContainer.enqueue` or `Outbox.send`) without an allocation failing.
  ///
  /// Sealing and storing hold the envelope, SQLite's copy of it as a bound blob and the row SQLite
  /// builds from it at once (measured with a 19 MB record: about 2.3 times its size beyond what
  /// the process had); this asks for three envelopes' worth.
  ///
  /// - Parameter bytes: the size of the record's plaintext.
  /// - Returns: whether that much address space is free now; the same caveat as `available(_:)`.
  public static func availableToSealAndStore(_ bytes: Int) -> Bool {
    available(3 * (bytes + Envelope.overhead))
  }
}

extension StandardStreamIO.ReadFailure: CodedError {
  /// A sentence naming what is wrong with standard input (command lines word their own, with a fix).
  public var description: String {
    switch self {
    case .closed: "standard input is closed"
    case .notReadable: "standard input is not open for reading"
    case .directory: "standard input is a directory"
    case .tooLarge: "standard input is larger than the limit"
    case .outOfMemory(let bytes):
      "not enough address space for a buffer of \(max(1, bytes >> 20)) MiB (ulimit -v)"
    case .failed(let code): "could not read standard input: \(String(cString: strerror(code)))"
    }
  }

  /// `standard-input.` and the case, in kebab case: stable across releases.
  public var code: String {
    switch self {
    case .closed: "standard-input.closed"
    case .notReadable: "standard-input.not-readable"
    case .directory: "standard-input.directory"
    case .tooLarge: "standard-input.too-large"
    case .outOfMemory: "standard-input.out-of-memory"
    case .failed: "standard-input.failed"
    }
  }
}

extension StandardStreamIO.WriteFailure: CodedError {
  /// A sentence naming what is wrong with the output stream (command lines word their own).
  public var description: String {
    switch self {
    case .closed: "the output stream is closed"
    case .notWritable: "the output stream is not open for writing"
    case .failed(let code): "could not write the output stream: \(String(cString: strerror(code)))"
    }
  }

  /// `standard-output.` and the case, in kebab case (for standard error too): stable across releases.
  public var code: String {
    switch self {
    case .closed: "standard-output.closed"
    case .notWritable: "standard-output.not-writable"
    case .failed: "standard-output.failed"
    }
  }
}
