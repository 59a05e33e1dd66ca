import CZlib
import Foundation

extension Scanner {
  /// Offsets where a gzip member starts (1f 8b 08).
  /// Offsets where a gzip member (1f 8b 08) or a zlib stream starts: 0x78 then a flag byte that
  /// makes the 16-bit header a multiple of 31 (RFC 1950), with no preset dictionary.
  func compressedStreams(_ bytes: UnsafeRawBufferPointer) -> [(start: Int, isGzip: Bool)] {
    var starts = Patterns.occurrences(of: [0x1f, 0x8b, 0x08], in: bytes).map { (start: $0, isGzip: true) }
    for offset in Patterns.occurrences(of: [0x78], in: bytes) where offset + 2 < bytes.count {
      let flags = bytes[offset + 1]
      if (0x7800 | Int(flags)) % 31 == 0, flags & 0x20 == 0 { starts.append((offset, false)) }
    }
    return starts
  }

  /// Inflates a stream (up to 64 MiB out) and searches it for canaries and JSON text.
  /// Inflates a stream (up to 64 MiB out) and searches it. It starts from the chunk in memory; a
  /// stream that runs past the chunk's end is inflated again from the file (up to 64 MiB in).
  func scanCompressed(
    _ input: UnsafeRawBufferPointer, fd: Int32, fileSize: Int, path: String, fileOffset: Int, minimumOutput: Int
  ) -> [Finding] {
    guard var result = Self.inflate(input, limit: 64 << 20) else { return [] }
    if result.ranOutOfInput, fileOffset + input.count < fileSize {
      let window = RegionMap.read(fd, at: fileOffset, count: min(64 << 20, fileSize - fileOffset))
      if let longer = window.withUnsafeBytes({ Self.inflate($0, limit: 64 << 20) }) { result = longer }
    }
    // Random data passes a 2-byte zlib header check now and then; a real stream inflates to something.
    let inflated = result.output
    guard inflated.count >= minimumOutput else { return [] }
    var findings: [Finding] = []
    inflated.withUnsafeBytes { bytes in
      var reported = Set<Int>()
      searcher.search(bytes) { _, index in
        guard reported.insert(index).inserted else { return }
        findings.append(
          Finding(
            file: path, offset: fileOffset, region: "compressed-stream", detector: "canary",
            encoding: "inflated+" + patterns[index].encoding, excerpt: "inside a compressed stream (redacted)"))
      }
      if let first = jsonText(bytes).first {
        findings.append(
          Finding(
            file: path, offset: fileOffset, region: "compressed-stream", detector: "json-text", encoding: "inflated",
            excerpt: redact(inflated[first.start..<first.end])))
      }
    }
    return findings
  }

  /// Inflates a gzip or zlib stream read straight from `input` (no copy): zlib consumes only what
  /// the stream needs, so a false start fails after a few bytes. Nil when nothing valid came out.
  /// `ranOutOfInput` says the stream had not ended when `input` did.
  static func inflate(_ input: UnsafeRawBufferPointer, limit: Int) -> (
    output: [UInt8], ranOutOfInput: Bool, consumed: Int
  )? {
    guard let base = input.baseAddress, !input.isEmpty else { return nil }
    var stream = z_stream()
    guard vault_inflate_init_auto(&stream) == Z_OK else { return nil }
    defer { inflateEnd(&stream) }
    var output: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 16_384)
    stream.next_in = UnsafeMutablePointer(mutating: base.assumingMemoryBound(to: UInt8.self))
    stream.avail_in = UInt32(min(input.count, Int(UInt32.max)))
    while output.count < limit {
      let (result, produced) = chunk.withUnsafeMutableBufferPointer { out -> (Int32, Int) in
        stream.next_out = out.baseAddress
        stream.avail_out = UInt32(out.count)
        let result = CZlib.inflate(&stream, Z_NO_FLUSH)
        return (result, out.count - Int(stream.avail_out))
      }
      output += chunk[0..<produced]
      let consumed = Int(stream.total_in)
      if result == Z_STREAM_END { return (output, false, consumed) }
      if result == Z_BUF_ERROR || (result == Z_OK && produced == 0 && stream.avail_in == 0) {
        return output.isEmpty ? nil : (output, stream.avail_in == 0, consumed)
      }
      if result != Z_OK { return output.isEmpty ? nil : (output, false, consumed) }
    }
    return (output, false, Int(stream.total_in))
  }
}
