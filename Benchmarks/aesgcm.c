// The speed of sluice's own AES-GCM (Sources/CSluiceEngines/gcm.c) against OpenSSL's EVP on
// the same TLS records: 16 KiB of plaintext and its content type sealed under a 5-byte header,
// then opened, with AES-128 and AES-256; OpenSSL's through the record layer's own calls
// (`sluice_aead_seal`, `sluice_aead_open` in Sources/CCrypto/tls_shim.h). Each round times
// every way once, in an order that turns each round; prints GB/s per way and round, then the
// medians and the median of the per-round ratios own/OpenSSL. Built and run by
// Benchmarks/aesgcm.sh.
#include "benchclock.h"
#include "sluice_gcm.h"
#include "tls_shim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { RECORD = 16384, COUNT = 40000 };

static unsigned char in[RECORD + 1], record[5 + RECORD + 17], out[RECORD + 17];
static unsigned char *const header = record, *const sealed = record + 5;


int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 7;
    if (rounds < 1 || rounds > 1000) rounds = 7;
    if (!sluice_gcm_available()) {
        puts("this CPU lacks VAES or VPCLMULQDQ: sluice uses OpenSSL's AES-GCM here");
        return 0;
    }
    for (size_t i = 0; i < sizeof(in); i++) in[i] = (unsigned char)(i * 131 + 7);
    unsigned char key[32], nonce[12] = {1, 2, 3};
    for (int i = 0; i < 32; i++) key[i] = (unsigned char)(i * 17 + 3);
    const char *names[4] = {"own seal", "OpenSSL seal", "own open", "OpenSSL open"};
    for (int bits = 128; bits <= 256; bits += 128) {
        sluice_gcm *own = sluice_gcm_new(key, (size_t)bits / 8);
        int suite = bits == 128 ? 0x1301 : 0x1302;
        EVP_CIPHER_CTX *seal = sluice_aead_new(suite, key, 1), *open = sluice_aead_new(suite, key, 0);
        sluice_record_header(header, RECORD);
        if (own == NULL || seal == NULL || open == NULL) {
            fputs("aesgcm: set-up failed\n", stderr);
            return 1;
        }
        double speed[4][1000], ratio[2][1000];
        for (int r = 0; r < rounds; r++) {
            for (int k = 0; k < 4; k++) {
                int way = (k + r) % 4;
                /* Each open reads what its own side sealed: seal once untimed first. */
                if (way == 2) sluice_gcm_seal(own, nonce, header, 5, in, RECORD, 23, sealed);
                if (way == 3 && sluice_aead_seal(seal, nonce, record, in, RECORD, 23) == 0) return 1;
                double t0 = now();
                int ok = 1;
                unsigned char last;
                for (int i = 0; i < COUNT && ok; i++) {
                    switch (way) {
                    case 0: ok = sluice_gcm_seal(own, nonce, header, 5, in, RECORD, 23, sealed); break;
                    case 1: ok = sluice_aead_seal(seal, nonce, record, in, RECORD, 23) > 0; break;
                    case 2: ok = sluice_gcm_open(own, nonce, header, 5, sealed, RECORD + 1, out, &last); break;
                    default: ok = sluice_aead_open(open, nonce, header, sealed, RECORD + 17, out, &last); break;
                    }
                }
                if (!ok) {
                    fprintf(stderr, "aesgcm: %s failed\n", names[way]);
                    return 1;
                }
                speed[way][r] = (double)COUNT * RECORD / (now() - t0) / 1e9;
            }
            ratio[0][r] = speed[0][r] / speed[1][r];
            ratio[1][r] = speed[2][r] / speed[3][r];
            printf("AES-%d round %d: own seal %.2f, OpenSSL seal %.2f, own open %.2f, OpenSSL open %.2f GB/s\n", bits,
                   r + 1, speed[0][r], speed[1][r], speed[2][r], speed[3][r]);
        }
        for (int k = 0; k < 4; k++) printf("AES-%d %s: median %.2f GB/s\n", bits, names[k], median(speed[k], rounds));
        double low = ratio[0][0], high = ratio[0][0];
        for (int r = 0; r < rounds; r++) low = ratio[0][r] < low ? ratio[0][r] : low, high = ratio[0][r] > high ? ratio[0][r] : high;
        printf("AES-%d own/OpenSSL seal: median %.2f (range %.2f-%.2f)\n", bits, median(ratio[0], rounds), low, high);
        low = high = ratio[1][0];
        for (int r = 0; r < rounds; r++) low = ratio[1][r] < low ? ratio[1][r] : low, high = ratio[1][r] > high ? ratio[1][r] : high;
        printf("AES-%d own/OpenSSL open: median %.2f (range %.2f-%.2f)\n", bits, median(ratio[1], rounds), low, high);
        sluice_gcm_free(own);
        EVP_CIPHER_CTX_free(seal);
        EVP_CIPHER_CTX_free(open);
    }
    return 0;
}
