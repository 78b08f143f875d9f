/* Helpers of util.h. */
#define _POSIX_C_SOURCE 200809L
#include "util/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

s4d_status s4d_fmt_err(char *buf, size_t size, s4d_status status, const char *fmt, ...)
{
    if (buf && size) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, size, fmt, ap);
        va_end(ap);
    }
    return status;
}

char *s4d_strdup(const char *s)
{
    if (!s)
        s = "";
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d)
        memcpy(d, s, n + 1);
    return d;
}

/* 2 GiB: the largest protobuf message (so the largest ONNX model without external data), and far
   above any engine of the models s4d targets. A hostile path must not make a reader allocate more. */
#define DEFAULT_MAX_FILE_BYTES (UINT64_C(2) << 30)

s4d_status s4d_max_file_bytes(uint64_t *limit, char *err, size_t errsz)
{
    *limit = DEFAULT_MAX_FILE_BYTES;
    const char *env = getenv("S4D_MAX_FILE_BYTES");
    if (!env || !env[0])
        return S4D_OK;
    uint64_t v = 0;
    const char *s = env;
    for (; *s >= '0' && *s <= '9'; s++) {
        if (v > (UINT64_MAX - 9) / 10)
            break;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    int shift = 0;
    if (s != env) {
        switch (*s) {
        case 'K': case 'k': shift = 10; s++; break;
        case 'M': case 'm': shift = 20; s++; break;
        case 'G': case 'g': shift = 30; s++; break;
        default: break;
        }
    }
    if (s == env || *s || v == 0 || v > (UINT64_MAX >> shift))
        return s4d_fmt_err(err, errsz, S4D_ERR_INVALID_ARG,
                           "S4D_MAX_FILE_BYTES='%s' is not a byte count (a positive integer, "
                           "optionally followed by K, M or G)",
                           env);
    *limit = v << shift;
    return S4D_OK;
}

s4d_status s4d_read_file(const char *path, uint8_t **data, size_t *size, char *err, size_t errsz)
{
    *data = NULL;
    *size = 0;
    uint64_t limit;
    s4d_status st = s4d_max_file_bytes(&limit, err, errsz);
    if (st != S4D_OK)
        return st;
    /* O_NONBLOCK: opening a FIFO must not wait for a writer before fstat can refuse it. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return s4d_fmt_err(err, errsz, S4D_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        st = s4d_fmt_err(err, errsz, S4D_ERR_IO, "cannot stat '%s': %s", path, strerror(errno));
        close(fd);
        return st;
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return s4d_fmt_err(err, errsz, S4D_ERR_IO,
                           "'%s' is not a regular file (%s); s4d reads models, engines and "
                           ".npy arrays from regular files only",
                           path,
                           S_ISDIR(sb.st_mode)   ? "a directory"
                           : S_ISCHR(sb.st_mode) ? "a character device"
                           : S_ISBLK(sb.st_mode) ? "a block device"
                           : S_ISFIFO(sb.st_mode) ? "a pipe"
                           : S_ISSOCK(sb.st_mode) ? "a socket"
                                                  : "another kind of file");
    }
    uint64_t want = (uint64_t)sb.st_size;
    if (sb.st_size < 0 || want > limit || want >= SIZE_MAX) {
        close(fd);
        return s4d_fmt_err(err, errsz, S4D_ERR_IO,
                           "'%s' holds %llu bytes, more than the limit of %llu (set the "
                           "environment variable S4D_MAX_FILE_BYTES to raise it)",
                           path, (unsigned long long)sb.st_size, (unsigned long long)limit);
    }
    size_t len = 0, n = (size_t)want;
    uint8_t *buf = malloc(n + 1);
    if (!buf) {
        close(fd);
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory reading '%s' (%zu bytes)",
                           path, n);
    }
    while (len < n) {
        ssize_t got = read(fd, buf + len, n - len);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            st = got < 0 ? s4d_fmt_err(err, errsz, S4D_ERR_IO, "cannot read '%s': %s", path,
                                       strerror(errno))
                         : s4d_fmt_err(err, errsz, S4D_ERR_IO,
                                       "'%s' shrank while being read (%zu of %zu bytes)", path,
                                       len, n);
            free(buf);
            close(fd);
            return st;
        }
        len += (size_t)got;
    }
    close(fd);
    buf[len] = 0;
    *data = buf;
    *size = len;
    return S4D_OK;
}

s4d_status s4d_write_file(const char *path, const void *data, size_t size, char *err, size_t errsz)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return s4d_fmt_err(err, errsz, S4D_ERR_IO, "cannot create '%s': %s", path, strerror(errno));
    size_t put = size ? fwrite(data, 1, size, f) : 0;
    int bad = (put != size) | (fclose(f) != 0);
    if (bad)
        return s4d_fmt_err(err, errsz, S4D_ERR_IO, "cannot write '%s'", path);
    return S4D_OK;
}

uint64_t s4d_fnv1a64(const void *data, size_t size, uint64_t seed)
{
    uint64_t h = seed ? seed : 0xcbf29ce484222325ull;
    const uint8_t *p = data;
    for (size_t i = 0; i < size; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

int64_t s4d_dims_numel(int rank, const int64_t *dims)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++) {
        if (dims[i] < 0)
            return -1;
        if (dims[i] != 0 && n > INT64_MAX / dims[i])
            return -1;
        n *= dims[i];
    }
    return n;
}

const char *s4d_dims_str(int rank, const int64_t *dims, char *buf, size_t size)
{
    size_t used = 0;
    if (!size)
        return buf;
    buf[0] = 0;
    used += (size_t)snprintf(buf + used, size - used, "[");
    for (int i = 0; i < rank && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%lld", i ? ", " : "", (long long)dims[i]);
    if (used < size)
        snprintf(buf + used, size - used, "]");
    return buf;
}

void *s4d_aligned_alloc(size_t size)
{
    /* 256 bytes: what the plugin ABI promises for workspaces, and a multiple of any SIMD width. */
    size_t n = (size_t)s4d_align_up(size ? size : 256, 256);
    void *p = NULL;
    if (posix_memalign(&p, 256, n) != 0)
        return NULL;
    memset(p, 0, n);
    return p;
}

void s4d_aligned_free(void *p)
{
    free(p);
}

/* ---- writer ---- */

static int wbuf_reserve(s4d_wbuf *w, size_t n)
{
    if (w->failed)
        return -1;
    if (w->cap - w->size >= n)
        return 0;
    size_t ncap = w->cap ? w->cap : 4096;
    while (ncap - w->size < n) {
        if (ncap > SIZE_MAX / 2) {
            w->failed = 1;
            return -1;
        }
        ncap *= 2;
    }
    uint8_t *nd = realloc(w->data, ncap);
    if (!nd) {
        w->failed = 1;
        return -1;
    }
    w->data = nd;
    w->cap = ncap;
    return 0;
}

void s4d_wbuf_bytes(s4d_wbuf *w, const void *p, size_t n)
{
    if (n == 0 || wbuf_reserve(w, n) != 0)
        return;
    memcpy(w->data + w->size, p, n);
    w->size += n;
}

void s4d_wbuf_u32(s4d_wbuf *w, uint32_t v)
{
    uint8_t b[4];
    for (int i = 0; i < 4; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    s4d_wbuf_bytes(w, b, 4);
}

void s4d_wbuf_u64(s4d_wbuf *w, uint64_t v)
{
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    s4d_wbuf_bytes(w, b, 8);
}

void s4d_wbuf_i64(s4d_wbuf *w, int64_t v)
{
    s4d_wbuf_u64(w, (uint64_t)v);
}

void s4d_wbuf_f32(s4d_wbuf *w, float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    s4d_wbuf_u32(w, u);
}

void s4d_wbuf_str(s4d_wbuf *w, const char *s)
{
    if (!s)
        s = "";
    size_t n = strlen(s);
    s4d_wbuf_u32(w, (uint32_t)n);
    s4d_wbuf_bytes(w, s, n);
}

void s4d_wbuf_pad(s4d_wbuf *w, size_t align)
{
    static const uint8_t zeros[64];
    size_t want = (size_t)s4d_align_up(w->size, align) - w->size;
    while (want > 0 && !w->failed) {
        size_t n = want < sizeof zeros ? want : sizeof zeros;
        s4d_wbuf_bytes(w, zeros, n);
        want -= n;
    }
}

void s4d_wbuf_free(s4d_wbuf *w)
{
    free(w->data);
    memset(w, 0, sizeof *w);
}

/* ---- reader ---- */

static int rbuf_fail(s4d_rbuf *r, const char *what)
{
    if (!r->failed) {
        r->failed = 1;
        r->what = what;
    }
    return -1;
}

int s4d_rbuf_skip(s4d_rbuf *r, size_t n, const char *what)
{
    if (r->failed || r->size - r->pos < n)
        return rbuf_fail(r, what);
    r->pos += n;
    return 0;
}

int s4d_rbuf_bytes(s4d_rbuf *r, void *out, size_t n, const char *what)
{
    if (r->failed || r->size - r->pos < n)
        return rbuf_fail(r, what);
    if (n)
        memcpy(out, r->data + r->pos, n);
    r->pos += n;
    return 0;
}

int s4d_rbuf_u32(s4d_rbuf *r, uint32_t *v, const char *what)
{
    uint8_t b[4];
    *v = 0;
    if (s4d_rbuf_bytes(r, b, 4, what))
        return -1;
    for (int i = 0; i < 4; i++)
        *v |= (uint32_t)b[i] << (8 * i);
    return 0;
}

int s4d_rbuf_u64(s4d_rbuf *r, uint64_t *v, const char *what)
{
    uint8_t b[8];
    *v = 0;
    if (s4d_rbuf_bytes(r, b, 8, what))
        return -1;
    for (int i = 0; i < 8; i++)
        *v |= (uint64_t)b[i] << (8 * i);
    return 0;
}

int s4d_rbuf_i64(s4d_rbuf *r, int64_t *v, const char *what)
{
    uint64_t u;
    int rc = s4d_rbuf_u64(r, &u, what);
    *v = (int64_t)u;
    return rc;
}

int s4d_rbuf_f32(s4d_rbuf *r, float *v, const char *what)
{
    uint32_t u;
    int rc = s4d_rbuf_u32(r, &u, what);
    memcpy(v, &u, 4);
    return rc;
}

char *s4d_rbuf_str(s4d_rbuf *r, const char *what)
{
    uint32_t n;
    if (s4d_rbuf_u32(r, &n, what))
        return NULL;
    if (r->size - r->pos < n) {
        rbuf_fail(r, what);
        return NULL;
    }
    char *s = malloc((size_t)n + 1);
    if (!s) {
        rbuf_fail(r, what);
        return NULL;
    }
    memcpy(s, r->data + r->pos, n);
    s[n] = 0;
    r->pos += n;
    return s;
}

/* ---- name map ---- */

static size_t name_hash(const char *s)
{
    return (size_t)s4d_fnv1a64(s, strlen(s), 0);
}

static int namemap_grow(s4d_namemap *m)
{
    size_t ncap = m->cap ? m->cap * 2 : 64;
    const char **nk = calloc(ncap, sizeof *nk);
    int *nv = calloc(ncap, sizeof *nv);
    if (!nk || !nv) {
        free(nk);
        free(nv);
        return -1;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->keys[i])
            continue;
        size_t j = name_hash(m->keys[i]) & (ncap - 1);
        while (nk[j])
            j = (j + 1) & (ncap - 1);
        nk[j] = m->keys[i];
        nv[j] = m->vals[i];
    }
    free(m->keys);
    free(m->vals);
    m->keys = nk;
    m->vals = nv;
    m->cap = ncap;
    return 0;
}

int s4d_namemap_put(s4d_namemap *m, const char *key, int val)
{
    if ((m->count + 1) * 2 > m->cap && namemap_grow(m) != 0)
        return -1;
    size_t j = name_hash(key) & (m->cap - 1);
    while (m->keys[j]) {
        if (strcmp(m->keys[j], key) == 0) {
            m->vals[j] = val;
            return 0;
        }
        j = (j + 1) & (m->cap - 1);
    }
    m->keys[j] = key;
    m->vals[j] = val;
    m->count++;
    return 0;
}

int s4d_namemap_get(const s4d_namemap *m, const char *key)
{
    if (!m->cap)
        return -1;
    size_t j = name_hash(key) & (m->cap - 1);
    while (m->keys[j]) {
        if (strcmp(m->keys[j], key) == 0)
            return m->vals[j];
        j = (j + 1) & (m->cap - 1);
    }
    return -1;
}

void s4d_namemap_free(s4d_namemap *m)
{
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

double s4d_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

void s4d_text_put(s4d_text *t, const char *s)
{
    size_t k = strlen(s);
    if (t->failed)
        return;
    if (t->len + k + 1 > t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 1024;
        while (cap < t->len + k + 1)
            cap *= 2;
        char *n = realloc(t->s, cap);
        if (!n) {
            t->failed = 1;
            return;
        }
        t->s = n;
        t->cap = cap;
    }
    memcpy(t->s + t->len, s, k + 1);
    t->len += k;
}

void s4d_text_add(s4d_text *t, const char *fmt, ...)
{
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n >= 0)
        s4d_text_put(t, line);
}
