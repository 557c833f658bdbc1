/*
 * storage_stub.bookie._writer: the entry log's direct I/O writes on a thread that never
 * takes the GIL.
 *
 * With dbStorage_directIOEntryLogger the bookie copies each group of adds into one
 * page-aligned buffer, fills in the frames' CRCs and writes the buffer with one O_DIRECT
 * pwrite (entry_log.py, EntryLogger.plan_direct). Done on the event loop, the copy alone
 * costs the loop as much as a tenth of a produce request's CPU; a Python thread that did
 * it would fight the loop for the GIL on every call. Here a plain POSIX thread does the
 * copy, the CRCs (ISA-L's where Writer() is given its library, else zlib's) and the
 * pwrite, touching no Python object: the loop hands it raw pointers to the payloads,
 * holds a reference to every payload until the write is collected, and hears of the end
 * through an eventfd. A forked child's copy of a Writer has no thread: it refuses
 * writes.
 *
 * One job at a time (the bookie's group committer has one group out at a time):
 *
 *     submit(buffer, fd, offset, length, copies, seals)   loop: queue the write
 *     submit_fsync(fds)                                   loop: or queue fsyncs
 *     ... the eventfd becomes readable ...
 *     collect() -> errno or None                         loop: 0 when done
 *
 * submit_fsync has the thread fsync each descriptor in turn, stopping at the first
 * failure: syncMode=batch gives the fsyncs of a group (its entry logs) to a second
 * Writer, so that neither the loop nor a Python thread waits on the device, nor a Python
 * thread on the GIL after the device answers.
 *
 * copies: (position, header, entries) per frame: header (bytes or bytearray, copied on
 * the loop: it is small and may be mutable) and then each of entries (a list or tuple of
 * bytes, copied on the thread) are placed one after another from position on. seals:
 * (start, end) per frame whose CRC is filled in (big-endian, over buffer[start+4:end],
 * into buffer[start:start+4]) after the copies. Then buffer[0:length] is written to fd
 * at offset, retrying short writes.
 *
 * While a write is out, the buffer stays exported (an mmap then refuses to close or
 * resize) and every payload stays referenced; collect() releases them on the loop, where
 * the GIL is held. close() lets a queued write finish and joins the thread; the write
 * is still collected after it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/types.h>
#include <unistd.h>
#include <zlib.h>

typedef struct {
    char *to;
    const char *from;
    size_t length;
} Copy;

typedef struct {
    Py_ssize_t start;
    Py_ssize_t end;
} Seal;

enum { IDLE, QUEUED, DONE };

enum { WRITE, FSYNC }; /* what a queued job is */

/* ISA-L's CRC-32 (gzip's, reflected: the same value as zlib's crc32 from 0), about 15
 * times faster here than zlib's; found in the library that Writer() is given. */
typedef uint32_t (*crc_function)(uint32_t, const unsigned char *, uint64_t);

typedef struct {
    PyObject_HEAD
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t thread;
    int started;  /* the thread was started and is not joined yet */
    int stopping; /* close asked the thread to end (no submit is taken after) */
    pid_t owner;  /* the process that started it: a forked child has no thread */
    int event_fd;
    int state; /* IDLE, QUEUED (the thread's), DONE (the loop's to collect) */
    int kind;  /* WRITE, FSYNC */
    int *sync_fds; /* FSYNC: the descriptors, fsynced in order */
    Py_ssize_t sync_count, sync_capacity;
    /* the write; the loop fills it in while IDLE, the thread reads it while QUEUED */
    Py_buffer buffer;
    int fd;
    off_t offset;
    size_t length;
    Copy *copies;
    Py_ssize_t copy_count, copy_capacity;
    Seal *seals;
    Py_ssize_t seal_count, seal_capacity;
    PyObject **held; /* the payloads, referenced until collect */
    Py_ssize_t held_count, held_capacity;
    int error; /* the write's errno, 0 when written */
    crc_function isal_crc; /* NULL: zlib's */
    void *library;         /* the dlopen handle isal_crc came from */
} Writer;

/* Grow *array (of item_size items, *capacity of them) to hold at least need; 0, or -1
 * with MemoryError. */
static int
reserve(void **array, Py_ssize_t *capacity, Py_ssize_t need, size_t item_size)
{
    if (need <= *capacity) {
        return 0;
    }
    Py_ssize_t grown = *capacity > 0 ? *capacity : 16;
    while (grown < need) {
        grown *= 2;
    }
    void *bigger = PyMem_Realloc(*array, (size_t)grown * item_size);
    if (bigger == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    *array = bigger;
    *capacity = grown;
    return 0;
}

/* The thread, FSYNC: fsync each descriptor in turn; the first failure's errno. */
static int
perform_fsync(Writer *self)
{
    for (Py_ssize_t i = 0; i < self->sync_count; i++) {
        while (fsync(self->sync_fds[i]) < 0) {
            if (errno != EINTR) {
                return errno ? errno : EIO;
            }
        }
    }
    return 0;
}

/* The thread: the copies, the seals, the pwrite. No Python object is touched. */
static int
perform(Writer *self)
{
    if (self->kind == FSYNC) {
        return perform_fsync(self);
    }
    for (Py_ssize_t i = 0; i < self->copy_count; i++) {
        memcpy(self->copies[i].to, self->copies[i].from, self->copies[i].length);
    }
    unsigned char *base = (unsigned char *)self->buffer.buf;
    for (Py_ssize_t i = 0; i < self->seal_count; i++) {
        unsigned char *frame = base + self->seals[i].start;
        size_t size = (size_t)(self->seals[i].end - self->seals[i].start - 4);
        uint32_t crc = self->isal_crc != NULL ? self->isal_crc(0, frame + 4, size)
                                              : (uint32_t)crc32_z(0L, frame + 4, size);
        frame[0] = (unsigned char)(crc >> 24);
        frame[1] = (unsigned char)(crc >> 16);
        frame[2] = (unsigned char)(crc >> 8);
        frame[3] = (unsigned char)crc;
    }
    size_t written = 0;
    while (written < self->length) {
        ssize_t count = pwrite(self->fd, (char *)base + written, self->length - written,
                               self->offset + (off_t)written);
        if (count < 0) {
            if (errno == EINTR) {
                continue;
            }
            return errno ? errno : EIO;
        }
        if (count == 0) {
            return EIO; /* no progress */
        }
        written += (size_t)count;
    }
    return 0;
}

static void *
run(void *argument)
{
    Writer *self = (Writer *)argument;
    pthread_mutex_lock(&self->lock);
    for (;;) {
        while (self->state != QUEUED && !self->stopping) {
            pthread_cond_wait(&self->wake, &self->lock);
        }
        if (self->state != QUEUED) {
            break; /* stopping, nothing queued */
        }
        pthread_mutex_unlock(&self->lock);
        int error = perform(self);
        pthread_mutex_lock(&self->lock);
        self->error = error;
        self->state = DONE;
        uint64_t one = 1;
        while (write(self->event_fd, &one, sizeof one) < 0 && errno == EINTR) {
        }
    }
    pthread_mutex_unlock(&self->lock);
    return NULL;
}

/* The state, read under the lock (the thread moves it from QUEUED to DONE). */
static int
current_state(Writer *self)
{
    pthread_mutex_lock(&self->lock);
    int state = self->state;
    pthread_mutex_unlock(&self->lock);
    return state;
}

/* Drop what a write holds (the loop, the GIL held, the thread not on it). */
static void
release(Writer *self)
{
    for (Py_ssize_t i = 0; i < self->held_count; i++) {
        Py_DECREF(self->held[i]);
    }
    self->held_count = 0;
    self->copy_count = 0;
    self->seal_count = 0;
    self->sync_count = 0;
    if (self->buffer.obj != NULL) {
        PyBuffer_Release(&self->buffer);
    }
    pthread_mutex_lock(&self->lock);
    self->state = IDLE;
    pthread_mutex_unlock(&self->lock);
}

static PyObject *
Writer_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"isal_library", NULL};
    PyObject *library = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:Writer", keywords, &library)) {
        return NULL;
    }
    if (library != Py_None && !PyUnicode_Check(library)) {
        PyErr_SetString(PyExc_TypeError, "isal_library must be a path or None");
        return NULL;
    }
    Writer *self = (Writer *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->event_fd = -1;
    self->owner = getpid();
    pthread_mutex_init(&self->lock, NULL);
    pthread_cond_init(&self->wake, NULL);
    if (library != Py_None) {
        const char *path = PyUnicode_AsUTF8(library);
        if (path == NULL) {
            Py_DECREF(self);
            return NULL;
        }
        /* already loaded by Python (isal.isal_zlib): the same handle, nothing run */
        self->library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (self->library != NULL) {
            self->isal_crc = (crc_function)dlsym(self->library, "crc32_gzip_refl");
        }
    }
    self->event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (self->event_fd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(self);
        return NULL;
    }
    int failed = pthread_create(&self->thread, NULL, run, self);
    if (failed) {
        errno = failed;
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(self);
        return NULL;
    }
    self->started = 1;
    return (PyObject *)self;
}

/* End the thread; a queued write finishes first and is left to collect. */
static void
stop(Writer *self)
{
    if (!self->started || self->owner != getpid()) {
        return; /* never started, already stopped, or a forked child's copy */
    }
    pthread_mutex_lock(&self->lock);
    /* the first caller joins; a caller on another thread meanwhile returns at once */
    int join = !self->stopping;
    self->stopping = 1;
    pthread_cond_signal(&self->wake);
    pthread_mutex_unlock(&self->lock);
    if (join) {
        Py_BEGIN_ALLOW_THREADS
        pthread_join(self->thread, NULL);
        Py_END_ALLOW_THREADS
        self->started = 0;
    }
}

static void
Writer_dealloc(Writer *self)
{
    stop(self);
    release(self);
    if (self->event_fd >= 0) {
        close(self->event_fd);
    }
    pthread_cond_destroy(&self->wake);
    pthread_mutex_destroy(&self->lock);
    PyMem_Free(self->copies);
    PyMem_Free(self->seals);
    PyMem_Free(self->held);
    PyMem_Free(self->sync_fds);
    if (self->library != NULL) {
        dlclose(self->library);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Plan the copies of one (position, header, entries) item into the buffer: the header
 * copied now, the entries queued (and held). 0, or -1 with an exception; a failed item
 * may leave earlier items planned (submit drops them). */
static int
plan_copy(Writer *self, PyObject *item)
{
    if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 3) {
        PyErr_SetString(PyExc_TypeError, "a copy is a (position, header, entries) tuple");
        return -1;
    }
    if (!PyLong_CheckExact(PyTuple_GET_ITEM(item, 0))) {
        PyErr_SetString(PyExc_TypeError, "a copy's position must be an int");
        return -1;
    }
    Py_ssize_t position = PyLong_AsSsize_t(PyTuple_GET_ITEM(item, 0));
    if (position == -1 && PyErr_Occurred()) {
        return -1;
    }
    PyObject *header = PyTuple_GET_ITEM(item, 1);
    PyObject *entries = PyTuple_GET_ITEM(item, 2);
    if (!PyByteArray_CheckExact(header) && !PyBytes_CheckExact(header)) {
        PyErr_SetString(PyExc_TypeError, "a header must be bytes or a bytearray");
        return -1;
    }
    if (!PyList_CheckExact(entries) && !PyTuple_CheckExact(entries)) {
        PyErr_SetString(PyExc_TypeError, "entries must be a list or tuple of bytes");
        return -1;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(entries);
    PyObject **items = PySequence_Fast_ITEMS(entries);
    Py_ssize_t header_size = PyByteArray_CheckExact(header) ? PyByteArray_GET_SIZE(header)
                                                            : PyBytes_GET_SIZE(header);
    Py_ssize_t capacity = self->buffer.len;
    if (position < 0 || position > capacity || header_size > capacity - position) {
        PyErr_Format(PyExc_ValueError, "a frame at %zd overruns a buffer of %zd", position,
                     capacity);
        return -1;
    }
    /* room left after each part, so no sum can overflow */
    Py_ssize_t room = capacity - position - header_size;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (!PyBytes_CheckExact(items[i])) {
            PyErr_SetString(PyExc_TypeError, "entries must be a list or tuple of bytes");
            return -1;
        }
        if (PyBytes_GET_SIZE(items[i]) > room) {
            PyErr_Format(PyExc_ValueError, "a frame at %zd overruns a buffer of %zd",
                         position, capacity);
            return -1;
        }
        room -= PyBytes_GET_SIZE(items[i]);
    }
    if (reserve((void **)&self->copies, &self->copy_capacity, self->copy_count + count,
                sizeof(Copy)) < 0 ||
        reserve((void **)&self->held, &self->held_capacity, self->held_count + count,
                sizeof(PyObject *)) < 0) {
        return -1;
    }
    char *to = (char *)self->buffer.buf + position;
    const char *header_bytes = PyByteArray_CheckExact(header) ? PyByteArray_AS_STRING(header)
                                                              : PyBytes_AS_STRING(header);
    memmove(to, header_bytes, (size_t)header_size); /* a bytearray buffer may be both */
    to += header_size;
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t length = PyBytes_GET_SIZE(items[i]);
        Copy *copy = &self->copies[self->copy_count++];
        copy->to = to;
        copy->from = PyBytes_AS_STRING(items[i]);
        copy->length = (size_t)length;
        Py_INCREF(items[i]);
        self->held[self->held_count++] = items[i];
        to += length;
    }
    return 0;
}

static int
plan_seal(Writer *self, PyObject *item)
{
    if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 2) {
        PyErr_SetString(PyExc_TypeError, "a seal is a (start, end) tuple");
        return -1;
    }
    if (!PyLong_CheckExact(PyTuple_GET_ITEM(item, 0)) ||
        !PyLong_CheckExact(PyTuple_GET_ITEM(item, 1))) {
        PyErr_SetString(PyExc_TypeError, "a seal's start and end must be ints");
        return -1;
    }
    Py_ssize_t start = PyLong_AsSsize_t(PyTuple_GET_ITEM(item, 0));
    if (start == -1 && PyErr_Occurred()) {
        return -1;
    }
    Py_ssize_t end = PyLong_AsSsize_t(PyTuple_GET_ITEM(item, 1));
    if (end == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (start < 0 || end < 0 || end > self->buffer.len || start > end - 4) {
        PyErr_Format(PyExc_ValueError, "a frame at [%zd, %zd) is not inside a buffer of %zd",
                     start, end, self->buffer.len);
        return -1;
    }
    if (reserve((void **)&self->seals, &self->seal_capacity, self->seal_count + 1,
                sizeof(Seal)) < 0) {
        return -1;
    }
    self->seals[self->seal_count].start = start;
    self->seals[self->seal_count].end = end;
    self->seal_count++;
    return 0;
}

PyDoc_STRVAR(submit_doc,
             "submit(buffer, fd, offset, length, copies, seals) -> None\n\n"
             "Queue the write: on the thread, copy the entries of each (position, header,\n"
             "entries) of copies into the writable buffer (headers are copied now),\n"
             "fill in the CRC of each (start, end) frame of seals, then pwrite\n"
             "buffer[:length] to fd at offset. The eventfd turns readable when it is\n"
             "done; collect() then says how it went. RuntimeError if a write is out or\n"
             "the writer is closed; TypeError or ValueError, and nothing queued, for\n"
             "arguments that do not fit (a header may have been copied). O(entries).");

static PyObject *
Writer_submit(Writer *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError, "submit takes 6 arguments (%zd given)", nargs);
        return NULL;
    }
    if (self->owner != getpid()) {
        PyErr_SetString(PyExc_RuntimeError, "the writer's thread is in another process");
        return NULL;
    }
    if (!self->started || self->stopping) {
        PyErr_SetString(PyExc_RuntimeError, "the writer is closed");
        return NULL;
    }
    if (current_state(self) != IDLE) {
        PyErr_SetString(PyExc_RuntimeError, "a write is already out");
        return NULL;
    }
    if (!PyLong_CheckExact(args[1]) || !PyLong_CheckExact(args[2]) ||
        !PyLong_CheckExact(args[3])) {
        PyErr_SetString(PyExc_TypeError, "fd, offset and length must be ints");
        return NULL;
    }
    long fd = PyLong_AsLong(args[1]);
    if (fd == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (fd < 0 || fd > INT_MAX) {
        PyErr_Format(PyExc_ValueError, "%ld is not a file descriptor", fd);
        return NULL;
    }
    long long offset = PyLong_AsLongLong(args[2]);
    if (offset == -1 && PyErr_Occurred()) {
        return NULL;
    }
    Py_ssize_t length = PyLong_AsSsize_t(args[3]);
    if (length == -1 && PyErr_Occurred()) {
        return NULL;
    }
    PyObject *copies = args[4];
    PyObject *seals = args[5];
    if (!PyList_CheckExact(copies) || !PyList_CheckExact(seals)) {
        PyErr_SetString(PyExc_TypeError, "copies and seals must be lists");
        return NULL;
    }
    if (offset < 0) {
        PyErr_SetString(PyExc_ValueError, "offset must not be negative");
        return NULL;
    }
    if (PyObject_GetBuffer(args[0], &self->buffer, PyBUF_WRITABLE) < 0) {
        return NULL;
    }
    if (length < 0 || length > self->buffer.len) {
        PyErr_Format(PyExc_ValueError, "a write of %zd bytes from a buffer of %zd", length,
                     self->buffer.len);
        release(self);
        return NULL;
    }
    /* plan_* run no Python code (exact ints, bytes, tuples and lists only), so nothing
     * can change the lists while they are read */
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(copies); i++) {
        if (plan_copy(self, PyList_GET_ITEM(copies, i)) < 0) {
            release(self);
            return NULL;
        }
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(seals); i++) {
        if (plan_seal(self, PyList_GET_ITEM(seals, i)) < 0) {
            release(self);
            return NULL;
        }
    }
    self->kind = WRITE;
    self->fd = (int)fd;
    self->offset = (off_t)offset;
    self->length = (size_t)length;
    self->error = 0;
    pthread_mutex_lock(&self->lock);
    if (self->stopping) { /* closed from another thread while this was planned */
        pthread_mutex_unlock(&self->lock);
        release(self);
        PyErr_SetString(PyExc_RuntimeError, "the writer is closed");
        return NULL;
    }
    self->state = QUEUED;
    pthread_cond_signal(&self->wake);
    pthread_mutex_unlock(&self->lock);
    Py_RETURN_NONE;
}

/* Whether a job can be queued now: 0, or -1 with RuntimeError. */
static int
check_idle(Writer *self)
{
    if (self->owner != getpid()) {
        PyErr_SetString(PyExc_RuntimeError, "the writer's thread is in another process");
        return -1;
    }
    if (!self->started || self->stopping) {
        PyErr_SetString(PyExc_RuntimeError, "the writer is closed");
        return -1;
    }
    if (current_state(self) != IDLE) {
        PyErr_SetString(PyExc_RuntimeError, "a write is already out");
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(submit_fsync_doc,
             "submit_fsync(fds) -> None\n\n"
             "Queue fsyncs: on the thread, fsync each descriptor of fds (a list or tuple\n"
             "of ints) in order, stopping at the first that fails. The eventfd turns\n"
             "readable when it is done; collect() then gives 0 or that fsync's errno.\n"
             "RuntimeError if a job is out or the writer is closed; TypeError or\n"
             "ValueError, and nothing queued, for fds that are not descriptors. O(fds).");

static PyObject *
Writer_submit_fsync(Writer *self, PyObject *fds)
{
    if (check_idle(self) < 0) {
        return NULL;
    }
    if (!PyList_CheckExact(fds) && !PyTuple_CheckExact(fds)) {
        PyErr_SetString(PyExc_TypeError, "fds must be a list or tuple of ints");
        return NULL;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(fds);
    PyObject **items = PySequence_Fast_ITEMS(fds);
    if (reserve((void **)&self->sync_fds, &self->sync_capacity, count, sizeof(int)) < 0) {
        return NULL;
    }
    /* exact ints only: no Python code runs, so the list cannot change while read */
    for (Py_ssize_t i = 0; i < count; i++) {
        if (!PyLong_CheckExact(items[i])) {
            PyErr_SetString(PyExc_TypeError, "fds must be a list or tuple of ints");
            return NULL;
        }
        long fd = PyLong_AsLong(items[i]);
        if (fd == -1 && PyErr_Occurred()) {
            return NULL;
        }
        if (fd < 0 || fd > INT_MAX) {
            PyErr_Format(PyExc_ValueError, "%ld is not a file descriptor", fd);
            return NULL;
        }
        self->sync_fds[i] = (int)fd;
    }
    self->sync_count = count;
    self->kind = FSYNC;
    self->error = 0;
    pthread_mutex_lock(&self->lock);
    if (self->stopping) { /* closed from another thread meanwhile */
        pthread_mutex_unlock(&self->lock);
        self->sync_count = 0;
        PyErr_SetString(PyExc_RuntimeError, "the writer is closed");
        return NULL;
    }
    self->state = QUEUED;
    pthread_cond_signal(&self->wake);
    pthread_mutex_unlock(&self->lock);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(collect_doc,
             "collect() -> int | None\n\n"
             "After the eventfd turned readable: the submitted write's errno (0: written)\n"
             "and its buffer and payloads released; None while it is still out or when\n"
             "none was submitted. Reads (resets) the eventfd. O(entries).");

static PyObject *
Writer_collect(Writer *self, PyObject *Py_UNUSED(ignored))
{
    uint64_t count;
    if (read(self->event_fd, &count, sizeof count) < 0 && errno != EAGAIN && errno != EINTR) {
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    if (current_state(self) != DONE) {
        Py_RETURN_NONE;
    }
    int error = self->error;
    release(self);
    return PyLong_FromLong(error);
}

PyDoc_STRVAR(close_doc,
             "close() -> None\n\n"
             "Let a queued write finish (collect() then says how it went) and end the\n"
             "thread. Idempotent; submit then raises RuntimeError.");

static PyObject *
Writer_close(Writer *self, PyObject *Py_UNUSED(ignored))
{
    stop(self);
    Py_RETURN_NONE;
}

static PyObject *
Writer_get_event_fd(Writer *self, void *Py_UNUSED(closure))
{
    return PyLong_FromLong(self->event_fd);
}

static PyObject *
Writer_get_crc(Writer *self, void *Py_UNUSED(closure))
{
    return PyUnicode_FromString(self->isal_crc != NULL ? "isa-l" : "zlib");
}

static PyObject *
Writer_get_busy(Writer *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(current_state(self) != IDLE);
}

static PyMethodDef Writer_methods[] = {
    {"submit", (PyCFunction)(void (*)(void))Writer_submit, METH_FASTCALL, submit_doc},
    {"submit_fsync", (PyCFunction)Writer_submit_fsync, METH_O, submit_fsync_doc},
    {"collect", (PyCFunction)Writer_collect, METH_NOARGS, collect_doc},
    {"close", (PyCFunction)Writer_close, METH_NOARGS, close_doc},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Writer_getset[] = {
    {"event_fd", (getter)Writer_get_event_fd, NULL,
     "The eventfd that turns readable when a submitted write is done.", NULL},
    {"busy", (getter)Writer_get_busy, NULL, "Whether a write is out or not yet collected.",
     NULL},
    {"crc", (getter)Writer_get_crc, NULL,
     "Whose CRC-32 seals frames: 'isa-l' (found in isal_library) or 'zlib'.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject WriterType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "storage_stub.bookie._writer.Writer",
    .tp_basicsize = sizeof(Writer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A thread that copies, seals and writes one direct I/O buffer at a time.",
    .tp_new = Writer_new,
    .tp_dealloc = (destructor)Writer_dealloc,
    .tp_methods = Writer_methods,
    .tp_getset = Writer_getset,
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "storage_stub.bookie._writer",
    "The entry log's direct I/O writes on a thread that never takes the GIL.",
    -1,
    NULL,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__writer(void)
{
    if (PyType_Ready(&WriterType) < 0) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(module, "Writer", (PyObject *)&WriterType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
