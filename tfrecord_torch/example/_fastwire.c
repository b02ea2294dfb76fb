/* tf.train.Example decoding in C for the common case.
 *
 * parse_example(payload) walks the Example's wire format (Example.features ->
 * map<string, Feature> -> BytesList | FloatList | Int64List) and returns
 * {key: value} with keys sorted: a list of bytes, or a float32 / int64 NumPy
 * array (fresh, writable, owning its memory; numpy's C API). It returns None for anything
 * it does not handle exactly as protobuf does -- a malformed message, an
 * unknown field, a map entry without key or value, a repeated key or
 * features field, a Feature with no kind or with its fields split, a key that
 * is not UTF-8 -- and the caller then decodes with protobuf, which gives the
 * values or the error. So where this returns a dict, it is protobuf's.
 *
 * parse_sequence_example(payload) does the same for a tf.train.SequenceExample
 * (context = 1: Features; feature_lists = 2: map<string, FeatureList>, each a
 * repeated Feature): (context dict, {key: [step value, ...]}) or None. With
 * a set of keys as second argument, each of those feature lists whose steps
 * each hold exactly one bytes value, all of one length n and one encoding,
 * comes back as (start, stride, T, n): where the values lie in the payload
 * (YouTube-8M's frames: no bytes object per frame; the caller copies them
 * out with one strided copy); any other list of those keys, as a list.
 *
 * A bytes value of 64 KiB or more (an image) is copied out with the GIL
 * released, so the process's other threads run meanwhile.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void tfr_crc32c_setup(void);
uint32_t tfr_crc32c(const uint8_t *p, size_t n, int force_software);
uint32_t tfr_masked_crc32c(const uint8_t *p, size_t n);

typedef struct {
    const uint8_t *p, *end;
} cursor;

/* Reads a varint; 0 on success, -1 if malformed. */
static int varint(cursor *c, uint64_t *out) {
    uint64_t v = 0;
    int shift;
    for (shift = 0; shift < 70 && c->p < c->end; shift += 7) {
        uint8_t b = *c->p++;
        if (shift == 63 && b > 1) {
            return -1;
        }
        v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return 0;
        }
    }
    return -1;
}

/* Reads a tag or a length: a varint of at most 5 bytes, no larger than limit. protobuf (upb)
 * refuses a longer one, even one that only pads a small value, so the message is left to it. */
static int short_varint(cursor *c, uint64_t limit, uint64_t *out) {
    const uint8_t *start = c->p;
    if (varint(c, out) < 0 || c->p - start > 5 || *out > limit) {
        return -1;
    }
    return 0;
}

/* Reads a tag and, for length-delimited fields, the field's span. */
static int field(cursor *c, uint32_t *number, uint32_t *wire, cursor *span) {
    uint64_t tag, len;
    if (short_varint(c, UINT32_MAX, &tag) < 0 || (tag >> 3) == 0) {
        return -1;
    }
    *number = (uint32_t)(tag >> 3);
    *wire = (uint32_t)(tag & 7);
    if (*wire == 2) {
        if (short_varint(c, INT32_MAX - 1, &len) < 0 || len > (uint64_t)(c->end - c->p)) {
            return -1;
        }
        span->p = c->p;
        span->end = c->p + len;
        c->p += len;
    }
    return 0;
}

typedef struct {
    char *data;
    size_t size, cap;
} buffer;

static int grow(buffer *b, size_t more) {
    if (b->size + more > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        char *data;
        while (cap < b->size + more) {
            cap *= 2;
        }
        data = PyMem_Realloc(b->data, cap);
        if (data == NULL) {
            return -1;
        }
        b->data = data;
        b->cap = cap;
    }
    return 0;
}

/* Appends n bytes to b (nothing when b is NULL: a dry run that only checks); 0, or -1 out of memory. */
static int put(buffer *b, const void *p, size_t n) {
    if (b == NULL) {
        return 0;
    }
    if (grow(b, n) < 0) {
        return -1;
    }
    memcpy(b->data + b->size, p, n);
    b->size += n;
    return 0;
}

/* The values of a numeric list (FloatList or Int64List, field 1, packed or
 * not) appended to b as float32 / int64; 0, or -1 if malformed (or out of memory). */
static int collect(cursor list, int is_float, buffer *b) {
    uint32_t number, wire;
    cursor span;
    while (list.p < list.end) {
        if (field(&list, &number, &wire, &span) < 0 || number != 1) {
            return -1;
        }
        if (is_float && wire == 2) {
            size_t n = (size_t)(span.end - span.p);
            if (n % 4 || put(b, span.p, n) < 0) {
                return -1;
            }
        } else if (is_float && wire == 5) {
            if (list.end - list.p < 4 || put(b, list.p, 4) < 0) {
                return -1;
            }
            list.p += 4;
        } else if (!is_float && (wire == 2 || wire == 0)) {
            cursor values = wire == 2 ? span : list;
            do {
                uint64_t v;
                if (varint(&values, &v) < 0 || put(b, &v, 8) < 0) {
                    return -1;
                }
            } while (wire == 2 && values.p < values.end);
            if (wire == 0) {
                list.p = values.p;
            }
        } else {
            return -1;
        }
    }
    return 0;
}

/* A new array of the values in b, of ndim dims (ndim 0 with dims NULL: 1-D of whatever count). */
static PyObject *array_of(buffer *b, int is_float, int ndim, npy_intp *dims) {
    npy_intp count[1];
    PyObject *array;
    if (dims == NULL) {
        count[0] = (npy_intp)(b->size / (is_float ? 4 : 8));
        ndim = 1;
        dims = count;
    }
    array = PyArray_SimpleNew(ndim, dims, is_float ? NPY_FLOAT32 : NPY_INT64);
    if (array != NULL && b->size) {
        memcpy(PyArray_DATA((PyArrayObject *)array), b->data, b->size);
    }
    return array;
}

/* A numeric list as a 1-D array; Py_None to fall back. */
static PyObject *numbers(cursor list, int is_float) {
    buffer b = {NULL, 0, 0};
    PyObject *array;
    if (collect(list, is_float, &b) < 0) {
        PyMem_Free(b.data);
        Py_RETURN_NONE;
    }
    array = array_of(&b, is_float, 0, NULL);
    PyMem_Free(b.data);
    return array;
}

/* Checks a BytesList (each field 1, length-delimited); 0, or -1 if malformed. */
static int check_strings(cursor list) {
    uint32_t number, wire;
    cursor span;
    while (list.p < list.end) {
        if (field(&list, &number, &wire, &span) < 0 || number != 1 || wire != 2) {
            return -1;
        }
    }
    return 0;
}

/* A value this long or longer is copied with the GIL released: a batch of 64 photos of 500 KB is
 * 32 MB of copying, and other threads of the process (a DataLoader worker's feeder and
 * resource-sharer threads, the training loop) then wait for the GIL for milliseconds at a time. */
#define RELEASE_BYTES ((Py_ssize_t)64 * 1024)

/* One bytes value, copied out of the payload. The payload is the caller's, held (its buffer
 * exported) for the whole call, so it stays where it is while the GIL is away. */
static PyObject *bytes_of(cursor span) {
    Py_ssize_t n = (Py_ssize_t)(span.end - span.p);
    PyObject *item;
    char *to;
    if (n < RELEASE_BYTES) {
        return PyBytes_FromStringAndSize((const char *)span.p, n);
    }
    item = PyBytes_FromStringAndSize(NULL, n);
    if (item == NULL) {
        return NULL;
    }
    to = PyBytes_AS_STRING(item);
    Py_BEGIN_ALLOW_THREADS
    memcpy(to, span.p, (size_t)n);
    Py_END_ALLOW_THREADS
    return item;
}

/* A BytesList as a list of bytes. */
static PyObject *byte_strings(cursor list) {
    PyObject *out;
    uint32_t number, wire;
    cursor span;
    if (check_strings(list) < 0) {
        Py_RETURN_NONE;
    }
    out = PyList_New(0);
    while (out != NULL && list.p < list.end) {
        PyObject *item;
        field(&list, &number, &wire, &span);
        item = bytes_of(span);
        if (item == NULL || PyList_Append(out, item) < 0) {
            Py_XDECREF(item);
            Py_CLEAR(out);
            break;
        }
        Py_DECREF(item);
    }
    return out;
}

/* Which kind a Feature holds (1 bytes, 2 float, 3 int64: exactly one kind
 * field, once) and its span; 0 for anything else (no kind, malformed). */
static uint32_t kind_of(cursor f, cursor *kind) {
    uint32_t number, wire, which = 0;
    cursor span;
    while (f.p < f.end) {
        if (field(&f, &number, &wire, &span) < 0 || wire != 2 || number < 1 || number > 3 || which) {
            return 0;
        }
        which = number;
        *kind = span;
    }
    return which;
}

/* A Feature's values. New reference, Py_None to fall back, NULL on error. */
static PyObject *feature(cursor f) {
    cursor kind;
    uint32_t which = kind_of(f, &kind);
    if (which == 1) {
        return byte_strings(kind);
    }
    if (which == 2 || which == 3) {
        return numbers(kind, which == 2);
    }
    Py_RETURN_NONE; /* no kind set: protobuf's path says what it decodes to */
}

/* Checks a Feature without making its values; 0 if feature() would decode it, else -1. */
static int check_feature(cursor f) {
    cursor kind;
    uint32_t which = kind_of(f, &kind);
    if (which == 1) {
        return check_strings(kind);
    }
    if (which == 2 || which == 3) {
        return collect(kind, which == 2, NULL);
    }
    return -1;
}

typedef struct {
    cursor key;
    PyObject *value;
} entry;

static PyObject *sorted_dict(entry *entries, size_t n);
static int top_fields(cursor c, cursor *spans, uint32_t count);

static int compare(const void *a, const void *b) {
    const cursor *x = &((const entry *)a)->key, *y = &((const entry *)b)->key;
    size_t nx = (size_t)(x->end - x->p), ny = (size_t)(y->end - y->p);
    int c = memcmp(x->p, y->p, nx < ny ? nx : ny);
    return c ? c : (nx > ny) - (nx < ny);
}

/* A map<string, V> field (entries: key = 1, value = 2, each exactly once) as
 * a dict, keys sorted, each value made by decode. New reference; Py_None to
 * fall back; NULL on error. */
static PyObject *map_dict(cursor map, PyObject *(*decode)(cursor, cursor, void *), void *context) {
    uint32_t number, wire;
    entry *entries = NULL;
    size_t n = 0, cap = 0, i;
    PyObject *out = NULL;
    while (map.p < map.end) {
        cursor item, parts[2];
        if (field(&map, &number, &wire, &item) < 0 || number != 1 || wire != 2 ||
            top_fields(item, parts, 2) < 0 || parts[0].p == NULL || parts[1].p == NULL) {
            goto fallback;
        }
        if (n == cap) {
            entry *more = PyMem_Realloc(entries, sizeof(entry) * (cap = cap ? cap * 2 : 16));
            if (more == NULL) {
                PyErr_NoMemory();
                goto done;
            }
            entries = more;
        }
        entries[n].key = parts[0];
        entries[n].value = decode(parts[1], parts[0], context);
        if (entries[n].value == NULL) {
            goto done;
        }
        n++;
        if (entries[n - 1].value == Py_None) {
            goto fallback;
        }
    }
    out = sorted_dict(entries, n);
    goto done;
fallback:
    out = Py_None;
    Py_INCREF(out);
done:
    for (i = 0; i < n; i++) {
        Py_XDECREF(entries[i].value);
    }
    PyMem_Free(entries);
    return out;
}

static PyObject *keyed_feature(cursor f, cursor key, void *context) {
    (void)key;
    (void)context;
    return feature(f);
}

/* A Features message (map<string, Feature> feature = 1) as a dict, keys sorted. */
static PyObject *features_dict(cursor features) {
    return map_dict(features, keyed_feature, NULL);
}

/* entries as a dict with UTF-8 keys, sorted; Py_None (new ref) for a repeated or non-UTF-8 key. */
static PyObject *sorted_dict(entry *entries, size_t n) {
    size_t i;
    PyObject *out;
    if (n > 1) { /* an empty map has no array at all, and qsort must not be given NULL */
        qsort(entries, n, sizeof(entry), compare);
    }
    out = PyDict_New();
    for (i = 0; out != NULL && i < n; i++) {
        PyObject *key;
        if (i && compare(&entries[i - 1], &entries[i]) == 0) {
            Py_DECREF(out); /* a key twice: protobuf keeps the last */
            Py_RETURN_NONE;
        }
        key = PyUnicode_DecodeUTF8((const char *)entries[i].key.p, entries[i].key.end - entries[i].key.p,
                                   "strict");
        if (key == NULL) {
            PyErr_Clear();
            Py_DECREF(out);
            Py_RETURN_NONE;
        }
        if (PyDict_SetItem(out, key, entries[i].value) < 0) {
            Py_CLEAR(out);
        }
        Py_DECREF(key);
    }
    return out;
}

/* The top-level fields of a message whose fields 1..count are each one
 * embedded message at most once; 0, or -1 to fall back. */
static int top_fields(cursor c, cursor *spans, uint32_t count) {
    uint32_t number, wire, i;
    cursor span;
    for (i = 0; i < count; i++) {
        spans[i].p = spans[i].end = NULL;
    }
    while (c.p < c.end) {
        if (field(&c, &number, &wire, &span) < 0 || number < 1 || number > count || wire != 2 ||
            spans[number - 1].p != NULL) {
            return -1;
        }
        spans[number - 1] = span;
    }
    return 0;
}

static PyObject *parse_example(PyObject *self, PyObject *arg) {
    Py_buffer view;
    cursor c, features;
    PyObject *out;

    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    c.p = view.buf;
    c.end = c.p + view.len;
    if (top_fields(c, &features, 1) < 0) { /* Example: features = 1 */
        out = Py_None;
        Py_INCREF(out);
    } else {
        out = features_dict(features);
    }
    PyBuffer_Release(&view);
    return out;
}

/* A FeatureList (repeated Feature feature = 1) as a list of step values. */
static PyObject *steps(cursor list) {
    uint32_t number, wire;
    cursor span;
    PyObject *out = PyList_New(0);
    while (out != NULL && list.p < list.end) {
        PyObject *value;
        if (field(&list, &number, &wire, &span) < 0 || number != 1 || wire != 2) {
            Py_DECREF(out);
            Py_RETURN_NONE;
        }
        value = feature(span);
        if (value == NULL || value == Py_None) {
            Py_DECREF(out);
            return value;
        }
        if (PyList_Append(out, value) < 0) {
            Py_CLEAR(out);
        }
        Py_DECREF(value);
    }
    return out;
}

/* The next step of a FeatureList when it is a Feature whose BytesList holds
 * exactly one value: 0 and the value's span; -1 for anything else. */
static int next_single_bytes(cursor *list, cursor *value) {
    uint32_t number, wire;
    cursor step, kind;
    if (field(list, &number, &wire, &step) < 0 || number != 1 || wire != 2 || kind_of(step, &kind) != 1 ||
        field(&kind, &number, &wire, value) < 0 || number != 1 || wire != 2 || kind.p != kind.end) {
        return -1;
    }
    return 0;
}

/* A FeatureList of T >= 1 steps, each one bytes value of n bytes and each
 * encoded in as many bytes, as a tuple (start, stride, T, n): value t lies
 * at payload[start + t * stride : ... + n], base being the payload's first
 * byte; Py_None when it is anything else (steps() then decodes it, or falls
 * back). T is the list's length over the first step's, checked step by step. */
static PyObject *joined_steps(cursor list, const uint8_t *base) {
    cursor scan = list, value, first;
    Py_ssize_t count, t;
    ptrdiff_t step;
    if (next_single_bytes(&scan, &first) < 0) {
        Py_RETURN_NONE;
    }
    step = scan.p - list.p; /* > 0: a tag and a length at least */
    if ((list.end - list.p) % step) {
        Py_RETURN_NONE;
    }
    count = (Py_ssize_t)((list.end - list.p) / step);
    scan = list;
    for (t = 0; t < count; t++) {
        const uint8_t *at = scan.p;
        if (next_single_bytes(&scan, &value) < 0 || scan.p - at != step ||
            value.end - value.p != first.end - first.p || value.p - at != first.p - list.p) {
            Py_RETURN_NONE;
        }
    }
    return Py_BuildValue("(nnnn)", (Py_ssize_t)(first.p - base), (Py_ssize_t)step, count,
                         (Py_ssize_t)(first.end - first.p));
}

typedef struct {
    PyObject *joined; /* a set of keys, or NULL */
    const uint8_t *base;
} lists_context;

/* A FeatureList's steps: joined_steps() where the context's set holds its key and it can, else steps(). */
static PyObject *keyed_steps(cursor list, cursor key, void *context) {
    lists_context *c = context;
    if (c->joined != NULL) {
        PyObject *name = PyUnicode_DecodeUTF8((const char *)key.p, key.end - key.p, "strict");
        int wanted = name == NULL ? 0 : PySet_Contains(c->joined, name);
        Py_XDECREF(name);
        if (wanted < 0) {
            return NULL;
        }
        PyErr_Clear(); /* a key that is not UTF-8: sorted_dict falls back */
        if (wanted) {
            PyObject *frames = joined_steps(list, c->base);
            if (frames != Py_None) {
                return frames;
            }
            Py_DECREF(frames);
        }
    }
    return steps(list);
}

/* FeatureLists (map<string, FeatureList> feature_list = 1) as a dict, keys sorted. */
static PyObject *lists_dict(cursor lists, PyObject *joined, const uint8_t *base) {
    lists_context context = {joined, base};
    return map_dict(lists, keyed_steps, &context);
}

static PyObject *parse_sequence_example(PyObject *self, PyObject *args) {
    Py_buffer view;
    cursor c, parts[2];
    PyObject *arg, *joined = NULL, *context = NULL, *lists = NULL, *out = NULL;

    if (!PyArg_ParseTuple(args, "O|O", &arg, &joined)) {
        return NULL;
    }
    if (joined == Py_None) {
        joined = NULL;
    } else if (joined != NULL && !PyAnySet_Check(joined)) {
        PyErr_SetString(PyExc_TypeError, "parse_sequence_example: joined must be a set of keys");
        return NULL;
    }
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    c.p = view.buf;
    c.end = c.p + view.len;
    if (top_fields(c, parts, 2) < 0) { /* SequenceExample: context = 1, feature_lists = 2 */
        goto fallback;
    }
    context = features_dict(parts[0]);
    if (context == NULL || context == Py_None) {
        out = context;
        context = NULL;
        goto done;
    }
    lists = lists_dict(parts[1], joined, c.p);
    if (lists == NULL || lists == Py_None) {
        out = lists;
        lists = NULL;
        goto done;
    }
    out = PyTuple_Pack(2, context, lists);
    goto done;
fallback:
    out = Py_None;
    Py_INCREF(out);
done:
    Py_XDECREF(context);
    Py_XDECREF(lists);
    PyBuffer_Release(&view);
    return out;
}

#define SMALL 4096
#define MAX_SPAN (64 << 20)

/* Whether size bytes at offset lie inside the open file fd: a size from a crafted or stale
 * index must not become an allocation of that size. Only asked of large sizes (one fstat). */
static int inside_file(int fd, long long offset, long long size) {
    struct stat st;
    return fstat(fd, &st) == 0 && offset <= (long long)st.st_size && size <= (long long)st.st_size - offset;
}

/* Reads the framed record of size bytes at offset into small (or a buffer it
 * allocates in *buf) and checks its length and, if verify, both CRCs. 1 with
 * the payload in *payload; 0 for anything else (the caller falls back); -1
 * with an exception set. The GIL is released during the read. */
static int read_frame(int fd, long long offset, Py_ssize_t size, int verify, uint8_t *small, uint8_t **buf,
                      cursor *payload) {
    Py_ssize_t got;
    uint64_t length;
    uint32_t stored;
    uint8_t *b = small;
    *buf = small;
    if (size < 16 || offset < 0 || (size > MAX_SPAN && !inside_file(fd, offset, size))) {
        return 0;
    }
    if (size > SMALL && (b = *buf = PyMem_Malloc((size_t)size)) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    Py_BEGIN_ALLOW_THREADS
    got = pread(fd, b, (size_t)size, (off_t)offset);
    Py_END_ALLOW_THREADS
    if (got != size) {
        return 0;
    }
    memcpy(&length, b, 8);
    if (length != (uint64_t)size - 16) {
        return 0;
    }
    if (verify) {
        memcpy(&stored, b + 8, 4);
        if (tfr_masked_crc32c(b, 8) != stored) {
            return 0;
        }
        memcpy(&stored, b + 12 + length, 4);
        if (tfr_masked_crc32c(b + 12, (size_t)length) != stored) {
            return 0;
        }
    }
    payload->p = b + 12;
    payload->end = payload->p + length;
    return 1;
}

/* read_example(fd, offset, size, verify): one framed record read with pread
 * and decoded: its length checked against the frame, both CRCs checked when
 * verify, the payload decoded as parse_example does. None for anything else
 * (a short read, a length or CRC that does not match, a payload protobuf must
 * decide): the caller then reads the record its own way, which gives the
 * error that names it. */
static PyObject *read_example(PyObject *self, PyObject *args) {
    int fd, verify, ok;
    long long offset;
    Py_ssize_t size;
    uint8_t small[SMALL], *buf;
    cursor payload, features;
    PyObject *out = Py_None;

    if (!PyArg_ParseTuple(args, "iLnp", &fd, &offset, &size, &verify)) {
        return NULL;
    }
    ok = read_frame(fd, offset, size, verify, small, &buf, &payload);
    if (ok < 0) {
        out = NULL;
    } else if (ok && top_fields(payload, &features, 1) == 0) {
        out = features_dict(features);
    } else {
        Py_INCREF(out);
    }
    if (buf != small) {
        PyMem_Free(buf);
    }
    return out;
}

#define MAX_PLANNED 32
#define MAX_DIMS 8

typedef struct {
    PyObject *name;
    const char *key;
    Py_ssize_t keylen;
    int is_float, ndim; /* ndim -1: 1-D of any length */
    npy_intp dims[MAX_DIMS];
    Py_ssize_t count;
    PyObject *array;
} planned;

/* Reads a plan: a tuple of (name, key bytes, is_float, shape tuple or None). 0, -1 to fall back, or -2
 * with an exception set (an is_float whose truth raises). */
static int read_plan(PyObject *plan, planned *p, Py_ssize_t *n) {
    Py_ssize_t i, d, extent;
    if (!PyTuple_Check(plan) || (*n = PyTuple_GET_SIZE(plan)) > MAX_PLANNED) {
        return -1;
    }
    for (i = 0; i < *n; i++) {
        PyObject *entry = PyTuple_GET_ITEM(plan, i), *key, *shape;
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 4) {
            return -1;
        }
        key = PyTuple_GET_ITEM(entry, 1);
        shape = PyTuple_GET_ITEM(entry, 3);
        if (!PyBytes_Check(key) || !(shape == Py_None || PyTuple_Check(shape))) {
            return -1;
        }
        p[i].name = PyTuple_GET_ITEM(entry, 0);
        p[i].key = PyBytes_AS_STRING(key);
        p[i].keylen = PyBytes_GET_SIZE(key);
        p[i].array = NULL;
        p[i].is_float = PyObject_IsTrue(PyTuple_GET_ITEM(entry, 2));
        if (p[i].is_float < 0) {
            *n = i; /* only the entries before this one are set */
            return -2;
        }
        p[i].ndim = shape == Py_None ? -1 : (int)PyTuple_GET_SIZE(shape);
        if (p[i].ndim > MAX_DIMS) {
            return -1;
        }
        p[i].count = extent = 1;
        for (d = 0; d < p[i].ndim; d++) {
            p[i].dims[d] = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, d));
            if (p[i].dims[d] < 0) {
                PyErr_Clear();
                return -1;
            }
            /* a shape numpy cannot make (it refuses one even when another dim is 0) matches no
             * record: the usual path raises the FeatureError that names the key and the record */
            if (p[i].dims[d] > 1 && extent > NPY_MAX_INTP / 8 / p[i].dims[d]) {
                return -1;
            }
            extent *= p[i].dims[d] ? p[i].dims[d] : 1;
            p[i].count *= p[i].dims[d];
        }
    }
    return 0;
}

/* Decodes the Features of an Example into the plan's arrays; 0, -1 to fall back, -2 on error. */
static int fill_plan(cursor features, planned *p, Py_ssize_t n) {
    uint32_t number, wire;
    Py_ssize_t j;
    while (features.p < features.end) {
        cursor item, parts[2], kind;
        Py_ssize_t keylen, k;
        uint32_t which;
        buffer b = {NULL, 0, 0};
        if (field(&features, &number, &wire, &item) < 0 || number != 1 || wire != 2 ||
            top_fields(item, parts, 2) < 0 || parts[0].p == NULL || parts[1].p == NULL) {
            return -1;
        }
        keylen = parts[0].end - parts[0].p;
        for (k = 0; k < keylen; k++) {
            if (parts[0].p[k] & 0x80) {
                return -1; /* not ASCII: protobuf checks the UTF-8 */
            }
        }
        for (j = 0; j < n; j++) { /* the first feature of the plan that reads this key */
            if (p[j].keylen == keylen && memcmp(p[j].key, parts[0].p, (size_t)keylen) == 0) {
                break;
            }
        }
        if (j == n) {
            if (check_feature(parts[1]) < 0) {
                return -1;
            }
            continue;
        }
        which = kind_of(parts[1], &kind);
        if (which != (p[j].is_float ? 2u : 3u) || collect(kind, p[j].is_float, &b) < 0) {
            PyMem_Free(b.data);
            return -1; /* another kind, or malformed: the usual path says */
        }
        for (; j < n; j++) { /* each feature reading this key gets an array of its own */
            if (p[j].keylen != keylen || memcmp(p[j].key, parts[0].p, (size_t)keylen) != 0) {
                continue;
            }
            if (p[j].array != NULL || which != (p[j].is_float ? 2u : 3u) ||
                (p[j].ndim >= 0 && (Py_ssize_t)(b.size / (p[j].is_float ? 4 : 8)) != p[j].count)) {
                PyMem_Free(b.data);
                return -1; /* a key twice, another kind, a size that does not fit: the usual path says */
            }
            p[j].array = array_of(&b, p[j].is_float, p[j].ndim < 0 ? 0 : p[j].ndim,
                                  p[j].ndim < 0 ? NULL : p[j].dims);
            if (p[j].array == NULL) {
                PyMem_Free(b.data);
                return -2;
            }
        }
        PyMem_Free(b.data);
    }
    for (j = 0; j < n; j++) {
        if (p[j].array == NULL) {
            return -1; /* missing: a default, or the error that names it */
        }
    }
    return 0;
}

/* read_item(fd, index, r, verify, plan, wrap): record r of a shard (index:
 * int64 [n, 2] of offsets and frame sizes) read as read_example reads it, and
 * only the features of the plan decoded (each a tuple (name, key bytes,
 * is_float, shape tuple or None for 1-D of any length)): {name: wrap(array)}
 * in the plan's order. None wherever the usual path must decide (a missing
 * key, another kind or size, anything read_example leaves). */
static PyObject *read_item(PyObject *self, PyObject *args) {
    int fd, verify, ok;
    Py_ssize_t r, n = 0, j;
    PyObject *index, *plan, *wrap, *out = NULL;
    PyArrayObject *ix;
    int64_t row[2];
    uint8_t small[SMALL], *buf = small;
    cursor payload, features;
    planned p[MAX_PLANNED];

    if (!PyArg_ParseTuple(args, "iOnpOO", &fd, &index, &r, &verify, &plan, &wrap)) {
        return NULL;
    }
    ix = (PyArrayObject *)index;
    if (!PyArray_Check(index) || PyArray_NDIM(ix) != 2 || PyArray_DIM(ix, 1) != 2 ||
        PyArray_TYPE(ix) != NPY_INT64 || !PyArray_IS_C_CONTIGUOUS(ix) || r < 0 || r >= PyArray_DIM(ix, 0)) {
        Py_RETURN_NONE;
    }
    ok = read_plan(plan, p, &n);
    if (ok == -2) {
        return NULL;
    }
    if (ok < 0) {
        Py_RETURN_NONE;
    }
    /* copied, as _frames.c copies its rows: a contiguous array need not be aligned (a view at an odd
     * offset of a buffer), and a misaligned int64_t load is undefined behaviour */
    memcpy(row, (const char *)PyArray_DATA(ix) + (size_t)r * sizeof(row), sizeof(row));
    ok = read_frame(fd, (long long)row[0], (Py_ssize_t)row[1], verify, small, &buf, &payload);
    if (ok < 0) {
        goto done;
    }
    if (ok && top_fields(payload, &features, 1) == 0) {
        ok = fill_plan(features, p, n);
        if (ok == -2) {
            goto done;
        }
        if (ok == 0) {
            out = PyDict_New();
            for (j = 0; out != NULL && j < n; j++) {
                PyObject *tensor = PyObject_CallOneArg(wrap, p[j].array);
                if (tensor == NULL || PyDict_SetItem(out, p[j].name, tensor) < 0) {
                    Py_CLEAR(out);
                }
                Py_XDECREF(tensor);
            }
            goto done;
        }
    }
    out = Py_None;
    Py_INCREF(out);
done:
    for (j = 0; j < n; j++) {
        Py_XDECREF(p[j].array);
    }
    if (buf != small) {
        PyMem_Free(buf);
    }
    return out;
}

static PyObject *crc32c_of(PyObject *self, PyObject *args) {
    Py_buffer view;
    int force_software = 0;
    uint32_t crc;
    if (!PyArg_ParseTuple(args, "y*|p", &view, &force_software)) {
        return NULL;
    }
    crc = tfr_crc32c(view.buf, (size_t)view.len, force_software);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

static PyMethodDef methods[] = {
    {"parse_example", parse_example, METH_O,
     "parse_example(payload): {key: list of bytes | float32 array | int64 array}, keys sorted; "
     "None where protobuf must decide."},
    {"parse_sequence_example", parse_sequence_example, METH_VARARGS,
     "parse_sequence_example(payload, joined=None): (context dict, {key: list of step values}), keys sorted; "
     "None where protobuf must decide. Keys in the set joined whose steps are each one bytes value of one "
     "length and encoding: (start, stride, T, n), value t at payload[start + t * stride:][:n]."},
    {"read_example", read_example, METH_VARARGS,
     "read_example(fd, offset, size, verify): the framed record at offset, CRCs checked if verify, "
     "as parse_example decodes its payload; None where the caller must read it its own way."},
    {"read_item", read_item, METH_VARARGS,
     "read_item(fd, index, r, verify, plan, wrap): record r, only the plan's features, as {name: wrap(array)}; "
     "None where the usual path must decide."},
    {"crc32c", crc32c_of, METH_VARARGS, "crc32c(data, force_software=False): the CRC-32C of data (for the tests)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastwire", NULL, -1, methods};

PyMODINIT_FUNC PyInit__fastwire(void) {
    import_array(); /* returns NULL from here if numpy's C API cannot be loaded */
    tfr_crc32c_setup();
    return PyModule_Create(&module);
}
