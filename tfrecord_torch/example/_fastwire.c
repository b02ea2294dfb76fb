/* tf.train.Example decoding in C for the common case.
 *
 * parse_example(payload) walks the Example's wire format (Example.features ->
 * map<string, Feature> -> BytesList | FloatList | Int64List) and returns
 * {key: value} with keys sorted: a list of bytes, or a float32 / int64 NumPy
 * array (made by the numpy.frombuffer given to setup(), over a bytearray, so
 * the arrays are writable and own their memory). It returns None for anything
 * it does not handle exactly as protobuf does -- a malformed message, an
 * unknown field, a map entry without key or value, a repeated key or
 * features field, a Feature with no kind or with its fields split, a key that
 * is not UTF-8 -- and the caller then decodes with protobuf, which gives the
 * values or the error. So where this returns a dict, it is protobuf's.
 *
 * parse_sequence_example(payload) does the same for a tf.train.SequenceExample
 * (context = 1: Features; feature_lists = 2: map<string, FeatureList>, each a
 * repeated Feature): (context dict, {key: [step value, ...]}) or None.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

static PyObject *frombuffer = NULL, *float32 = NULL, *int64 = NULL;

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

/* Reads a tag and, for length-delimited fields, the field's span. */
static int field(cursor *c, uint32_t *number, uint32_t *wire, cursor *span) {
    uint64_t tag, len;
    if (varint(c, &tag) < 0 || (tag >> 3) == 0 || (tag >> 3) > 0x1FFFFFFF) {
        return -1;
    }
    *number = (uint32_t)(tag >> 3);
    *wire = (uint32_t)(tag & 7);
    if (*wire == 2) {
        if (varint(c, &len) < 0 || len > (uint64_t)(c->end - c->p)) {
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

/* A numeric list (FloatList or Int64List, field 1, packed or not) as an array. */
static PyObject *numbers(cursor list, int is_float) {
    buffer b = {NULL, 0, 0};
    PyObject *bytes, *array = NULL;
    uint32_t number, wire;
    cursor span;
    while (list.p < list.end) {
        if (field(&list, &number, &wire, &span) < 0 || number != 1) {
            goto fail;
        }
        if (is_float && wire == 2) {
            size_t n = (size_t)(span.end - span.p);
            if (n % 4 || grow(&b, n) < 0) {
                goto fail;
            }
            memcpy(b.data + b.size, span.p, n);
            b.size += n;
        } else if (is_float && wire == 5) {
            if (list.end - list.p < 4 || grow(&b, 4) < 0) {
                goto fail;
            }
            memcpy(b.data + b.size, list.p, 4);
            b.size += 4;
            list.p += 4;
        } else if (!is_float && (wire == 2 || wire == 0)) {
            cursor values = wire == 2 ? span : list;
            do {
                uint64_t v;
                if (varint(&values, &v) < 0 || grow(&b, 8) < 0) {
                    goto fail;
                }
                memcpy(b.data + b.size, &v, 8);
                b.size += 8;
            } while (wire == 2 && values.p < values.end);
            if (wire == 0) {
                list.p = values.p;
            }
        } else {
            goto fail;
        }
    }
    bytes = PyByteArray_FromStringAndSize(b.size ? b.data : "", (Py_ssize_t)b.size);
    PyMem_Free(b.data);
    if (bytes == NULL) {
        return NULL;
    }
    array = PyObject_CallFunctionObjArgs(frombuffer, bytes, is_float ? float32 : int64, NULL);
    Py_DECREF(bytes);
    return array;
fail:
    PyMem_Free(b.data);
    Py_RETURN_NONE;
}

/* A BytesList as a list of bytes. */
static PyObject *byte_strings(cursor list) {
    PyObject *out = PyList_New(0);
    uint32_t number, wire;
    cursor span;
    while (out != NULL && list.p < list.end) {
        PyObject *item;
        if (field(&list, &number, &wire, &span) < 0 || number != 1 || wire != 2) {
            Py_DECREF(out);
            Py_RETURN_NONE;
        }
        item = PyBytes_FromStringAndSize((const char *)span.p, span.end - span.p);
        if (item == NULL || PyList_Append(out, item) < 0) {
            Py_XDECREF(item);
            Py_CLEAR(out);
            break;
        }
        Py_DECREF(item);
    }
    return out;
}

/* A Feature: exactly one kind field, once. New reference, Py_None to fall back, NULL on error. */
static PyObject *feature(cursor f) {
    uint32_t number, wire;
    cursor span, kind = {NULL, NULL};
    uint32_t which = 0;
    while (f.p < f.end) {
        if (field(&f, &number, &wire, &span) < 0 || wire != 2 || number < 1 || number > 3 || which) {
            Py_RETURN_NONE;
        }
        which = number;
        kind = span;
    }
    if (which == 1) {
        return byte_strings(kind);
    }
    if (which == 2 || which == 3) {
        return numbers(kind, which == 2);
    }
    Py_RETURN_NONE; /* no kind set: protobuf's path says what it decodes to */
}

typedef struct {
    cursor key;
    PyObject *value;
} entry;

static PyObject *sorted_dict(entry *entries, size_t n);

static int compare(const void *a, const void *b) {
    const cursor *x = &((const entry *)a)->key, *y = &((const entry *)b)->key;
    size_t nx = (size_t)(x->end - x->p), ny = (size_t)(y->end - y->p);
    int c = memcmp(x->p, y->p, nx < ny ? nx : ny);
    return c ? c : (nx > ny) - (nx < ny);
}

/* A Features message (map<string, Feature> feature = 1) as a dict, keys sorted.
 * New reference; Py_None to fall back; NULL on error. */
static PyObject *features_dict(cursor features) {
    cursor span;
    uint32_t number, wire;
    entry *entries = NULL;
    size_t n = 0, cap = 0, i;
    PyObject *out = NULL;

    while (features.p < features.end) {
        cursor item, key = {NULL, NULL}, value = {NULL, NULL};
        int has_key = 0, has_value = 0;
        if (field(&features, &number, &wire, &item) < 0 || number != 1 || wire != 2) {
            goto fallback;
        }
        while (item.p < item.end) {
            if (field(&item, &number, &wire, &span) < 0 || wire != 2 || number < 1 || number > 2 ||
                (number == 1 ? has_key : has_value)) {
                goto fallback;
            }
            if (number == 1) {
                key = span;
                has_key = 1;
            } else {
                value = span;
                has_value = 1;
            }
        }
        if (!has_key || !has_value) {
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
        entries[n].key = key;
        entries[n].value = feature(value);
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

/* entries as a dict with UTF-8 keys, sorted; Py_None (new ref) for a repeated or non-UTF-8 key. */
static PyObject *sorted_dict(entry *entries, size_t n) {
    size_t i;
    PyObject *out;
    qsort(entries, n, sizeof(entry), compare);
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

static int ready(void) {
    if (frombuffer == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "setup(numpy.frombuffer, float32, int64) first");
        return -1;
    }
    return 0;
}

static PyObject *parse_example(PyObject *self, PyObject *arg) {
    Py_buffer view;
    cursor c, features;
    PyObject *out;

    if (ready() < 0 || PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) {
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

/* FeatureLists (map<string, FeatureList> feature_list = 1) as a dict, keys sorted. */
static PyObject *lists_dict(cursor lists) {
    uint32_t number, wire;
    entry *entries = NULL;
    size_t n = 0, cap = 0, i;
    PyObject *out = NULL;
    while (lists.p < lists.end) {
        cursor item, parts[2];
        if (field(&lists, &number, &wire, &item) < 0 || number != 1 || wire != 2 ||
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
        entries[n].value = steps(parts[1]);
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

static PyObject *parse_sequence_example(PyObject *self, PyObject *arg) {
    Py_buffer view;
    cursor c, parts[2];
    PyObject *context = NULL, *lists = NULL, *out = NULL;

    if (ready() < 0 || PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) {
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
    lists = lists_dict(parts[1]);
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

static PyObject *setup(PyObject *self, PyObject *args) {
    PyObject *f, *f32, *i64;
    if (!PyArg_ParseTuple(args, "OOO", &f, &f32, &i64)) {
        return NULL;
    }
    Py_XSETREF(frombuffer, Py_NewRef(f));
    Py_XSETREF(float32, Py_NewRef(f32));
    Py_XSETREF(int64, Py_NewRef(i64));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"parse_example", parse_example, METH_O,
     "parse_example(payload): {key: list of bytes | float32 array | int64 array}, keys sorted; "
     "None where protobuf must decide."},
    {"parse_sequence_example", parse_sequence_example, METH_O,
     "parse_sequence_example(payload): (context dict, {key: list of step values}), keys sorted; "
     "None where protobuf must decide."},
    {"setup", setup, METH_VARARGS, "setup(numpy.frombuffer, float32 dtype, int64 dtype)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastwire", NULL, -1, methods};

PyMODINIT_FUNC PyInit__fastwire(void) { return PyModule_Create(&module); }
