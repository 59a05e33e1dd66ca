internal import CCompression
internal import CZlib
import Foundation

/// A compressed stream's format: gzip (RFC 1952), zlib (RFC 1950), raw deflate inside a ZIP entry
/// (APPNOTE §4.4.5 method 8), xz, bzip2 or zstd (RFC 8878).
enum StreamFormat: Equatable {
  case gzip, zlib, zipDeflate, xz, bzip2, zstd
  /// Not compressed: the bytes a base64 layer decoded, searched as they are.
  case plain

  /// How the format is named in a report.
  var name: String {
    switch self {
    case .gzip: "gzip"
    case .zlib: "zlib"
    case .zipDeflate: "ZIP entry's deflate"
    case .xz: "xz"
    case .bzip2: "bzip2"
    case .zstd: "zstd"
    case .plain: "base64"
    }
  }

  /// The name with its article, to start a sentence's subject: "an xz", "a gzip".
  var withArticle: String { (self == .xz ? "an " : "a ") + name }

  /// Random bytes pass a 2-byte zlib header check now and then; a real stream decodes to something.
  /// Every other format starts with a magic number of 3 bytes or more.
  var minimumOutput: Int { self == .zlib ? 16 : 1 }
}

/// One decoder state per file, reset for each candidate stream instead of allocated anew: most
/// candidates are false starts that fail within a few bytes, so their cost is mostly this set-up.
/// Memory is bounded per format: zlib's 32 KiB window, xz at most 128 MiB (a stream that needs
/// more is reported, not decoded), bzip2's 900 kB blocks, zstd windows up to 128 MiB (its default).
final class StreamDecoder {
  /// How one step ended.
  enum State: Equatable {
    case more
    case end
    /// Not valid data of the format from some point on (or at all: a false start).
    case corrupt
    /// Valid, but beyond what the scanner will decode (the reason names the limit).
    case unsupported(String)
  }

  private var format = StreamFormat.gzip
  private var zlib = z_stream()
  private var zlibReady = false
  private var lzma = vault_lzma_stream_init()
  private var lzmaReady = false
  private var bzip = bz_stream()
  private var bzipReady = false
  private var zstd: OpaquePointer?
  static let xzMemoryLimit: UInt64 = 128 << 20

  /// Why a stream of `format` was not decoded when its decoder ran out of memory.
  static func outOfMemory(_ format: StreamFormat) -> String {
    "\(format.withArticle) stream could not be decoded (out of memory)"
  }

  /// Prepares for a new stream of `format`; false if the library could not allocate its state.
  func reset(_ format: StreamFormat) -> Bool {
    self.format = format
    switch format {
    case .gzip, .zlib, .zipDeflate:
      // windowBits 31: gzip only; 15: zlib with any window up to 32 KiB; -15: raw deflate.
      let bits: Int32 = format == .gzip ? 31 : format == .zlib ? 15 : -15
      if zlibReady { return inflateReset2(&zlib, bits) == Z_OK }
      zlibReady = vault_inflate_init(&zlib, bits) == Z_OK
      return zlibReady
    case .xz:
      // liblzma re-initialises a stream in place, reusing its memory (lzma_stream_decoder's docs).
      lzmaReady = lzma_stream_decoder(&lzma, Self.xzMemoryLimit, 0) == LZMA_OK
      return lzmaReady
    case .bzip2:
      if bzipReady { BZ2_bzDecompressEnd(&bzip) }
      bzip = bz_stream()
      bzipReady = BZ2_bzDecompressInit(&bzip, 0, 0) == BZ_OK
      return bzipReady
    case .plain:
      return true
    case .zstd:
      if zstd == nil { zstd = ZSTD_createDStream() }
      guard let zstd else { return false }
      return ZSTD_isError(ZSTD_DCtx_reset(zstd, ZSTD_reset_session_only)) == 0
    }
  }

  /// Decodes from `input` into `output` as far as both allow: bytes read, bytes written, state.
  func step(
    _ input: UnsafeMutableRawBufferPointer, _ output: UnsafeMutableRawBufferPointer
  ) -> (read: Int, written: Int, state: State) {
    let inBase = input.baseAddress!.assumingMemoryBound(to: UInt8.self)
    let outBase = output.baseAddress!.assumingMemoryBound(to: UInt8.self)
    switch format {
    case .gzip, .zlib, .zipDeflate:
      zlib.next_in = inBase
      zlib.avail_in = UInt32(input.count)
      zlib.next_out = outBase
      zlib.avail_out = UInt32(output.count)
      let result = CZlib.inflate(&zlib, Z_NO_FLUSH)
      let state: State =
        switch result {
        case Z_STREAM_END: .end
        case Z_OK, Z_BUF_ERROR: .more
        case Z_MEM_ERROR: .unsupported(Self.outOfMemory(format))
        default: .corrupt
        }
      return (input.count - Int(zlib.avail_in), output.count - Int(zlib.avail_out), state)
    case .xz:
      lzma.next_in = UnsafePointer(inBase)
      lzma.avail_in = input.count
      lzma.next_out = outBase
      lzma.avail_out = output.count
      let result = lzma_code(&lzma, LZMA_RUN)
      let state: State =
        switch result {
        case LZMA_STREAM_END: .end
        case LZMA_OK, LZMA_BUF_ERROR: .more
        case LZMA_MEMLIMIT_ERROR: .unsupported("an xz stream needs more than 128 MiB to decode")
        // Memory short is not a corrupt stream (an outside review: under `ulimit -v` an xz stream
        // was taken for a false start, and the scan said clean).
        case LZMA_MEM_ERROR: .unsupported(Self.outOfMemory(format))
        default: .corrupt
        }
      return (input.count - lzma.avail_in, output.count - lzma.avail_out, state)
    case .bzip2:
      let raw = UnsafeMutableRawPointer(inBase).assumingMemoryBound(to: CChar.self)
      bzip.next_in = raw
      bzip.avail_in = UInt32(input.count)
      bzip.next_out = UnsafeMutableRawPointer(outBase).assumingMemoryBound(to: CChar.self)
      bzip.avail_out = UInt32(output.count)
      let result = BZ2_bzDecompress(&bzip)
      let state: State =
        switch result {
        case BZ_STREAM_END: .end
        case BZ_OK: .more
        case BZ_MEM_ERROR: .unsupported(Self.outOfMemory(format))
        default: .corrupt
        }
      return (input.count - Int(bzip.avail_in), output.count - Int(bzip.avail_out), state)
    case .plain:
      let count = min(input.count, output.count)
      output.baseAddress!.copyMemory(from: input.baseAddress!, byteCount: count)
      return (count, count, .more)
    case .zstd:
      var source = ZSTD_inBuffer(src: input.baseAddress, size: input.count, pos: 0)
      var target = ZSTD_outBuffer(dst: output.baseAddress, size: output.count, pos: 0)
      let result = ZSTD_decompressStream(zstd, &target, &source)
      let state: State
      if ZSTD_isError(result) != 0 {
        state =
          switch ZSTD_getErrorCode(result) {
          case ZSTD_error_frameParameter_windowTooLarge:
            .unsupported("a zstd frame needs a window larger than 128 MiB to decode")
          // A frame that names a dictionary cannot be read without it (an outside review: one
          // decoded nothing and was passed over, clean).
          case ZSTD_error_dictionary_wrong: .unsupported("a zstd frame needs a dictionary the scanner does not have")
          case ZSTD_error_memory_allocation: .unsupported(Self.outOfMemory(format))
          default: .corrupt
          }
      } else {
        state = result == 0 ? .end : .more
      }
      return (source.pos, target.pos, state)
    }
  }

  deinit {
    if zlibReady { inflateEnd(&zlib) }
    if lzmaReady { lzma_end(&lzma) }
    if bzipReady { BZ2_bzDecompressEnd(&bzip) }
    if let zstd { ZSTD_freeDStream(zstd) }
  }
}
