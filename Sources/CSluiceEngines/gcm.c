#include "sluice_gcm.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__clang__)
#include <immintrin.h>

/* How the hash works here. GCM maps the bits of a block to polynomial coefficients backwards
 * (the first byte's top bit is x^0). A block whose bytes are reversed (`bswap`) is, read as a
 * 128-bit integer, that polynomial with its coefficients in reverse order; a carry-less
 * product of two such values is the reversed product shifted by one place, an extra factor
 * that the hash key absorbs: every stored power of H carries one factor x^-1 (in GCM's order;
 * a left shift, read in the natural order). Read in the natural order, the multiplication
 * below is a * b * x^-128 modulo x^128 + x^127 + x^126 + x^121 + 1: the 256-bit product's
 * low 128 bits are folded into its high half 64 bits at a time, each fold adding the low 64
 * bits times that polynomial (which is where x^63 + x^62 + x^57, 0xc2 << 56, comes from). */

#define SLUICE_GCM_TARGET __attribute__((target("avx2,vaes,vpclmulqdq,aes,pclmul,sse4.1")))

/* Sixteen blocks (eight 256-bit vectors of two) a step, then eight, then the tail. */
struct sluice_gcm {
    __m256i round_keys[15]; /* each round key in both 128-bit lanes */
    __m128i powers[24];     /* H^16 … H^1 (each times x^-1), then zeros for a short tail */
    __m128i halves[24];     /* each power's two halves XORed (in both), for Karatsuba */
    int rounds;             /* 10 (AES-128) or 14 (AES-256) */
};

/* Where H^8 is: the eight-block hash's powers. */
#define POWERS8 8
/* Where H^1 is. */
#define H1 15

int sluice_gcm_available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("vaes") &&
           __builtin_cpu_supports("vpclmulqdq") && __builtin_cpu_supports("aes") &&
           __builtin_cpu_supports("pclmul");
}

SLUICE_GCM_TARGET static inline __m128i bswap_mask128(void) {
    return _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}

SLUICE_GCM_TARGET static inline __m128i gfpoly128(void) { return _mm_set_epi64x((long long)0xc200000000000000ULL, 1); }

/* a * b * x^-128 (natural order) for one block: see the comment at the top. */
SLUICE_GCM_TARGET static inline __m128i ghash_mul(__m128i a, __m128i b) {
    __m128i poly = gfpoly128();
    __m128i lo = _mm_clmulepi64_si128(a, b, 0x00);
    __m128i mi = _mm_xor_si128(_mm_clmulepi64_si128(a, b, 0x01), _mm_clmulepi64_si128(a, b, 0x10));
    __m128i hi = _mm_clmulepi64_si128(a, b, 0x11);
    __m128i t = _mm_clmulepi64_si128(poly, lo, 0x01);
    mi = _mm_xor_si128(_mm_xor_si128(mi, _mm_shuffle_epi32(lo, 0x4e)), t);
    t = _mm_clmulepi64_si128(poly, mi, 0x01);
    return _mm_xor_si128(_mm_xor_si128(hi, _mm_shuffle_epi32(mi, 0x4e)), t);
}

/* acc = (acc + d[0]) * H^m + d[1] * H^(m-1) + … over the 2n blocks in d (n vectors of two, n
 * 4 or 8), whose bytes are still in wire order, `powers` pointing at H^m (blocks past the m-th
 * are zero, for a short tail): the products summed unreduced (the one that waits for acc
 * last), Karatsuba's way (three multiplies a block: the middle term from (a_L + a_H)(b_L + b_H),
 * the key's half-sums stored with its powers), then one reduction for both lanes, then the
 * lanes summed. */
SLUICE_GCM_TARGET static inline __m128i ghash_v(__m128i acc, const __m256i *d, int n, const __m128i *powers,
                                                const __m128i *halves) {
    __m256i mask = _mm256_broadcastsi128_si256(bswap_mask128());
    __m256i lo = _mm256_setzero_si256(), mi = _mm256_setzero_si256(), hi = _mm256_setzero_si256();
    for (int v = n - 1; v >= 0; v--) {
        __m256i x = _mm256_shuffle_epi8(d[v], mask);
        if (v == 0) x = _mm256_xor_si256(x, _mm256_zextsi128_si256(acc));
        __m256i h = _mm256_loadu_si256((const __m256i *)(powers + 2 * v));
        __m256i k = _mm256_loadu_si256((const __m256i *)(halves + 2 * v));
        lo = _mm256_xor_si256(lo, _mm256_clmulepi64_epi128(h, x, 0x00));
        hi = _mm256_xor_si256(hi, _mm256_clmulepi64_epi128(h, x, 0x11));
        __m256i xk = _mm256_xor_si256(x, _mm256_shuffle_epi32(x, 0x4e));
        mi = _mm256_xor_si256(mi, _mm256_clmulepi64_epi128(k, xk, 0x00));
    }
    mi = _mm256_xor_si256(mi, _mm256_xor_si256(lo, hi));
    __m256i poly = _mm256_broadcastsi128_si256(gfpoly128());
    __m256i t = _mm256_clmulepi64_epi128(poly, lo, 0x01);
    mi = _mm256_xor_si256(_mm256_xor_si256(mi, _mm256_shuffle_epi32(lo, 0x4e)), t);
    t = _mm256_clmulepi64_epi128(poly, mi, 0x01);
    hi = _mm256_xor_si256(_mm256_xor_si256(hi, _mm256_shuffle_epi32(mi, 0x4e)), t);
    return _mm_xor_si128(_mm256_castsi256_si128(hi), _mm256_extracti128_si256(hi, 1));
}

/* The same over the 2n blocks at `p`. */
SLUICE_GCM_TARGET static inline __m128i ghash(__m128i acc, const uint8_t *p, int n, const __m128i *powers,
                                              const __m128i *halves) {
    __m256i d[8];
    for (int v = 0; v < n; v++) d[v] = _mm256_loadu_si256((const __m256i *)(p + 32 * v));
    return ghash_v(acc, d, n, powers, halves);
}

/* Encrypts `n` counter vectors in place (2n blocks): eight in flight keep both AES units busy
 * through the rounds' latency, four only half. */
SLUICE_GCM_TARGET static inline void aes_rounds(const sluice_gcm *key, __m256i *b, int n, int rounds) {
    for (int v = 0; v < n; v++) b[v] = _mm256_xor_si256(b[v], key->round_keys[0]);
    for (int r = 1; r < rounds; r++) {
        __m256i k = key->round_keys[r];
        for (int v = 0; v < n; v++) b[v] = _mm256_aesenc_epi128(b[v], k);
    }
    for (int v = 0; v < n; v++) b[v] = _mm256_aesenclast_epi128(b[v], key->round_keys[rounds]);
}

SLUICE_GCM_TARGET static inline void aes_n(const sluice_gcm *key, __m256i *b, int n) {
    if (key->rounds == 10) aes_rounds(key, b, n, 10);
    else aes_rounds(key, b, n, 14);
}

/* Encrypts the four counter vectors in place (eight blocks). */
SLUICE_GCM_TARGET static inline void aes8(const sluice_gcm *key, __m256i b[4]) { aes_n(key, b, 4); }

SLUICE_GCM_TARGET static inline __m128i aes1(const sluice_gcm *key, __m128i b) {
    b = _mm_xor_si128(b, _mm256_castsi256_si128(key->round_keys[0]));
    for (int r = 1; r < key->rounds; r++) b = _mm_aesenc_si128(b, _mm256_castsi256_si128(key->round_keys[r]));
    return _mm_aesenclast_si128(b, _mm256_castsi256_si128(key->round_keys[key->rounds]));
}

/* The next 2n counter blocks (big-endian, for AES) from `counter` (little-endian lanes
 * holding counters i and i+1 in their low 32 bits), which moves on by 2n; inc32 as GCM's. */
SLUICE_GCM_TARGET static inline void next_counters_n(__m256i *counter, __m256i *b, int n) {
    __m256i mask = _mm256_broadcastsi128_si256(bswap_mask128());
    __m256i two = _mm256_broadcastsi128_si256(_mm_set_epi32(0, 0, 0, 2));
    for (int v = 0; v < n; v++) {
        b[v] = _mm256_shuffle_epi8(*counter, mask);
        *counter = _mm256_add_epi32(*counter, two);
    }
}

SLUICE_GCM_TARGET static inline void next_counters(__m256i *counter, __m256i b[4]) { next_counters_n(counter, b, 4); }

#define EXPAND_128(previous, rcon)                                                                            \
    expand_step(previous, _mm_shuffle_epi32(_mm_aeskeygenassist_si128(previous, rcon), 0xff))

SLUICE_GCM_TARGET static inline __m128i expand_step(__m128i key, __m128i assist) {
    key = _mm_xor_si128(key, _mm_slli_si128(key, 4));
    key = _mm_xor_si128(key, _mm_slli_si128(key, 4));
    key = _mm_xor_si128(key, _mm_slli_si128(key, 4));
    return _mm_xor_si128(key, assist);
}

SLUICE_GCM_TARGET static void expand_key(sluice_gcm *out, const uint8_t *key, size_t key_length) {
    __m128i rk[15];
    rk[0] = _mm_loadu_si128((const __m128i *)key);
    if (key_length == 16) {
        rk[1] = EXPAND_128(rk[0], 0x01);
        rk[2] = EXPAND_128(rk[1], 0x02);
        rk[3] = EXPAND_128(rk[2], 0x04);
        rk[4] = EXPAND_128(rk[3], 0x08);
        rk[5] = EXPAND_128(rk[4], 0x10);
        rk[6] = EXPAND_128(rk[5], 0x20);
        rk[7] = EXPAND_128(rk[6], 0x40);
        rk[8] = EXPAND_128(rk[7], 0x80);
        rk[9] = EXPAND_128(rk[8], 0x1b);
        rk[10] = EXPAND_128(rk[9], 0x36);
        out->rounds = 10;
    } else {
        rk[1] = _mm_loadu_si128((const __m128i *)(key + 16));
#define EXPAND_256(i, rcon)                                                                                   \
    rk[i] = expand_step(rk[i - 2], _mm_shuffle_epi32(_mm_aeskeygenassist_si128(rk[i - 1], rcon), 0xff));      \
    if (i < 14) rk[i + 1] = expand_step(rk[i - 1], _mm_shuffle_epi32(_mm_aeskeygenassist_si128(rk[i], 0), 0xaa))
        EXPAND_256(2, 0x01);
        EXPAND_256(4, 0x02);
        EXPAND_256(6, 0x04);
        EXPAND_256(8, 0x08);
        EXPAND_256(10, 0x10);
        EXPAND_256(12, 0x20);
        EXPAND_256(14, 0x40);
#undef EXPAND_256
        out->rounds = 14;
    }
    for (int r = 0; r <= out->rounds; r++) out->round_keys[r] = _mm256_broadcastsi128_si256(rk[r]);
    explicit_bzero(rk, sizeof(rk));

    /* H = E(0), bytes reversed, times x^-1 (a left shift by one, reduced). */
    __m128i h = _mm_shuffle_epi8(aes1(out, _mm_setzero_si128()), bswap_mask128());
    uint64_t lo = (uint64_t)_mm_cvtsi128_si64(h), hi = (uint64_t)_mm_extract_epi64(h, 1);
    uint64_t carry = 0 - (hi >> 63);
    hi = (hi << 1) | (lo >> 63);
    lo <<= 1;
    hi ^= carry & 0xc200000000000000ULL;
    lo ^= carry & 1;
    __m128i power = _mm_set_epi64x((long long)hi, (long long)lo), h1 = power;
    for (int i = H1; i >= 0; i--) {
        out->powers[i] = power;
        power = ghash_mul(power, h1);
    }
    for (int i = H1 + 1; i < 24; i++) out->powers[i] = _mm_setzero_si128();
    for (int i = 0; i < 24; i++)
        out->halves[i] = _mm_xor_si128(out->powers[i], _mm_shuffle_epi32(out->powers[i], 0x4e));
}

sluice_gcm *sluice_gcm_new(const uint8_t *key, size_t key_length) {
    if ((key_length != 16 && key_length != 32) || !sluice_gcm_available()) return NULL;
    sluice_gcm *out = aligned_alloc(64, sizeof(sluice_gcm));
    if (out == NULL) return NULL;
    expand_key(out, key, key_length);
    return out;
}

void sluice_gcm_free(sluice_gcm *key) {
    if (key == NULL) return;
    explicit_bzero(key, sizeof(*key));
    free(key);
}

/* The hash of the additional data into a fresh accumulator. */
SLUICE_GCM_TARGET static inline __m128i ghash_aad(const sluice_gcm *key, const uint8_t *aad, size_t length) {
    __m128i acc = _mm_setzero_si128();
    while (length > 0) {
        uint8_t block[16] = {0};
        size_t n = length < 16 ? length : 16;
        memcpy(block, aad, n);
        __m128i x = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)block), bswap_mask128());
        acc = ghash_mul(_mm_xor_si128(acc, x), key->powers[H1]);
        aad += n;
        length -= n;
    }
    return acc;
}

/* The tag: the lengths block hashed in, bytes reversed back, XOR E(J0). */
SLUICE_GCM_TARGET static inline __m128i finish_tag(const sluice_gcm *key, __m128i acc, __m128i j0, size_t aad_length,
                                                   size_t length) {
    __m128i lengths = _mm_set_epi64x((long long)(aad_length * 8), (long long)(length * 8));
    acc = ghash_mul(_mm_xor_si128(acc, lengths), key->powers[H1]);
    return _mm_xor_si128(_mm_shuffle_epi8(acc, bswap_mask128()), aes1(key, j0));
}

/* J0 (nonce || 1) in wire order, and the first data counters (2, 3) as little-endian lanes. */
SLUICE_GCM_TARGET static inline __m128i start_counters(const uint8_t nonce[12], __m256i *counter) {
    uint8_t block[16] = {0};
    memcpy(block, nonce, 12);
    block[15] = 1;
    __m128i j0 = _mm_loadu_si128((const __m128i *)block);
    __m256i base = _mm256_broadcastsi128_si256(_mm_shuffle_epi8(j0, bswap_mask128()));
    *counter = _mm256_add_epi32(base, _mm256_set_epi32(0, 0, 0, 2, 0, 0, 0, 1));
    return j0;
}

SLUICE_GCM_TARGET int sluice_gcm_seal(const sluice_gcm *key, const uint8_t nonce[12], const uint8_t *aad,
                                      size_t aad_length, const uint8_t *in, size_t length, uint8_t trailer,
                                      uint8_t *out) {
    if (length > SLUICE_GCM_MAX_LENGTH) return 0;
    __m256i counter;
    __m128i j0 = start_counters(nonce, &counter);
    __m128i acc = ghash_aad(key, aad, aad_length);
    size_t done = 0;
    __m256i b[4];
    /* Each step enciphers sixteen blocks and hashes them from the registers; the processor
     * overlaps a step's hash with the next step's AES rounds (hashing the step before, read
     * back from `out`, measured 4-12 % slower). */
    while (done + 256 <= length) {
        __m256i w[8];
        next_counters_n(&counter, w, 8);
        aes_n(key, w, 8);
        for (int v = 0; v < 8; v++) {
            w[v] = _mm256_xor_si256(w[v], _mm256_loadu_si256((const __m256i *)(in + done + 32 * v)));
            _mm256_storeu_si256((__m256i *)(out + done + 32 * v), w[v]);
        }
        acc = ghash_v(acc, w, 8, key->powers, key->halves);
        done += 256;
    }
    /* Then at most one step of eight blocks. */
    if (done + 128 <= length) {
        next_counters(&counter, b);
        aes8(key, b);
        for (int v = 0; v < 4; v++)
            _mm256_storeu_si256((__m256i *)(out + done + 32 * v),
                                _mm256_xor_si256(b[v], _mm256_loadu_si256((const __m256i *)(in + done + 32 * v))));
        acc = ghash(acc, out + done, 4, key->powers + POWERS8, key->halves + POWERS8);
        done += 128;
    }
    /* The tail (1…128 bytes): the rest of `in`, then the trailer, enciphered in a block of
     * zeros that are zeros again before the hash. */
    size_t rest = length - done + 1;
    uint8_t tail[128] = {0};
    if (rest > 1) memcpy(tail, in + done, rest - 1);
    tail[rest - 1] = trailer;
    next_counters(&counter, b);
    aes8(key, b);
    for (int v = 0; v < 4; v++)
        _mm256_storeu_si256((__m256i *)(tail + 32 * v),
                            _mm256_xor_si256(b[v], _mm256_loadu_si256((const __m256i *)(tail + 32 * v))));
    memset(tail + rest, 0, sizeof(tail) - rest);
    memcpy(out + done, tail, rest);
    acc = ghash(acc, tail, 4, key->powers + 16 - (rest + 15) / 16, key->halves + 16 - (rest + 15) / 16);
    _mm_storeu_si128((__m128i *)(out + length + 1), finish_tag(key, acc, j0, aad_length, length + 1));
    explicit_bzero(tail, sizeof(tail));
    return 1;
}

SLUICE_GCM_TARGET int sluice_gcm_open(const sluice_gcm *key, const uint8_t nonce[12], const uint8_t *aad,
                                      size_t aad_length, const uint8_t *in, size_t length, uint8_t *out,
                                      uint8_t *last) {
    if (length == 0 || length > SLUICE_GCM_MAX_LENGTH) return 0;
    __m256i counter;
    __m128i j0 = start_counters(nonce, &counter);
    __m128i acc = ghash_aad(key, aad, aad_length);
    size_t done = 0;
    __m256i b[4], c[4];
    while (done + 256 < length) {
        __m256i w[8];
        acc = ghash(acc, in + done, 8, key->powers, key->halves);
        next_counters_n(&counter, w, 8);
        aes_n(key, w, 8);
        for (int v = 0; v < 8; v++)
            _mm256_storeu_si256((__m256i *)(out + done + 32 * v),
                                _mm256_xor_si256(w[v], _mm256_loadu_si256((const __m256i *)(in + done + 32 * v))));
        done += 256;
    }
    /* Then at most one step of eight blocks (the tail keeps at least one byte). */
    if (done + 128 < length) {
        acc = ghash(acc, in + done, 4, key->powers + POWERS8, key->halves + POWERS8);
        next_counters(&counter, b);
        aes8(key, b);
        for (int v = 0; v < 4; v++)
            _mm256_storeu_si256((__m256i *)(out + done + 32 * v),
                                _mm256_xor_si256(b[v], _mm256_loadu_si256((const __m256i *)(in + done + 32 * v))));
        done += 128;
    }
    /* The tail (1…128 bytes), whose last byte goes to *last. */
    size_t rest = length - done;
    uint8_t tail[128] = {0};
    memcpy(tail, in + done, rest);
    for (int v = 0; v < 4; v++) c[v] = _mm256_loadu_si256((const __m256i *)(tail + 32 * v));
    acc = ghash(acc, tail, 4, key->powers + 16 - (rest + 15) / 16, key->halves + 16 - (rest + 15) / 16);
    __m128i tag = finish_tag(key, acc, j0, aad_length, length);
    __m128i given = _mm_loadu_si128((const __m128i *)(in + length));
    int ok = _mm_movemask_epi8(_mm_cmpeq_epi8(tag, given)) == 0xffff;
    next_counters(&counter, b);
    aes8(key, b);
    for (int v = 0; v < 4; v++) _mm256_storeu_si256((__m256i *)(tail + 32 * v), _mm256_xor_si256(b[v], c[v]));
    if (rest > 1) memcpy(out + done, tail, rest - 1);
    *last = tail[rest - 1];
    explicit_bzero(tail, sizeof(tail));
    return ok;
}

#else

int sluice_gcm_available(void) { return 0; }
sluice_gcm *sluice_gcm_new(const uint8_t *key, size_t key_length) {
    (void)key;
    (void)key_length;
    return NULL;
}
void sluice_gcm_free(sluice_gcm *key) { (void)key; }
int sluice_gcm_seal(const sluice_gcm *key, const uint8_t nonce[12], const uint8_t *aad, size_t aad_length,
                    const uint8_t *in, size_t length, uint8_t trailer, uint8_t *out) {
    (void)key, (void)nonce, (void)aad, (void)aad_length, (void)in, (void)length, (void)trailer, (void)out;
    return 0;
}
int sluice_gcm_open(const sluice_gcm *key, const uint8_t nonce[12], const uint8_t *aad, size_t aad_length,
                    const uint8_t *in, size_t length, uint8_t *out, uint8_t *last) {
    (void)key, (void)nonce, (void)aad, (void)aad_length, (void)in, (void)length, (void)out, (void)last;
    return 0;
}

#endif
