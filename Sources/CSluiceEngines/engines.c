#include "sluice_engines.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if __has_include(<zstd.h>)
#define SLUICE_HAVE_ZSTD 1
#include <zstd.h>
#else
#define SLUICE_HAVE_ZSTD 0
#endif

#if __has_include(<isa-l.h>)
#define SLUICE_HAVE_ISAL 1
#include <isa-l.h>
#else
#define SLUICE_HAVE_ISAL 0
#endif

#if __has_include(<libdeflate.h>)
#define SLUICE_HAVE_LIBDEFLATE 1
#include <libdeflate.h>
#include <zlib.h>
#else
#define SLUICE_HAVE_LIBDEFLATE 0
#endif

int sluice_zstd_compiled(void) { return SLUICE_HAVE_ZSTD; }
int sluice_isal_compiled(void) { return SLUICE_HAVE_ISAL; }
int sluice_libdeflate_compiled(void) { return SLUICE_HAVE_LIBDEFLATE; }

#define LOOKUP(handle, table, name)                                                                           \
    do {                                                                                                      \
        *(void **)(&(table).name) = dlsym((handle), #name);                                                   \
        if (!(table).name) return 0;                                                                          \
    } while (0)

/* ---- zstd ---------------------------------------------------------------------------------- */

#if SLUICE_HAVE_ZSTD
static struct {
    __typeof__(ZSTD_createCCtx) *ZSTD_createCCtx;
    __typeof__(ZSTD_freeCCtx) *ZSTD_freeCCtx;
    __typeof__(ZSTD_CCtx_setParameter) *ZSTD_CCtx_setParameter;
    __typeof__(ZSTD_compressStream2) *ZSTD_compressStream2;
    __typeof__(ZSTD_createDCtx) *ZSTD_createDCtx;
    __typeof__(ZSTD_freeDCtx) *ZSTD_freeDCtx;
    __typeof__(ZSTD_DCtx_setParameter) *ZSTD_DCtx_setParameter;
    __typeof__(ZSTD_DCtx_reset) *ZSTD_DCtx_reset;
    __typeof__(ZSTD_decompressStream) *ZSTD_decompressStream;
    __typeof__(ZSTD_isError) *ZSTD_isError;
    __typeof__(ZSTD_getErrorName) *ZSTD_getErrorName;
    __typeof__(ZSTD_versionString) *ZSTD_versionString;
    __typeof__(ZSTD_getFrameContentSize) *ZSTD_getFrameContentSize;
} zstd;

static int zstd_loaded;
static pthread_once_t zstd_once = PTHREAD_ONCE_INIT;

static int zstd_lookup(void *h) {
    LOOKUP(h, zstd, ZSTD_createCCtx);
    LOOKUP(h, zstd, ZSTD_freeCCtx);
    LOOKUP(h, zstd, ZSTD_CCtx_setParameter);
    LOOKUP(h, zstd, ZSTD_compressStream2);
    LOOKUP(h, zstd, ZSTD_createDCtx);
    LOOKUP(h, zstd, ZSTD_freeDCtx);
    LOOKUP(h, zstd, ZSTD_DCtx_setParameter);
    LOOKUP(h, zstd, ZSTD_DCtx_reset);
    LOOKUP(h, zstd, ZSTD_decompressStream);
    LOOKUP(h, zstd, ZSTD_isError);
    LOOKUP(h, zstd, ZSTD_getErrorName);
    LOOKUP(h, zstd, ZSTD_versionString);
    LOOKUP(h, zstd, ZSTD_getFrameContentSize);
    return 1;
}

static void zstd_load_once(void) {
    void *h = dlopen("libzstd.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libzstd.so", RTLD_NOW | RTLD_LOCAL);
    zstd_loaded = h && zstd_lookup(h);
}

int sluice_zstd_load(void) {
    pthread_once(&zstd_once, zstd_load_once);
    return zstd_loaded;
}

const char *sluice_zstd_version(void) { return sluice_zstd_load() ? zstd.ZSTD_versionString() : ""; }

void *sluice_zstd_cctx_create(int level, int workers, int long_window) {
    if (!sluice_zstd_load()) return NULL;
    ZSTD_CCtx *c = zstd.ZSTD_createCCtx();
    if (!c) return NULL;
    if (zstd.ZSTD_isError(zstd.ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, level)) ||
        zstd.ZSTD_isError(zstd.ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, 1)) ||
        (long_window && zstd.ZSTD_isError(zstd.ZSTD_CCtx_setParameter(c, ZSTD_c_enableLongDistanceMatching, 1)))) {
        zstd.ZSTD_freeCCtx(c);
        return NULL;
    }
    /* A build of libzstd without threads refuses nbWorkers: single-threaded output then. */
    if (workers > 0) (void)zstd.ZSTD_CCtx_setParameter(c, ZSTD_c_nbWorkers, workers);
    return c;
}

void sluice_zstd_cctx_free(void *cctx) {
    if (cctx) zstd.ZSTD_freeCCtx(cctx);
}

size_t sluice_zstd_compress(void *cctx, const void *src, size_t src_size, size_t *src_pos, void *dst,
                            size_t dst_size, size_t *dst_pos, int end) {
    ZSTD_inBuffer in = {src, src_size, *src_pos};
    ZSTD_outBuffer out = {dst, dst_size, *dst_pos};
    size_t r = zstd.ZSTD_compressStream2(cctx, &out, &in, end ? ZSTD_e_end : ZSTD_e_continue);
    *src_pos = in.pos;
    *dst_pos = out.pos;
    return r;
}

void *sluice_zstd_dctx_create(int window_log_max) {
    if (!sluice_zstd_load()) return NULL;
    ZSTD_DCtx *d = zstd.ZSTD_createDCtx();
    if (!d) return NULL;
    if (zstd.ZSTD_isError(zstd.ZSTD_DCtx_setParameter(d, ZSTD_d_windowLogMax, window_log_max))) {
        zstd.ZSTD_freeDCtx(d);
        return NULL;
    }
    return d;
}

void sluice_zstd_dctx_free(void *dctx) {
    if (dctx) zstd.ZSTD_freeDCtx(dctx);
}

void sluice_zstd_dctx_reset(void *dctx) { (void)zstd.ZSTD_DCtx_reset(dctx, ZSTD_reset_session_only); }

size_t sluice_zstd_decompress(void *dctx, const void *src, size_t src_size, size_t *src_pos, void *dst,
                              size_t dst_size, size_t *dst_pos) {
    ZSTD_inBuffer in = {src, src_size, *src_pos};
    ZSTD_outBuffer out = {dst, dst_size, *dst_pos};
    size_t r = zstd.ZSTD_decompressStream(dctx, &out, &in);
    *src_pos = in.pos;
    *dst_pos = out.pos;
    return r;
}

int sluice_zstd_is_error(size_t code) { return zstd.ZSTD_isError(code) ? 1 : 0; }
const char *sluice_zstd_error_name(size_t code) { return zstd.ZSTD_getErrorName(code); }

int sluice_zstd_frame_content_size(const void *frame, size_t size, unsigned long long *content_size) {
    unsigned long long n = zstd.ZSTD_getFrameContentSize(frame, size);
    if (n == ZSTD_CONTENTSIZE_UNKNOWN || n == ZSTD_CONTENTSIZE_ERROR) return 0;
    *content_size = n;
    return 1;
}

#else
int sluice_zstd_load(void) { return 0; }
const char *sluice_zstd_version(void) { return ""; }
void *sluice_zstd_cctx_create(int level, int workers, int long_window) {
    (void)level, (void)workers, (void)long_window;
    return NULL;
}
void sluice_zstd_cctx_free(void *cctx) { (void)cctx; }
size_t sluice_zstd_compress(void *cctx, const void *src, size_t src_size, size_t *src_pos, void *dst,
                            size_t dst_size, size_t *dst_pos, int end) {
    (void)cctx, (void)src, (void)src_size, (void)src_pos, (void)dst, (void)dst_size, (void)dst_pos, (void)end;
    return (size_t)-1;
}
void *sluice_zstd_dctx_create(int window_log_max) {
    (void)window_log_max;
    return NULL;
}
void sluice_zstd_dctx_free(void *dctx) { (void)dctx; }
void sluice_zstd_dctx_reset(void *dctx) { (void)dctx; }
size_t sluice_zstd_decompress(void *dctx, const void *src, size_t src_size, size_t *src_pos, void *dst,
                              size_t dst_size, size_t *dst_pos) {
    (void)dctx, (void)src, (void)src_size, (void)src_pos, (void)dst, (void)dst_size, (void)dst_pos;
    return (size_t)-1;
}
int sluice_zstd_is_error(size_t code) { return code == (size_t)-1; }
int sluice_zstd_frame_content_size(const void *frame, size_t size, unsigned long long *content_size) {
    (void)frame, (void)size, (void)content_size;
    return 0;
}
const char *sluice_zstd_error_name(size_t code) {
    (void)code;
    return "zstd is not in this build";
}
#endif

/* ---- ISA-L --------------------------------------------------------------------------------- */

#if SLUICE_HAVE_ISAL
static struct {
    __typeof__(isal_deflate_init) *isal_deflate_init;
    __typeof__(isal_deflate_reset) *isal_deflate_reset;
    __typeof__(isal_deflate_set_dict) *isal_deflate_set_dict;
    __typeof__(isal_deflate) *isal_deflate;
    __typeof__(isal_inflate_init) *isal_inflate_init;
    __typeof__(isal_inflate_reset) *isal_inflate_reset;
    __typeof__(isal_inflate) *isal_inflate;
    __typeof__(isal_gzip_header_init) *isal_gzip_header_init;
    __typeof__(isal_read_gzip_header) *isal_read_gzip_header;
    __typeof__(crc32_gzip_refl) *crc32_gzip_refl;
} isal;

static int isal_loaded;
static pthread_once_t isal_once = PTHREAD_ONCE_INIT;

static int isal_lookup(void *h) {
    LOOKUP(h, isal, isal_deflate_init);
    LOOKUP(h, isal, isal_deflate_reset);
    LOOKUP(h, isal, isal_deflate_set_dict);
    LOOKUP(h, isal, isal_deflate);
    LOOKUP(h, isal, isal_inflate_init);
    LOOKUP(h, isal, isal_inflate_reset);
    LOOKUP(h, isal, isal_inflate);
    LOOKUP(h, isal, isal_gzip_header_init);
    LOOKUP(h, isal, isal_read_gzip_header);
    LOOKUP(h, isal, crc32_gzip_refl);
    return 1;
}

static void isal_load_once(void) {
    void *h = dlopen("libisal.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libisal.so", RTLD_NOW | RTLD_LOCAL);
    isal_loaded = h && isal_lookup(h);
}

int sluice_isal_load(void) {
    pthread_once(&isal_once, isal_load_once);
    return isal_loaded;
}

const char *sluice_isal_version(void) {
#if defined(ISAL_MAJOR_VERSION) && defined(ISAL_MINOR_VERSION) && defined(ISAL_PATCH_VERSION)
#define SLUICE_STR2(x) #x
#define SLUICE_STR(x) SLUICE_STR2(x)
    return sluice_isal_load() ? SLUICE_STR(ISAL_MAJOR_VERSION) "." SLUICE_STR(ISAL_MINOR_VERSION) "." SLUICE_STR(
                                    ISAL_PATCH_VERSION)
                              : "";
#else
    return sluice_isal_load() ? "2" : "";
#endif
}

struct sluice_isal_deflater {
    struct isal_zstream stream;
    int level;
    uint32_t level_buf_size;
    uint8_t *level_buf;
};

static uint32_t isal_level_buf_size(int level) {
    switch (level) {
    case 0: return 0;
    case 1: return ISAL_DEF_LVL1_DEFAULT;
    case 2: return ISAL_DEF_LVL2_DEFAULT;
    default: return ISAL_DEF_LVL3_DEFAULT;
    }
}

void *sluice_isal_deflate_create(int level) {
    if (!sluice_isal_load() || level < 0 || level > ISAL_DEF_MAX_LEVEL) return NULL;
    struct sluice_isal_deflater *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->level = level;
    d->level_buf_size = isal_level_buf_size(level);
    if (d->level_buf_size) {
        d->level_buf = malloc(d->level_buf_size);
        if (!d->level_buf) {
            free(d);
            return NULL;
        }
    }
    isal.isal_deflate_init(&d->stream);
    return d;
}

void sluice_isal_deflate_free(void *ctx) {
    struct sluice_isal_deflater *d = ctx;
    if (!d) return;
    free(d->level_buf);
    free(d);
}

long sluice_isal_deflate_block(void *ctx, const uint8_t *dict, uint32_t dict_len, const uint8_t *in,
                               uint32_t in_len, int last, uint8_t *out, uint32_t out_cap) {
    struct sluice_isal_deflater *d = ctx;
    struct isal_zstream *s = &d->stream;
    isal.isal_deflate_reset(s);
    s->level = (uint32_t)d->level;
    s->level_buf = d->level_buf;
    s->level_buf_size = d->level_buf_size;
    s->gzip_flag = IGZIP_DEFLATE;
    if (dict_len && isal.isal_deflate_set_dict(s, (uint8_t *)dict, dict_len) != COMP_OK) return -2;
    s->next_in = (uint8_t *)in;
    s->avail_in = in_len;
    s->next_out = out;
    s->avail_out = out_cap;
    s->end_of_stream = last ? 1 : 0;
    s->flush = last ? NO_FLUSH : SYNC_FLUSH;
    if (isal.isal_deflate(s) != COMP_OK) return -2;
    int done = last ? s->internal_state.state == ZSTATE_END : (s->avail_in == 0 && s->internal_state.state == ZSTATE_NEW_HDR);
    if (!done) return s->avail_out == 0 ? -1 : -2;
    return (long)(out_cap - s->avail_out);
}

uint32_t sluice_isal_crc32(uint32_t crc, const uint8_t *buf, uint64_t len) {
    return len ? isal.crc32_gzip_refl(crc, buf, len) : crc;
}

/* An inflate state, and for SLUICE_ISAL_GZIP_BODY the gzip header being read (kept across
   calls, so that a header split over several inputs is read as one). */
struct sluice_isal_inflater {
    struct inflate_state state;
    struct isal_gzip_header header;
    int reading_header;
};

void *sluice_isal_inflate_create(void) {
    if (!sluice_isal_load()) return NULL;
    struct sluice_isal_inflater *d = malloc(sizeof *d);
    if (!d) return NULL;
    isal.isal_inflate_init(&d->state);
    d->state.crc_flag = ISAL_DEFLATE;
    d->reading_header = 0;
    return d;
}

void sluice_isal_inflate_free(void *ctx) { free(ctx); }

void sluice_isal_inflate_reset(void *ctx, int container) {
    struct sluice_isal_inflater *d = ctx;
    isal.isal_inflate_reset(&d->state);
    d->reading_header = container == SLUICE_ISAL_GZIP_BODY;
    if (d->reading_header) isal.isal_gzip_header_init(&d->header);
    d->state.crc_flag = d->reading_header ? ISAL_DEFLATE : (uint32_t)container;
}

int sluice_isal_inflate(void *ctx, const uint8_t *in, uint32_t in_len, uint32_t *in_used, uint8_t *out,
                        uint32_t out_cap, uint32_t *out_used, int *ended, uint32_t *unread,
                        uint8_t unread_bytes[8]) {
    struct sluice_isal_inflater *d = ctx;
    struct inflate_state *s = &d->state;
    s->next_in = (uint8_t *)in;
    s->avail_in = in_len;
    s->next_out = out;
    s->avail_out = out_cap;
    int rc = ISAL_DECOMP_OK;
    if (d->reading_header) {
        /* What isal_inflate does for ISAL_GZIP, with the header kept across calls; then the
           body is raw deflate, with no CRC-32 computed (the caller checks the trailer). */
        rc = isal.isal_read_gzip_header(s, &d->header);
        if (rc == ISAL_DECOMP_OK) {
            d->reading_header = 0;
        } else if (rc > 0) {
            rc = ISAL_END_INPUT;
        }
    }
    if (!d->reading_header && rc == ISAL_DECOMP_OK) rc = isal.isal_inflate(s);
    *in_used = in_len - s->avail_in;
    *out_used = out_cap - s->avail_out;
    *ended = !d->reading_header && s->block_state == ISAL_BLOCK_FINISH ? 1 : 0;
    *unread = 0;
    if (*ended && s->read_in_length > 0) {
        /* The bits of the last byte that are left are its padding; whole bytes beyond it were
           read ahead and belong to what follows the stream. */
        uint64_t ahead = s->read_in >> (s->read_in_length % 8);
        uint32_t n = (uint32_t)s->read_in_length / 8;
        for (uint32_t i = 0; i < n && i < 8; i++) unread_bytes[i] = (uint8_t)(ahead >> (8 * i));
        *unread = n;
        s->read_in = 0;
        s->read_in_length = 0;
    }
    s->next_in = NULL;
    s->next_out = NULL;
    return rc;
}

#else
int sluice_isal_load(void) { return 0; }
const char *sluice_isal_version(void) { return ""; }
void *sluice_isal_deflate_create(int level) {
    (void)level;
    return NULL;
}
void sluice_isal_deflate_free(void *ctx) { (void)ctx; }
long sluice_isal_deflate_block(void *ctx, const uint8_t *dict, uint32_t dict_len, const uint8_t *in,
                               uint32_t in_len, int last, uint8_t *out, uint32_t out_cap) {
    (void)ctx, (void)dict, (void)dict_len, (void)in, (void)in_len, (void)last, (void)out, (void)out_cap;
    return -2;
}
uint32_t sluice_isal_crc32(uint32_t crc, const uint8_t *buf, uint64_t len) {
    (void)buf, (void)len;
    return crc;
}
void *sluice_isal_inflate_create(void) { return NULL; }
void sluice_isal_inflate_free(void *ctx) { (void)ctx; }
void sluice_isal_inflate_reset(void *ctx, int container) { (void)ctx, (void)container; }
int sluice_isal_inflate(void *ctx, const uint8_t *in, uint32_t in_len, uint32_t *in_used, uint8_t *out,
                        uint32_t out_cap, uint32_t *out_used, int *ended, uint32_t *unread,
                        uint8_t unread_bytes[8]) {
    (void)ctx, (void)in, (void)in_len, (void)out, (void)out_cap, (void)unread_bytes;
    *in_used = 0;
    *out_used = 0;
    *ended = 0;
    *unread = 0;
    return -1;
}
#endif

/* ---- libdeflate ---------------------------------------------------------------------------- */

#if SLUICE_HAVE_LIBDEFLATE
static struct {
    __typeof__(libdeflate_alloc_compressor) *libdeflate_alloc_compressor;
    __typeof__(libdeflate_deflate_compress) *libdeflate_deflate_compress;
    __typeof__(libdeflate_free_compressor) *libdeflate_free_compressor;
    __typeof__(libdeflate_crc32) *libdeflate_crc32;
    __typeof__(libdeflate_adler32) *libdeflate_adler32;
} ld;

static int ld_loaded;
static pthread_once_t ld_once = PTHREAD_ONCE_INIT;

static int ld_lookup(void *h) {
    LOOKUP(h, ld, libdeflate_alloc_compressor);
    LOOKUP(h, ld, libdeflate_deflate_compress);
    LOOKUP(h, ld, libdeflate_free_compressor);
    LOOKUP(h, ld, libdeflate_crc32);
    LOOKUP(h, ld, libdeflate_adler32);
    return 1;
}

static void ld_load_once(void) {
    void *h = dlopen("libdeflate.so.0", RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libdeflate.so", RTLD_NOW | RTLD_LOCAL);
    ld_loaded = h && ld_lookup(h);
}

int sluice_libdeflate_load(void) {
    pthread_once(&ld_once, ld_load_once);
    return ld_loaded;
}

/* libdeflate has no version call: the version of the header this build was compiled with. */
const char *sluice_libdeflate_version(void) { return sluice_libdeflate_load() ? LIBDEFLATE_VERSION_STRING : ""; }

struct sluice_libdeflate_deflater {
    struct libdeflate_compressor *compressor;
    /* zlib's inflate, which walks a piece's blocks to find the last one (Z_BLOCK), and the
       output it decodes into, in turns (discarded). */
    z_stream walker;
    int walker_ready;
    uint8_t *scratch;
    uint32_t scratch_size;
};

void *sluice_libdeflate_deflate_create(int level) {
    if (!sluice_libdeflate_load() || level < 1 || level > 12) return NULL;
    struct sluice_libdeflate_deflater *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->compressor = ld.libdeflate_alloc_compressor(level);
    d->scratch_size = 64 * 1024;
    d->scratch = malloc(d->scratch_size);
    if (!d->compressor || !d->scratch || inflateInit2(&d->walker, -MAX_WBITS) != Z_OK) {
        if (d->compressor) ld.libdeflate_free_compressor(d->compressor);
        free(d->scratch);
        free(d);
        return NULL;
    }
    d->walker_ready = 1;
    return d;
}

void sluice_libdeflate_deflate_free(void *ctx) {
    struct sluice_libdeflate_deflater *d = ctx;
    if (!d) return;
    ld.libdeflate_free_compressor(d->compressor);
    if (d->walker_ready) inflateEnd(&d->walker);
    free(d->scratch);
    free(d);
}

/* Makes the complete raw deflate stream in out[0..<len] (libdeflate's: its last block final)
   continuable: clears the last block's BFINAL bit and ends the stream on a byte boundary with an
   empty stored block, as zlib's Z_SYNC_FLUSH does. The blocks are walked with zlib's inflate,
   which stops at each block boundary (Z_BLOCK; the method of zlib's examples/gzjoin.c). Returns
   the new length (at most len + 5), or -2 when the stream does not decode to exactly
   `expected` bytes. */
static long ld_continuable(struct sluice_libdeflate_deflater *d, uint8_t *out, size_t len, size_t expected) {
    z_stream *s = &d->walker;
    if (len == 0 || inflateReset(s) != Z_OK) return -2;
    s->next_in = out;
    s->avail_in = (uInt)len;
    /* Where the BFINAL bit of the block being decoded is: its byte and mask. */
    uint8_t *bit_byte = out;
    uint8_t bit_mask = 1;
    int final = out[0] & 1;
    size_t produced = 0;
    for (;;) {
        s->next_out = d->scratch;
        s->avail_out = d->scratch_size;
        int rc = inflate(s, Z_BLOCK);
        produced += d->scratch_size - s->avail_out;
        if (rc != Z_OK) return -2; /* Z_STREAM_END cannot come before the final block's end */
        if (s->data_type & 128) {
            if (final) break;
            int unused = s->data_type & 7;
            if (unused) {
                bit_byte = s->next_in - 1;
                bit_mask = (uint8_t)(0x100 >> unused);
            } else {
                if (s->avail_in == 0) return -2;
                bit_byte = s->next_in;
                bit_mask = 1;
            }
            final = (*bit_byte & bit_mask) != 0;
        } else if (s->avail_in == 0 && s->avail_out != 0) {
            return -2;
        }
    }
    if (produced != expected) return -2;
    *bit_byte &= (uint8_t)~bit_mask;
    int unused = s->data_type & 7;
    size_t n = (size_t)(s->next_in - out);
    if (unused) out[n - 1] &= (uint8_t)((0x100 >> unused) - 1);
    /* The stored block's three header bits fit in the last byte's unused bits, or take a byte. */
    if (unused < 3) out[n++] = 0;
    out[n++] = 0;
    out[n++] = 0;
    out[n++] = 0xff;
    out[n++] = 0xff;
    return (long)n;
}

long sluice_libdeflate_deflate_block(void *ctx, const uint8_t *in, uint32_t in_len, int last, uint8_t *out,
                                     uint32_t out_cap) {
    struct sluice_libdeflate_deflater *d = ctx;
    if (out_cap < 8) return -1;
    size_t n = ld.libdeflate_deflate_compress(d->compressor, in, in_len, out, out_cap - 8);
    if (n == 0) return -1;
    return last ? (long)n : ld_continuable(d, out, n, in_len);
}

uint32_t sluice_libdeflate_crc32(uint32_t crc, const uint8_t *buf, size_t len) {
    return len ? ld.libdeflate_crc32(crc, buf, len) : crc;
}

uint32_t sluice_libdeflate_adler32(uint32_t adler, const uint8_t *buf, size_t len) {
    return len ? ld.libdeflate_adler32(adler, buf, len) : adler;
}

#else
int sluice_libdeflate_load(void) { return 0; }
const char *sluice_libdeflate_version(void) { return ""; }
void *sluice_libdeflate_deflate_create(int level) {
    (void)level;
    return NULL;
}
void sluice_libdeflate_deflate_free(void *ctx) { (void)ctx; }
long sluice_libdeflate_deflate_block(void *ctx, const uint8_t *in, uint32_t in_len, int last, uint8_t *out,
                                     uint32_t out_cap) {
    (void)ctx, (void)in, (void)in_len, (void)last, (void)out, (void)out_cap;
    return -2;
}
uint32_t sluice_libdeflate_crc32(uint32_t crc, const uint8_t *buf, size_t len) {
    (void)buf, (void)len;
    return crc;
}
uint32_t sluice_libdeflate_adler32(uint32_t adler, const uint8_t *buf, size_t len) {
    (void)buf, (void)len;
    return adler;
}
#endif
