// Vectorised pre-filters for VaultScan (Sources/VaultScan/Compressed.swift): code, not a library,
// written here; no library to link. Swift cannot ask for AVX2 per function, so the loop is C with
// a target attribute, and chosen at run time only on a CPU (and kernel) that has AVX2.
#ifndef VAULT_CSCANKERNELS_SHIM_H
#define VAULT_CSCANKERNELS_SHIM_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
// flistxattr and fgetxattr, which Swift's Glibc module leaves out: the scan searches extended
// attributes (Sources/VaultScan/FilePipeline.swift).
#include <sys/xattr.h>

/// 1 when this CPU and kernel run AVX2 code (checked through CPUID and XGETBV by the compiler's
/// runtime), else 0.
static inline int vault_scan_has_avx2(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") ? 1 : 0;
}

/// Writes to `positions`, in order, the positions from `from` on where a byte pair
/// (bytes[i], bytes[i + 1]) passes the nibble filter `masks`, 32 positions at a time, until fewer
/// than 33 bytes are left or `positions` might not hold the next 32 (it holds `capacity`, at least
/// 32). Returns the first position not looked at (the caller checks the rest itself) and sets
/// `*found` to how many were written. `masks` is 64 bytes: 16 for the first byte's low nibble, 16
/// for its high nibble, then the same two for the second byte. A pair passes when the four entries
/// its nibbles select share a set bit (one bit per bucket of pairs): every pair put in a bucket
/// passes, and some others may, so callers check each position found exactly.
__attribute__((target("avx2"))) static inline size_t vault_scan_pair_positions_avx2(
    const uint8_t *bytes, size_t count, size_t from, const uint8_t *masks, size_t *positions, size_t capacity,
    size_t *found) {
  const __m256i first_low = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(masks)));
  const __m256i first_high = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(masks + 16)));
  const __m256i second_low = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(masks + 32)));
  const __m256i second_high = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(masks + 48)));
  const __m256i nibble = _mm256_set1_epi8(0x0f);
  const __m256i zero = _mm256_setzero_si256();
  size_t i = from;
  size_t written = 0;
  // The second byte of the block's last position is bytes[i + 32].
  while (count > 32 && i < count - 32 && capacity - written >= 32) {
    const __m256i x = _mm256_loadu_si256((const __m256i *)(bytes + i));
    const __m256i y = _mm256_loadu_si256((const __m256i *)(bytes + i + 1));
    const __m256i a = _mm256_and_si256(
        _mm256_shuffle_epi8(first_low, _mm256_and_si256(x, nibble)),
        _mm256_shuffle_epi8(first_high, _mm256_and_si256(_mm256_srli_epi16(x, 4), nibble)));
    const __m256i b = _mm256_and_si256(
        _mm256_shuffle_epi8(second_low, _mm256_and_si256(y, nibble)),
        _mm256_shuffle_epi8(second_high, _mm256_and_si256(_mm256_srli_epi16(y, 4), nibble)));
    uint32_t passing = ~(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_and_si256(a, b), zero));
    while (passing != 0) {
      positions[written++] = i + (size_t)__builtin_ctz(passing);
      passing &= passing - 1;
    }
    i += 32;
  }
  *found = written;
  return i;
}

/// The first 32-position block `[i, i + 32)`, `i` = `from`, `from + 32`, ..., that holds a position
/// `p` where `bytes[p] == first` and `bytes[p + distance]` belongs to the class `table` describes
/// (as in `vault_scan_find_class_block_avx2`), while `bytes[i + distance + 31]` is inside `count`.
/// Returns its `i` and sets `*mask` to its positions (bit k: `i + k`); or, with none, returns the
/// first `i` not looked at with `*mask` 0 (the caller looks at the rest itself).
__attribute__((target("avx2"))) static inline size_t vault_scan_find_byte_then_class_avx2(
    const uint8_t *bytes, size_t count, size_t from, uint8_t first, size_t distance, const uint8_t *table,
    uint32_t *mask) {
  const __m256i a = _mm256_set1_epi8((char)first);
  const __m256i low = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(table)));
  const __m256i high = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(table + 16)));
  const __m256i nibble = _mm256_set1_epi8(0x0f);
  const __m256i zero = _mm256_setzero_si256();
  size_t i = from;
  while (count >= distance + 32 && i <= count - distance - 32) {
    const __m256i x = _mm256_cmpeq_epi8(_mm256_loadu_si256((const __m256i *)(bytes + i)), a);
    const __m256i y = _mm256_loadu_si256((const __m256i *)(bytes + i + distance));
    const __m256i classes = _mm256_and_si256(
        _mm256_shuffle_epi8(low, _mm256_and_si256(y, nibble)),
        _mm256_shuffle_epi8(high, _mm256_and_si256(_mm256_srli_epi16(y, 4), nibble)));
    const __m256i both = _mm256_andnot_si256(_mm256_cmpeq_epi8(classes, zero), x);
    const uint32_t found = (uint32_t)_mm256_movemask_epi8(both);
    if (found != 0) {
      *mask = found;
      return i;
    }
    i += 32;
  }
  *mask = 0;
  return i;
}

/// The first of the blocks `[b, b + span)`, for `b` = `from`, `from + 16`, ..., whose bytes all
/// belong to the class `table` describes, `span` 16 or (with `pairs`) 32, looking at the 32 bytes
/// from `i` = `from`, `from + 32`, ... while they are inside `count` (with `pairs`, the block from
/// `i - 16` when `i` is past `from`, then the one from `i`; else the one from `i`, then from `i + 16`).
/// Sets `*found` to 1 and returns its `b`; or, with none, sets `*found` to 0 and returns the first
/// `i` not looked at (fewer than 32 bytes are left from it). `table` is 32 bytes: 16 for a byte's
/// low nibble, then 16 for its high nibble; a byte belongs when the two entries its nibbles select
/// share a set bit. Any run of `span + 15` or more bytes of the class from `from` on holds such a
/// block, so a caller that measures the run through the block found, then looks again from the
/// run's end, meets every such run that ends where the loop stops.
__attribute__((target("avx2"))) static inline size_t vault_scan_find_class_block_avx2(
    const uint8_t *bytes, size_t count, size_t from, const uint8_t *table, int pairs, int *found) {
  const __m256i low = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(table)));
  const __m256i high = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(table + 16)));
  const __m256i nibble = _mm256_set1_epi8(0x0f);
  const __m256i zero = _mm256_setzero_si256();
  size_t i = from;
  int previous_high = 0;
  while (count >= 32 && i <= count - 32) {
    const __m256i x = _mm256_loadu_si256((const __m256i *)(bytes + i));
    const __m256i classes = _mm256_and_si256(
        _mm256_shuffle_epi8(low, _mm256_and_si256(x, nibble)),
        _mm256_shuffle_epi8(high, _mm256_and_si256(_mm256_srli_epi16(x, 4), nibble)));
    const uint32_t outside = (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(classes, zero));
    const int low_full = (outside & 0xffff) == 0;
    const int high_full = (outside >> 16) == 0;
    if (pairs) {
      if (previous_high && low_full) {
        *found = 1;
        return i - 16;
      }
      if (low_full && high_full) {
        *found = 1;
        return i;
      }
      previous_high = high_full;
    } else {
      if (low_full) {
        *found = 1;
        return i;
      }
      if (high_full) {
        *found = 1;
        return i + 16;
      }
    }
    i += 32;
  }
  *found = 0;
  return i;
}

#endif
