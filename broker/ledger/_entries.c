/*
 * broker.ledger._entries: the per-message loop of broker.ledger.entry.encode_payloads,
 * compiled.
 *
 * encode_payloads builds one entry per produced message in Pulsar's format,
 *
 *     magic 0x0e01 | CRC32C (u32) | metadata size (u32) | head | tail | payload
 *
 * (integers big-endian), where a table row gives the metadata's head (producer name and
 * sequence id), its size and the CRC32C of "size | head" carried over the tail's length
 * (see _PlainMetadata in entry.py). What remains per message is one CRC32C over the
 * payload, seeded with the row's carried value XOR the tail's own CRC, and the bytes
 * object holding the five parts. In Python that is a CRC call, a struct pack and a join
 * a message, about 0.33 us of a 1 KiB message's encoding; here it is one allocation,
 * three copies and the CRC in SSE4.2 instructions (three streams at once).
 *
 * encode_rows_b64 and encode_batch_b64 do the same for the produce route's base64 texts,
 * decoding each straight into its entry (see "Decoding base64 payloads" below).
 *
 * entry.py stays the reference: it uses this module when it imports (x86-64 with
 * SSE4.2, and a compiler at install time) and its own loop otherwise, and the tests
 * hold the two to the same bytes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

#if !defined(__x86_64__)
#error "broker.ledger._entries needs x86-64 (SSE4.2 CRC32C); entry.py encodes without it"
#endif

#include <nmmintrin.h>

#define MAGIC_0 0x0e
#define MAGIC_1 0x01
#define HEAD_SIZE 10 /* magic, checksum, metadata size */

/*
 * CRC32C with the SSE4.2 instruction, three streams at a time.
 *
 * One crc32 instruction takes 8 bytes, but each waits about 3 cycles for the one before
 * it in the same stream, so a single stream runs at a third of what the unit can do.
 * A chunk of 3 x BLOCK bytes is taken as three independent streams A, B, C (B and C
 * from register 0), and combined: the register is affine in its start value, so
 *
 *     R(c, A | B | C) = shift_2block(R(c, A)) ^ shift_block(R(0, B)) ^ R(0, C)
 *
 * where shift_n(x) = R(x, n zero bytes) is linear in x, and is looked up a byte at a
 * time in tables built at import (4 x 256 entries for each of the two shifts). What is
 * left after the chunks goes 8 bytes, then one byte, at a time. A 1 KiB payload takes
 * about half the time of one stream.
 */
#define BLOCK 128
static uint32_t shift_tables[2][4][256]; /* [0]: BLOCK zero bytes, [1]: 2 x BLOCK */

__attribute__((target("sse4.2"))) static uint32_t
register_after_zeros(uint32_t reg, size_t n)
{
    uint64_t c = reg;
    for (size_t i = 0; i < n / 8; i++) {
        c = _mm_crc32_u64(c, 0);
    }
    return (uint32_t)c;
}

static void
build_shift_tables(void)
{
    for (int which = 0; which < 2; which++) {
        for (int k = 0; k < 4; k++) {
            for (uint32_t b = 0; b < 256; b++) {
                shift_tables[which][k][b] =
                    register_after_zeros(b << (8 * k), (size_t)BLOCK * (size_t)(which + 1));
            }
        }
    }
}

static inline uint32_t
shift(int which, uint32_t reg)
{
    const uint32_t(*t)[256] = shift_tables[which];
    return t[0][reg & 0xff] ^ t[1][(reg >> 8) & 0xff] ^ t[2][(reg >> 16) & 0xff] ^ t[3][reg >> 24];
}

/* CRC32C of p[0..n) continuing from crc (the value the crc32c package's crc32c(data,
 * crc) returns). */
__attribute__((target("sse4.2"))) static uint32_t
crc32c_continue(uint32_t crc, const unsigned char *p, size_t n)
{
    uint64_t a = (uint32_t)~crc;
    while (n >= 3 * BLOCK) {
        uint64_t b = 0, c = 0;
        for (size_t i = 0; i < BLOCK; i += 8) {
            uint64_t wa, wb, wc;
            memcpy(&wa, p + i, 8);
            memcpy(&wb, p + BLOCK + i, 8);
            memcpy(&wc, p + 2 * BLOCK + i, 8);
            a = _mm_crc32_u64(a, wa);
            b = _mm_crc32_u64(b, wb);
            c = _mm_crc32_u64(c, wc);
        }
        a = shift(1, (uint32_t)a) ^ shift(0, (uint32_t)b) ^ (uint32_t)c;
        p += 3 * BLOCK;
        n -= 3 * BLOCK;
    }
    while (n >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        a = _mm_crc32_u64(a, word);
        p += 8;
        n -= 8;
    }
    uint32_t a32 = (uint32_t)a;
    while (n > 0) {
        a32 = _mm_crc32_u8(a32, *p++);
        n--;
    }
    return ~a32;
}

static void
put_u32_be(char *p, uint32_t value)
{
    p[0] = (char)(value >> 24);
    p[1] = (char)(value >> 16);
    p[2] = (char)(value >> 8);
    p[3] = (char)value;
}

/* An exact int in [0, 2**32), or -1 with an exception set. */
static int64_t
u32_of(PyObject *value, const char *what)
{
    if (!PyLong_CheckExact(value)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int", what);
        return -1;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(value);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        return -1;
    }
    if (v > 0xffffffffULL) {
        PyErr_Format(PyExc_ValueError, "%s does not fit 32 bits", what);
        return -1;
    }
    return (int64_t)v;
}

/* A row of _PlainMetadata.rows: the metadata's head, its size and the carried CRC. */
typedef struct {
    const char *head;
    Py_ssize_t head_size;
    uint32_t size;
    uint32_t carried;
} Row;

/* Reads a (head: bytes, size, carried) tuple into *out: 0, or -1 with an exception set
 * for a row of any other shape. */
static int
row_of(PyObject *row, Row *out)
{
    if (!PyTuple_CheckExact(row) || PyTuple_GET_SIZE(row) != 3 ||
        !PyBytes_CheckExact(PyTuple_GET_ITEM(row, 0))) {
        PyErr_SetString(PyExc_TypeError, "a row must be a (head: bytes, size, carried) tuple");
        return -1;
    }
    int64_t size = u32_of(PyTuple_GET_ITEM(row, 1), "a row's metadata size");
    if (size < 0) {
        return -1;
    }
    int64_t carried = u32_of(PyTuple_GET_ITEM(row, 2), "a row's carried CRC");
    if (carried < 0) {
        return -1;
    }
    PyObject *head = PyTuple_GET_ITEM(row, 0);
    out->head = PyBytes_AS_STRING(head);
    out->head_size = PyBytes_GET_SIZE(head);
    out->size = (uint32_t)size;
    out->carried = (uint32_t)carried;
    return 0;
}

/* The arguments encode_rows and encode_rows_b64 share: rows, the list of payloads or
 * texts, the tail and its CRC. */
typedef struct {
    PyObject *rows;
    PyObject *items;
    const char *tail;
    Py_ssize_t tail_size;
    Py_ssize_t count;
    uint32_t tail_crc;
} RowsCall;

/* Writes an entry's magic, checksum, metadata size, head and tail at out; returns where
 * its payload goes. */
static char *
put_entry_head(char *out, uint32_t checksum, const Row *row, const RowsCall *call)
{
    out[0] = MAGIC_0;
    out[1] = MAGIC_1;
    put_u32_be(out + 2, checksum);
    put_u32_be(out + 6, row->size);
    out += HEAD_SIZE;
    memcpy(out, row->head, (size_t)row->head_size);
    out += row->head_size;
    memcpy(out, call->tail, (size_t)call->tail_size);
    return out + call->tail_size;
}

/* Reads (rows, items, tail, tail_crc) into *call: 0, or -1 with an exception set for
 * arguments of any other shape (lists of unequal length among them). */
static int
rows_call_of(const char *name, PyObject *const *args, Py_ssize_t nargs, RowsCall *call)
{
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "%s takes 4 arguments (%zd given)", name, nargs);
        return -1;
    }
    PyObject *rows = args[0], *items = args[1], *tail = args[2];
    if (!PyList_CheckExact(rows) || !PyList_CheckExact(items)) {
        PyErr_Format(PyExc_TypeError, "%s: rows and its second argument must be lists", name);
        return -1;
    }
    if (!PyBytes_CheckExact(tail)) {
        PyErr_SetString(PyExc_TypeError, "tail must be bytes");
        return -1;
    }
    int64_t tail_crc = u32_of(args[3], "tail_crc");
    if (tail_crc < 0) {
        return -1;
    }
    if (PyList_GET_SIZE(rows) != PyList_GET_SIZE(items)) {
        PyErr_Format(PyExc_ValueError, "%s: the lists differ in length", name);
        return -1;
    }
    call->rows = rows;
    call->items = items;
    call->tail = PyBytes_AS_STRING(tail);
    call->tail_size = PyBytes_GET_SIZE(tail);
    call->count = PyList_GET_SIZE(items);
    call->tail_crc = (uint32_t)tail_crc;
    return 0;
}

/* The call's result list, of its count of unset items; NULL with an exception set.
 * Allocating it may run a garbage collection, and with it Python code (a __del__, a
 * weakref callback) that changes the lists: their lengths are checked again. Nothing
 * the callers do after runs Python code (exact types only; bytes objects are not
 * tracked by the collector), so the lists cannot change under their loops. */
static PyObject *
new_entries(const char *name, const RowsCall *call)
{
    PyObject *entries = PyList_New(call->count);
    if (entries == NULL) {
        return NULL;
    }
    if (PyList_GET_SIZE(call->items) != call->count ||
        PyList_GET_SIZE(call->rows) != call->count) {
        Py_DECREF(entries);
        PyErr_Format(PyExc_RuntimeError, "the lists changed during %s", name);
        return NULL;
    }
    return entries;
}

PyDoc_STRVAR(encode_rows_doc,
             "encode_rows(rows, payloads, tail, tail_crc) -> list[bytes]\n\n"
             "One entry per payload: rows[i] is (head, metadata size, carried CRC) of\n"
             "_PlainMetadata.rows; entry i is magic | crc32c(payload, carried ^\n"
             "tail_crc) | size | head | tail | payload. rows and payloads are lists of\n"
             "equal length, heads, tail and payloads bytes. O(total payload bytes).");

static PyObject *
encode_rows(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    RowsCall call;
    if (rows_call_of("encode_rows", args, nargs, &call) < 0) {
        return NULL;
    }
    PyObject *entries = new_entries("encode_rows", &call);
    if (entries == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < call.count; i++) {
        PyObject *payload = PyList_GET_ITEM(call.items, i);
        Row row;
        if (row_of(PyList_GET_ITEM(call.rows, i), &row) < 0) {
            goto fail;
        }
        if (!PyBytes_CheckExact(payload)) {
            PyErr_SetString(PyExc_TypeError, "payloads must be bytes");
            goto fail;
        }
        const char *payload_bytes = PyBytes_AS_STRING(payload);
        Py_ssize_t payload_size = PyBytes_GET_SIZE(payload);
        PyObject *entry = PyBytes_FromStringAndSize(
            NULL, HEAD_SIZE + row.head_size + call.tail_size + payload_size);
        if (entry == NULL) {
            goto fail;
        }
        uint32_t checksum = crc32c_continue(row.carried ^ call.tail_crc,
                                            (const unsigned char *)payload_bytes,
                                            (size_t)payload_size);
        char *out = put_entry_head(PyBytes_AS_STRING(entry), checksum, &row, &call);
        memcpy(out, payload_bytes, (size_t)payload_size);
        PyList_SET_ITEM(entries, i, entry);
    }
    return entries;
fail:
    Py_DECREF(entries); /* unset items are NULL, which the list's dealloc skips */
    return NULL;
}

/*
 * Decoding base64 payloads straight into their entries.
 *
 * The produce route's payloads come as base64 texts. Decoding each into a bytes object
 * and copying that into its entry costs an allocation, a free and a copy a message, and
 * a Python call; encode_rows_b64 decodes each text into the entry itself, and
 * encode_batch_b64 each of a batch's texts into the one entry, after its framing, with
 * the entry allocated once at its size. The decoder is
 * libbase64's base64_decode (SIMD, chosen for the CPU at run time), the one pybase64
 * runs: pybase64's extension module exports it, and bind_base64 finds it there with
 * dlsym, as storage_stub.bookie._writer finds ISA-L's CRC-32.
 *
 * What this accepts the broker's strict decoding (broker.http.b64) accepts, with the same
 * bytes: a text must be an exact str of ASCII characters whose length is a multiple of
 * 4, base64_decode (flags 0: the standard alphabet, '=' only as the last one or two
 * characters) must accept it, and it must have produced exactly 3 bytes per 4 characters
 * less one per '=' at the end, which no character outside the alphabet can. For anything
 * else they answer None and the caller decodes its own way, which then decides.
 *
 * base64_decode writes at most 3 bytes per 4 characters of its input, '=' included
 * (checked for every codec libbase64 has, against canaries and guard pages, by an
 * independent review): so a payload with padding gets that much room, cut after.
 */
typedef int (*base64_decode_function)(const char *src, size_t srclen, char *out,
                                      size_t *outlen, int flags);
static base64_decode_function base64_decode_fn = NULL;

PyDoc_STRVAR(bind_base64_doc,
             "bind_base64(path: str) -> None\n\n"
             "Find libbase64's base64_decode in the shared library at path (pybase64's\n"
             "extension module, already loaded) for encode_rows_b64 and encode_batch_b64.\n"
             "OSError if it is not there, ValueError for an empty path or one with a NUL.");

static PyObject *
bind_base64(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 1 || !PyUnicode_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "bind_base64(path: str)");
        return NULL;
    }
    Py_ssize_t size = 0;
    const char *path = PyUnicode_AsUTF8AndSize(args[0], &size);
    if (path == NULL) {
        return NULL;
    }
    if ((size_t)size != strlen(path) || size == 0) { /* a NUL inside, or "": the program */
        PyErr_SetString(PyExc_ValueError, "bind_base64: not a library's path");
        return NULL;
    }
    /* The handle is never closed: the function stays in use for the process's life. */
    void *library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) {
        PyErr_Format(PyExc_OSError, "cannot open %s: %s", path, dlerror());
        return NULL;
    }
    void *found = dlsym(library, "base64_decode");
    if (found == NULL) {
        PyErr_Format(PyExc_OSError, "no base64_decode in %s", path);
        dlclose(library);
        return NULL;
    }
    base64_decode_fn = (base64_decode_function)found;
    Py_RETURN_NONE;
}

/* The payload size of a text that may be canonical base64 (a multiple of 4 characters,
 * less one byte per '=' at its end), or -1 for one that cannot be. */
static Py_ssize_t
decoded_size(const char *text, Py_ssize_t length)
{
    if (length % 4 != 0) {
        return -1;
    }
    Py_ssize_t size = length / 4 * 3;
    if (length > 0 && text[length - 1] == '=') {
        size -= text[length - 2] == '=' ? 2 : 1;
    }
    return size;
}

/* The text's characters if it is an exact str stored one byte a character (ASCII), with
 * its length and its payload's size as decoded_size gives it; NULL for any other text. */
static const char *
b64_text(PyObject *text, Py_ssize_t *length, Py_ssize_t *payload_size)
{
    if (!PyUnicode_CheckExact(text) || !PyUnicode_IS_COMPACT_ASCII(text)) {
        return NULL;
    }
    const char *source = (const char *)PyUnicode_DATA(text);
    *length = PyUnicode_GET_LENGTH(text);
    *payload_size = decoded_size(source, *length);
    return *payload_size < 0 ? NULL : source;
}

PyDoc_STRVAR(encode_rows_b64_doc,
             "encode_rows_b64(rows, texts, tail, tail_crc) -> list[bytes] | None\n\n"
             "encode_rows(rows, [base64 decode of t for t in texts], tail, tail_crc),\n"
             "decoding each text straight into its entry; None if any text is not\n"
             "canonical base64 in an ASCII str (or bind_base64 was not called). rows and\n"
             "texts are lists of equal length. O(total text length).");

static PyObject *
encode_rows_b64(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    RowsCall call;
    if (rows_call_of("encode_rows_b64", args, nargs, &call) < 0) {
        return NULL;
    }
    if (base64_decode_fn == NULL) {
        Py_RETURN_NONE;
    }
    PyObject *entries = new_entries("encode_rows_b64", &call);
    if (entries == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < call.count; i++) {
        PyObject *text = PyList_GET_ITEM(call.items, i);
        Row row;
        if (row_of(PyList_GET_ITEM(call.rows, i), &row) < 0) {
            goto fail;
        }
        Py_ssize_t length, payload_size;
        const char *source = b64_text(text, &length, &payload_size);
        if (source == NULL) {
            goto refuse;
        }
        Py_ssize_t payload_at = HEAD_SIZE + row.head_size + call.tail_size;
        /* base64_decode may write up to 3 bytes per 4 characters, '=' included: the
         * entry has room for that and is cut to its size after. */
        PyObject *entry = PyBytes_FromStringAndSize(NULL, payload_at + length / 4 * 3);
        if (entry == NULL) {
            goto fail;
        }
        size_t decoded = 0;
        if (base64_decode_fn(source, (size_t)length, PyBytes_AS_STRING(entry) + payload_at,
                             &decoded, 0) != 1 ||
            decoded != (size_t)payload_size) {
            Py_DECREF(entry);
            goto refuse;
        }
        if (payload_size != length / 4 * 3 &&
            _PyBytes_Resize(&entry, payload_at + payload_size) < 0) {
            goto fail; /* _PyBytes_Resize released the entry */
        }
        char *out = PyBytes_AS_STRING(entry);
        uint32_t checksum = crc32c_continue(row.carried ^ call.tail_crc,
                                            (const unsigned char *)out + payload_at,
                                            (size_t)payload_size);
        put_entry_head(out, checksum, &row, &call);
        PyList_SET_ITEM(entries, i, entry);
    }
    return entries;
refuse:
    Py_DECREF(entries);
    Py_RETURN_NONE;
fail:
    Py_DECREF(entries);
    return NULL;
}

PyDoc_STRVAR(decoded_sizes_doc,
             "decoded_sizes(texts: list) -> list[int] | None\n\n"
             "The payload size each base64 text decodes to if it is canonical: 3 bytes a\n"
             "quad less one a trailing '='. None if a text is not an ASCII str of whole\n"
             "quads. Its characters are not checked: for a text that is not canonical\n"
             "the size means nothing, and encode_batch_b64 refuses the text (its decoding\n"
             "does not come to that size). O(len(texts)).");

static PyObject *
decoded_sizes(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 1 || !PyList_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "decoded_sizes(texts: list)");
        return NULL;
    }
    PyObject *texts = args[0];
    PyObject *sizes = PyList_New(PyList_GET_SIZE(texts));
    if (sizes == NULL) {
        return NULL;
    }
    /* Only ints are made below (their allocation runs no collection); the list's own
     * allocation may have, so its length is the one read from here on. */
    Py_ssize_t count = PyList_GET_SIZE(sizes);
    if (PyList_GET_SIZE(texts) != count) {
        Py_DECREF(sizes);
        PyErr_SetString(PyExc_RuntimeError, "texts changed during decoded_sizes");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t length, payload_size;
        if (b64_text(PyList_GET_ITEM(texts, i), &length, &payload_size) == NULL) {
            Py_DECREF(sizes);
            Py_RETURN_NONE;
        }
        PyObject *size = PyLong_FromSsize_t(payload_size);
        if (size == NULL) {
            Py_DECREF(sizes);
            return NULL;
        }
        PyList_SET_ITEM(sizes, i, size);
    }
    return sizes;
}

PyDoc_STRVAR(encode_batch_b64_doc,
             "encode_batch_b64(metadata, framing, texts) -> bytes | None\n\n"
             "The entry of serialized MessageMetadata and a batch whose message i is\n"
             "framing[i] then the base64 decode of texts[i], each decoded straight into\n"
             "the entry: entry_of(metadata, b''.join(f + decode(t) ...)). None if a text\n"
             "is not canonical base64 in an ASCII str (or bind_base64 was not called).\n"
             "framing and texts are lists of equal length. O(total text length).");

static PyObject *
encode_batch_b64(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 3 || !PyBytes_CheckExact(args[0]) || !PyList_CheckExact(args[1]) ||
        !PyList_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError,
                        "encode_batch_b64(metadata: bytes, framing: list, texts: list)");
        return NULL;
    }
    PyObject *metadata = args[0], *framing = args[1], *texts = args[2];
    Py_ssize_t count = PyList_GET_SIZE(texts);
    if (PyList_GET_SIZE(framing) != count) {
        PyErr_SetString(PyExc_ValueError, "framing and texts differ in length");
        return NULL;
    }
    if (base64_decode_fn == NULL) {
        Py_RETURN_NONE;
    }
    /* The entry's size, and room past its end for a payload's decoding, which may take
     * 3 bytes a quad, '=' included: up to 2 bytes more than the payload. Whatever a
     * payload writes past its end before the entry's end is overwritten by what comes
     * after it (the next framing and payload are written after it); the room takes
     * what would go past the entry's end, for any payload (the framing after a payload
     * may be empty). A list may hold one object many times, so the sum is checked. */
    Py_ssize_t metadata_size = PyBytes_GET_SIZE(metadata);
    Py_ssize_t size = HEAD_SIZE + metadata_size, room = 0;
    if (metadata_size > (Py_ssize_t)0xffffffff) {
        PyErr_SetString(PyExc_ValueError, "metadata does not fit 32 bits");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *frame = PyList_GET_ITEM(framing, i);
        if (!PyBytes_CheckExact(frame)) {
            PyErr_SetString(PyExc_TypeError, "framing must be bytes");
            return NULL;
        }
        Py_ssize_t length, payload_size;
        if (b64_text(PyList_GET_ITEM(texts, i), &length, &payload_size) == NULL) {
            Py_RETURN_NONE;
        }
        Py_ssize_t part = PyBytes_GET_SIZE(frame) + payload_size; /* both in memory */
        if (size > PY_SSIZE_T_MAX - 2 - part) {
            return PyErr_NoMemory();
        }
        size += part;
        if (length / 4 * 3 - payload_size > room) {
            room = length / 4 * 3 - payload_size;
        }
    }
    /* Nothing from here runs Python code: the lists cannot change under the loop. */
    PyObject *entry = PyBytes_FromStringAndSize(NULL, size + room);
    if (entry == NULL) {
        return NULL;
    }
    char *start = PyBytes_AS_STRING(entry);
    char *out = start + HEAD_SIZE;
    memcpy(out, PyBytes_AS_STRING(metadata), (size_t)metadata_size);
    out += metadata_size;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *frame = PyList_GET_ITEM(framing, i);
        memcpy(out, PyBytes_AS_STRING(frame), (size_t)PyBytes_GET_SIZE(frame));
        out += PyBytes_GET_SIZE(frame);
        Py_ssize_t length, payload_size;
        const char *source = b64_text(PyList_GET_ITEM(texts, i), &length, &payload_size);
        size_t decoded = 0;
        if (base64_decode_fn(source, (size_t)length, out, &decoded, 0) != 1 ||
            decoded != (size_t)payload_size) {
            Py_DECREF(entry);
            Py_RETURN_NONE;
        }
        out += payload_size;
    }
    if (room != 0 && _PyBytes_Resize(&entry, size) < 0) {
        return NULL; /* _PyBytes_Resize released the entry */
    }
    start = PyBytes_AS_STRING(entry);
    start[0] = MAGIC_0;
    start[1] = MAGIC_1;
    put_u32_be(start + 6, (uint32_t)metadata_size);
    put_u32_be(start + 2, crc32c_continue(0, (const unsigned char *)start + 6,
                                          (size_t)(size - 6)));
    return entry;
}

PyDoc_STRVAR(crc32c_doc,
             "crc32c(data: bytes, value: int = 0) -> int\n\n"
             "CRC32C of data continuing from value, as this module computes it (for\n"
             "tests: it must agree with the crc32c package).");

static PyObject *
crc32c_py(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs < 1 || nargs > 2 || !PyBytes_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "crc32c(data: bytes, value: int = 0)");
        return NULL;
    }
    int64_t value = 0;
    if (nargs == 2) {
        value = u32_of(args[1], "value");
        if (value < 0) {
            return NULL;
        }
    }
    uint32_t crc = crc32c_continue((uint32_t)value,
                                   (const unsigned char *)PyBytes_AS_STRING(args[0]),
                                   (size_t)PyBytes_GET_SIZE(args[0]));
    return PyLong_FromUnsignedLong(crc);
}

/*
 * Walking a batch (the produce path's check of what a client sent, entry.py's
 * check_entry): each message is "size (u32) | SingleMessageMetadata | payload". Most
 * clients write the metadata of a message with no key, properties or event time as
 * "18 varint" (payload_size) and "40 varint" (sequence_id), in that order; such a
 * message is walked here, and the first one of any other kind (or one running past the
 * entry) stops the walk, for entry.py to parse with protobuf and judge.
 */

/* The varint at p (at most max_len bytes, before end): its value in *value and its
 * length, or 0 if it is not a whole varint within those bounds. */
static size_t
read_varint(const unsigned char *p, const unsigned char *end, size_t max_len, uint64_t *value)
{
    uint64_t result = 0;
    for (size_t i = 0; i < max_len && p + i < end; i++) {
        result |= (uint64_t)(p[i] & 0x7f) << (7 * i);
        if (p[i] < 0x80) {
            *value = result;
            return i + 1;
        }
    }
    return 0;
}

PyDoc_STRVAR(walk_plain_batch_doc,
             "walk_plain_batch(data: bytes, offset: int, count: int, /) -> tuple[int, int]\n\n"
             "Walk at most count batch messages of data from offset while each one's\n"
             "SingleMessageMetadata is plain (payload_size, then sequence_id, nothing else)\n"
             "and its payload ends within data: (messages walked, offset after them).");

static PyObject *
walk_plain_batch(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 3 || !PyBytes_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "walk_plain_batch(data: bytes, offset: int, count: int)");
        return NULL;
    }
    Py_ssize_t offset = PyLong_AsSsize_t(args[1]);
    Py_ssize_t count = PyLong_AsSsize_t(args[2]);
    if ((offset == -1 || count == -1) && PyErr_Occurred()) {
        return NULL;
    }
    Py_ssize_t size = PyBytes_GET_SIZE(args[0]);
    if (offset < 0 || offset > size || count < 0) {
        PyErr_SetString(PyExc_ValueError, "offset or count out of range");
        return NULL;
    }
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    const unsigned char *end = data + size;
    const unsigned char *p = data + offset;
    Py_ssize_t walked = 0;
    while (walked < count && end - p >= 4) {
        uint32_t meta_size = ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) |
                             ((uint32_t)p[2] << 8) | (uint32_t)p[3];
        const unsigned char *meta = p + 4;
        if ((uint64_t)meta_size > (uint64_t)(end - meta) || meta_size < 2 || meta[0] != 0x18) {
            break;
        }
        const unsigned char *meta_end = meta + meta_size;
        uint64_t payload_size = 0;
        uint64_t sequence_id = 0;
        size_t n = read_varint(meta + 1, meta_end, 5, &payload_size);
        if (n == 0 || payload_size > 0x7fffffff) {
            break;
        }
        const unsigned char *q = meta + 1 + n;
        if (q >= meta_end || q[0] != 0x40) {
            break;
        }
        n = read_varint(q + 1, meta_end, 10, &sequence_id);
        if (n == 0 || q + 1 + n != meta_end || (n == 10 && q[10] > 1)) {
            break;
        }
        if (payload_size > (uint64_t)(end - meta_end)) {
            break;
        }
        p = meta_end + payload_size;
        walked++;
    }
    return Py_BuildValue("(nn)", walked, (Py_ssize_t)(p - data));
}

/*
 * plain_fields: entry.py's _plain_fields_py, for the produce path's check of every
 * unbatched SEND (about 150 bytecodes there). The same answers, byte for byte: the
 * tests hold the two to it.
 */
PyDoc_STRVAR(plain_fields_doc,
             "plain_fields(data) -> tuple[str, int, int, int] | int | None\n\n"
             "(producer name, sequence id, publish time, metadata end) when the entry's\n"
             "metadata is exactly 0a len name | 10 varint | 18 varint (a name of at most\n"
             "127 bytes of UTF-8, a sequence id of one varint byte or two in canonical\n"
             "form, a publish time of one to nine varint bytes); None for any other\n"
             "metadata; 1 for bytes that are not an entry (no magic), 2 for metadata that\n"
             "runs past the entry. O(metadata size).");

static PyObject *
plain_fields(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 1 || !PyBytes_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "plain_fields(data: bytes)");
        return NULL;
    }
    Py_ssize_t size = PyBytes_GET_SIZE(args[0]);
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    if (size < HEAD_SIZE || data[0] != MAGIC_0 || data[1] != MAGIC_1) {
        return PyLong_FromLong(1);
    }
    uint32_t meta_size = ((uint32_t)data[6] << 24) | ((uint32_t)data[7] << 16) |
                         ((uint32_t)data[8] << 8) | (uint32_t)data[9];
    if ((uint64_t)HEAD_SIZE + meta_size > (uint64_t)size) {
        return PyLong_FromLong(2);
    }
    const Py_ssize_t start = HEAD_SIZE;
    const Py_ssize_t end = HEAD_SIZE + (Py_ssize_t)meta_size;
    if (end - start < 6 || data[start] != 0x0A || data[start + 1] >= 0x80) {
        Py_RETURN_NONE;
    }
    const Py_ssize_t name_length = data[start + 1];
    const Py_ssize_t name_end = start + 2 + name_length;
    if (name_end + 4 > end || data[name_end] != 0x10) {
        Py_RETURN_NONE;
    }
    Py_ssize_t position = name_end + 1;
    long sequence_id;
    if (data[position] < 0x80) {
        sequence_id = data[position];
        position += 1;
    } else {
        /* two bytes in canonical form only (the second 1..0x7f), as the Python table */
        unsigned char second = data[position + 1];
        if (second == 0 || second >= 0x80) {
            Py_RETURN_NONE;
        }
        sequence_id = (long)(data[position] & 0x7F) | ((long)second << 7);
        position += 2;
    }
    if (position + 1 >= end || data[position] != 0x18) {
        Py_RETURN_NONE;
    }
    /* the rest is exactly one varint of one to nine bytes */
    const Py_ssize_t tail = position + 1;
    const Py_ssize_t tail_length = end - tail;
    if (tail_length > 9) {
        Py_RETURN_NONE;
    }
    uint64_t publish_time = 0;
    for (Py_ssize_t i = 0; i < tail_length; i++) {
        unsigned char byte = data[tail + i];
        if ((byte < 0x80) != (i == tail_length - 1)) {
            Py_RETURN_NONE;
        }
        publish_time |= (uint64_t)(byte & 0x7F) << (7 * i);
    }
    PyObject *name = PyUnicode_DecodeUTF8((const char *)data + start + 2, name_length, "strict");
    if (name == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
            return NULL;
        }
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    return Py_BuildValue("(NlKn)", name, sequence_id, (unsigned long long)publish_time, end);
}

static PyMethodDef methods[] = {
    {"walk_plain_batch", (PyCFunction)(void (*)(void))walk_plain_batch, METH_FASTCALL,
     walk_plain_batch_doc},
    {"encode_rows", (PyCFunction)(void (*)(void))encode_rows, METH_FASTCALL, encode_rows_doc},
    {"encode_rows_b64", (PyCFunction)(void (*)(void))encode_rows_b64, METH_FASTCALL,
     encode_rows_b64_doc},
    {"encode_batch_b64", (PyCFunction)(void (*)(void))encode_batch_b64, METH_FASTCALL,
     encode_batch_b64_doc},
    {"decoded_sizes", (PyCFunction)(void (*)(void))decoded_sizes, METH_FASTCALL,
     decoded_sizes_doc},
    {"bind_base64", (PyCFunction)(void (*)(void))bind_base64, METH_FASTCALL, bind_base64_doc},
    {"crc32c", (PyCFunction)(void (*)(void))crc32c_py, METH_FASTCALL, crc32c_doc},
    {"plain_fields", (PyCFunction)(void (*)(void))plain_fields, METH_FASTCALL, plain_fields_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "broker.ledger._entries",
    "Compiled per-message loop of broker.ledger.entry.encode_payloads (x86-64, SSE4.2).",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__entries(void)
{
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("sse4.2")) {
        PyErr_SetString(PyExc_ImportError, "broker.ledger._entries needs SSE4.2");
        return NULL;
    }
    build_shift_tables();
    return PyModule_Create(&module_def);
}
