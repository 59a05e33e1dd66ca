// OpenSSL (libcrypto) for VaultCrypto. Only VaultCrypto imports this module.
#ifndef VAULT_COPENSSL_SHIM_H
#define VAULT_COPENSSL_SHIM_H

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/kdf.h>
#include <openssl/rand.h>
// getrandom(2), for the per-seal nonces (glibc 2.25+; not in Swift's Glibc module).
#include <sys/random.h>

// EVP_CIPHER_CTX_ctrl takes a void pointer for the tag; these name the two GCM uses.
static inline int vault_gcm_get_tag(EVP_CIPHER_CTX *ctx, unsigned char *tag, int length) {
  return EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, length, tag);
}

static inline int vault_gcm_set_tag(EVP_CIPHER_CTX *ctx, const unsigned char *tag, int length) {
  return EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, length, (void *)tag);
}

#endif
