#ifndef SLUICE_CCRYPTO_SHIM_H
#define SLUICE_CCRYPTO_SHIM_H

/* OpenSSL's libcrypto, for the SHA-256 digests of the transfer protocol (EVP interface). */
#include <openssl/evp.h>

#endif
