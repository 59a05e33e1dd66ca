// The decoders the scanner uses for compressed files besides gzip/zlib: xz (liblzma), bzip2
// (libbz2) and zstd (libzstd), from Debian's liblzma-dev, libbz2-dev and libzstd-dev.
#ifndef VAULT_CCOMPRESSION_SHIM_H
#define VAULT_CCOMPRESSION_SHIM_H

#include <bzlib.h>
#include <lzma.h>
#include <zstd.h>
#include <zstd_errors.h>

// LZMA_STREAM_INIT is a macro Swift cannot import.
static inline lzma_stream vault_lzma_stream_init(void) {
  lzma_stream stream = LZMA_STREAM_INIT;
  return stream;
}

#endif
