// Two builds of sluice's own AES-GCM (Sources/CSluiceEngines/gcm.c) against each other in one
// process: OLD is gcm.c at another commit, NEW the tree's, each compiled with its symbols renamed
// (Benchmarks/gcm-ab.sh). 16 KiB TLS records sealed, then opened, from a 256 KiB ring (in the
// cache, as the record layer's buffers are), AES-128; the four ways alternate in every round.
// Prints the median and best GB/s of each way over the rounds and the median of the per-round
// ratios NEW/OLD.
#include "benchclock.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct sluice_gcm sluice_gcm;
#define DECLARE(p)                                                                                            \
    sluice_gcm *p##_new(const uint8_t *, size_t);                                                             \
    int p##_seal(const sluice_gcm *, const uint8_t *, const uint8_t *, size_t, const uint8_t *, size_t, uint8_t, \
                 uint8_t *);                                                                                  \
    int p##_open(const sluice_gcm *, const uint8_t *, const uint8_t *, size_t, const uint8_t *, size_t, uint8_t *, \
                 uint8_t *);
DECLARE(old)
DECLARE(new)

enum { RECORD = 16384, RING = 256 * 1024, TOTAL = 32 << 20, ROUNDS = 41 };

int main(void) {
    uint8_t key[16] = {1}, nonce[12] = {2}, aad[5] = {23, 3, 3, 64, 17}, last = 0;
    sluice_gcm *keys[2] = {old_new(key, 16), new_new(key, 16)};
    if (keys[0] == NULL || keys[1] == NULL) {
        fprintf(stderr, "gcm-ab: this CPU lacks VAES or VPCLMULQDQ\n");
        return 1;
    }
    uint8_t *plain = aligned_alloc(64, RING), *sealed = aligned_alloc(64, RING + 4096);
    memset(plain, 7, RING);
    static double t[4][ROUNDS], ratio[2][ROUNDS];
    for (int r = 0; r < ROUNDS; r++) {
        for (int w = 0; w < 4; w++) {
            int build = w & 1, opening = w >> 1;
            double t0 = now();
            for (size_t n = 0, o = 0; n < TOTAL / RECORD; n++) {
                if (o + RECORD + 17 > RING) o = 0;
                if (!opening) {
                    (build ? new_seal : old_seal)(keys[build], nonce, aad, 5, plain + o, RECORD, 23, sealed + o);
                } else if (!(build ? new_open : old_open)(keys[build], nonce, aad, 5, sealed + o, RECORD + 1,
                                                           plain + o, &last)) {
                    fprintf(stderr, "gcm-ab: a record did not open\n");
                    return 1;
                }
                o += RECORD + 17;
            }
            t[w][r] = now() - t0;
        }
        ratio[0][r] = t[0][r] / t[1][r];
        ratio[1][r] = t[2][r] / t[3][r];
    }
    const char *names[4] = {"OLD seal", "NEW seal", "OLD open", "NEW open"};
    for (int w = 0; w < 4; w++) {
        double middle = median(t[w], ROUNDS);
        printf("%s: median %.2f GB/s, best %.2f\n", names[w], TOTAL / middle / 1e9, TOTAL / t[w][0] / 1e9);
    }
    for (int i = 0; i < 2; i++) {
        double middle = median(ratio[i], ROUNDS);
        printf("NEW/OLD %s speed: median %.3f (range %.3f-%.3f)\n", i ? "open" : "seal", middle, ratio[i][0],
               ratio[i][ROUNDS - 1]);
    }
    return 0;
}
