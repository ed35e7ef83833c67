/*
 * kvstore._speedups: C versions of the hottest pure-Python loops.
 *
 * Optional. kvstore works without it (set KVSTORE_PURE_PYTHON=1 to force the
 * Python code); tests run both and compare them. Every function here takes
 * untrusted bytes (a block whose checksum passed may still be malformed by a
 * bug or a crafted file), so every offset is bounds-checked in 64-bit
 * arithmetic before it is used, and a malformed input raises ValueError with
 * the same message the Python decoder gives.
 *
 * Data block layout (see kvstore/format/sst.py, docs/format/sst.md):
 *
 *     n:u32  shared: n x u16  suffix: n x u16  vlen: n x u32  seq: n x u64
 *     suffixes  values  r:u32  restarts: r x u32
 *
 * Bloom filter layout (kvstore/format/bloom.py):
 *
 *     k:u8  nblocks:u32  blocks: nblocks x 64 bytes (little-endian 512-bit ints)
 *
 * with (h1, h2) = MurmurHash3_x64_128(key, seed 0), as mmh3.hash64(signed=False).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define TOMBSTONE_LEN 0xFFFFFFFFu
#define RESTART_INTERVAL 16
#define MAX_KEY_BUF (2 * 65536)
#define STACK_ENTRIES 512

static inline uint16_t rd16(const unsigned char *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t rd32(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline uint64_t rd64(const unsigned char *p) {
    return (uint64_t)rd32(p) | ((uint64_t)rd32(p + 4) << 32);
}
static inline void wr16(unsigned char *p, uint32_t v) { p[0] = (unsigned char)v; p[1] = (unsigned char)(v >> 8); }
static inline void wr32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)v; p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16); p[3] = (unsigned char)(v >> 24);
}
static inline void wr64(unsigned char *p, uint64_t v) { wr32(p, (uint32_t)v); wr32(p + 4, (uint32_t)(v >> 32)); }

/* ------------------------------------------------------------------------ */
/* data blocks                                                              */
/* ------------------------------------------------------------------------ */

typedef struct {
    const unsigned char *b;
    uint64_t len;
    uint64_t n;
    const unsigned char *shared, *suffix, *vlen, *seq;
    uint64_t data_start; /* first suffix byte */
    uint64_t rpos;       /* offset of r */
    uint64_t r;
    const unsigned char *restarts;
} BlockLayout;

static int fail(const char *msg) {
    PyErr_SetString(PyExc_ValueError, msg);
    return -1;
}

/* Parse and check the layout: lengths add up, restart points are valid. */
static int parse_layout(const unsigned char *b, uint64_t len, BlockLayout *L) {
    if (len < 4) return fail("malformed data block: shorter than its entry count");
    uint64_t n = rd32(b);
    if (n == 0) return fail("data block lengths do not add up");
    uint64_t head = 4 + 16 * n;
    if (head > len) return fail("malformed data block: columns run past the block");
    L->b = b;
    L->len = len;
    L->n = n;
    L->shared = b + 4;
    L->suffix = b + 4 + 2 * n;
    L->vlen = b + 4 + 4 * n;
    L->seq = b + 4 + 8 * n;
    L->data_start = head;
    uint64_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        total += rd16(L->suffix + 2 * i);
        uint32_t vl = rd32(L->vlen + 4 * i);
        if (vl != TOMBSTONE_LEN) total += vl;
    }
    uint64_t rpos = head + total;
    if (rpos + 4 > len) return fail("malformed data block: entries run past the block");
    uint64_t r = rd32(b + rpos);
    if (rpos + 4 + 4 * r != len) return fail("data block lengths do not add up");
    L->rpos = rpos;
    L->r = r;
    L->restarts = b + rpos + 4;
    if (r == 0 || rd32(L->restarts) != 0)
        return fail("data block restart points are invalid");
    uint64_t prev = 0;
    for (uint64_t j = 0; j < r; j++) {
        uint64_t x = rd32(L->restarts + 4 * j);
        if (x >= n || (j > 0 && x <= prev) || rd16(L->shared + 2 * x) != 0)
            return fail("data block restart points are invalid");
        prev = x;
    }
    return 0;
}

static inline int keycmp(const unsigned char *a, uint64_t alen, const unsigned char *b, uint64_t blen) {
    uint64_t m = alen < blen ? alen : blen;
    int c = m ? memcmp(a, b, (size_t)m) : 0;
    if (c) return c;
    return alen < blen ? -1 : (alen > blen ? 1 : 0);
}

/* "O&" converter: a Python int in [0, 2**64), else OverflowError/TypeError */
static int u64_conv(PyObject *obj, void *addr) {
    if (!PyLong_Check(obj)) {
        PyErr_SetString(PyExc_TypeError, "expected an int");
        return 0;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(obj);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) return 0;
    *(unsigned long long *)addr = v;
    return 1;
}

static PyObject *get_buffer(PyObject *obj, Py_buffer *view) {
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0) return NULL;
    return obj;
}


/* ------------------------------------------------------------------------ */
/* CRC-32C (Castagnoli), as the crc32c package computes it                  */
/* ------------------------------------------------------------------------ */

static uint32_t crc_table[8][256];
static int crc_hw = 0;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int j = 0; j < 8; j++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    crc_hw = __builtin_cpu_supports("sse4.2");
#endif
}

static uint32_t crc_sw(uint32_t crc, const unsigned char *p, size_t len) {
    while (len >= 8) {
        uint64_t w = rd64(p) ^ crc;
        crc = crc_table[7][w & 0xFF] ^ crc_table[6][(w >> 8) & 0xFF] ^
              crc_table[5][(w >> 16) & 0xFF] ^ crc_table[4][(w >> 24) & 0xFF] ^
              crc_table[3][(w >> 32) & 0xFF] ^ crc_table[2][(w >> 40) & 0xFF] ^
              crc_table[1][(w >> 48) & 0xFF] ^ crc_table[0][w >> 56];
        p += 8;
        len -= 8;
    }
    while (len--) crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xFF];
    return crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("sse4.2"))) static uint32_t crc_hw_x86(uint32_t crc, const unsigned char *p, size_t len) {
    uint64_t c = crc;
    while (len >= 8) {
        c = __builtin_ia32_crc32di(c, rd64(p));
        p += 8;
        len -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (len--) c32 = __builtin_ia32_crc32qi(c32, *p++);
    return c32;
}
#endif

static uint32_t crc32c_buf(const unsigned char *p, size_t len) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (crc_hw) return ~crc_hw_x86(0xFFFFFFFFu, p, len);
#endif
    return ~crc_sw(0xFFFFFFFFu, p, len);
}

PyDoc_STRVAR(crc32c_doc, "crc32c(data) -> int: CRC-32C, equal to crc32c.crc32c(data).");

static PyObject *py_crc32c_sw(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (!get_buffer(arg, &view)) return NULL;
    uint32_t c = ~crc_sw(0xFFFFFFFFu, view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(c);
}

static PyObject *py_crc32c(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (!get_buffer(arg, &view)) return NULL;
    uint32_t c = crc32c_buf(view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(c);
}

PyDoc_STRVAR(block_layout_doc,
"block_layout(body) -> (n, first_key, first_seq)\n\n"
"Check a data block's layout (lengths, restart points); ValueError if malformed.");

static PyObject *block_layout(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (!get_buffer(arg, &view)) return NULL;
    BlockLayout L;
    PyObject *res = NULL;
    if (parse_layout(view.buf, (uint64_t)view.len, &L) == 0) {
        uint64_t klen = rd16(L.suffix);
        res = Py_BuildValue("(Ky#K)", (unsigned long long)L.n, (const char *)L.b + L.data_start,
                            (Py_ssize_t)klen, (unsigned long long)rd64(L.seq));
    }
    PyBuffer_Release(&view);
    return res;
}

PyDoc_STRVAR(block_decode_doc,
"block_decode(body) -> (keys: list[bytes], seqs: tuple[int, ...], values: list[bytes | None])\n\n"
"Decode and verify every entry of a data block; ValueError if malformed.");

/* Decode every entry of a block whose layout parse_layout accepted. */
static PyObject *decode_layout(const BlockLayout *Lp) {
    const BlockLayout L = *Lp;
    PyObject *keys = NULL, *seqs = NULL, *values = NULL, *res = NULL;
    unsigned char *cur = NULL;
    uint64_t n = L.n;
    keys = PyList_New((Py_ssize_t)n);
    seqs = PyTuple_New((Py_ssize_t)n);
    values = PyList_New((Py_ssize_t)n);
    cur = PyMem_Malloc(MAX_KEY_BUF);
    if (!keys || !seqs || !values || !cur) {
        if (!cur) PyErr_NoMemory();
        goto done;
    }
    uint64_t soff = L.data_start;
    uint64_t voff = L.data_start;
    for (uint64_t i = 0; i < n; i++) voff += rd16(L.suffix + 2 * i);
    uint64_t curlen = 0, prevseq = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t s = rd16(L.shared + 2 * i), sl = rd16(L.suffix + 2 * i);
        uint64_t seq = rd64(L.seq + 8 * i);
        if (s > curlen) {
            fail("data block key prefix out of range");
            goto done;
        }
        /* compare the new key with the previous one (prefix s is shared) */
        const unsigned char *suf = L.b + soff;
        int c = 0;
        if (i > 0) c = keycmp(suf, sl, cur + s, curlen - s);
        memcpy(cur + s, suf, (size_t)sl);
        uint64_t klen = s + sl;
        if (i > 0) {
            if (c < 0) {
                fail("data block entries out of order");
                goto done;
            }
            if (c == 0 && seq >= prevseq) {
                fail("data block versions of a key out of order");
                goto done;
            }
        }
        curlen = klen;
        prevseq = seq;
        soff += sl;
        PyObject *k = PyBytes_FromStringAndSize((const char *)cur, (Py_ssize_t)klen);
        if (!k) goto done;
        PyList_SET_ITEM(keys, (Py_ssize_t)i, k);
        PyObject *q = PyLong_FromUnsignedLongLong(seq);
        if (!q) goto done;
        PyTuple_SET_ITEM(seqs, (Py_ssize_t)i, q);
        uint32_t vl = rd32(L.vlen + 4 * i);
        PyObject *v;
        if (vl == TOMBSTONE_LEN) {
            v = Py_None;
            Py_INCREF(v);
        } else {
            v = PyBytes_FromStringAndSize((const char *)L.b + voff, (Py_ssize_t)vl);
            if (!v) goto done;
            voff += vl;
        }
        PyList_SET_ITEM(values, (Py_ssize_t)i, v);
    }
    res = PyTuple_Pack(3, keys, seqs, values);
done:
    PyMem_Free(cur);
    Py_XDECREF(keys);
    Py_XDECREF(seqs);
    Py_XDECREF(values);
    return res;
}

static PyObject *block_decode(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (!get_buffer(arg, &view)) return NULL;
    BlockLayout L;
    PyObject *res = NULL;
    if (parse_layout(view.buf, (uint64_t)view.len, &L) == 0) res = decode_layout(&L);
    PyBuffer_Release(&view);
    return res;
}

PyDoc_STRVAR(block_find_doc,
"block_find(body, key, read_seq) -> None | False | (seq, value)\n\n"
"The newest version of key with seq <= read_seq in a data block: (seq, value) when\n"
"found (value None for a tombstone), None when the block shows the key has no such\n"
"version, False when the block ended first (its versions may go on in the next block).");

/* read seqs beyond u64 see everything; negative ones see nothing */
static int parse_read_seq(PyObject *seq_obj, unsigned long long *read_seq, int *none_visible) {
    *none_visible = 0;
    *read_seq = PyLong_AsUnsignedLongLong(seq_obj);
    if (*read_seq == (unsigned long long)-1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) return -1;
        PyErr_Clear();
        PyObject *zero = PyLong_FromLong(0);
        if (!zero) return -1;
        int neg = PyObject_RichCompareBool(seq_obj, zero, Py_LT);
        Py_DECREF(zero);
        if (neg < 0) return -1;
        *none_visible = neg;
        *read_seq = (unsigned long long)-1;
    }
    return 0;
}

/* The search itself, over a block whose layout parse_layout accepted. */
static PyObject *find_in_layout(const BlockLayout *Lp, const unsigned char *key, uint64_t keylen,
                                unsigned long long read_seq, int none_visible) {
    const BlockLayout L = *Lp;
    PyObject *res = NULL;
    uint64_t stack_soff[STACK_ENTRIES + 1];
    uint64_t *soff = stack_soff;
    unsigned char *cur = NULL;
    uint64_t n = L.n;
    if (n > STACK_ENTRIES) {
        soff = PyMem_Malloc((size_t)(n + 1) * sizeof(uint64_t));
        if (!soff) {
            PyErr_NoMemory();
            goto done;
        }
    }
    soff[0] = L.data_start;
    for (uint64_t i = 0; i < n; i++) soff[i + 1] = soff[i] + rd16(L.suffix + 2 * i);
    /* last restart whose (full) key is < key: versions of key may begin before
       the first restart that equals it */
    uint64_t lo = 0, hi = L.r; /* bisect_left over restart keys */
    while (lo < hi) {
        uint64_t mid = (lo + hi) / 2;
        uint64_t x = rd32(L.restarts + 4 * mid);
        if (keycmp(L.b + soff[x], soff[x + 1] - soff[x], key, keylen) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    uint64_t i = lo > 0 ? rd32(L.restarts + 4 * (lo - 1)) : 0;
    cur = PyMem_Malloc(MAX_KEY_BUF);
    if (!cur) {
        PyErr_NoMemory();
        goto done;
    }
    uint64_t curlen = soff[i + 1] - soff[i];
    memcpy(cur, L.b + soff[i], (size_t)curlen);
    int have_last = 0;
    uint64_t last_seq = 0;
    for (;;) {
        int c = keycmp(cur, curlen, key, keylen);
        if (c > 0) {
            res = Py_None;
            Py_INCREF(res);
            break;
        }
        if (c == 0) {
            uint64_t seq = rd64(L.seq + 8 * i);
            if (have_last && seq >= last_seq) {
                fail("data block versions of a key out of order");
                break;
            }
            if (!none_visible && seq <= read_seq) {
                uint32_t vl = rd32(L.vlen + 4 * i);
                PyObject *v;
                if (vl == TOMBSTONE_LEN) {
                    v = Py_None;
                    Py_INCREF(v);
                } else {
                    uint64_t voff = soff[n];
                    for (uint64_t j = 0; j < i; j++) {
                        uint32_t x = rd32(L.vlen + 4 * j);
                        if (x != TOMBSTONE_LEN) voff += x;
                    }
                    v = PyBytes_FromStringAndSize((const char *)L.b + voff, (Py_ssize_t)vl);
                    if (!v) break;
                }
                PyObject *q = PyLong_FromUnsignedLongLong(seq);
                if (!q) {
                    Py_DECREF(v);
                    break;
                }
                res = PyTuple_New(2);
                if (!res) {
                    Py_DECREF(v);
                    Py_DECREF(q);
                    break;
                }
                PyTuple_SET_ITEM(res, 0, q);
                PyTuple_SET_ITEM(res, 1, v);
                break;
            }
            have_last = 1;
            last_seq = seq;
        }
        i++;
        if (i >= n) {
            res = Py_False;
            Py_INCREF(res);
            break;
        }
        uint64_t s = rd16(L.shared + 2 * i);
        if (s > curlen) {
            fail("data block key prefix out of range");
            break;
        }
        uint64_t sl = soff[i + 1] - soff[i];
        const unsigned char *suf = L.b + soff[i];
        if (keycmp(suf, sl, cur + s, curlen - s) < 0) {
            fail("data block entries out of order");
            break;
        }
        memcpy(cur + s, suf, (size_t)sl);
        curlen = s + sl;
    }
done:
    PyMem_Free(cur);
    if (soff != stack_soff) PyMem_Free(soff);
    return res;
}

static PyObject *block_find(PyObject *self, PyObject *args) {
    PyObject *body_obj, *seq_obj;
    Py_buffer view, kview;
    if (!PyArg_ParseTuple(args, "Oy*O!", &body_obj, &kview, &PyLong_Type, &seq_obj)) return NULL;
    unsigned long long read_seq;
    int none_visible;
    if (parse_read_seq(seq_obj, &read_seq, &none_visible) < 0 || !get_buffer(body_obj, &view)) {
        PyBuffer_Release(&kview);
        return NULL;
    }
    PyObject *res = NULL;
    BlockLayout L;
    if (parse_layout(view.buf, (uint64_t)view.len, &L) == 0)
        res = find_in_layout(&L, kview.buf, (uint64_t)kview.len, read_seq, none_visible);
    PyBuffer_Release(&view);
    PyBuffer_Release(&kview);
    return res;
}

PyDoc_STRVAR(stored_find_doc,
"stored_find(file, offset, size, first_key, first_seq, key, read_seq)\n\n"
"block_find on a stored block inside ``file`` (a buffer holding the whole SST):\n"
"checks the block's bounds, its crc32c trailer and that it starts with the index's\n"
"first key and seq, then searches it. Returns what block_find returns, or True when\n"
"the block is compressed (the caller decompresses it). ValueError if corrupt.");

/* Check a stored block inside a whole-file buffer: bounds, crc32c trailer,
   compression byte, layout, and agreement with the index's first key and seq.
   Returns 0 (layout in *L), 1 (compressed: the caller decompresses) or -1. */
static int check_stored(const Py_buffer *view, unsigned long long off, unsigned long long size,
                        const Py_buffer *fk, unsigned long long first_seq, BlockLayout *L) {
    const unsigned char *f = view->buf;
    if (size < 5 || off > (uint64_t)view->len || size > (uint64_t)view->len - off)
        return fail("data block truncated");
    const unsigned char *b = f + off;
    uint64_t blen = size - 5;
    if (crc32c_buf(b, (size_t)(size - 4)) != rd32(b + size - 4))
        return fail("block checksum mismatch");
    if (b[blen] != 0) {
        if (b[blen] == 1) return 1;
        PyErr_Format(PyExc_ValueError, "unknown block compression %d", (int)b[blen]);
        return -1;
    }
    if (parse_layout(b, blen, L) < 0) return -1;
    if (rd64(L->seq) != first_seq || rd16(L->suffix) != (uint64_t)fk->len ||
        memcmp(b + L->data_start, fk->buf, (size_t)fk->len) != 0)
        return fail("data block does not match the index");
    return 0;
}

static PyObject *stored_find(PyObject *self, PyObject *args) {
    PyObject *file_obj, *seq_obj;
    Py_buffer view, kview, fkview;
    unsigned long long off, size, first_seq;
    if (!PyArg_ParseTuple(args, "OO&O&y*O&y*O!", &file_obj, u64_conv, &off, u64_conv, &size,
                          &fkview, u64_conv, &first_seq, &kview, &PyLong_Type, &seq_obj))
        return NULL;
    unsigned long long read_seq;
    int none_visible;
    PyObject *res = NULL;
    if (parse_read_seq(seq_obj, &read_seq, &none_visible) == 0 && get_buffer(file_obj, &view)) {
        BlockLayout L;
        int st = check_stored(&view, off, size, &fkview, first_seq, &L);
        if (st == 1) {
            res = Py_True;
            Py_INCREF(res);
        } else if (st == 0) {
            res = find_in_layout(&L, kview.buf, (uint64_t)kview.len, read_seq, none_visible);
        }
        PyBuffer_Release(&view);
    }
    PyBuffer_Release(&kview);
    PyBuffer_Release(&fkview);
    return res;
}

PyDoc_STRVAR(stored_decode_doc,
"stored_decode(file, offset, size, first_key, first_seq)\n\n"
"block_decode on a stored block inside ``file``, after the checks of stored_find.\n"
"Returns (keys, seqs, values), or True when the block is compressed.");

static PyObject *stored_decode(PyObject *self, PyObject *args) {
    PyObject *file_obj;
    Py_buffer view, fkview;
    unsigned long long off, size, first_seq;
    if (!PyArg_ParseTuple(args, "OO&O&y*O&", &file_obj, u64_conv, &off, u64_conv, &size, &fkview,
                          u64_conv, &first_seq))
        return NULL;
    PyObject *res = NULL;
    if (get_buffer(file_obj, &view)) {
        BlockLayout L;
        int st = check_stored(&view, off, size, &fkview, first_seq, &L);
        if (st == 1) {
            res = Py_True;
            Py_INCREF(res);
        } else if (st == 0) {
            res = decode_layout(&L);
        }
        PyBuffer_Release(&view);
    }
    PyBuffer_Release(&fkview);
    return res;
}

PyDoc_STRVAR(block_encode_doc,
"block_encode(keys, seqs, values) -> bytes\n\n"
"Encode one data block (keys sorted; values None for tombstones); every restart\n"
"interval shares the prefix common to its first and last key.");

/* Check the entries [lo, hi) of the three item arrays: bytes keys of at most
   65535 bytes, sorted; bytes-or-None values under 4 GiB. */
static int check_entries(PyObject **kv, PyObject **vv, Py_ssize_t lo, Py_ssize_t hi) {
    for (Py_ssize_t i = lo; i < hi; i++) {
        if (!PyBytes_Check(kv[i]) || PyBytes_GET_SIZE(kv[i]) > 0xFFFF)
            return fail("keys must be bytes of at most 65535 bytes");
        if (i > lo && keycmp((const unsigned char *)PyBytes_AS_STRING(kv[i - 1]),
                             (uint64_t)PyBytes_GET_SIZE(kv[i - 1]),
                             (const unsigned char *)PyBytes_AS_STRING(kv[i]),
                             (uint64_t)PyBytes_GET_SIZE(kv[i])) > 0)
            return fail("block keys must be sorted");
        if (vv[i] != Py_None &&
            (!PyBytes_Check(vv[i]) || (uint64_t)PyBytes_GET_SIZE(vv[i]) >= TOMBSTONE_LEN))
            return fail("values must be bytes shorter than 4 GiB, or None");
    }
    return 0;
}

/* Encode entries [lo, hi) (already checked) as one data block; with seal, also
   append the compression byte 0 and the crc32c trailer. */
static PyObject *encode_range(PyObject **kv, PyObject **sv, PyObject **vv, Py_ssize_t lo,
                              Py_ssize_t hi, int seal) {
    Py_ssize_t n = hi - lo;
    Py_ssize_t r = (n + RESTART_INTERVAL - 1) / RESTART_INTERVAL;
    uint64_t total = 4 + 16 * (uint64_t)n + 4 + 4 * (uint64_t)r + 5;
    for (Py_ssize_t i = lo; i < hi; i++) {
        total += (uint64_t)PyBytes_GET_SIZE(kv[i]);
        if (vv[i] != Py_None) total += (uint64_t)PyBytes_GET_SIZE(vv[i]);
    }
    unsigned char *buf = PyMem_Malloc((size_t)total); /* upper bound: prefixes only shrink it */
    if (!buf) return PyErr_NoMemory();
    unsigned char *p_shared = buf + 4, *p_suffix = buf + 4 + 2 * n, *p_vlen = buf + 4 + 4 * n,
                  *p_seq = buf + 4 + 8 * n;
    unsigned char *out = buf + 4 + 16 * n;
    wr32(buf, (uint32_t)n);
    for (Py_ssize_t g = 0; g < n; g += RESTART_INTERVAL) {
        Py_ssize_t end = g + RESTART_INTERVAL < n ? g + RESTART_INTERVAL : n;
        const char *first = PyBytes_AS_STRING(kv[lo + g]);
        Py_ssize_t flen = PyBytes_GET_SIZE(kv[lo + g]);
        const char *last = PyBytes_AS_STRING(kv[lo + end - 1]);
        Py_ssize_t llen = PyBytes_GET_SIZE(kv[lo + end - 1]);
        Py_ssize_t m = flen < llen ? flen : llen, p = 0;
        while (p < m && first[p] == last[p]) p++;
        for (Py_ssize_t i = g; i < end; i++) {
            Py_ssize_t s = i == g ? 0 : p;
            Py_ssize_t klen = PyBytes_GET_SIZE(kv[lo + i]);
            wr16(p_shared + 2 * i, (uint32_t)s);
            wr16(p_suffix + 2 * i, (uint32_t)(klen - s));
            memcpy(out, PyBytes_AS_STRING(kv[lo + i]) + s, (size_t)(klen - s));
            out += klen - s;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned long long seq = PyLong_AsUnsignedLongLong(sv[lo + i]);
        if (seq == (unsigned long long)-1 && PyErr_Occurred()) {
            PyMem_Free(buf);
            return NULL;
        }
        wr64(p_seq + 8 * i, seq);
        PyObject *v = vv[lo + i];
        if (v == Py_None) {
            wr32(p_vlen + 4 * i, TOMBSTONE_LEN);
        } else {
            Py_ssize_t vlen = PyBytes_GET_SIZE(v);
            wr32(p_vlen + 4 * i, (uint32_t)vlen);
            memcpy(out, PyBytes_AS_STRING(v), (size_t)vlen);
            out += vlen;
        }
    }
    wr32(out, (uint32_t)r);
    out += 4;
    for (Py_ssize_t j = 0; j < r; j++) {
        wr32(out, (uint32_t)(j * RESTART_INTERVAL));
        out += 4;
    }
    if (seal) {
        *out++ = 0; /* COMPRESS_NONE */
        wr32(out, crc32c_buf(buf, (size_t)(out - buf)));
        out += 4;
    }
    PyObject *res = PyBytes_FromStringAndSize((const char *)buf, out - buf);
    PyMem_Free(buf);
    return res;
}

static int get_columns(PyObject *args, PyObject **keys, PyObject **seqf, PyObject **values,
                       unsigned long long *block_bytes) {
    PyObject *seqs;
    int ok = block_bytes
                 ? PyArg_ParseTuple(args, "O!OO!O&", &PyList_Type, keys, &seqs, &PyList_Type,
                                    values, u64_conv, block_bytes)
                 : PyArg_ParseTuple(args, "O!OO!", &PyList_Type, keys, &seqs, &PyList_Type, values);
    if (!ok) return -1;
    *seqf = PySequence_Fast(seqs, "seqs must be a sequence");
    if (!*seqf) return -1;
    Py_ssize_t n = PyList_GET_SIZE(*keys);
    if (n == 0 || PySequence_Fast_GET_SIZE(*seqf) != n || PyList_GET_SIZE(*values) != n) {
        Py_DECREF(*seqf);
        return fail("keys, seqs and values must have the same, non-zero length");
    }
    return 0;
}

static PyObject *block_encode(PyObject *self, PyObject *args) {
    PyObject *keys, *seqf, *values;
    if (get_columns(args, &keys, &seqf, &values, NULL) < 0) return NULL;
    PyObject **kv = PySequence_Fast_ITEMS(keys), **vv = PySequence_Fast_ITEMS(values);
    Py_ssize_t n = PyList_GET_SIZE(keys);
    PyObject *res = NULL;
    if (check_entries(kv, vv, 0, n) == 0)
        res = encode_range(kv, PySequence_Fast_ITEMS(seqf), vv, 0, n, 0);
    Py_DECREF(seqf);
    return res;
}


PyDoc_STRVAR(sst_stats_doc,
"sst_stats(keys, seqs, values) -> (tombstones, min_seq, max_seq, has_versions)\n\n"
"Check that SST entries are in internal order (key ascending, seq descending\n"
"within a key) with keys of at most 65535 bytes, and summarize them; ValueError\n"
"with build_sst's messages otherwise. has_versions: some key appears twice.");

static PyObject *sst_stats(PyObject *self, PyObject *args) {
    PyObject *keys, *seqf, *values;
    if (get_columns(args, &keys, &seqf, &values, NULL) < 0) return NULL;
    PyObject **kv = PySequence_Fast_ITEMS(keys), **sv = PySequence_Fast_ITEMS(seqf),
             **vv = PySequence_Fast_ITEMS(values);
    Py_ssize_t n = PyList_GET_SIZE(keys);
    PyObject *res = NULL;
    unsigned long long tombstones = 0, lo = ~0ull, hi = 0, prev_seq = 0;
    int versions = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyBytes_Check(kv[i]) || (vv[i] != Py_None && !PyBytes_Check(vv[i]))) {
            PyErr_SetString(PyExc_TypeError, "SST keys must be bytes and values bytes or None");
            goto done;
        }
        if (PyBytes_GET_SIZE(kv[i]) > 0xFFFF) {
            fail("a key exceeds 65535 bytes");
            goto done;
        }
        unsigned long long seq = PyLong_AsUnsignedLongLong(sv[i]);
        if (seq == (unsigned long long)-1 && PyErr_Occurred()) goto done;
        if (i > 0) {
            int c = keycmp((const unsigned char *)PyBytes_AS_STRING(kv[i - 1]),
                           (uint64_t)PyBytes_GET_SIZE(kv[i - 1]),
                           (const unsigned char *)PyBytes_AS_STRING(kv[i]),
                           (uint64_t)PyBytes_GET_SIZE(kv[i]));
            if (c > 0 || (c == 0 && seq >= prev_seq)) {
                fail("SST entries must be sorted by key asc, seq desc");
                goto done;
            }
            if (c == 0) versions = 1;
        }
        prev_seq = seq;
        if (seq < lo) lo = seq;
        if (seq > hi) hi = seq;
        if (vv[i] == Py_None) tombstones++;
    }
    res = Py_BuildValue("(KKKO)", tombstones, lo, hi, versions ? Py_True : Py_False);
done:
    Py_DECREF(seqf);
    return res;
}

PyDoc_STRVAR(build_blocks_doc,
"build_blocks(keys, seqs, values, block_bytes) -> (blocks: list[bytes], starts: list[int])\n\n"
"Cut sorted entries into data blocks as build_sst does (a block ends with the entry\n"
"that brings it to block_bytes, each entry counting 16 + key + value bytes) and\n"
"return each block sealed uncompressed (body, byte 0, crc32c), with its first index.");

static PyObject *build_blocks(PyObject *self, PyObject *args) {
    PyObject *keys, *seqf, *values;
    unsigned long long block_bytes;
    if (get_columns(args, &keys, &seqf, &values, &block_bytes) < 0) return NULL;
    PyObject **kv = PySequence_Fast_ITEMS(keys), **sv = PySequence_Fast_ITEMS(seqf),
             **vv = PySequence_Fast_ITEMS(values);
    Py_ssize_t n = PyList_GET_SIZE(keys);
    PyObject *blocks = NULL, *starts = NULL, *res = NULL;
    if (check_entries(kv, vv, 0, n) < 0) goto done;
    blocks = PyList_New(0);
    starts = PyList_New(0);
    if (!blocks || !starts) goto done;
    Py_ssize_t start = 0;
    while (start < n) {
        uint64_t acc = 0;
        Py_ssize_t end = n;
        for (Py_ssize_t e = start; e < n; e++) {
            acc += 16 + (uint64_t)PyBytes_GET_SIZE(kv[e]) +
                   (vv[e] == Py_None ? 0 : (uint64_t)PyBytes_GET_SIZE(vv[e]));
            if (acc >= block_bytes) {
                end = e + 1;
                break;
            }
        }
        PyObject *blk = encode_range(kv, sv, vv, start, end, 1);
        if (!blk) goto done;
        int err = PyList_Append(blocks, blk);
        Py_DECREF(blk);
        if (err < 0) goto done;
        PyObject *st = PyLong_FromSsize_t(start);
        if (!st) goto done;
        err = PyList_Append(starts, st);
        Py_DECREF(st);
        if (err < 0) goto done;
        start = end;
    }
    res = PyTuple_Pack(2, blocks, starts);
done:
    Py_XDECREF(blocks);
    Py_XDECREF(starts);
    Py_DECREF(seqf);
    return res;
}

/* ------------------------------------------------------------------------ */
/* MurmurHash3_x64_128 (Austin Appleby, public domain) and the bloom filter */
/* ------------------------------------------------------------------------ */

static inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static inline uint64_t fmix64(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k;
}

static void murmur3_x64_128(const unsigned char *data, size_t len, uint64_t *o1, uint64_t *o2) {
    const size_t nblocks = len / 16;
    uint64_t h1 = 0, h2 = 0;
    const uint64_t c1 = 0x87c37b91114253d5ULL, c2 = 0x4cf5ad432745937fULL;
    for (size_t i = 0; i < nblocks; i++) {
        uint64_t k1 = rd64(data + 16 * i), k2 = rd64(data + 16 * i + 8);
        k1 *= c1; k1 = rotl64(k1, 31); k1 *= c2; h1 ^= k1;
        h1 = rotl64(h1, 27); h1 += h2; h1 = h1 * 5 + 0x52dce729;
        k2 *= c2; k2 = rotl64(k2, 33); k2 *= c1; h2 ^= k2;
        h2 = rotl64(h2, 31); h2 += h1; h2 = h2 * 5 + 0x38495ab5;
    }
    const unsigned char *tail = data + nblocks * 16;
    uint64_t k1 = 0, k2 = 0;
    switch (len & 15) {
    case 15: k2 ^= (uint64_t)tail[14] << 48; /* fall through */
    case 14: k2 ^= (uint64_t)tail[13] << 40; /* fall through */
    case 13: k2 ^= (uint64_t)tail[12] << 32; /* fall through */
    case 12: k2 ^= (uint64_t)tail[11] << 24; /* fall through */
    case 11: k2 ^= (uint64_t)tail[10] << 16; /* fall through */
    case 10: k2 ^= (uint64_t)tail[9] << 8; /* fall through */
    case 9:
        k2 ^= (uint64_t)tail[8];
        k2 *= c2; k2 = rotl64(k2, 33); k2 *= c1; h2 ^= k2;
        /* fall through */
    case 8: k1 ^= (uint64_t)tail[7] << 56; /* fall through */
    case 7: k1 ^= (uint64_t)tail[6] << 48; /* fall through */
    case 6: k1 ^= (uint64_t)tail[5] << 40; /* fall through */
    case 5: k1 ^= (uint64_t)tail[4] << 32; /* fall through */
    case 4: k1 ^= (uint64_t)tail[3] << 24; /* fall through */
    case 3: k1 ^= (uint64_t)tail[2] << 16; /* fall through */
    case 2: k1 ^= (uint64_t)tail[1] << 8; /* fall through */
    case 1:
        k1 ^= (uint64_t)tail[0];
        k1 *= c1; k1 = rotl64(k1, 31); k1 *= c2; h1 ^= k1;
    }
    h1 ^= (uint64_t)len; h2 ^= (uint64_t)len;
    h1 += h2; h2 += h1;
    h1 = fmix64(h1); h2 = fmix64(h2);
    h1 += h2; h2 += h1;
    *o1 = h1;
    *o2 = h2;
}

PyDoc_STRVAR(hash64_doc, "hash64(key) -> (h1, h2): MurmurHash3_x64_128, seed 0, as mmh3.hash64(key, signed=False).");

static PyObject *hash64(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (!get_buffer(arg, &view)) return NULL;
    uint64_t h1, h2;
    murmur3_x64_128(view.buf, (size_t)view.len, &h1, &h2);
    PyBuffer_Release(&view);
    return Py_BuildValue("(KK)", (unsigned long long)h1, (unsigned long long)h2);
}

#define BLOOM_HEAD 5
#define BLOOM_BLOCK 64

PyDoc_STRVAR(bloom_may_contain_doc,
"bloom_may_contain(filter, key) -> bool\n\n"
"Probe a bloom filter whose header was already checked by BloomFilter.");

static PyObject *bloom_may_contain(PyObject *self, PyObject *args) {
    Py_buffer fview, kview;
    if (!PyArg_ParseTuple(args, "y*y*", &fview, &kview)) return NULL;
    const unsigned char *f = fview.buf;
    PyObject *res = NULL;
    if (fview.len < BLOOM_HEAD) {
        PyErr_SetString(PyExc_ValueError, "bloom filter too short");
        goto done;
    }
    unsigned k = f[0];
    uint64_t nb = rd32(f + 1);
    if (k < 1 || k > 7 || nb == 0 || (uint64_t)fview.len != BLOOM_HEAD + nb * BLOOM_BLOCK) {
        PyErr_SetString(PyExc_ValueError, "bloom filter header does not match its size");
        goto done;
    }
    uint64_t h1, h2;
    murmur3_x64_128(kview.buf, (size_t)kview.len, &h1, &h2);
    const unsigned char *blk = f + BLOOM_HEAD + (h1 % nb) * BLOOM_BLOCK;
    int hit = 1;
    for (unsigned i = 0; i < k; i++) {
        unsigned bit = (unsigned)((h2 >> (9 * i)) & 511);
        if (!(blk[bit >> 3] & (1u << (bit & 7)))) {
            hit = 0;
            break;
        }
    }
    res = PyBool_FromLong(hit);
done:
    PyBuffer_Release(&fview);
    PyBuffer_Release(&kview);
    return res;
}

PyDoc_STRVAR(bloom_build_doc,
"bloom_build(keys, nblocks, k) -> bytes: the filter (header included) holding keys.");

static PyObject *bloom_build(PyObject *self, PyObject *args) {
    PyObject *keys;
    unsigned long long nb, k;
    if (!PyArg_ParseTuple(args, "OO&O&", &keys, u64_conv, &nb, u64_conv, &k)) return NULL;
    if (nb == 0 || nb > 0xFFFFFFFFull || k < 1 || k > 7) {
        PyErr_SetString(PyExc_ValueError, "bloom filter needs 1 <= k <= 7 and 1 <= nblocks < 2**32");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(keys, "keys must be a sequence");
    if (!seq) return NULL;
    PyObject *res = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(BLOOM_HEAD + nb * BLOOM_BLOCK));
    if (!res) {
        Py_DECREF(seq);
        return NULL;
    }
    unsigned char *f = (unsigned char *)PyBytes_AS_STRING(res);
    memset(f, 0, (size_t)(BLOOM_HEAD + nb * BLOOM_BLOCK));
    f[0] = (unsigned char)k;
    wr32(f + 1, (uint32_t)nb);
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyBytes_Check(items[i])) {
            Py_DECREF(seq);
            Py_DECREF(res);
            PyErr_SetString(PyExc_TypeError, "bloom keys must be bytes");
            return NULL;
        }
        uint64_t h1, h2;
        murmur3_x64_128((const unsigned char *)PyBytes_AS_STRING(items[i]),
                        (size_t)PyBytes_GET_SIZE(items[i]), &h1, &h2);
        unsigned char *blk = f + BLOOM_HEAD + (h1 % nb) * BLOOM_BLOCK;
        for (unsigned j = 0; j < k; j++) {
            unsigned bit = (unsigned)((h2 >> (9 * j)) & 511);
            blk[bit >> 3] |= (unsigned char)(1u << (bit & 7));
        }
    }
    Py_DECREF(seq);
    return res;
}



/* ------------------------------------------------------------------------ */
/* WAL frames (kvstore/format/wal.py)                                       */
/* ------------------------------------------------------------------------ */

PyDoc_STRVAR(wal_frame_doc,
"wal_frame(seq, keys, values) -> bytes\n\n"
"One complete WAL frame (header + payload) for a write: equal to\n"
"kvstore.format.wal.encode_record_py. Keys bytes, values bytes or None (delete).");

static PyObject *wal_frame(PyObject *self, PyObject *args) {
    unsigned long long seq;
    PyObject *key_arg, *value_arg;
    if (!PyArg_ParseTuple(args, "O&OO", u64_conv, &seq, &key_arg, &value_arg)) return NULL;
    PyObject *keys = PySequence_Fast(key_arg, "keys must be a sequence");
    if (!keys) return NULL;
    PyObject *values = PySequence_Fast(value_arg, "values must be a sequence");
    if (!values) {
        Py_DECREF(keys);
        return NULL;
    }
    PyObject *res = NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(keys);
    if (PySequence_Fast_GET_SIZE(values) != n || n > 0xFFFFFFFFLL) {
        PyErr_SetString(PyExc_ValueError, "keys and values must have the same length");
        goto done;
    }
    PyObject **kv = PySequence_Fast_ITEMS(keys), **vv = PySequence_Fast_ITEMS(values);
    uint64_t payload = 12 + 9 * (uint64_t)n;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyBytes_Check(kv[i]) || (vv[i] != Py_None && !PyBytes_Check(vv[i]))) {
            PyErr_SetString(PyExc_TypeError, "keys must be bytes and values bytes or None");
            goto done;
        }
        uint64_t kl = (uint64_t)PyBytes_GET_SIZE(kv[i]);
        uint64_t vl = vv[i] == Py_None ? 0 : (uint64_t)PyBytes_GET_SIZE(vv[i]);
        if (kl > 0xFFFFFFFFull || vl > 0xFFFFFFFFull) {
            PyErr_SetString(PyExc_ValueError, "a key or value exceeds 4 GiB");
            goto done;
        }
        payload += kl + vl;
    }
    if (payload >= (1ull << 31)) {
        PyErr_Format(PyExc_ValueError, "write of %llu bytes exceeds the WAL frame limit",
                     (unsigned long long)payload);
        goto done;
    }
    res = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(12 + payload));
    if (!res) goto done;
    unsigned char *f = (unsigned char *)PyBytes_AS_STRING(res);
    unsigned char *p = f + 12;
    wr64(p, seq);
    wr32(p + 8, (uint32_t)n);
    unsigned char *kinds = p + 12, *klens = kinds + n, *vlens = klens + 4 * n;
    unsigned char *out = vlens + 4 * n;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t kl = PyBytes_GET_SIZE(kv[i]);
        kinds[i] = vv[i] == Py_None ? 0 : 1;
        wr32(klens + 4 * i, (uint32_t)kl);
        memcpy(out, PyBytes_AS_STRING(kv[i]), (size_t)kl);
        out += kl;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t vl = vv[i] == Py_None ? 0 : PyBytes_GET_SIZE(vv[i]);
        wr32(vlens + 4 * i, (uint32_t)vl);
        if (vl) memcpy(out, PyBytes_AS_STRING(vv[i]), (size_t)vl);
        out += vl;
    }
    unsigned char lenb[4];
    wr32(lenb, (uint32_t)payload);
    wr32(f, (uint32_t)payload);
    wr32(f + 4, crc32c_buf(lenb, 4));
    wr32(f + 8, crc32c_buf(p, (size_t)payload));
done:
    Py_DECREF(keys);
    Py_DECREF(values);
    return res;
}

/* ------------------------------------------------------------------------ */
/* read-only file mappings without a duplicated file descriptor            */
/* ------------------------------------------------------------------------ */

#if defined(__unix__) || defined(__APPLE__)
#include <sys/mman.h>
#include <errno.h>
#define HAVE_MAP_FILE 1

typedef struct {
    PyObject_HEAD
    void *addr;
    Py_ssize_t len;
} MappingObject;

static int mapping_getbuffer(PyObject *obj, Py_buffer *view, int flags) {
    MappingObject *self = (MappingObject *)obj;
    return PyBuffer_FillInfo(view, obj, self->addr, self->len, 1, flags); /* read-only */
}

static void mapping_dealloc(PyObject *obj) {
    MappingObject *self = (MappingObject *)obj;
    if (self->addr) munmap(self->addr, (size_t)self->len);
    Py_TYPE(obj)->tp_free(obj);
}

static PyBufferProcs mapping_as_buffer = {mapping_getbuffer, NULL};

static PyTypeObject MappingType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kvstore._speedups.Mapping",
    .tp_basicsize = sizeof(MappingObject),
    .tp_dealloc = mapping_dealloc,
    .tp_as_buffer = &mapping_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A read-only mapping of a whole file; unmapped when the last buffer of it is gone.",
};

PyDoc_STRVAR(map_file_doc,
"map_file(fd, size) -> Mapping\n\n"
"Map the first size bytes of the open file fd read-only (MAP_SHARED). Unlike\n"
"mmap.mmap it keeps no duplicate of fd: the mapping lives on after fd is closed.");

static PyObject *map_file(PyObject *self, PyObject *args) {
    int fd;
    Py_ssize_t size;
    if (!PyArg_ParseTuple(args, "in", &fd, &size)) return NULL;
    if (size <= 0) {
        PyErr_SetString(PyExc_ValueError, "cannot map an empty file");
        return NULL;
    }
    void *addr = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
    if (addr == MAP_FAILED) return PyErr_SetFromErrno(PyExc_OSError);
    MappingObject *m = PyObject_New(MappingObject, &MappingType);
    if (!m) {
        munmap(addr, (size_t)size);
        return NULL;
    }
    m->addr = addr;
    m->len = size;
    return (PyObject *)m;
}
#endif

static PyMethodDef methods[] = {
    {"block_layout", block_layout, METH_O, block_layout_doc},
    {"block_decode", block_decode, METH_O, block_decode_doc},
    {"block_find", block_find, METH_VARARGS, block_find_doc},
    {"stored_find", stored_find, METH_VARARGS, stored_find_doc},
    {"stored_decode", stored_decode, METH_VARARGS, stored_decode_doc},
    {"crc32c", py_crc32c, METH_O, crc32c_doc},
    {"wal_frame", wal_frame, METH_VARARGS, wal_frame_doc},
#ifdef HAVE_MAP_FILE
    {"map_file", map_file, METH_VARARGS, map_file_doc},
#endif
    {"_crc32c_sw", py_crc32c_sw, METH_O, "crc32c by table only (tests: the path without SSE4.2)."},
    {"block_encode", block_encode, METH_VARARGS, block_encode_doc},
    {"build_blocks", build_blocks, METH_VARARGS, build_blocks_doc},
    {"sst_stats", sst_stats, METH_VARARGS, sst_stats_doc},
    {"hash64", hash64, METH_O, hash64_doc},
    {"bloom_may_contain", bloom_may_contain, METH_VARARGS, bloom_may_contain_doc},
    {"bloom_build", bloom_build, METH_VARARGS, bloom_build_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "kvstore._speedups",
    "C versions of kvstore's block decoding, block search, block encoding and bloom filter.",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__speedups(void) {
    crc_init();
#ifdef HAVE_MAP_FILE
    if (PyType_Ready(&MappingType) < 0) return NULL;
#endif
    return PyModule_Create(&module);
}
