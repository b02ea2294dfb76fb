/* Framed records of an indexed shard read in C: a run of adjacent records
 * (records/frames.py) with one positioned read, lengths and CRCs checked.
 * Built with _crc32c.c (the same CRC-32C _fastwire's one-record reads use);
 * numpy's C API reads the index. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>

#include <stdint.h>
#include <string.h>
#include <unistd.h>

void tfr_crc32c_setup(void);
uint32_t tfr_masked_crc32c(const uint8_t *p, size_t n);

#define MAX_SPAN (64 << 20)

/* read_frames(fd, index, r0, r1, verify, crc): records r0..r1-1 of a shard
 * (index: int64 [n, 2] of offsets and frame sizes), adjacent in the file,
 * read with one pread (GIL released) and checked as one framed record is checked:
 * a list of their payloads (bytes). Payload CRCs of more than 1 KiB are
 * computed by crc (the crc32c package's function, which is faster on long
 * buffers). None for anything else: records that are not adjacent, more than
 * 64 MiB at once, offsets or sizes that are negative or overflow, a short
 * read, a length or CRC that does not match.
 *
 * The rows used are copied out of the index first and every offset and size
 * is checked on the copy: the GIL is released during the read and crc runs
 * Python code, so the caller's array may change before the frames are cut. */
static PyObject *read_frames(PyObject *self, PyObject *args) {
    int fd, verify;
    Py_ssize_t r0, r1, r, n, got, total;
    PyObject *index, *crc, *out = NULL;
    PyArrayObject *ix;
    int64_t *spans = NULL, start, end;
    uint8_t *buf = NULL, *p;

    if (!PyArg_ParseTuple(args, "iOnnpO", &fd, &index, &r0, &r1, &verify, &crc)) {
        return NULL;
    }
    ix = (PyArrayObject *)index;
    if (!PyArray_Check(index) || PyArray_NDIM(ix) != 2 || PyArray_DIM(ix, 1) != 2 ||
        PyArray_TYPE(ix) != NPY_INT64 || !PyArray_IS_C_CONTIGUOUS(ix) || r0 < 0 || r1 <= r0 ||
        r1 > PyArray_DIM(ix, 0) || r1 - r0 > MAX_SPAN / 16) {
        Py_RETURN_NONE;
    }
    n = r1 - r0;
    if ((spans = PyMem_Malloc(sizeof(int64_t) * 2 * (size_t)n)) == NULL) {
        return PyErr_NoMemory();
    }
    memcpy(spans, (const int64_t *)PyArray_DATA(ix) + 2 * r0, sizeof(int64_t) * 2 * (size_t)n);
    /* each sum below stays under start + MAX_SPAN, which cannot overflow */
    start = end = spans[0];
    if (start < 0 || start > INT64_MAX - MAX_SPAN) {
        goto fallback;
    }
    for (r = 0; r < n; r++) {
        if (spans[2 * r] != end || spans[2 * r + 1] < 16 || spans[2 * r + 1] > MAX_SPAN - (end - start)) {
            goto fallback;
        }
        end += spans[2 * r + 1];
    }
    total = (Py_ssize_t)(end - start);
    if ((buf = PyMem_Malloc((size_t)total)) == NULL) {
        PyMem_Free(spans);
        return PyErr_NoMemory();
    }
    Py_BEGIN_ALLOW_THREADS
    got = pread(fd, buf, (size_t)total, (off_t)start);
    Py_END_ALLOW_THREADS
    if (got != total || (out = PyList_New(n)) == NULL) {
        goto fallback;
    }
    for (r = 0, p = buf; r < n; p += spans[2 * r + 1], r++) {
        uint64_t length;
        uint32_t stored, sum;
        PyObject *payload;
        memcpy(&length, p, 8);
        if (length != (uint64_t)spans[2 * r + 1] - 16) {
            goto fallback;
        }
        memcpy(&stored, p + 8, 4);
        if (verify && tfr_masked_crc32c(p, 8) != stored) {
            goto fallback;
        }
        payload = PyBytes_FromStringAndSize((const char *)p + 12, (Py_ssize_t)length);
        if (payload == NULL) {
            goto error;
        }
        PyList_SET_ITEM(out, r, payload);
        if (!verify) {
            continue;
        }
        memcpy(&stored, p + 12 + length, 4);
        if (length <= 1024) {
            sum = tfr_masked_crc32c(p + 12, (size_t)length);
        } else {
            PyObject *value = PyObject_CallOneArg(crc, payload);
            unsigned long plain;
            if (value == NULL) {
                goto error;
            }
            plain = PyLong_AsUnsignedLong(value);
            Py_DECREF(value);
            if (plain == (unsigned long)-1 && PyErr_Occurred()) {
                goto error;
            }
            sum = (((uint32_t)plain >> 15) | ((uint32_t)plain << 17)) + 0xA282EAD8u;
        }
        if (sum != stored) {
            goto fallback;
        }
    }
    PyMem_Free(spans);
    PyMem_Free(buf);
    return out;
fallback:
    Py_XDECREF(out);
    PyMem_Free(spans);
    PyMem_Free(buf);
    Py_RETURN_NONE;
error:
    Py_XDECREF(out);
    PyMem_Free(spans);
    PyMem_Free(buf);
    return NULL;
}

static PyMethodDef methods[] = {
    {"read_frames", read_frames, METH_VARARGS,
     "read_frames(fd, index, r0, r1, verify, crc): the payloads of adjacent records r0..r1-1, read at once and "
     "checked; None where the caller must read them its own way."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_frames", NULL, -1, methods};

PyMODINIT_FUNC PyInit__frames(void) {
    import_array(); /* returns NULL from here if numpy's C API cannot be loaded */
    tfr_crc32c_setup();
    return PyModule_Create(&module);
}
