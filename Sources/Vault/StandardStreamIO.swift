// C boundary: the standard descriptors through read(2), write(2), fstat(2), fcntl(2), poll(2), and
// mmap(2) for the address-space probe. Shared by vault's and memo's command lines (package access:
// this is not API for apps).
import Glibc

/// Standard input and output read and written with system calls, so every failure is an error the
/// command reports: FileHandle's `readDataToEndOfFile` and `write` trap on EISDIR, EBADF, ENOSPC and
/// EPIPE, and an array that grows past what `ulimit -v` allows traps too. Each command line words
/// the failures for its own users; the mechanism is one.
package enum StandardStreamIO {
  /// Why standard input could not be read in full.
  package enum ReadFailure: Error, Equatable, Sendable {
    /// Descriptor 0 is not open (EBADF, and fcntl finds nothing there).
    case closed
    /// Descriptor 0 is open for writing only (`0>FILE`): read(2) gives EBADF, yet it is not closed.
    case notReadable
    case directory
    /// More than the limit given to `readAll`.
    case tooLarge
    /// The buffer for `bytes` could not be had under the address-space limit (`ulimit -v`).
    case outOfMemory(bytes: Int)
    case failed(errno: Int32)
  }

  /// Why standard output (or another descriptor) could not be written.
  package enum WriteFailure: Error, Equatable, Sendable {
    /// The descriptor is not open.
    case closed
    /// The descriptor is open for reading only (`1<FILE`): write(2) gives EBADF, yet it is not closed.
    case notWritable
    /// Any other errno: ENOSPC, EPIPE, EFBIG (`ulimit -f`, with SIGXFSZ ignored), EIO …
    case failed(errno: Int32)
  }

  /// All of standard input, at most `limit` bytes.
  ///
  /// A regular file says how large it is, so it is refused before any of it is read; a pipe is read
  /// until it ends or passes `limit`. The buffer grows by doubling, as Array would, but each new
  /// buffer is checked against the address space first (`MemoryHeadroom`), since a failed
  /// allocation traps. A non-blocking descriptor is waited on with poll(2).
  /// - Throws: `ReadFailure`.
  package static func readAll(limit: Int) throws(ReadFailure) -> [UInt8] {
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

  /// Writes all of `bytes` to `fd`, retrying after EINTR and waiting on a non-blocking descriptor.
  /// - Returns: nil when everything was written, else why not.
  package static func writeAll(_ fd: Int32, _ bytes: [UInt8]) -> WriteFailure? {
    bytes.withUnsafeBytes { buffer in
      var offset = 0
      while offset < buffer.count {
        let written = write(fd, buffer.baseAddress! + offset, buffer.count - offset)
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

/// Whether the address space has room for more, under `ulimit -v`. Swift traps when an allocation
/// fails, so code that is about to allocate in proportion to its input asks first.
package enum MemoryHeadroom {
  /// Whether `bytes` more fit: a probe reservation that takes no memory (PROT_NONE,
  /// MAP_NORESERVE) and is released at once. A yes is not a promise (another thread may allocate
  /// in between), but a no is certain.
  package static func available(_ bytes: Int) -> Bool {
    guard bytes > 0 else { return true }
    let probe = mmap(nil, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
    guard let probe, probe != MAP_FAILED else { return false }
    munmap(probe, bytes)
    return true
  }

  /// Whether a record of `bytes` can be sealed and stored in a queue container: its envelope,
  /// SQLite's copy of that as a bound blob, and the row SQLite builds from it are held at once
  /// (measured with a 19 MB memo: about 2.3 times its size beyond what the process had).
  package static func availableToSealAndStore(_ bytes: Int) -> Bool {
    available(3 * (bytes + Envelope.overhead))
  }
}
