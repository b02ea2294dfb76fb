/* Framed records of an indexed shard read in C: a run of adjacent records, or records anywhere in the
 * shard (records/frames.py), read straight into their payloads, lengths and CRCs checked.
 * Built with _crc32c.c (the same CRC-32C _fastwire's one-record reads use);
 * numpy's C API reads the index. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>

#include <stdint.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

void tfr_crc32c_setup(void);
uint32_t tfr_masked_crc32c(const uint8_t *p, size_t n);

#define MAX_SPAN (64 << 20)

/* read_frames(fd, index, r0, r1, verify, crc): records r0..r1-1 of a shard
 * (index: int64 [n, 2] of offsets and frame sizes), adjacent in the file,
 * read with positioned reads (GIL released) and checked as one framed record is
 * checked: a list of their payloads (bytes). Payload CRCs of more than 1 KiB are
 * computed by crc (the crc32c package's function, which is faster on long
 * buffers). None for anything else: records that are not adjacent, more than
 * 64 MiB at once, offsets or sizes that are negative or overflow, a short
 * read, a length or CRC that does not match.
 *
 * Each payload is read straight into its bytes object (preadv: the headers and
 * footers into a small array beside them), not into one buffer of the whole
 * run that is then copied out: a fresh multi-megabyte buffer costs a page fault
 * per 4 KiB every call, more than the read itself, in a process whose
 * allocator hands such buffers back to the kernel (a DataLoader worker).
 *
 * The rows used are copied out of the index first and every offset and size
 * is checked on the copy: the GIL is released during the read and crc runs
 * Python code, so the caller's array may change before the frames are cut. */
#define IOV_BATCH 1024 /* iovecs per preadv call: Linux's and macOS's IOV_MAX */

/* Whether index is a C-contiguous int64 array [N, 2] holding rows r0..r1-1, at most MAX_SPAN / 16 of
 * them (each frame is 16 bytes at least). */
static int rows_usable(PyObject *index, Py_ssize_t r0, Py_ssize_t r1) {
    PyArrayObject *ix = (PyArrayObject *)index;

    return PyArray_Check(index) && PyArray_NDIM(ix) == 2 && PyArray_DIM(ix, 1) == 2 &&
           PyArray_TYPE(ix) == NPY_INT64 && PyArray_IS_C_CONTIGUOUS(ix) && r0 >= 0 && r1 > r0 &&
           r1 <= PyArray_DIM(ix, 0) && r1 - r0 <= MAX_SPAN / 16;
}

/* Whether a frame's 12-byte header at head gives the payload length its index row's frame size says
 * (frame - 16; frame >= 16, checked by the caller) and, with verify, a length CRC that matches;
 * the length in *length. */
static int header_sound(const uint8_t *head, int64_t frame, int verify, uint64_t *length) {
    uint32_t stored;

    memcpy(length, head, 8);
    if (*length != (uint64_t)frame - 16) {
        return 0;
    }
    memcpy(&stored, head + 8, 4);
    return !verify || tfr_masked_crc32c(head, 8) == stored;
}

/* The masked CRC-32C of a payload of ``length`` bytes at ``data`` (``payload``: the same bytes as an
 * object): computed here when short; by crc(payload), the crc32c package (faster on long runs), when
 * long. -1 with a Python exception set when crc fails. */
static int payload_crc(const uint8_t *data, uint64_t length, PyObject *payload, PyObject *crc, uint32_t *sum) {
    PyObject *value;
    unsigned long plain;

    if (length <= 1024) {
        *sum = tfr_masked_crc32c(data, (size_t)length);
        return 0;
    }
    value = PyObject_CallOneArg(crc, payload);
    if (value == NULL) {
        return -1;
    }
    plain = PyLong_AsUnsignedLong(value);
    Py_DECREF(value);
    if (plain == (unsigned long)-1 && PyErr_Occurred()) {
        return -1;
    }
    *sum = (((uint32_t)plain >> 15) | ((uint32_t)plain << 17)) + 0xA282EAD8u;
    return 0;
}

/* Reads frames [0, n) of spans into payloads' bytes (at data[r]) and heads (16 bytes per frame: its
 * header's 12, then its footer's 4): one preadv per stretch of adjacent frames (and per IOV_BATCH / 3
 * frames), all of it with the GIL released (the caller's list and bytes stay alive and unseen meanwhile);
 * 0, or -1 on a short read or an error. */
static int read_into(int fd, const int64_t *spans, Py_ssize_t n, char *const *data, uint8_t *heads) {
    struct iovec iov[IOV_BATCH];
    int count = 0, failed = 0;
    int64_t pos = 0, want = 0;
    Py_ssize_t r;

    Py_BEGIN_ALLOW_THREADS
    for (r = 0; r <= n && !failed; r++) {
        /* queued reads end here: at the end, before a frame that does not follow the one before, or
         * when a frame's three iovecs would not fit */
        if (count > 0 && (r == n || spans[2 * r] != pos + want || count + 3 > IOV_BATCH)) {
            failed = preadv(fd, iov, count, (off_t)pos) != (ssize_t)want;
            count = 0;
            want = 0;
        }
        if (r == n || failed) {
            break;
        }
        if (count == 0) {
            pos = spans[2 * r];
        }
        iov[count].iov_base = heads + 16 * r;
        iov[count++].iov_len = 12;
        iov[count].iov_base = data[r];
        iov[count++].iov_len = (size_t)(spans[2 * r + 1] - 16);
        iov[count].iov_base = heads + 16 * r + 12;
        iov[count++].iov_len = 4;
        want += spans[2 * r + 1];
    }
    Py_END_ALLOW_THREADS
    return failed ? -1 : 0;
}

/* The payloads of the n frames of spans (offsets and frame sizes, a copy of the caller's rows, freed
 * here), read from fd and checked; None (the caller's own path reads them) for a span outside
 * [0, INT64_MAX - MAX_SPAN], a frame under 16 bytes, more than MAX_SPAN bytes in all, frames that must be
 * adjacent and are not, a short read, or a length or CRC that does not match. */
static PyObject *read_spans(int fd, int64_t *spans, Py_ssize_t n, int adjacent, int verify, PyObject *crc) {
    PyObject *out = NULL;
    uint8_t *heads = NULL;
    char **data = NULL;
    int64_t total = 0;
    Py_ssize_t r;

    for (r = 0; r < n; r++) {
        int64_t at = spans[2 * r], frame = spans[2 * r + 1];
        /* at + frame stays under INT64_MAX; total stays under MAX_SPAN */
        if (at < 0 || at > INT64_MAX - MAX_SPAN || (int64_t)(off_t)(at + MAX_SPAN) != at + MAX_SPAN ||
            frame < 16 || frame > MAX_SPAN - total ||
            (adjacent && r > 0 && at != spans[2 * r - 2] + spans[2 * r - 1])) {
            goto fallback;
        }
        total += frame;
    }
    /* n frames of at least 16 bytes each fit in MAX_SPAN: 16 * n cannot overflow */
    if ((heads = PyMem_Malloc(16 * (size_t)n)) == NULL || (data = PyMem_Malloc(sizeof(char *) * (size_t)n)) == NULL ||
        (out = PyList_New(n)) == NULL) {
        goto error;
    }
    for (r = 0; r < n; r++) { /* filled below, before anyone else sees them */
        PyObject *payload = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(spans[2 * r + 1] - 16));
        if (payload == NULL) {
            goto error;
        }
        PyList_SET_ITEM(out, r, payload);
        data[r] = PyBytes_AS_STRING(payload);
    }
    if (read_into(fd, spans, n, data, heads) != 0) {
        goto fallback;
    }
    for (r = 0; r < n; r++) {
        const uint8_t *head = heads + 16 * r;
        PyObject *payload = PyList_GET_ITEM(out, r);
        uint64_t length;
        uint32_t stored, sum;
        if (!header_sound(head, spans[2 * r + 1], verify, &length)) {
            goto fallback;
        }
        if (!verify) {
            continue;
        }
        memcpy(&stored, head + 12, 4);
        if (payload_crc((const uint8_t *)PyBytes_AS_STRING(payload), length, payload, crc, &sum) != 0) {
            goto error;
        }
        if (sum != stored) {
            goto fallback;
        }
    }
    PyMem_Free(spans);
    PyMem_Free(heads);
    PyMem_Free(data);
    return out;
fallback:
    Py_XDECREF(out);
    PyMem_Free(spans);
    PyMem_Free(heads);
    PyMem_Free(data);
    Py_RETURN_NONE;
error:
    Py_XDECREF(out);
    PyMem_Free(spans);
    PyMem_Free(heads);
    PyMem_Free(data);
    return PyErr_Occurred() ? NULL : PyErr_NoMemory();
}

static PyObject *read_frames(PyObject *self, PyObject *args) {
    int fd, verify;
    Py_ssize_t r0, r1, n;
    PyObject *index, *crc;
    int64_t *spans;

    if (!PyArg_ParseTuple(args, "iOnnpO", &fd, &index, &r0, &r1, &verify, &crc)) {
        return NULL;
    }
    if (!rows_usable(index, r0, r1)) {
        Py_RETURN_NONE;
    }
    n = r1 - r0;
    if ((spans = PyMem_Malloc(sizeof(int64_t) * 2 * (size_t)n)) == NULL) {
        return PyErr_NoMemory();
    }
    memcpy(spans, (const int64_t *)PyArray_DATA((PyArrayObject *)index) + 2 * r0, sizeof(int64_t) * 2 * (size_t)n);
    return read_spans(fd, spans, n, 1, verify, crc);
}

/* read_records(fd, index, records, verify, crc): the records numbered in records (a C-contiguous int64
 * array of one dimension, numbers in [0, len(index)), at most MAX_SPAN / 16 of them; in any order, best
 * ascending) read and checked as read_frames reads a run: adjacent ones with one preadv, all of them with
 * the GIL released once. None where read_frames would give None, or for a records array or number it
 * cannot use. */
static PyObject *read_records(PyObject *self, PyObject *args) {
    int fd, verify;
    Py_ssize_t r, n, rows;
    PyObject *index, *records, *crc;
    PyArrayObject *ix, *numbers;
    const char *table, *wanted;
    int64_t *spans;

    if (!PyArg_ParseTuple(args, "iOOpO", &fd, &index, &records, &verify, &crc)) {
        return NULL;
    }
    ix = (PyArrayObject *)index;
    numbers = (PyArrayObject *)records;
    if (!PyArray_Check(records) || PyArray_NDIM(numbers) != 1 || PyArray_TYPE(numbers) != NPY_INT64 ||
        !PyArray_IS_C_CONTIGUOUS(numbers) || PyArray_DIM(numbers, 0) < 1 ||
        PyArray_DIM(numbers, 0) > MAX_SPAN / 16 || !PyArray_Check(index) || PyArray_NDIM(ix) != 2 ||
        PyArray_DIM(ix, 1) != 2 || PyArray_TYPE(ix) != NPY_INT64 || !PyArray_IS_C_CONTIGUOUS(ix)) {
        Py_RETURN_NONE;
    }
    n = PyArray_DIM(numbers, 0);
    rows = PyArray_DIM(ix, 0);
    /* either array may be contiguous but not aligned (a view into a buffer): values copied out, never
     * loaded as int64 in place */
    table = (const char *)PyArray_DATA(ix);
    wanted = (const char *)PyArray_DATA(numbers);
    if ((spans = PyMem_Malloc(sizeof(int64_t) * 2 * (size_t)n)) == NULL) {
        return PyErr_NoMemory();
    }
    for (r = 0; r < n; r++) { /* copied before crc (Python code) runs: later changes to either array do not count */
        int64_t number;
        memcpy(&number, wanted + sizeof(int64_t) * (size_t)r, sizeof(number));
        if (number < 0 || number >= rows) {
            PyMem_Free(spans);
            Py_RETURN_NONE;
        }
        memcpy(spans + 2 * r, table + 2 * sizeof(int64_t) * (size_t)number, 2 * sizeof(int64_t));
    }
    return read_spans(fd, spans, n, 0, verify, crc);
}

/* cut_frames(data, index, r0, r1, verify, crc): records r0..r1-1 of a shard, adjacent in the file, cut from
 * data (a bytes-like object holding the file's bytes from record r0's offset on) and checked as read_frames
 * checks them: a list of their payloads (bytes). None for anything else: records that are not adjacent,
 * more than 64 MiB at once, offsets or sizes that are negative or overflow, frames that run past the end
 * of data, a length or CRC that does not match. The rows used are copied out of the index first and
 * every offset and size is checked on the copy (crc runs Python code). */
static PyObject *cut_frames(PyObject *self, PyObject *args) {
    int verify;
    Py_ssize_t r0, r1, r, n;
    PyObject *data, *index, *crc, *out = NULL;
    PyArrayObject *ix;
    Py_buffer view;
    int64_t *spans = NULL, start, end, size;
    const uint8_t *base;

    if (!PyArg_ParseTuple(args, "OOnnpO", &data, &index, &r0, &r1, &verify, &crc)) {
        return NULL;
    }
    if (!rows_usable(index, r0, r1)) {
        Py_RETURN_NONE;
    }
    ix = (PyArrayObject *)index;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) != 0) {
        return NULL;
    }
    n = r1 - r0;
    if ((spans = PyMem_Malloc(sizeof(int64_t) * 2 * (size_t)n)) == NULL) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    memcpy(spans, (const int64_t *)PyArray_DATA(ix) + 2 * r0, sizeof(int64_t) * 2 * (size_t)n);
    size = (int64_t)view.len;
    base = (const uint8_t *)view.buf;
    /* each sum below stays under start + MAX_SPAN, which cannot overflow */
    start = end = spans[0];
    if (start < 0 || start > INT64_MAX - MAX_SPAN) {
        goto fallback;
    }
    for (r = 0; r < n; r++) {
        if (spans[2 * r] != end || spans[2 * r + 1] < 16 || spans[2 * r + 1] > MAX_SPAN - (end - start) ||
            spans[2 * r + 1] > size - (end - start)) {
            goto fallback;
        }
        end += spans[2 * r + 1];
    }
    if ((out = PyList_New(n)) == NULL) {
        goto error;
    }
    for (r = 0; r < n; r++) {
        /* 0 <= at and at + frame <= size, checked above */
        const uint8_t *head = base + (spans[2 * r] - start);
        uint64_t length;
        uint32_t stored, sum;
        PyObject *payload;
        if (!header_sound(head, spans[2 * r + 1], verify, &length)) {
            goto fallback;
        }
        payload = PyBytes_FromStringAndSize((const char *)head + 12, (Py_ssize_t)length);
        if (payload == NULL) {
            goto error;
        }
        PyList_SET_ITEM(out, r, payload);
        if (!verify) {
            continue;
        }
        memcpy(&stored, head + 12 + length, 4);
        if (payload_crc(head + 12, length, payload, crc, &sum) != 0) {
            goto error;
        }
        if (sum != stored) {
            goto fallback;
        }
    }
    PyMem_Free(spans);
    PyBuffer_Release(&view);
    return out;
fallback:
    Py_XDECREF(out);
    PyMem_Free(spans);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
error:
    Py_XDECREF(out);
    PyMem_Free(spans);
    PyBuffer_Release(&view);
    return PyErr_Occurred() ? NULL : PyErr_NoMemory();
}

static PyMethodDef methods[] = {
    {"read_frames", read_frames, METH_VARARGS,
     "read_frames(fd, index, r0, r1, verify, crc): the payloads of adjacent records r0..r1-1, read at once and "
     "checked; None where the caller must read them its own way."},
    {"read_records", read_records, METH_VARARGS,
     "read_records(fd, index, records, verify, crc): the payloads of the records numbered in records (int64, "
     "best ascending), read at once and checked; None where the caller must read them its own way."},
    {"cut_frames", cut_frames, METH_VARARGS,
     "cut_frames(data, index, r0, r1, verify, crc): the payloads of adjacent records r0..r1-1 cut from data (the "
     "file's bytes from record r0's offset on) and checked; None where the caller must read them its own way."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_frames", NULL, -1, methods};

PyMODINIT_FUNC PyInit__frames(void) {
    import_array(); /* returns NULL from here if numpy's C API cannot be loaded */
    tfr_crc32c_setup();
    return PyModule_Create(&module);
}
