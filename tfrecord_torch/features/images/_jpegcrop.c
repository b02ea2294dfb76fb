/* Decoding only a window of a JPEG, with libjpeg-turbo's jpeglib API.
 *
 * decode_crop(data, out, top, left, height, width, fast) decodes the
 * (top, left, height, width) window of a baseline or progressive JPEG to RGB
 * into `out` (a writable C-contiguous buffer of height * width * 3 bytes),
 * with the GIL released. The window is taken as signed 64-bit integers and
 * must lie inside the image (ValueError naming the window and the image's
 * size otherwise), as the pure-Python path requires. Rows above the window are skipped
 * (jpeg_skip_scanlines: entropy-decoded, no IDCT), columns outside it are
 * not produced (jpeg_crop_scanline) and rows below it are never read: what
 * tf.image.decode_and_crop_jpeg and DALI's ImageDecoderRandomCrop do.
 *
 * The pixels equal a full decode's, cropped: the window asked of libjpeg is
 * widened by up to 16 pixels on each side (its iMCU boundaries), so the
 * upsampler never sees an edge the full image does not have.
 *
 * Corrupt data raises ValueError with libjpeg's message; libjpeg's
 * warnings (premature end, extraneous bytes) are errors too, as simplejpeg
 * makes them. Since the rows below the window are not decoded, a file with
 * no end-of-image marker after its first scan is refused before decoding,
 * so a truncated file fails here as it does in a full decode.
 *
 * jpeg_headers(images) reads a whole batch's JPEG frame headers (size,
 * components, precision) in one call, walking the markers as libjpeg does
 * up to the first scan (and as limits.read_header does), so a batch's
 * headers cost one GIL round trip.
 *
 * decode_planes(data, out, height, width, fast) decodes a whole JPEG straight to RGB planes
 * [3, H, W]: libjpeg gives rows (as many at once as it makes, 2 for 4:2:0) into a buffer still in
 * cache, and each is spread over the planes from there, so no [H, W, 3] image is made beside them.
 *
 * to_planes(image, out, height, width, flip) turns a decoded RGB image
 * [H, W, 3] into planes [3, H, W], each row mirrored if asked, with the GIL
 * released, 16 pixels at a time with SSSE3 where the CPU has it: torch's
 * copy of the permuted view (what stacking such images into a contiguous
 * batch runs) takes ten times as long.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include <jpeglib.h>

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
} error_mgr;

static void on_error(j_common_ptr cinfo) {
    error_mgr *err = (error_mgr *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, err->message);
    longjmp(err->jump, 1);
}

static void on_message(j_common_ptr cinfo, int level) {
    if (level < 0) { /* a warning: corrupt data libjpeg would paper over */
        on_error(cinfo);
    }
}

/* Whether an end-of-image marker (FF D9) follows byte `from`. Entropy-coded
 * data never holds FF D9 (an FF there is followed by 00 or a restart
 * marker), so its absence means the file was cut short. */
static int has_eoi(const unsigned char *data, size_t size, size_t from) {
    size_t i;
    for (i = size; i >= from + 2; i--) {
        if (data[i - 2] == 0xFF && data[i - 1] == 0xD9) {
            return 1;
        }
    }
    return 0;
}

/* Ends a decode: rows below the window are never read. */
static void finish(j_decompress_ptr cinfo) {
    if (cinfo->output_scanline < cinfo->output_height) {
        jpeg_abort_decompress(cinfo);
    } else {
        jpeg_finish_decompress(cinfo);
    }
    jpeg_destroy_decompress(cinfo);
}

#define ROW_OFFSET 1 /* the row buffer's rows start this far past an aligned address (see decode) */

static void row_to_planes(const unsigned char *row, unsigned char *dst, size_t height, size_t width, size_t y);

/* Decodes the window (top, left, height, width) into out ([height, width, 3], or the planes
 * [3, height, width] if `planes`: each row decoded into a row buffer, still in cache, and spread
 * over the planes from there); 0, or -1 with message set. The window
 * comes as the caller gave it (signed, 64-bit) and is checked against the image in 64 bits before
 * libjpeg sees it: a negative or wrapped value must never reach jpeg_crop_scanline or
 * jpeg_skip_scanlines, which would write outside their buffers or skip the whole image. */
static int decode(const unsigned char *data, size_t size, unsigned char *out, long long top_arg,
                  long long left_arg, long long height_arg, long long width_arg, int fast, int exact,
                  int planes, char *message) {
    struct jpeg_decompress_struct cinfo;
    error_mgr err;
    unsigned char *volatile row = NULL;
    JDIMENSION xoffset, cropped, y;
    unsigned int top, left, height, width, margin_left, stride, pitch, strip;
    long long image_height, image_width;

    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = on_error;
    err.pub.emit_message = on_message;
    err.message[0] = '\0';
    if (setjmp(err.jump)) {
        strncpy(message, err.message, JMSG_LENGTH_MAX);
        jpeg_destroy_decompress(&cinfo);
        free(row);
        return -1;
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, data, (unsigned long)size);
    jpeg_read_header(&cinfo, TRUE);
    image_height = (long long)cinfo.image_height;
    image_width = (long long)cinfo.image_width;
    if (exact && (height_arg != image_height || width_arg != image_width)) {
        snprintf(message, JMSG_LENGTH_MAX, "image is %lldx%lld, expected %lldx%lld", image_height, image_width,
                 height_arg, width_arg);
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    /* no sum here can overflow: each side is bounded by the image (at most 65535) or checked first */
    if (top_arg < 0 || left_arg < 0 || height_arg < 1 || width_arg < 1 || height_arg > image_height ||
        width_arg > image_width || top_arg > image_height - height_arg || left_arg > image_width - width_arg) {
        snprintf(message, JMSG_LENGTH_MAX, "crop window (%lld, %lld, %lld, %lld) is outside the %lldx%lld image",
                 top_arg, left_arg, height_arg, width_arg, image_height, image_width);
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    top = (unsigned int)top_arg;
    left = (unsigned int)left_arg;
    height = (unsigned int)height_arg;
    width = (unsigned int)width_arg;
    if (!has_eoi(data, size, size - cinfo.src->bytes_in_buffer)) {
        snprintf(message, JMSG_LENGTH_MAX, "Premature end of JPEG file (no end-of-image marker)");
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    cinfo.out_color_space = JCS_RGB;
    cinfo.dct_method = fast ? JDCT_IFAST : JDCT_ISLOW;
    cinfo.do_fancy_upsampling = TRUE;
    jpeg_start_decompress(&cinfo);
    /* widen by 16 pixels (the largest iMCU) where the image allows */
    xoffset = left >= 16 ? left - 16 : 0;
    cropped = (left + width + 16 <= cinfo.output_width ? left + width + 16 : cinfo.output_width) - xoffset;
    if (xoffset > 0 || cropped < cinfo.output_width) {
        jpeg_crop_scanline(&cinfo, &xoffset, &cropped);
    }
    if (top > 0) {
        jpeg_skip_scanlines(&cinfo, top);
    }
    if (!planes && left == 0 && width == cinfo.output_width && xoffset == 0) { /* whole rows: no copy */
        while (cinfo.output_scanline < top + height) {
            JSAMPROW rows[1] = {out + (size_t)(cinfo.output_scanline - top) * width * 3};
            jpeg_read_scanlines(&cinfo, rows, 1);
        }
        finish(&cinfo);
        return 0;
    }
    margin_left = left - (unsigned int)xoffset;
    stride = (unsigned int)cropped * 3;
    /* as many rows per call as libjpeg makes at once (2 for 4:2:0): asked for one at a time, it
     * upsamples a pair into a spare row of its own and copies the second out on the next call */
    strip = cinfo.rec_outbuf_height >= 1 && cinfo.rec_outbuf_height <= 4 ? (unsigned int)cinfo.rec_outbuf_height : 1;
    /* ROW_OFFSET: libjpeg-turbo's SIMD color conversion writes a row that starts aligned (16 bytes for
     * SSE2, 32 for AVX2) with non-temporal stores, past the caches; read back at once from there, each
     * row came from memory (a 256x256 JPEG to planes took up to 1.5 times as long as to [H, W, 3]).
     * Rows one byte off get ordinary stores and stay in cache for the copy below. */
    pitch = (stride + 15u) & ~15u; /* every row of the strip as far past alignment as the first */
    row = malloc((size_t)pitch * strip + ROW_OFFSET);
    if (row == NULL) {
        snprintf(message, JMSG_LENGTH_MAX, "out of memory for %u rows of %u bytes", strip, stride);
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    for (y = 0; y < height;) {
        JSAMPROW rows[4];
        JDIMENSION i, want = height - y < strip ? height - y : strip, got;
        for (i = 0; i < want; i++) {
            rows[i] = row + ROW_OFFSET + (size_t)i * pitch;
        }
        got = jpeg_read_scanlines(&cinfo, rows, want);
        if (got == 0 || got > want) { /* cannot happen with a memory source; never loop or overrun on it */
            snprintf(message, JMSG_LENGTH_MAX, "libjpeg gave %u rows at row %u of %u", got, y, height);
            jpeg_destroy_decompress(&cinfo);
            free(row);
            return -1;
        }
        for (i = 0; i < got; i++, y++) {
            const unsigned char *from = rows[i] + (size_t)margin_left * 3;
            if (planes) {
                row_to_planes(from, out, height, width, y);
            } else {
                memcpy(out + (size_t)y * width * 3, from, (size_t)width * 3);
            }
        }
    }
    finish(&cinfo);
    free(row);
    return 0;
}

/* A window coordinate: any Python int; one beyond 64 bits is refused here (no image is that large). */
static int coordinate(PyObject *value, const char *name, long long *out) {
    int overflow;
    PyObject *number = PyNumber_Index(value);
    if (number == NULL) {
        return -1;
    }
    *out = PyLong_AsLongLongAndOverflow(number, &overflow);
    if (overflow) {
        PyErr_Format(PyExc_ValueError, "crop window %s=%R is outside any image", name, number);
    }
    Py_DECREF(number);
    return overflow || (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* Whether height x width is a size a JPEG can have (so that height * width * 3 cannot overflow). */
static int plausible(long long height, long long width) {
    return height >= 0 && width >= 0 && height <= JPEG_MAX_DIMENSION && width <= JPEG_MAX_DIMENSION;
}

/* decode() of data into out with the GIL released, both buffers then released: None, or NULL with
 * ValueError set to libjpeg's message. */
static PyObject *decode_into(Py_buffer *data, Py_buffer *out, long long top, long long left, long long height,
                             long long width, int fast, int exact, int planes) {
    char message[JMSG_LENGTH_MAX];
    int status;

    message[0] = '\0';
    Py_BEGIN_ALLOW_THREADS
    status = decode((const unsigned char *)data->buf, (size_t)data->len, (unsigned char *)out->buf, top, left,
                    height, width, fast, exact, planes, message);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(data);
    PyBuffer_Release(out);
    if (status != 0) {
        PyErr_SetString(PyExc_ValueError, message[0] ? message : "cannot decode JPEG");
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *decode_crop(PyObject *self, PyObject *args) {
    Py_buffer data, out;
    PyObject *args4[4];
    long long top, left, height, width;
    int fast;

    if (!PyArg_ParseTuple(args, "y*w*OOOOp", &data, &out, &args4[0], &args4[1], &args4[2], &args4[3], &fast)) {
        return NULL;
    }
    if (coordinate(args4[0], "top", &top) < 0 || coordinate(args4[1], "left", &left) < 0 ||
        coordinate(args4[2], "height", &height) < 0 || coordinate(args4[3], "width", &width) < 0) {
        PyBuffer_Release(&data);
        PyBuffer_Release(&out);
        return NULL;
    }
    /* a height or width no JPEG can have is refused by decode() with the image's size, before out is
     * touched; any other must match out exactly */
    if (!PyBuffer_IsContiguous(&out, 'C') ||
        (plausible(height, width) && (size_t)out.len != (size_t)height * (size_t)width * 3)) {
        PyErr_Format(PyExc_ValueError, "out must be a C-contiguous buffer of %lld x %lld x 3 bytes",
                     height, width);
        PyBuffer_Release(&data);
        PyBuffer_Release(&out);
        return NULL;
    }
    return decode_into(&data, &out, top, left, height, width, fast, 0, 0);
}

/* The images of a batch: our own tuple of them (the caller's list may change meanwhile; the tuple
 * holds each bytes alive while the GIL is away), each one's address and size, and room for each
 * one's status and libjpeg message. NULL with an error set on failure (TypeError naming an item
 * that is not bytes). */
typedef struct {
    PyObject *seq;
    Py_ssize_t n;
    const unsigned char **data;
    size_t *sizes;
    int *status;
    char (*messages)[JMSG_LENGTH_MAX];
} images_t;

static void images_free(images_t *images) {
    free(images->data);
    free(images->sizes);
    free(images->status);
    free(images->messages);
    Py_XDECREF(images->seq);
}

static int images_take(PyObject *items, images_t *images) {
    Py_ssize_t i, room;

    memset(images, 0, sizeof(*images));
    images->seq = PySequence_Tuple(items);
    if (images->seq == NULL) {
        return -1;
    }
    images->n = PyTuple_GET_SIZE(images->seq);
    room = images->n ? images->n : 1;
    images->data = malloc(sizeof(*images->data) * (size_t)room);
    images->sizes = malloc(sizeof(*images->sizes) * (size_t)room);
    images->status = calloc((size_t)room, sizeof(*images->status));
    images->messages = malloc(sizeof(*images->messages) * (size_t)room);
    if (!images->data || !images->sizes || !images->status || !images->messages) {
        PyErr_NoMemory();
        return -1;
    }
    for (i = 0; i < images->n; i++) {
        PyObject *item = PyTuple_GET_ITEM(images->seq, i);
        if (!PyBytes_Check(item)) {
            PyErr_Format(PyExc_TypeError, "images[%zd] is %s, not bytes", i, Py_TYPE(item)->tp_name);
            return -1;
        }
        images->data[i] = (const unsigned char *)PyBytes_AS_STRING(item);
        images->sizes[i] = (size_t)PyBytes_GET_SIZE(item);
        images->messages[i][0] = '\0';
    }
    return 0;
}

/* Decodes image i whole into target (zero-filled if it fails); its status kept. No GIL needed. */
static void images_decode(images_t *images, Py_ssize_t i, unsigned char *target, long long height,
                          long long width, int fast) {
    images->status[i] = decode(images->data[i], images->sizes[i], target, 0, 0, height, width, fast, 1, 0,
                               images->messages[i]);
    if (images->status[i] != 0) {
        memset(target, 0, (size_t)height * (size_t)width * 3);
    }
}

/* images[i]'s libjpeg message as a str (new reference), or NULL with an error set. */
static PyObject *images_message(images_t *images, Py_ssize_t i) {
    return PyUnicode_FromString(images->messages[i][0] ? images->messages[i] : "cannot decode JPEG");
}

static PyObject *decode_many(PyObject *self, PyObject *args) {
    PyObject *items, *errors = NULL;
    Py_buffer out;
    long long height, width;
    int fast;
    Py_ssize_t i;
    size_t slot;
    images_t images;

    if (!PyArg_ParseTuple(args, "Ow*LLp", &items, &out, &height, &width, &fast)) {
        return NULL;
    }
    if (!plausible(height, width)) {
        PyErr_Format(PyExc_ValueError, "height x width (%lld x %lld) is not a JPEG size (0 to %d each)", height,
                     width, (int)JPEG_MAX_DIMENSION);
        PyBuffer_Release(&out);
        return NULL;
    }
    if (images_take(items, &images) < 0) {
        goto done;
    }
    slot = (size_t)height * (size_t)width * 3;
    /* by division: slot * n may wrap in 64 bits (n near 2**30 images of 65500 x 65500), and a wrapped
     * product equal to out.len would let the loop below write past out */
    if (!PyBuffer_IsContiguous(&out, 'C') || out.len < 0 || (size_t)out.len % slot != 0 ||
        (size_t)out.len / slot != (size_t)images.n) {
        PyErr_Format(PyExc_ValueError, "out must be a C-contiguous buffer of %zd x %lld x %lld x 3 bytes",
                     images.n, height, width);
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    for (i = 0; i < images.n; i++) {
        images_decode(&images, i, (unsigned char *)out.buf + slot * (size_t)i, height, width, fast);
    }
    Py_END_ALLOW_THREADS
    errors = PyList_New(images.n);
    for (i = 0; errors != NULL && i < images.n; i++) {
        PyObject *value = Py_None;
        if (images.status[i] != 0) {
            value = images_message(&images, i);
            if (value == NULL) {
                Py_CLEAR(errors);
                break;
            }
        } else {
            Py_INCREF(value);
        }
        PyList_SET_ITEM(errors, i, value);
    }
done:
    images_free(&images);
    PyBuffer_Release(&out);
    return errors;
}

/* decode_claimed(images, out, slots, claim, height, width, fast): the images this call claims,
 * decoded whole into their slots of out. Every thread decoding one batch calls it with the same
 * arguments: each image goes to the call that takes its number from `claim` (a native int64, taken
 * atomically without the GIL), so the threads finish the batch together however its images' costs
 * fall. Every slot number is checked against out (in 64 bits, on a copy of them) before the GIL is
 * let go; a claim outside [0, len(images)) ends the call. */
static PyObject *decode_claimed(PyObject *self, PyObject *args) {
    PyObject *items, *failures = NULL;
    Py_buffer out, slots_arg, claim;
    long long height, width, count, *slots = NULL, *next;
    int fast;
    Py_ssize_t i;
    size_t slot;
    images_t images;

    if (!PyArg_ParseTuple(args, "Ow*y*w*LLp", &items, &out, &slots_arg, &claim, &height, &width, &fast)) {
        return NULL;
    }
    memset(&images, 0, sizeof(images));
    if (!plausible(height, width) || height == 0 || width == 0) {
        PyErr_Format(PyExc_ValueError, "height x width (%lld x %lld) is not a JPEG size (1 to %d each)", height,
                     width, (int)JPEG_MAX_DIMENSION);
        goto done;
    }
    slot = (size_t)height * (size_t)width * 3;
    if (!PyBuffer_IsContiguous(&out, 'C') || out.len < 0 || (size_t)out.len % slot != 0) {
        PyErr_Format(PyExc_ValueError, "out must be a C-contiguous buffer of N x %lld x %lld x 3 bytes", height,
                     width);
        goto done;
    }
    if (claim.len < (Py_ssize_t)sizeof(long long) || (uintptr_t)claim.buf % _Alignof(long long) != 0) {
        PyErr_SetString(PyExc_ValueError, "claim must be a writable, aligned buffer of one int64");
        goto done;
    }
    if (images_take(items, &images) < 0) {
        goto done;
    }
    if (slots_arg.len < 0 || (size_t)slots_arg.len != sizeof(long long) * (size_t)images.n) {
        PyErr_Format(PyExc_ValueError, "slots must hold %zd int64 slot numbers, one per image", images.n);
        goto done;
    }
    count = (long long)((size_t)out.len / slot);
    slots = malloc(sizeof(*slots) * (size_t)(images.n ? images.n : 1));
    if (slots == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    memcpy(slots, slots_arg.buf, sizeof(*slots) * (size_t)images.n);
    for (i = 0; i < images.n; i++) {
        if (slots[i] < 0 || slots[i] >= count) {
            PyErr_Format(PyExc_ValueError, "slots[%zd] = %lld is not a slot of out (0 to %lld)", i, slots[i],
                         count - 1);
            goto done;
        }
    }
    next = (long long *)claim.buf;
    Py_BEGIN_ALLOW_THREADS
    for (;;) {
        long long k = __atomic_fetch_add(next, 1, __ATOMIC_RELAXED);
        if (k < 0 || k >= (long long)images.n) {
            break;
        }
        images_decode(&images, (Py_ssize_t)k, (unsigned char *)out.buf + slot * (size_t)slots[k], height, width,
                      fast);
        if (images.status[k] == 0) {
            images.status[k] = 2; /* claimed here and decoded (0: another call's; else failed here) */
        }
    }
    Py_END_ALLOW_THREADS
    failures = PyList_New(0);
    for (i = 0; failures != NULL && i < images.n; i++) {
        if (images.status[i] != 0 && images.status[i] != 2) {
            PyObject *message = images_message(&images, i);
            PyObject *pair = message == NULL ? NULL : Py_BuildValue("(nN)", i, message);
            if (pair == NULL || PyList_Append(failures, pair) < 0) {
                Py_XDECREF(pair);
                Py_CLEAR(failures);
            } else {
                Py_DECREF(pair);
            }
        }
    }
done:
    free(slots);
    images_free(&images);
    PyBuffer_Release(&out);
    PyBuffer_Release(&slots_arg);
    PyBuffer_Release(&claim);
    return failures;
}

/* How libjpeg's read_markers (jdmarker.c) treats a marker before the first scan. */
enum { SOS = 0xDA, SOI = 0xD8, EOI = 0xD9 };
/* Why a walk stops without a frame: limits.py's _TRUNCATED, _SCAN_FIRST, _SECOND, _EARLY_END, _UNKNOWN,
 * _BAD_LENGTH, in that order. */
enum { TRUNCATED, SCAN_FIRST, SECOND, EARLY_END, UNKNOWN, BAD_LENGTH };

static int is_sof(unsigned char m) { /* SOF0-SOF15: the frame header (C4 DHT, C8 JPG, CC DAC are not) */
    return m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC;
}
static int is_table(unsigned char m) { /* DHT, DAC, DQT, DRI: a length below 2 is refused */
    return m == 0xC4 || m == 0xCC || m == 0xDB || m == 0xDD;
}
static int is_skipped(unsigned char m) { /* APPn, COM, DNL: a length below 2 skips the length alone */
    return (m >= 0xE0 && m <= 0xEF) || m == 0xFE || m == 0xDC;
}

/* The frame header libjpeg's jpeg_read_header would read, walking the markers as it does up to the
 * first scan, exactly as limits._jpeg_walk does (see there for the rules): returns 1 with values =
 * (width, height, components, precision), or 0 with values = (reason, byte offset, marker) where
 * libjpeg would stop with an error before a scan, or the frame is malformed. Positions are 64-bit and
 * each step adds at most 65537, so no sum can wrap; no byte at or past n is read. */
static int jpeg_frame(const unsigned char *data, unsigned long long n, long long values[4]) {
    unsigned long long pos = 2, at, length;
    int have_frame = 0;
    unsigned char marker;
    while (1) {
        while (pos < n && data[pos] != 0xFF) { /* libjpeg's next_marker: other bytes skipped */
            pos++;
        }
        while (pos < n && data[pos] == 0xFF) { /* fill bytes */
            pos++;
        }
        if (pos >= n) {
            goto truncated;
        }
        marker = data[pos];
        at = pos - 1;
        pos++;
        if (marker == 0 || marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) {
            continue; /* FF 00 (a stuffed zero, skipped), TEM, RST0-7: no length */
        }
        if (marker == SOS) {
            if (have_frame) {
                return 1;
            }
            values[0] = SCAN_FIRST;
            goto stop;
        }
        if (marker == SOI || (is_sof(marker) && have_frame)) {
            values[0] = SECOND;
            goto stop;
        }
        if (marker == EOI) {
            values[0] = EARLY_END;
            goto stop;
        }
        if (!is_sof(marker) && !is_table(marker) && !is_skipped(marker)) {
            values[0] = UNKNOWN;
            goto stop;
        }
        if (pos + 2 > n) {
            goto truncated;
        }
        length = (unsigned long long)data[pos] << 8 | data[pos + 1];
        if (is_sof(marker)) {
            if (pos + 8 > n) {
                goto truncated;
            }
            if (length != 8 + 3 * (unsigned long long)data[pos + 7]) { /* libjpeg: "Bogus marker length" */
                values[0] = BAD_LENGTH;
                goto stop;
            }
            values[0] = (long long)data[pos + 5] << 8 | data[pos + 6]; /* width */
            values[1] = (long long)data[pos + 3] << 8 | data[pos + 4]; /* height */
            values[2] = data[pos + 7];                                  /* components */
            values[3] = data[pos + 2];                                  /* precision */
            have_frame = 1;
        } else if (length < 2 && is_table(marker)) {
            values[0] = BAD_LENGTH;
            goto stop;
        }
        pos += length < 2 ? 2 : length;
    }
truncated:
    values[0] = TRUNCATED;
    values[1] = (long long)n;
    values[2] = 0;
    return 0;
stop:
    values[1] = (long long)at;
    values[2] = marker;
    return 0;
}

static PyObject *jpeg_headers(PyObject *self, PyObject *args) {
    PyObject *items, *seq, *result = NULL;
    Py_ssize_t n, i;
    const unsigned char **data = NULL;
    unsigned long long *sizes = NULL;
    int *status = NULL; /* -1: not bytes or not a JPEG, 0: no frame (why in values), 1: found */
    long long (*values)[4] = NULL;

    if (!PyArg_ParseTuple(args, "O", &items)) {
        return NULL;
    }
    seq = PySequence_Tuple(items); /* our own references: the caller's list may change meanwhile */
    if (seq == NULL) {
        return NULL;
    }
    n = PyTuple_GET_SIZE(seq);
    data = malloc(sizeof(*data) * (size_t)(n ? n : 1));
    sizes = malloc(sizeof(*sizes) * (size_t)(n ? n : 1));
    status = malloc(sizeof(*status) * (size_t)(n ? n : 1));
    values = malloc(sizeof(*values) * (size_t)(n ? n : 1));
    if (!data || !sizes || !status || !values) {
        PyErr_NoMemory();
        goto done;
    }
    for (i = 0; i < n; i++) { /* bytes only: immutable, and the tuple holds them while the GIL is away */
        PyObject *item = PyTuple_GET_ITEM(seq, i);
        status[i] = -1;
        data[i] = NULL;
        sizes[i] = 0;
        if (PyBytes_Check(item)) {
            data[i] = (const unsigned char *)PyBytes_AS_STRING(item);
            sizes[i] = (unsigned long long)PyBytes_GET_SIZE(item);
        }
    }
    Py_BEGIN_ALLOW_THREADS
    for (i = 0; i < n; i++) {
        if (sizes[i] >= 3 && data[i][0] == 0xFF && data[i][1] == 0xD8 && data[i][2] == 0xFF) {
            status[i] = jpeg_frame(data[i], sizes[i], values[i]);
        }
    }
    Py_END_ALLOW_THREADS
    result = PyList_New(n);
    for (i = 0; result != NULL && i < n; i++) {
        PyObject *value;
        if (status[i] == 1) {
            value = Py_BuildValue("(LLLL)", values[i][0], values[i][1], values[i][2], values[i][3]);
        } else if (status[i] == 0) {
            value = Py_BuildValue("(LLL)", values[i][0], values[i][1], values[i][2]);
        } else {
            value = Py_None;
            Py_INCREF(value);
        }
        if (value == NULL) {
            Py_CLEAR(result);
            break;
        }
        PyList_SET_ITEM(result, i, value);
    }
done:
    free(data);
    free(sizes);
    free(status);
    free(values);
    Py_DECREF(seq);
    return result;
}

/* The n pixels of interleaved src into r, g, b (a byte each), pixel by pixel; if flip, src is read
 * right to left, from its pixel n - 1 (a mirrored row). */
static void planes_scalar(const unsigned char *src, unsigned char *r, unsigned char *g, unsigned char *b,
                          size_t n, int flip) {
    size_t x;
    if (flip) {
        const unsigned char *p = src + n * 3;
        for (x = 0; x < n; x++) {
            p -= 3;
            r[x] = p[0];
            g[x] = p[1];
            b[x] = p[2];
        }
    } else {
        const unsigned char *p = src;
        for (x = 0; x < n; x++, p += 3) {
            r[x] = p[0];
            g[x] = p[1];
            b[x] = p[2];
        }
    }
}

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_SHUFFLE 1

/* planes_scalar, 16 pixels (48 bytes in, 16 per plane out) per step with SSSE3's byte shuffle: each
 * plane's 16 bytes gathered from the three loaded vectors. Five times as fast as the scalar loop for
 * a 256x256 image. Every load and store lies inside the n pixels given: a step runs only while 16
 * whole pixels remain, the rest go pixel by pixel. */
__attribute__((target("ssse3"))) static void planes_shuffle(const unsigned char *src, unsigned char *r,
                                                            unsigned char *g, unsigned char *b, size_t n,
                                                            int flip) {
    const __m128i r0 = _mm_setr_epi8(0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m128i r1 = _mm_setr_epi8(-1, -1, -1, -1, -1, -1, 2, 5, 8, 11, 14, -1, -1, -1, -1, -1);
    const __m128i r2 = _mm_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 1, 4, 7, 10, 13);
    const __m128i g0 = _mm_setr_epi8(1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m128i g1 = _mm_setr_epi8(-1, -1, -1, -1, -1, 0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1);
    const __m128i g2 = _mm_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 2, 5, 8, 11, 14);
    const __m128i b0 = _mm_setr_epi8(2, 5, 8, 11, 14, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m128i b1 = _mm_setr_epi8(-1, -1, -1, -1, -1, 1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1);
    const __m128i b2 = _mm_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 3, 6, 9, 12, 15);
    const __m128i reverse = _mm_setr_epi8(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    size_t x = 0;
    for (; n - x >= 16; x += 16) {
        /* mirrored: out[x, x + 16) holds src pixels n - x - 1 down to n - x - 16 */
        const unsigned char *p = src + (flip ? n - x - 16 : x) * 3;
        const __m128i a = _mm_loadu_si128((const __m128i *)p);
        const __m128i c = _mm_loadu_si128((const __m128i *)(p + 16));
        const __m128i d = _mm_loadu_si128((const __m128i *)(p + 32));
        __m128i vr = _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(a, r0), _mm_shuffle_epi8(c, r1)),
                                  _mm_shuffle_epi8(d, r2));
        __m128i vg = _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(a, g0), _mm_shuffle_epi8(c, g1)),
                                  _mm_shuffle_epi8(d, g2));
        __m128i vb = _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(a, b0), _mm_shuffle_epi8(c, b1)),
                                  _mm_shuffle_epi8(d, b2));
        if (flip) {
            vr = _mm_shuffle_epi8(vr, reverse);
            vg = _mm_shuffle_epi8(vg, reverse);
            vb = _mm_shuffle_epi8(vb, reverse);
        }
        _mm_storeu_si128((__m128i *)(r + x), vr);
        _mm_storeu_si128((__m128i *)(g + x), vg);
        _mm_storeu_si128((__m128i *)(b + x), vb);
    }
    /* the last n - x pixels: mirrored, they are the first n - x of src */
    planes_scalar(flip ? src : src + x * 3, r + x, g + x, b + x, n - x, flip);
}
#endif

typedef void (*planes_step)(const unsigned char *, unsigned char *, unsigned char *, unsigned char *, size_t, int);

/* The planes loop this CPU runs: SSSE3's shuffle where it has it, else pixel by pixel. */
static planes_step step_for_cpu(void) {
#ifdef HAVE_SHUFFLE
    if (__builtin_cpu_supports("ssse3")) {
        return planes_shuffle;
    }
#endif
    return planes_scalar;
}

/* From interleaved src [height, width, 3] to the three planes of dst [3, height, width], each row
 * read right to left if flip. Unmirrored, the image is one run of height * width pixels. */
static void planes(const unsigned char *src, unsigned char *dst, size_t height, size_t width, int flip) {
    size_t plane = height * width, rows = flip ? height : 1, run = flip ? width : plane, y;
    planes_step step = step_for_cpu();
    if (plane == 0) {
        return;
    }
    for (y = 0; y < rows; y++) {
        unsigned char *r = dst + y * run;
        step(src + y * run * 3, r, r + plane, r + 2 * plane, run, flip);
    }
}

/* Row y of an interleaved image (width pixels) into its place in each of the planes of dst
 * [3, height, width]. */
static void row_to_planes(const unsigned char *row, unsigned char *dst, size_t height, size_t width, size_t y) {
    unsigned char *r = dst + y * width;
    step_for_cpu()(row, r, r + height * width, r + 2 * height * width, width, 0);
}

static PyObject *decode_planes(PyObject *self, PyObject *args) {
    Py_buffer data, out;
    long long height, width;
    int fast;

    if (!PyArg_ParseTuple(args, "y*w*LLp", &data, &out, &height, &width, &fast)) {
        return NULL;
    }
    if (!plausible(height, width) || height < 1 || width < 1 || !PyBuffer_IsContiguous(&out, 'C') ||
        (size_t)out.len != (size_t)height * (size_t)width * 3) {
        PyErr_Format(PyExc_ValueError, "out must be a C-contiguous buffer of 3 x %lld x %lld bytes, a JPEG's size",
                     height, width);
        PyBuffer_Release(&data);
        PyBuffer_Release(&out);
        return NULL;
    }
    return decode_into(&data, &out, 0, 0, height, width, fast, 1, 1);
}

static PyObject *to_planes(PyObject *self, PyObject *args) {
    Py_buffer src, dst;
    Py_ssize_t height, width;
    int flip;

    if (!PyArg_ParseTuple(args, "y*w*nnp", &src, &dst, &height, &width, &flip)) {
        return NULL;
    }
    /* the size is checked before it is multiplied: no product below can wrap */
    if (height < 0 || width < 0 || (width > 0 && height > PY_SSIZE_T_MAX / 3 / width) ||
        !PyBuffer_IsContiguous(&src, 'C') || !PyBuffer_IsContiguous(&dst, 'C') ||
        src.len != height * width * 3 || dst.len != src.len) {
        PyErr_Format(PyExc_ValueError, "image and out must be C-contiguous buffers of %zd x %zd x 3 bytes",
                     height, width);
        PyBuffer_Release(&src);
        PyBuffer_Release(&dst);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    planes((const unsigned char *)src.buf, (unsigned char *)dst.buf, (size_t)height, (size_t)width, flip);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"jpeg_headers", jpeg_headers, METH_VARARGS,
     "jpeg_headers(images): for each bytes image, the JPEG frame header's (width, height, components, "
     "precision); (reason, byte offset, marker) for a JPEG whose markers libjpeg would refuse before its first "
     "scan (limits._jpeg_problem words it); None for anything else (not a JPEG, or not bytes). One call for the "
     "batch, GIL released while scanning."},
    {"decode_many", decode_many, METH_VARARGS,
     "decode_many(images, out, height, width, fast): decode each JPEG (all height x width) to RGB into its "
     "slot of out (len(images) * height * width * 3 bytes), GIL released for the whole list; returns one "
     "error message or None per image (a failed slot is zero-filled)."},
    {"decode_claimed", decode_claimed, METH_VARARGS,
     "decode_claimed(images, out, slots, claim, height, width, fast): each image whose number this call "
     "takes from claim (one int64, taken atomically: threads calling it with the same arguments share the "
     "images) decoded to RGB into out's slot slots[i] (out: N * height * width * 3 bytes; slots: one int64 "
     "per image), GIL released; returns (i, message) for each of them that failed (its slot zero-filled)."},
    {"decode_crop", decode_crop, METH_VARARGS,
     "decode_crop(data, out, top, left, height, width, fast): decode a window of a JPEG to RGB "
     "into out (height * width * 3 bytes), GIL released; ValueError on corrupt data or a window outside "
     "the image."},
    {"decode_planes", decode_planes, METH_VARARGS,
     "decode_planes(data, out, height, width, fast): decode a JPEG of exactly height x width to RGB planes "
     "[3, height, width] in out (3 * height * width bytes), GIL released; ValueError on corrupt data (libjpeg's "
     "warnings too) or another size."},
    {"to_planes", to_planes, METH_VARARGS,
     "to_planes(image, out, height, width, flip): RGB image [height, width, 3] into out [3, height, width] "
     "(both C-contiguous uint8 buffers), each row mirrored if flip; GIL released."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_jpegcrop", NULL, -1, methods};

PyMODINIT_FUNC PyInit__jpegcrop(void) {
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "LIBJPEG_VERSION", JPEG_LIB_VERSION) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
