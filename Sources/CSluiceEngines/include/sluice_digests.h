#ifndef SLUICE_DIGESTS_H
#define SLUICE_DIGESTS_H

#include <stddef.h>
#include <stdint.h>

/// XXH3-128 from libxxhash (Debian's libxxhash0), loaded with dlopen at run time like the
/// optional compression engines: no header is needed to build, and a machine without the
/// library uses SHA-256 for transfers. Only version 0.8.0 or later is used: the 128-bit XXH3
/// of earlier versions was experimental and gave other values.

/// Loads the library (once; thread-safe). 1 when it is 0.8.0 or later and every function
/// sluice needs was found.
int sluice_xxh_load(void);

/// The loaded library's version text ("0.8.1", with ", dispatched" when updates run the
/// library's CPU dispatcher: its AVX2 or AVX-512 code where the CPU has it), or "" before a
/// successful load.
const char *sluice_xxh_version(void);

/// A streaming XXH3-128 state (XXH3_createState + XXH3_128bits_reset), or NULL when the
/// library is not loaded or memory ran out.
void *sluice_xxh128_create(void);
void sluice_xxh128_free(void *state);
/// Adds bytes: through the library's dispatcher when it has one, else its baseline code.
void sluice_xxh128_update(void *state, const void *bytes, size_t count);
/// The same through the baseline code always (the tests' reference for the dispatched one).
void sluice_xxh128_update_baseline(void *state, const void *bytes, size_t count);
/// The digest of everything added, in XXH128's canonical form: the high 64 bits then the low
/// 64 bits, each big-endian (XXH128_canonicalFromHash).
void sluice_xxh128_digest(void *state, uint8_t out[16]);

#endif
