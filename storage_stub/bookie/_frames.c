/*
 * storage_stub.bookie._frames: an entry log frame's header, and its copy into the
 * direct I/O buffer, compiled.
 *
 * A frame (see entry_log.py) is one add call's entries behind a header
 *
 *     crc (u32) | ledger id (u64) | first entry id (i64) | count (u32) |
 *     payload bytes (u64) | count x entry length (u32)
 *
 * all big-endian; the CRC is left 0 here and filled in later (Frame.seal, or the entry
 * log writer thread over the frame's copy). In Python, building a 100-entry header is
 * a list of lengths, a sum and two struct packs (about 4 us), and copying a frame into
 * the aligned buffer is a join of header and entries into a new bytes object and a
 * second copy of that into the buffer; here the header is one pass over the entries and
 * the copy one memcpy an entry, straight into the buffer.
 *
 * Also total_size, the summed length of a list of entries: sum(map(len, entries)) makes
 * an int object per entry (lengths over 256 are not cached), about 2.3 us for 100.
 *
 * entry_log.py stays the reference: it uses this module when it imports and its own
 * code otherwise, and the tests hold the two to the same bytes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#define FIXED_SIZE 32 /* crc 4, ledger id 8, first entry id 8, count 4, payload bytes 8 */
#define LENGTH_SIZE 4

static void
put_be(unsigned char *p, uint64_t value, int size)
{
    for (int i = size - 1; i >= 0; i--) {
        p[i] = (unsigned char)value;
        value >>= 8;
    }
}

/* The entries as a list or tuple whose items are all exact bytes: a new reference to
 * the sequence, or NULL with TypeError. */
static PyObject *
bytes_items(PyObject *entries)
{
    if (!PyList_CheckExact(entries) && !PyTuple_CheckExact(entries)) {
        PyErr_SetString(PyExc_TypeError, "entries must be a list or tuple of bytes");
        return NULL;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(entries);
    PyObject **items = PySequence_Fast_ITEMS(entries);
    for (Py_ssize_t i = 0; i < count; i++) {
        if (!PyBytes_CheckExact(items[i])) {
            PyErr_SetString(PyExc_TypeError, "entries must be a list or tuple of bytes");
            return NULL;
        }
    }
    Py_INCREF(entries);
    return entries;
}

PyDoc_STRVAR(frame_header_doc,
             "frame_header(ledger_id, first_entry_id, entries) -> (bytearray, int)\n\n"
             "The frame header of entries (a list or tuple of 1 to 2**32 - 1 bytes\n"
             "objects), its CRC 0, and their total size. ledger_id in [0, 2**64),\n"
             "first_entry_id in [-2**63, 2**63). O(entries).");

static PyObject *
frame_header(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "frame_header takes 3 arguments (%zd given)", nargs);
        return NULL;
    }
    if (!PyLong_CheckExact(args[0]) || !PyLong_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "ledger_id and first_entry_id must be ints");
        return NULL;
    }
    unsigned long long ledger_id = PyLong_AsUnsignedLongLong(args[0]);
    if (ledger_id == (unsigned long long)-1 && PyErr_Occurred()) {
        return NULL;
    }
    long long first_entry_id = PyLong_AsLongLong(args[1]);
    if (first_entry_id == -1 && PyErr_Occurred()) {
        return NULL;
    }
    PyObject *entries = bytes_items(args[2]);
    if (entries == NULL) {
        return NULL;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(entries);
    if (count < 1 || (unsigned long long)count > 0xffffffffULL) {
        Py_DECREF(entries);
        PyErr_Format(PyExc_ValueError, "a frame holds 1 to 4294967295 entries, not %zd", count);
        return NULL;
    }
    PyObject *header = PyByteArray_FromStringAndSize(NULL, FIXED_SIZE + LENGTH_SIZE * count);
    if (header == NULL) {
        Py_DECREF(entries);
        return NULL;
    }
    unsigned char *out = (unsigned char *)PyByteArray_AS_STRING(header);
    PyObject **items = PySequence_Fast_ITEMS(entries);
    uint64_t payload_bytes = 0;
    unsigned char *lengths = out + FIXED_SIZE;
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t size = PyBytes_GET_SIZE(items[i]);
        if ((unsigned long long)size > 0xffffffffULL) {
            Py_DECREF(entries);
            Py_DECREF(header);
            PyErr_SetString(PyExc_ValueError, "an entry's length does not fit 32 bits");
            return NULL;
        }
        put_be(lengths + LENGTH_SIZE * i, (uint64_t)size, LENGTH_SIZE);
        payload_bytes += (uint64_t)size;
    }
    Py_DECREF(entries);
    put_be(out, 0, 4);
    put_be(out + 4, ledger_id, 8);
    put_be(out + 12, (uint64_t)first_entry_id, 8);
    put_be(out + 20, (uint64_t)count, 4);
    put_be(out + 24, payload_bytes, 8);
    PyObject *total = PyLong_FromUnsignedLongLong(payload_bytes);
    if (total == NULL) {
        Py_DECREF(header);
        return NULL;
    }
    PyObject *result = PyTuple_Pack(2, header, total);
    Py_DECREF(header);
    Py_DECREF(total);
    return result;
}

PyDoc_STRVAR(copy_frame_doc,
             "copy_frame(buffer, position, header, entries) -> int\n\n"
             "Copy header (any bytes-like object) and then each of entries (a list or\n"
             "tuple of bytes) into the writable buffer from position on; return where\n"
             "the copy ends. ValueError, and nothing copied, if it would not fit.\n"
             "O(bytes copied).");

static PyObject *
copy_frame(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "copy_frame takes 4 arguments (%zd given)", nargs);
        return NULL;
    }
    Py_ssize_t position = PyNumber_AsSsize_t(args[1], PyExc_OverflowError);
    if (position == -1 && PyErr_Occurred()) {
        return NULL;
    }
    /* The buffers first: getting one may run Python code (a __buffer__ method), which
     * must not run between the entries' check and the copy. */
    Py_buffer buffer, header;
    if (PyObject_GetBuffer(args[0], &buffer, PyBUF_WRITABLE) < 0) {
        return NULL;
    }
    if (PyObject_GetBuffer(args[2], &header, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&buffer);
        return NULL;
    }
    PyObject *entries = bytes_items(args[3]);
    if (entries == NULL) {
        PyBuffer_Release(&header);
        PyBuffer_Release(&buffer);
        return NULL;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(entries);
    PyObject **items = PySequence_Fast_ITEMS(entries);
    Py_ssize_t size = header.len;
    for (Py_ssize_t i = 0; i < count; i++) {
        size += PyBytes_GET_SIZE(items[i]);
    }
    PyObject *result = NULL;
    if (position < 0 || position > buffer.len || size > buffer.len - position) {
        PyErr_Format(PyExc_ValueError, "a frame of %zd bytes at %zd overruns a buffer of %zd",
                     size, position, buffer.len);
    } else {
        char *out = (char *)buffer.buf + position;
        memmove(out, header.buf, (size_t)header.len); /* a header may view the buffer */
        out += header.len;
        for (Py_ssize_t i = 0; i < count; i++) {
            Py_ssize_t length = PyBytes_GET_SIZE(items[i]);
            memcpy(out, PyBytes_AS_STRING(items[i]), (size_t)length);
            out += length;
        }
        result = PyLong_FromSsize_t(position + size);
    }
    PyBuffer_Release(&header);
    PyBuffer_Release(&buffer);
    Py_DECREF(entries);
    return result;
}

PyDoc_STRVAR(total_size_doc,
             "total_size(entries) -> int\n\n"
             "The summed length of entries (a list or tuple of bytes), without the int\n"
             "object per entry that sum(map(len, entries)) makes. O(entries).");

static PyObject *
total_size(PyObject *module, PyObject *entries)
{
    (void)module;
    PyObject *items = bytes_items(entries);
    if (items == NULL) {
        return NULL;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(items);
    PyObject **item = PySequence_Fast_ITEMS(items);
    unsigned long long total = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        total += (unsigned long long)PyBytes_GET_SIZE(item[i]);
    }
    Py_DECREF(items);
    return PyLong_FromUnsignedLongLong(total);
}

static PyMethodDef methods[] = {
    {"total_size", (PyCFunction)total_size, METH_O, total_size_doc},
    {"frame_header", (PyCFunction)(void (*)(void))frame_header, METH_FASTCALL, frame_header_doc},
    {"copy_frame", (PyCFunction)(void (*)(void))copy_frame, METH_FASTCALL, copy_frame_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "storage_stub.bookie._frames",
    "Entry log frame headers and their copy into the direct I/O buffer, compiled.",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__frames(void)
{
    return PyModule_Create(&module_def);
}
