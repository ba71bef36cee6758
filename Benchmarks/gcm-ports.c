// What the AES-GCM loop is made of, on this CPU: the throughput of VAESENC and VPCLMULQDQ on
// 256-bit vectors, each alone and both mixed, in time-stamp-counter ticks per instruction (eight
// independent chains, so latency does not count). Their sum per 256 bytes (AES-128: 80 VAESENC;
// the hash: 26 VPCLMULQDQ, Karatsuba's three multiplies a block and one reduction per sixteen
// blocks) bounds what gcm.c can reach where the two share the vector units. Run by
// Benchmarks/gcm-ab.sh.
#include <immintrin.h>
#include <stdio.h>
#include <x86intrin.h>

enum { N = 10000000 };

__attribute__((target("avx2,vaes,vpclmulqdq"))) int main(void) {
    __m256i a[8], k = _mm256_set1_epi32(0x1234567);
    for (int i = 0; i < 8; i++) a[i] = _mm256_set1_epi32(i * 77 + 1);
    unsigned long long t0 = __rdtsc();
    for (long n = 0; n < N; n++)
        for (int i = 0; i < 8; i++) a[i] = _mm256_aesenc_epi128(a[i], k);
    double aes = (double)(__rdtsc() - t0) / (N * 8.0);
    t0 = __rdtsc();
    for (long n = 0; n < N; n++)
        for (int i = 0; i < 8; i++) a[i] = _mm256_clmulepi64_epi128(a[i], k, 0x01);
    double clmul = (double)(__rdtsc() - t0) / (N * 8.0);
    t0 = __rdtsc();
    for (long n = 0; n < N; n++) {
        for (int i = 0; i < 4; i++) a[i] = _mm256_aesenc_epi128(a[i], k);
        for (int i = 4; i < 8; i++) a[i] = _mm256_clmulepi64_epi128(a[i], k, 0x01);
    }
    double mixed = (double)(__rdtsc() - t0) / N;
    double bound = 80 * aes + 26 * clmul;
    printf("VAESENC ymm %.3f ticks, VPCLMULQDQ ymm %.3f ticks; four of each %.2f ticks (%.2f apart)\n", aes, clmul,
           mixed, 4 * aes + 4 * clmul);
    printf("AES-128-GCM bound, the two summed: %.1f ticks per 256 bytes\n", bound);
    int sink = 0;
    for (int i = 0; i < 8; i++) sink += _mm256_extract_epi32(a[i], 0);
    return sink == 42;
}
