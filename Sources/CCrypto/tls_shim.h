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

/* ---- The record layer after the handshake (TLS 1.3, RFC 8446 §5, §7) ---- */

/* The two application traffic secrets of one connection, as OpenSSL's keylog callback reports
 * them (CLIENT_TRAFFIC_SECRET_0, SERVER_TRAFFIC_SECRET_0): stored in the SSL's app data (a
 * `sluice_secrets` the engine attaches), cleansed once the engine has taken them. */
typedef struct {
    unsigned char client[64];
    unsigned char server[64];
    size_t client_length;
    size_t server_length;
} sluice_secrets;

static inline int sluice_hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Decodes the hex of `text` (up to a space or the end) into `out`; the length, or 0. */
static inline size_t sluice_unhex(const char *text, unsigned char *out, size_t capacity) {
    size_t n = 0;
    while (text[0] != '\0' && text[0] != ' ') {
        int high = sluice_hex_digit(text[0]);
        int low = text[1] == '\0' ? -1 : sluice_hex_digit(text[1]);
        if (high < 0 || low < 0 || n == capacity) return 0;
        out[n++] = (unsigned char)(high << 4 | low);
        text += 2;
    }
    return n;
}

static inline void sluice_keylog(const SSL *ssl, const char *line) {
    sluice_secrets *secrets = (sluice_secrets *)SSL_get_ex_data(ssl, 0);
    if (secrets == NULL || line == NULL) return;
    static const char client[] = "CLIENT_TRAFFIC_SECRET_0 ";
    static const char server[] = "SERVER_TRAFFIC_SECRET_0 ";
    int isClient = strncmp(line, client, sizeof client - 1) == 0;
    if (!isClient && strncmp(line, server, sizeof server - 1) != 0) return;
    const char *random = line + sizeof client - 1; /* the client random, then the secret */
    const char *secret = strchr(random, ' ');
    if (secret == NULL) return;
    secret += 1;
    if (isClient) {
        secrets->client_length = sluice_unhex(secret, secrets->client, sizeof secrets->client);
    } else {
        secrets->server_length = sluice_unhex(secret, secrets->server, sizeof secrets->server);
    }
}

static inline void sluice_ctx_set_keylog(SSL_CTX *ctx) { SSL_CTX_set_keylog_callback(ctx, sluice_keylog); }

/* Attaches a zeroed `sluice_secrets` to `ssl` for the keylog callback to fill; NULL on failure. */
static inline sluice_secrets *sluice_secrets_attach(SSL *ssl) {
    sluice_secrets *secrets = (sluice_secrets *)OPENSSL_zalloc(sizeof(sluice_secrets));
    if (secrets == NULL) return NULL;
    if (SSL_set_ex_data(ssl, 0, secrets) != 1) {
        OPENSSL_free(secrets);
        return NULL;
    }
    return secrets;
}

/* Detaches and frees (cleansed) what `sluice_secrets_attach` attached. */
static inline void sluice_secrets_detach(SSL *ssl) {
    sluice_secrets *secrets = (sluice_secrets *)SSL_get_ex_data(ssl, 0);
    (void)SSL_set_ex_data(ssl, 0, NULL);
    if (secrets != NULL) OPENSSL_clear_free(secrets, sizeof(sluice_secrets));
}

/* The suite's hash: SHA-384 for TLS_AES_256_GCM_SHA384 (0x1302), else SHA-256. */
static inline const EVP_MD *sluice_suite_md(int suite) { return suite == 0x1302 ? EVP_sha384() : EVP_sha256(); }

/* The suite's AEAD: AES-128-GCM (0x1301), AES-256-GCM (0x1302), ChaCha20-Poly1305 (0x1303). */
static inline const EVP_CIPHER *sluice_suite_cipher(int suite) {
    switch (suite) {
    case 0x1301: return EVP_aes_128_gcm();
    case 0x1302: return EVP_aes_256_gcm();
    case 0x1303: return EVP_chacha20_poly1305();
    default: return NULL;
    }
}

/* The two-byte id of the suite `ssl` negotiated (0x1301…), or 0. */
static inline int sluice_ssl_suite(const SSL *ssl) {
    const SSL_CIPHER *cipher = SSL_get_current_cipher(ssl);
    return cipher == NULL ? 0 : (int)(SSL_CIPHER_get_id(cipher) & 0xffff);
}

/* HKDF-Expand-Label(secret, label, "", out_length) (RFC 8446 §7.1) with the suite's hash. */
static inline int sluice_hkdf_expand_label(int suite, const unsigned char *secret, size_t secret_length,
                                           const char *label, unsigned char *out, size_t out_length) {
    unsigned char info[2 + 1 + 255 + 1];
    size_t label_length = strlen(label);
    if (label_length > 249 || out_length > 255 * 48) return 0;
    info[0] = (unsigned char)(out_length >> 8);
    info[1] = (unsigned char)out_length;
    info[2] = (unsigned char)(6 + label_length);
    memcpy(info + 3, "tls13 ", 6);
    memcpy(info + 9, label, label_length);
    info[9 + label_length] = 0; /* the empty context */
    EVP_PKEY_CTX *pctx = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, NULL);
    int ok = pctx != NULL && EVP_PKEY_derive_init(pctx) == 1 &&
             EVP_PKEY_CTX_set_hkdf_mode(pctx, EVP_PKEY_HKDEF_MODE_EXPAND_ONLY) == 1 &&
             EVP_PKEY_CTX_set_hkdf_md(pctx, sluice_suite_md(suite)) == 1 &&
             EVP_PKEY_CTX_set1_hkdf_key(pctx, secret, (int)secret_length) == 1 &&
             EVP_PKEY_CTX_add1_hkdf_info(pctx, info, (int)(10 + label_length)) == 1 &&
             EVP_PKEY_derive(pctx, out, &out_length) == 1;
    EVP_PKEY_CTX_free(pctx);
    return ok;
}

/* A cipher context for one direction with `key`, or NULL. */
static inline EVP_CIPHER_CTX *sluice_aead_new(int suite, const unsigned char *key, int encrypt) {
    const EVP_CIPHER *cipher = sluice_suite_cipher(suite);
    EVP_CIPHER_CTX *ctx = cipher == NULL ? NULL : EVP_CIPHER_CTX_new();
    if (ctx == NULL) return NULL;
    if (EVP_CipherInit_ex(ctx, cipher, NULL, key, NULL, encrypt) != 1) {
        EVP_CIPHER_CTX_free(ctx);
        return NULL;
    }
    return ctx;
}

/* Writes the 5-byte header of an application-data record carrying `length` bytes of content
 * (RFC 8446 5.2: the inner type and the 16-byte tag follow them); returns the body's length. */
static inline size_t sluice_record_header(unsigned char *record, size_t length) {
    size_t body = length + 1 + 16;
    record[0] = 0x17;
    record[1] = 0x03;
    record[2] = 0x03;
    record[3] = (unsigned char)(body >> 8);
    record[4] = (unsigned char)body;
    return body;
}

/* Seals one record in place: `record` holds the 5-byte header (written here), then room for
 * `length` bytes of ciphertext of `plaintext` (which may be elsewhere), the inner content
 * type, and the 16-byte tag. Returns the record's whole length, or 0. */
static inline size_t sluice_aead_seal(EVP_CIPHER_CTX *ctx, const unsigned char nonce[12], unsigned char *record,
                                      const unsigned char *plaintext, size_t length, unsigned char type) {
    size_t body = sluice_record_header(record, length);
    int n = 0;
    unsigned char *out = record + 5;
    if (EVP_EncryptInit_ex(ctx, NULL, NULL, NULL, nonce) != 1 || EVP_EncryptUpdate(ctx, NULL, &n, record, 5) != 1)
        return 0;
    if (length > 0 && (EVP_EncryptUpdate(ctx, out, &n, plaintext, (int)length) != 1 || (size_t)n != length)) return 0;
    if (EVP_EncryptUpdate(ctx, out + length, &n, &type, 1) != 1 || n != 1) return 0;
    if (EVP_EncryptFinal_ex(ctx, out + length + 1, &n) != 1 || n != 0) return 0;
    if (EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, 16, out + length + 1) != 1) return 0;
    return 5 + body;
}

/* Opens one record (`header`: its 5 bytes; `ciphertext`: `length` bytes, the tag last): all
 * of the inner plaintext but its last byte goes to `out`, the last byte to `*last` (so that a
 * record whose content fills the caller's buffer exactly needs no room for its type). `out`
 * may be `ciphertext` itself. 1 when the tag checks out. */
static inline int sluice_aead_open(EVP_CIPHER_CTX *ctx, const unsigned char nonce[12], const unsigned char *header,
                                   const unsigned char *ciphertext, size_t length, unsigned char *out,
                                   unsigned char *last) {
    if (length < 17) return 0;
    size_t inner = length - 16;
    int n = 0;
    unsigned char tag[16];
    memcpy(tag, ciphertext + inner, 16);
    if (EVP_DecryptInit_ex(ctx, NULL, NULL, NULL, nonce) != 1 || EVP_DecryptUpdate(ctx, NULL, &n, header, 5) != 1)
        return 0;
    if (inner > 1 && (EVP_DecryptUpdate(ctx, out, &n, ciphertext, (int)(inner - 1)) != 1 || (size_t)n != inner - 1))
        return 0;
    if (EVP_DecryptUpdate(ctx, last, &n, ciphertext + inner - 1, 1) != 1 || n != 1) return 0;
    if (EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, 16, tag) != 1) return 0;
    return EVP_DecryptFinal_ex(ctx, tag, &n) == 1;
}

#endif
