/*
 * src/util/util.h - small helpers shared by the importer, builder, engine
 * file and runtime: error formatting, whole-file reads, hashing, a growable
 * little-endian writer and a bounds-checked reader.
 */
#ifndef S4D_UTIL_H
#define S4D_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "s4d/types.h"

#if defined(__GNUC__)
#define S4D_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define S4D_PRINTF(a, b)
#endif

/* Formats into buf (size bytes, always NUL-terminated); returns status. */
s4d_status s4d_fmt_err(char *buf, size_t size, s4d_status status, const char *fmt, ...)
    S4D_PRINTF(4, 5);

/* Duplicates a string; NULL in gives "" out; NULL on allocation failure. */
char *s4d_strdup(const char *s);

/*
 * Reads a whole regular file into a malloc'd buffer (one spare NUL byte past the end). Devices,
 * pipes and directories are refused, and so is a file larger than s4d_max_file_bytes(), before
 * anything is allocated: S4D_ERR_IO with a one-line message naming the path.
 */
s4d_status s4d_read_file(const char *path, uint8_t **data, size_t *size, char *err, size_t errsz);
/* The file size limit: 2 GiB, or the environment variable S4D_MAX_FILE_BYTES (bytes, or with a
   K, M or G suffix); S4D_ERR_INVALID_ARG naming the variable when it is malformed. */
s4d_status s4d_max_file_bytes(uint64_t *limit, char *err, size_t errsz);
s4d_status s4d_write_file(const char *path, const void *data, size_t size, char *err, size_t errsz);

/* FNV-1a, 64-bit. Pass 0 as seed to start; feed the result back to continue. */
uint64_t s4d_fnv1a64(const void *data, size_t size, uint64_t seed);

/* Element count of dims[0..rank) with overflow detection: -1 on overflow or a negative dim. */
int64_t s4d_dims_numel(int rank, const int64_t *dims);

/* Formats dims as "[2, 3, 4]" into buf. Returns buf. */
const char *s4d_dims_str(int rank, const int64_t *dims, char *buf, size_t size);

/* Rounds up to a multiple of align (a power of two). */
static inline uint64_t s4d_align_up(uint64_t v, uint64_t align)
{
    return (v + align - 1) & ~(align - 1);
}

/* Aligned allocation (256 bytes), zero-filled; size 0 allocates one block. Free with s4d_aligned_free. */
void *s4d_aligned_alloc(size_t size);
void s4d_aligned_free(void *p);

/* Growable little-endian writer. On allocation failure sets failed and ignores further writes. */
typedef struct s4d_wbuf {
    uint8_t *data;
    size_t size;
    size_t cap;
    int failed;
} s4d_wbuf;

void s4d_wbuf_bytes(s4d_wbuf *w, const void *p, size_t n);
void s4d_wbuf_u32(s4d_wbuf *w, uint32_t v);
void s4d_wbuf_u64(s4d_wbuf *w, uint64_t v);
void s4d_wbuf_i64(s4d_wbuf *w, int64_t v);
void s4d_wbuf_f32(s4d_wbuf *w, float v);
void s4d_wbuf_str(s4d_wbuf *w, const char *s); /* u32 length + bytes, no NUL */
void s4d_wbuf_pad(s4d_wbuf *w, size_t align); /* zero bytes up to a multiple of align */
void s4d_wbuf_free(s4d_wbuf *w);

/*
 * Bounds-checked reader. Every getter returns 0 on success; on the first
 * out-of-bounds read it sets failed, records what was being read and returns
 * -1, and every later read fails too, so callers may check once at the end.
 */
typedef struct s4d_rbuf {
    const uint8_t *data;
    size_t size;
    size_t pos;
    int failed;
    const char *what; /* the field that did not fit */
} s4d_rbuf;

int s4d_rbuf_bytes(s4d_rbuf *r, void *out, size_t n, const char *what);
int s4d_rbuf_skip(s4d_rbuf *r, size_t n, const char *what);
int s4d_rbuf_u32(s4d_rbuf *r, uint32_t *v, const char *what);
int s4d_rbuf_u64(s4d_rbuf *r, uint64_t *v, const char *what);
int s4d_rbuf_i64(s4d_rbuf *r, int64_t *v, const char *what);
int s4d_rbuf_f32(s4d_rbuf *r, float *v, const char *what);
/* A malloc'd NUL-terminated copy of a length-prefixed string; NULL on failure. */
char *s4d_rbuf_str(s4d_rbuf *r, const char *what);

/* Name -> index map (open addressing); keys are borrowed, not copied. */
typedef struct s4d_namemap {
    const char **keys;
    int *vals;
    size_t cap;
    size_t count;
} s4d_namemap;

int s4d_namemap_put(s4d_namemap *m, const char *key, int val); /* 0 ok, -1 no memory */
int s4d_namemap_get(const s4d_namemap *m, const char *key);    /* -1 when absent */
void s4d_namemap_free(s4d_namemap *m);

/* Monotonic clock in milliseconds. */
double s4d_now_ms(void);

/* A growing NUL-terminated text (reports). After an allocation failure it
   stops growing and sets failed; s is NULL until something is added. */
typedef struct s4d_text {
    char *s;
    size_t len, cap;
    int failed;
} s4d_text;

/* Appends s whole. */
void s4d_text_put(s4d_text *t, const char *s);
/* Appends one formatted line of at most 2047 characters. */
void s4d_text_add(s4d_text *t, const char *fmt, ...) S4D_PRINTF(2, 3);

#endif /* S4D_UTIL_H */
