// zlib for the telemetry batcher and the scanner.
#ifndef VAULT_CZLIB_SHIM_H
#define VAULT_CZLIB_SHIM_H

#include <zlib.h>

// deflateInit2 is a macro over deflateInit2_; windowBits 31 selects a gzip wrapper.
static inline int vault_deflate_init_gzip(z_stream *stream, int level) {
  return deflateInit2_(stream, level, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY, ZLIB_VERSION, (int)sizeof(z_stream));
}

// inflateInit2 is a macro too.
// windowBits 31: gzip only; 15: zlib with any window up to 32 KiB; -15: raw deflate (ZIP entries).
static inline int vault_inflate_init(z_stream *stream, int windowBits) {
  return inflateInit2_(stream, windowBits, ZLIB_VERSION, (int)sizeof(z_stream));
}

#endif
