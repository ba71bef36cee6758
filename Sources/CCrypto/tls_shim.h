#ifndef SLUICE_CCRYPTO_TLS_SHIM_H
#define SLUICE_CCRYPTO_TLS_SHIM_H

/* OpenSSL's libssl for sluice's TLS 1.3 streams: inline wrappers for the calls that are macros
 * (BIO_*, SSL_CTX_set_*), the external-PSK callbacks, HKDF, and a throwaway certificate. */
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <string.h>

/* The socket's end reached: the TLS side of the BIO pair reads end of file once it has read
 * everything before it. */
static inline void sluice_bio_shutdown_wr(BIO *bio) { (void)BIO_shutdown_wr(bio); }

/* A verify callback that accepts any chain: a pin is checked after the handshake instead. */
static inline int sluice_verify_accept(int preverify_ok, X509_STORE_CTX *ctx) {
    (void)preverify_ok;
    (void)ctx;
    return 1;
}
static inline void sluice_ssl_verify_for_pin(SSL *ssl, int require) {
    SSL_set_verify(ssl, SSL_VERIFY_PEER | (require ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0), sluice_verify_accept);
}

/* A verify callback that refuses every certificate: with a pre-shared key the key is the only
 * proof, and a peer that shows a certificate instead (a server ignoring the client's
 * pre_shared_key) is not the one holding it. */
static inline int sluice_verify_refuse(int preverify_ok, X509_STORE_CTX *ctx) {
    (void)preverify_ok;
    if (ctx != NULL) X509_STORE_CTX_set_error(ctx, X509_V_ERR_APPLICATION_VERIFICATION);
    return 0;
}
static inline void sluice_ssl_refuse_certificates(SSL *ssl) {
    SSL_set_verify(ssl, SSL_VERIFY_PEER, sluice_verify_refuse);
}

static inline int sluice_ctx_tls13_only(SSL_CTX *ctx) {
    if (SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION) != 1) return 0;
    if (SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION) != 1) return 0;
    (void)SSL_CTX_set_num_tickets(ctx, 0);
    (void)SSL_CTX_set_max_early_data(ctx, 0);
    (void)SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
    (void)SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    /* Partial writes and a moving buffer: the mem BIO never blocks, but the caller's buffer
     * may be a different slice of the same chunk on a retry. */
    (void)SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    return 1;
}

static inline int sluice_set_sni(SSL *ssl, const char *name) { return (int)SSL_set_tlsext_host_name(ssl, name); }

/* ---- External pre-shared key (TLS 1.3, RFC 8446 §4.2.11), psk_dhe_ke only ---- */

typedef struct {
    unsigned char key[32];
    unsigned char identity[64];
    size_t identity_length;
} sluice_psk;

/* TLS_AES_128_GCM_SHA256: the PSK's hash is SHA-256. */
static inline SSL_SESSION *sluice_psk_session(SSL *ssl, const sluice_psk *psk) {
    static const unsigned char aes128gcmsha256[2] = {0x13, 0x01};
    const SSL_CIPHER *cipher = SSL_CIPHER_find(ssl, aes128gcmsha256);
    if (cipher == NULL) return NULL;
    SSL_SESSION *session = SSL_SESSION_new();
    if (session == NULL) return NULL;
    if (SSL_SESSION_set1_master_key(session, psk->key, sizeof psk->key) != 1 ||
        SSL_SESSION_set_cipher(session, cipher) != 1 ||
        SSL_SESSION_set_protocol_version(session, TLS1_3_VERSION) != 1) {
        SSL_SESSION_free(session);
        return NULL;
    }
    return session;
}

static inline int sluice_psk_use(SSL *ssl, const EVP_MD *md, const unsigned char **id, size_t *idlen,
                                 SSL_SESSION **sessionOut) {
    const sluice_psk *psk = (const sluice_psk *)SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl));
    *sessionOut = NULL;
    *id = NULL;
    *idlen = 0;
    if (psk == NULL) return 1;
    SSL_SESSION *session = sluice_psk_session(ssl, psk);
    if (session == NULL) return 0;
    if (md != NULL && md != SSL_CIPHER_get_handshake_digest(SSL_SESSION_get0_cipher(session))) {
        SSL_SESSION_free(session); /* after a HelloRetryRequest with another hash: no PSK */
        return 1;
    }
    *sessionOut = session;
    *id = psk->identity;
    *idlen = psk->identity_length;
    return 1;
}

static inline int sluice_psk_find(SSL *ssl, const unsigned char *id, size_t idlen, SSL_SESSION **sessionOut) {
    const sluice_psk *psk = (const sluice_psk *)SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl));
    *sessionOut = NULL;
    if (psk == NULL || idlen != psk->identity_length || CRYPTO_memcmp(id, psk->identity, idlen) != 0) {
        return 1; /* unknown identity: no PSK, and without a certificate the handshake fails */
    }
    *sessionOut = sluice_psk_session(ssl, psk);
    return *sessionOut != NULL;
}

/* Installs `psk` (owned by the caller, alive as long as `ctx`) on both sides' callbacks. */
static inline void sluice_ctx_set_psk(SSL_CTX *ctx, sluice_psk *psk) {
    SSL_CTX_set_app_data(ctx, psk);
    SSL_CTX_set_psk_use_session_callback(ctx, sluice_psk_use);
    SSL_CTX_set_psk_find_session_callback(ctx, sluice_psk_find);
}

/* ---- HKDF-SHA256 (RFC 5869) ---- */

static inline int sluice_hkdf_sha256(const unsigned char *ikm, size_t ikm_length, const unsigned char *salt,
                                     size_t salt_length, const unsigned char *info, size_t info_length,
                                     unsigned char *out, size_t out_length) {
    EVP_PKEY_CTX *pctx = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, NULL);
    int ok = pctx != NULL && EVP_PKEY_derive_init(pctx) == 1 &&
             EVP_PKEY_CTX_set_hkdf_md(pctx, EVP_sha256()) == 1 &&
             EVP_PKEY_CTX_set1_hkdf_salt(pctx, salt, (int)salt_length) == 1 &&
             EVP_PKEY_CTX_set1_hkdf_key(pctx, ikm, (int)ikm_length) == 1 &&
             EVP_PKEY_CTX_add1_hkdf_info(pctx, info, (int)info_length) == 1 &&
             EVP_PKEY_derive(pctx, out, &out_length) == 1;
    EVP_PKEY_CTX_free(pctx);
    return ok;
}

/* ---- Keys and certificates ---- */

/* SHA-256 of the certificate's SubjectPublicKeyInfo (DER), as `openssl x509 -pubkey | openssl pkey
 * -pubin -outform der | sha256sum` prints it. */
static inline int sluice_spki_sha256(X509 *cert, unsigned char out[32]) {
    unsigned char *der = NULL;
    int length = i2d_X509_PUBKEY(X509_get_X509_PUBKEY(cert), &der);
    if (length <= 0) return 0;
    unsigned int digestLength = 32;
    int ok = EVP_Digest(der, (size_t)length, out, &digestLength, EVP_sha256(), NULL) == 1 && digestLength == 32;
    OPENSSL_free(der);
    return ok;
}

/* A throwaway EC P-256 key and a self-signed certificate for it (CN=sluice, valid one day). */
static inline int sluice_make_self_signed(EVP_PKEY **keyOut, X509 **certOut) {
    EVP_PKEY *key = EVP_EC_gen("P-256");
    X509 *cert = X509_new();
    int ok = key != NULL && cert != NULL && X509_set_version(cert, 2) == 1;
    if (ok) {
        unsigned char serial[16];
        ok = RAND_bytes(serial, sizeof serial) == 1;
        serial[0] &= 0x7f;
        BIGNUM *bn = ok ? BN_bin2bn(serial, sizeof serial, NULL) : NULL;
        ok = bn != NULL && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert)) != NULL;
        BN_free(bn);
    }
    ok = ok && X509_gmtime_adj(X509_getm_notBefore(cert), -3600) != NULL &&
         X509_gmtime_adj(X509_getm_notAfter(cert), 86400) != NULL && X509_set_pubkey(cert, key) == 1;
    if (ok) {
        X509_NAME *name = X509_get_subject_name(cert);
        ok = X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)"sluice", -1, -1, 0) == 1 &&
             X509_set_issuer_name(cert, name) == 1 && X509_sign(cert, key, EVP_sha256()) > 0;
    }
    if (!ok) {
        EVP_PKEY_free(key);
        X509_free(cert);
        return 0;
    }
    *keyOut = key;
    *certOut = cert;
    return 1;
}

/* The first (root) error on this thread's OpenSSL error queue; clears the queue. */
static inline unsigned long sluice_first_error(void) {
    unsigned long first = ERR_get_error();
    ERR_clear_error();
    return first;
}
static inline int sluice_error_reason(unsigned long e) { return ERR_GET_REASON(e); }

#endif
