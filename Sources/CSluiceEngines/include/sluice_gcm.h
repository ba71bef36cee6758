#ifndef SLUICE_GCM_H
#define SLUICE_GCM_H

#include <stddef.h>
#include <stdint.h>

/// AES-GCM (NIST SP 800-38D, 96-bit nonces, 16-byte tags) on the vector AES and carry-less
/// multiply instructions (VAES and VPCLMULQDQ on 256-bit vectors, with AVX2): sixteen blocks a
/// step, enciphered and hashed in one pass over the data. Used for TLS 1.3 records where the CPU has those
/// instructions; everywhere else the record layer keeps OpenSSL's EVP. Its only inputs from a
/// peer are the bytes it decrypts and the tag it checks (in constant time); lengths are the
/// caller's.

typedef struct sluice_gcm sluice_gcm;

/// 1 when this CPU (and its kernel) runs this implementation, else 0.
int sluice_gcm_available(void);

/// The largest `length` the seal and open functions take (bytes).
#define SLUICE_GCM_MAX_LENGTH ((size_t)1 << 30)

/// A key schedule for AES-128 (`key_length` 16) or AES-256 (32); NULL when the CPU lacks the
/// instructions, the length is neither, or memory runs out. Free with `sluice_gcm_free`,
/// which wipes it.
sluice_gcm *sluice_gcm_new(const uint8_t *key, size_t key_length);
void sluice_gcm_free(sluice_gcm *key);

/// Encrypts `length` bytes at `in`, then the one byte `trailer` (a TLS 1.3 record's inner
/// content type), into `out` (`length` + 1 bytes) and writes the 16-byte tag after them;
/// `aad` is authenticated. 1, or 0 when `length` passes SLUICE_GCM_MAX_LENGTH.
int sluice_gcm_seal(const sluice_gcm *key, const uint8_t nonce[12], const uint8_t *aad, size_t aad_length,
                    const uint8_t *in, size_t length, uint8_t trailer, uint8_t *out);

/// Decrypts the `length` bytes at `in` (the tag's 16 follow them): all but the last go to
/// `out` (which may be `in` itself), the last to `*last`. 1 when the tag checks out; 0 when
/// it does not (what was written to `out` is then to be discarded), `length` is 0, or it
/// passes SLUICE_GCM_MAX_LENGTH.
int sluice_gcm_open(const sluice_gcm *key, const uint8_t nonce[12], const uint8_t *aad, size_t aad_length,
                    const uint8_t *in, size_t length, uint8_t *out, uint8_t *last);

#endif
