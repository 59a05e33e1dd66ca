// C boundary: every OpenSSL return code in VaultCrypto goes through `check`.
internal import COpenSSL

/// Checks an OpenSSL return code (1 is success); anything else clears OpenSSL's error queue
/// and throws `CryptoError.library` naming the call, never any data.
@inline(__always)
func check(_ result: Int32, _ call: StaticString) throws {
  guard result == 1 else {
    ERR_clear_error()
    throw CryptoError.library(call: "\(call)")
  }
}

/// Overwrites memory in a way the optimiser may not remove.
func cleanse(_ buffer: UnsafeMutableRawBufferPointer) {
  guard let base = buffer.baseAddress, buffer.count > 0 else { return }
  OPENSSL_cleanse(base, buffer.count)
}

/// Compares two buffers in time that depends only on their length.
package func constantTimeEquals(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Bool {
  guard a.count == b.count else { return false }
  guard a.count > 0, let pa = a.baseAddress, let pb = b.baseAddress else { return true }
  return CRYPTO_memcmp(pa, pb, a.count) == 0
}

/// An owned `EVP_CIPHER_CTX`; freed (which also cleanses its key schedule) on deinit.
// Sendable so a pool can hand it between threads; only one thread uses a context at a time.
final class CipherContext: @unchecked Sendable {
  let pointer: OpaquePointer

  init() throws {
    guard let pointer = EVP_CIPHER_CTX_new() else { throw CryptoError.library(call: "EVP_CIPHER_CTX_new") }
    self.pointer = pointer
  }

  deinit { EVP_CIPHER_CTX_free(pointer) }
}

/// The AES-256-GCM implementation, fetched from the default provider once per process
/// (fetching it on every call costs more than sealing a small record).
nonisolated(unsafe) let aes256GCMCipher: OpaquePointer? = EVP_CIPHER_fetch(nil, "AES-256-GCM", nil)
nonisolated(unsafe) let aes256ECBCipher: OpaquePointer? = EVP_CIPHER_fetch(nil, "AES-256-ECB", nil)
nonisolated(unsafe) let sha256Digest: OpaquePointer? = EVP_MD_fetch(nil, "SHA256", nil)

/// The OpenSSL (libcrypto) that this process runs with, for `vault version`.
package enum OpenSSLLibrary {
  /// How the library loaded at run time names itself (`OpenSSL 3.0.15 3 Sep 2024`), which may
  /// differ from the headers vault was built with; nil when it gives no name.
  package static var version: String? {
    OpenSSL_version(OPENSSL_VERSION).map { String(cString: $0) }
  }
}
