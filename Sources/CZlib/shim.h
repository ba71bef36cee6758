#ifndef SLUICE_CZLIB_SHIM_H
#define SLUICE_CZLIB_SHIM_H

#include <zlib.h>

/// deflateInit2 and inflateInit2 are macros in zlib.h, which Swift cannot call:
/// these inline wrappers expose them as functions.
static inline int sluice_deflateInit2(z_streamp strm, int level, int method, int windowBits, int memLevel,
                                      int strategy) {
    return deflateInit2(strm, level, method, windowBits, memLevel, strategy);
}

static inline int sluice_inflateInit2(z_streamp strm, int windowBits) {
    return inflateInit2(strm, windowBits);
}

#endif
