#include "sluice_digests.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

/* The few declarations of xxhash.h that sluice calls, so that no header is needed to build. */
typedef struct {
    uint64_t low64;
    uint64_t high64;
} sluice_xxh128_hash;

static struct {
    unsigned (*XXH_versionNumber)(void);
    void *(*XXH3_createState)(void);
    int (*XXH3_freeState)(void *);
    int (*XXH3_128bits_reset)(void *);
    int (*XXH3_128bits_update)(void *, const void *, size_t);
    sluice_xxh128_hash (*XXH3_128bits_digest)(const void *);
    /* The update that runs the widest vector code this CPU has (AVX2, AVX-512), where the
     * library was built with xxhash's x86 dispatcher (Debian's is): the plain one is built for
     * the baseline (SSE2), half AVX2's speed on long inputs. Optional; the same digest. */
    int (*XXH3_128bits_update_dispatch)(void *, const void *, size_t);
} xxh;

static int xxh_loaded;
static char xxh_version[32];
static pthread_once_t xxh_once = PTHREAD_ONCE_INIT;

#define XXH_LOOKUP(handle, name)                                                                              \
    do {                                                                                                      \
        *(void **)(&xxh.name) = dlsym((handle), #name);                                                       \
        if (!xxh.name) return 0;                                                                              \
    } while (0)

static int xxh_lookup(void *h) {
    XXH_LOOKUP(h, XXH_versionNumber);
    XXH_LOOKUP(h, XXH3_createState);
    XXH_LOOKUP(h, XXH3_freeState);
    XXH_LOOKUP(h, XXH3_128bits_reset);
    XXH_LOOKUP(h, XXH3_128bits_update);
    XXH_LOOKUP(h, XXH3_128bits_digest);
    *(void **)(&xxh.XXH3_128bits_update_dispatch) = dlsym(h, "XXH3_128bits_update_dispatch");
    unsigned version = xxh.XXH_versionNumber(); /* major * 10000 + minor * 100 + release */
    if (version < 800) return 0;
    snprintf(xxh_version, sizeof xxh_version, "%u.%u.%u%s", version / 10000, version / 100 % 100, version % 100,
             xxh.XXH3_128bits_update_dispatch ? ", dispatched" : "");
    return 1;
}

static void xxh_load_once(void) {
    void *h = dlopen("libxxhash.so.0", RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libxxhash.so", RTLD_NOW | RTLD_LOCAL);
    xxh_loaded = h && xxh_lookup(h);
}

int sluice_xxh_load(void) {
    pthread_once(&xxh_once, xxh_load_once);
    return xxh_loaded;
}

const char *sluice_xxh_version(void) { return sluice_xxh_load() ? xxh_version : ""; }

void *sluice_xxh128_create(void) {
    if (!sluice_xxh_load()) return NULL;
    void *state = xxh.XXH3_createState();
    if (state && xxh.XXH3_128bits_reset(state) != 0) {
        xxh.XXH3_freeState(state);
        return NULL;
    }
    return state;
}

void sluice_xxh128_free(void *state) {
    if (state) xxh.XXH3_freeState(state);
}

void sluice_xxh128_update(void *state, const void *bytes, size_t count) {
    if (!count) return;
    if (xxh.XXH3_128bits_update_dispatch)
        xxh.XXH3_128bits_update_dispatch(state, bytes, count);
    else
        xxh.XXH3_128bits_update(state, bytes, count);
}

void sluice_xxh128_update_baseline(void *state, const void *bytes, size_t count) {
    if (count) xxh.XXH3_128bits_update(state, bytes, count);
}

static void put64(uint8_t *out, uint64_t v) {
    for (int i = 7; i >= 0; i--, v >>= 8) out[i] = (uint8_t)v;
}

void sluice_xxh128_digest(void *state, uint8_t out[16]) {
    sluice_xxh128_hash h = xxh.XXH3_128bits_digest(state);
    put64(out, h.high64);
    put64(out + 8, h.low64);
}
