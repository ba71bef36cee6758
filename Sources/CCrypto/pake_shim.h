#ifndef SLUICE_CCRYPTO_PAKE_SHIM_H
#define SLUICE_CCRYPTO_PAKE_SHIM_H

/* OpenSSL's libcrypto for SPAKE2 (RFC 9382) on P-256: elliptic-curve points and big numbers,
 * HMAC-SHA256, and scrypt (EVP_PBE_scrypt) to stretch a short code. */
#include <openssl/bn.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/obj_mac.h>

#endif
