/* certs.c -- a run's CA and one key + certificate per site, through the
 * OpenSSL 3 API (no openssl command line needed). Keys are EC P-256: small,
 * fast to make, and what gRPC's TLS stack handles natively. */
#include "al_transport.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

/* Open path for writing only if it does not exist yet (never overwrite). */
static FILE *create_excl(const char *path, mode_t mode, al_err *err) {
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0) {
        al_errf(err, AL_EIO, "certs: %s: %s%s", path, strerror(errno),
                errno == EEXIST ? " (refusing to overwrite)" : "");
        return NULL;
    }
    fchmod(fd, mode); /* the umask must not loosen or tighten what we asked for */
    FILE *f = fdopen(fd, "w");
    if (!f) {
        close(fd);
        al_errf(err, AL_EIO, "certs: %s: %s", path, strerror(errno));
    }
    return f;
}

static int write_key(const char *path, EVP_PKEY *key, al_err *err) {
    FILE *f = create_excl(path, 0600, err);
    if (!f) return AL_EIO;
    int ok = PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL);
    if (fclose(f) || !ok) return al_errf(err, AL_EIO, "certs: writing key %s failed", path);
    return 0;
}

static int write_cert(const char *path, X509 *x, al_err *err) {
    FILE *f = create_excl(path, 0644, err);
    if (!f) return AL_EIO;
    int ok = PEM_write_X509(f, x);
    if (fclose(f) || !ok) return al_errf(err, AL_EIO, "certs: writing certificate %s failed", path);
    return 0;
}

static int add_ext(X509 *cert, X509 *issuer, int nid, const char *value) {
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, issuer, cert, NULL, NULL, 0);
    X509_EXTENSION *ex = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
    if (!ex) return 0;
    int ok = X509_add_ext(cert, ex, -1);
    X509_EXTENSION_free(ex);
    return ok;
}

/* A certificate for `cn` with key `key`, signed by (issuer, issuer_key), or
 * self-signed when issuer is NULL (the CA). */
static X509 *make_cert(const char *cn, EVP_PKEY *key, X509 *issuer, EVP_PKEY *issuer_key,
                       int days) {
    X509 *x = X509_new();
    if (!x) return NULL;
    unsigned char serial[16];
    BIGNUM *bn = NULL;
    int ok = X509_set_version(x, 2) && RAND_bytes(serial, sizeof serial) == 1;
    serial[0] &= 0x7f; /* positive */
    ok = ok && (bn = BN_bin2bn(serial, sizeof serial, NULL)) &&
         BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x));
    BN_free(bn);
    ok = ok && X509_gmtime_adj(X509_getm_notBefore(x), -3600) &&
         X509_gmtime_adj(X509_getm_notAfter(x), (long)days * 86400L) && X509_set_pubkey(x, key);
    X509_NAME *name = X509_get_subject_name(x);
    ok = ok &&
         X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, (const unsigned char *)"autoloco", -1,
                                    -1, 0) &&
         X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0);
    X509 *signer = issuer ? issuer : x;
    ok = ok && X509_set_issuer_name(x, X509_get_subject_name(signer));
    if (!issuer) {
        ok = ok && add_ext(x, x, NID_basic_constraints, "critical,CA:TRUE") &&
             add_ext(x, x, NID_key_usage, "critical,keyCertSign,cRLSign") &&
             add_ext(x, x, NID_subject_key_identifier, "hash");
    } else {
        char san[256];
        snprintf(san, sizeof san, "DNS:%s,DNS:localhost,IP:127.0.0.1,IP:::1", cn);
        ok = ok && add_ext(x, signer, NID_basic_constraints, "critical,CA:FALSE") &&
             add_ext(x, signer, NID_key_usage, "critical,digitalSignature,keyEncipherment") &&
             add_ext(x, signer, NID_ext_key_usage, "serverAuth,clientAuth") &&
             add_ext(x, signer, NID_subject_alt_name, san) &&
             add_ext(x, signer, NID_subject_key_identifier, "hash") &&
             add_ext(x, signer, NID_authority_key_identifier, "keyid:always");
    }
    ok = ok && X509_sign(x, issuer ? issuer_key : key, EVP_sha256()) > 0;
    if (!ok) {
        X509_free(x);
        return NULL;
    }
    return x;
}

static int load_ca(const char *cert_path, const char *key_path, X509 **ca, EVP_PKEY **ca_key,
                   al_err *err) {
    FILE *f = fopen(cert_path, "r");
    if (!f) return al_errf(err, AL_EIO, "certs: %s: %s", cert_path, strerror(errno));
    *ca = PEM_read_X509(f, NULL, NULL, NULL);
    fclose(f);
    f = fopen(key_path, "r");
    if (!f) return al_errf(err, AL_EIO, "certs: %s: %s", key_path, strerror(errno));
    *ca_key = PEM_read_PrivateKey(f, NULL, NULL, NULL);
    fclose(f);
    if (!*ca || !*ca_key)
        return al_errf(err, AL_EFORMAT, "certs: cannot parse the CA in %s", cert_path);
    return 0;
}

int al_certs_create(const char *dir, const char *const *sites, size_t nsites, int days,
                    al_err *err) {
    if (days < 1 || days > 36500) return al_errf(err, AL_EINVAL, "certs: %d days", days);
    for (size_t i = 0; i < nsites; i++)
        if (!al_site_name_ok(sites[i]) || !strcmp(sites[i], "ca"))
            return al_errf(err, AL_EINVAL, "certs: '%s' is not a usable site name", sites[i]);
    int rc = al_mkdirs(dir, err);
    if (rc) return rc;
    char cp[4096], kp[4096];
    snprintf(cp, sizeof cp, "%s/ca.pem", dir);
    snprintf(kp, sizeof kp, "%s/ca.key", dir);
    X509 *ca = NULL;
    EVP_PKEY *ca_key = NULL;
    if (access(cp, F_OK) == 0) {
        rc = load_ca(cp, kp, &ca, &ca_key, err);
    } else {
        ca_key = EVP_EC_gen("P-256");
        ca = ca_key ? make_cert("autoloco-ca", ca_key, NULL, NULL, days) : NULL;
        if (!ca) rc = al_errf(err, AL_EIO, "certs: creating the CA failed (OpenSSL)");
        if (!rc) rc = write_key(kp, ca_key, err);
        if (!rc) rc = write_cert(cp, ca, err);
    }
    for (size_t i = 0; !rc && i < nsites; i++) {
        snprintf(cp, sizeof cp, "%s/%s.pem", dir, sites[i]);
        snprintf(kp, sizeof kp, "%s/%s.key", dir, sites[i]);
        if (access(cp, F_OK) == 0 || access(kp, F_OK) == 0) {
            rc = al_errf(err, AL_EIO,
                         "certs: %s already has a certificate or key for '%s' "
                         "(refusing to overwrite)",
                         dir, sites[i]);
            break;
        }
        EVP_PKEY *key = EVP_EC_gen("P-256");
        X509 *x = key ? make_cert(sites[i], key, ca, ca_key, days) : NULL;
        if (!x)
            rc = al_errf(err, AL_EIO, "certs: creating the certificate of '%s' failed", sites[i]);
        if (!rc) rc = write_key(kp, key, err);
        if (!rc) rc = write_cert(cp, x, err);
        X509_free(x);
        EVP_PKEY_free(key);
    }
    X509_free(ca);
    EVP_PKEY_free(ca_key);
    return rc;
}

/* ---- a peer's identity ------------------------------------------------------------------ */

int al_cert_site(const char *pem, size_t len, char site[AL_SITE_MAX + 1], al_err *err) {
    BIO *bio = BIO_new_mem_buf(pem, (int)len);
    X509 *x = bio ? PEM_read_bio_X509(bio, NULL, NULL, NULL) : NULL;
    BIO_free(bio);
    if (!x) return al_errf(err, AL_EPERM, "identity: the peer's certificate does not parse");
    X509_NAME *subj = X509_get_subject_name(x);
    int rc = 0, at = X509_NAME_get_index_by_NID(subj, NID_commonName, -1), n = 0;
    for (int i = at; i >= 0; i = X509_NAME_get_index_by_NID(subj, NID_commonName, i)) n++;
    unsigned char *cn = NULL;
    int cn_len = -1;
    if (n != 1) {
        rc = al_errf(err, AL_EPERM, "identity: the certificate has %d CNs, not one", n);
    } else {
        ASN1_STRING *d = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subj, at));
        cn_len = d ? ASN1_STRING_to_UTF8(&cn, d) : -1;
        if (cn_len < 0)
            rc = al_errf(err, AL_EPERM, "identity: the certificate's CN does not decode");
        else if ((size_t)cn_len != strnlen((const char *)cn, (size_t)cn_len))
            rc = al_errf(err, AL_EPERM, "identity: the certificate's CN holds a NUL byte");
        else if (!al_site_name_ok((const char *)cn))
            rc = al_errf(err, AL_EPERM, "identity: the certificate's CN '%.64s' is not a site name",
                         (const char *)cn);
    }
    GENERAL_NAMES *sans = rc ? NULL : X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
    if (sans) { /* DNS names present: one must be the CN, byte for byte */
        int dns = 0, match = 0;
        for (int i = 0; i < sk_GENERAL_NAME_num(sans); i++) {
            const GENERAL_NAME *g = sk_GENERAL_NAME_value(sans, i);
            if (g->type != GEN_DNS) continue;
            dns++;
            const ASN1_IA5STRING *v = g->d.dNSName;
            match |= v->length == cn_len && memcmp(v->data, cn, (size_t)cn_len) == 0;
        }
        if (dns > 0 && !match)
            rc = al_errf(err, AL_EPERM, "identity: no DNS name of the certificate is its CN '%s'",
                         (const char *)cn);
        GENERAL_NAMES_free(sans);
    }
    if (rc == 0) snprintf(site, AL_SITE_MAX + 1, "%s", (const char *)cn);
    OPENSSL_free(cn);
    X509_free(x);
    return rc;
}
