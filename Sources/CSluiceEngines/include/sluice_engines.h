#ifndef SLUICE_ENGINES_H
#define SLUICE_ENGINES_H

#include <stddef.h>
#include <stdint.h>

#include "sluice_digests.h"

/// The optional compression engines, loaded with dlopen at run time so that one build runs on
/// machines with and without them. Support for each is compiled in only where its header was
/// found at build time (libzstd-dev, libisal-dev): `sluice_*_compiled` says whether it was.

/// 1 when this build was compiled with zstd.h / isa-l.h / libdeflate.h.
int sluice_zstd_compiled(void);
int sluice_isal_compiled(void);
int sluice_libdeflate_compiled(void);

/// Loads the library (once; thread-safe). 1 when every function sluice needs was found.
int sluice_zstd_load(void);
int sluice_isal_load(void);
int sluice_libdeflate_load(void);

/// The loaded library's version text ("1.5.4"), or "" before a successful load (libdeflate:
/// the version of the header this build was compiled with; the library has no version call).
const char *sluice_zstd_version(void);
const char *sluice_isal_version(void);
const char *sluice_libdeflate_version(void);

/// zstd streaming compression (ZSTD_compressStream2). `workers` ≥ 1 selects zstd's
/// multithreaded mode, whose output does not depend on the number of workers.
void *sluice_zstd_cctx_create(int level, int workers, int long_window);
void sluice_zstd_cctx_free(void *cctx);
/// One ZSTD_compressStream2 call; `end` selects ZSTD_e_end. Returns zstd's result (bytes
/// left to flush, or an error code for sluice_zstd_is_error).
size_t sluice_zstd_compress(void *cctx, const void *src, size_t src_size, size_t *src_pos, void *dst,
                            size_t dst_size, size_t *dst_pos, int end);

/// zstd streaming decompression (ZSTD_decompressStream), window bounded by `window_log_max`.
void *sluice_zstd_dctx_create(int window_log_max);
void sluice_zstd_dctx_free(void *dctx);
void sluice_zstd_dctx_reset(void *dctx);
size_t sluice_zstd_decompress(void *dctx, const void *src, size_t src_size, size_t *src_pos, void *dst,
                              size_t dst_size, size_t *dst_pos);
int sluice_zstd_is_error(size_t code);
/// The content size a zstd frame's header declares (a skippable frame: 0), given the frame's
/// first bytes (its whole header, or the whole frame if shorter): 1 and the size, or 0 when the
/// header does not say or cannot be read.
int sluice_zstd_frame_content_size(const void *frame, size_t size, unsigned long long *content_size);
const char *sluice_zstd_error_name(size_t code);

/// ISA-L raw deflate of one block (isal_deflate with gzip_flag IGZIP_DEFLATE): `dict` primes
/// the window; the block ends with a sync flush, or final when `last`.
void *sluice_isal_deflate_create(int level);
void sluice_isal_deflate_free(void *ctx);
/// Returns the bytes written to `out`; -1 when `out` was too small; -2 on any other failure.
long sluice_isal_deflate_block(void *ctx, const uint8_t *dict, uint32_t dict_len, const uint8_t *in,
                               uint32_t in_len, int last, uint8_t *out, uint32_t out_cap);

/// CRC-32 (gzip's, as zlib's crc32) continued from `crc` over `len` bytes: ISA-L's
/// crc32_gzip_refl. Only once sluice_isal_load() succeeded.
uint32_t sluice_isal_crc32(uint32_t crc, const uint8_t *buf, uint64_t len);

/// A `container` for sluice_isal_inflate_reset: a gzip member whose header ISA-L reads and checks
/// (isal_read_gzip_header, as isal_inflate does for ISAL_GZIP) and whose body it decodes as raw
/// deflate without a CRC-32; the stream ends before the trailer, which is left to the caller
/// (the bytes ISA-L read of it are given back as `unread`).
#define SLUICE_ISAL_GZIP_BODY 7

/// ISA-L inflate (isal_inflate) of one stream: `container` 0 raw deflate, 1 gzip (header parsed,
/// CRC-32 and size checked), 3 zlib (Adler-32 checked) — ISA-L's crc_flag values — or
/// SLUICE_ISAL_GZIP_BODY.
void *sluice_isal_inflate_create(void);
void sluice_isal_inflate_free(void *ctx);
void sluice_isal_inflate_reset(void *ctx, int container);
/// One isal_inflate call. Returns ISA-L's status (negative for corrupt data, 6 when a zlib
/// stream needs a dictionary). Once the stream has ended, `*ended` is 1 and the whole bytes
/// ISA-L read past its end are given back: `*unread` of them (at most 8), earliest first in
/// `unread_bytes`.
int sluice_isal_inflate(void *ctx, const uint8_t *in, uint32_t in_len, uint32_t *in_used, uint8_t *out,
                        uint32_t out_cap, uint32_t *out_used, int *ended, uint32_t *unread,
                        uint8_t unread_bytes[8]);

/// libdeflate raw deflate of one piece (libdeflate_deflate_compress, `level` 1–12), with no
/// dictionary (libdeflate has none). Unless `last`, the piece is made continuable: its last
/// block's BFINAL bit is cleared (the blocks walked with zlib's inflate) and it ends on a byte
/// boundary with an empty stored block, as after a sync flush.
void *sluice_libdeflate_deflate_create(int level);
void sluice_libdeflate_deflate_free(void *ctx);
/// Returns the bytes written to `out`; -1 when `out` was too small; -2 on any other failure.
long sluice_libdeflate_deflate_block(void *ctx, const uint8_t *in, uint32_t in_len, int last, uint8_t *out,
                                     uint32_t out_cap);
/// libdeflate's CRC-32 (gzip's) and Adler-32, continued from `crc` / `adler`. Only once
/// sluice_libdeflate_load() succeeded.
uint32_t sluice_libdeflate_crc32(uint32_t crc, const uint8_t *buf, size_t len);
uint32_t sluice_libdeflate_adler32(uint32_t adler, const uint8_t *buf, size_t len);

#endif
