/* The C accelerator of kafkacompat/wire/validation.py: scan_records(section, count) walks the
 * records of a RecordBatch v2 records section (decompressed) in one pass, with no allocation,
 * and returns the same (kind, index, a, b) tuple as scan_records_py, which documents the kinds.
 * Varints are read as Kafka's ByteUtils reads them: at most 5 bytes (varlong 10), zigzag, with
 * Java's wrapping 32/64-bit arithmetic. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

enum {
    OK = 0,
    PREMATURE_EOF = 1,
    BAD_VARINT = 2,
    RECORD_SIZE = 3,
    RECORD_TRUNCATED = 4,
    OFFSET_DELTA = 5,
    HEADER_COUNT = 6,
    HEADER_KEY_SIZE = 7,
    RECORD_LEFTOVER = 8,
    TRAILING_BYTES = 9,
};

static inline int64_t unzigzag32(uint32_t raw)
{
    return (int64_t)(int32_t)((raw >> 1) ^ (uint32_t)-(int32_t)(raw & 1));
}

/* The general case of read_varint: 3 bytes and more, or near the end. */
static int read_varint_slow(const uint8_t *p, Py_ssize_t *pos, Py_ssize_t end, int max_bytes, int bits,
                            int64_t *out)
{
    Py_ssize_t at = *pos;
    uint64_t result = 0;
    int shift = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (at >= end)
            return RECORD_TRUNCATED;
        uint8_t byte = p[at++];
        result |= (uint64_t)(byte & 0x7F) << shift;
        if (!(byte & 0x80)) {
            if (bits == 32)
                *out = unzigzag32((uint32_t)result);
            else
                *out = (int64_t)((result >> 1) ^ (uint64_t)-(int64_t)(result & 1));
            *pos = at;
            return OK;
        }
        shift += 7;
    }
    return BAD_VARINT;
}

/* Reads a zigzag varint of at most max_bytes bytes (5: int, 10: long) from p[*pos], never at or
 * past end. Returns OK, RECORD_TRUNCATED (ran into end) or BAD_VARINT (too long). One- and
 * two-byte values (every delta, and lengths up to 8 KiB) take the inline paths. */
static inline int read_varint(const uint8_t *p, Py_ssize_t *pos, Py_ssize_t end, int max_bytes, int bits,
                              int64_t *out)
{
    Py_ssize_t at = *pos;
    if (at < end) {
        uint32_t first = p[at];
        if (first < 0x80) {
            *out = unzigzag32(first);
            *pos = at + 1;
            return OK;
        }
        uint32_t second = end - at >= 2 ? p[at + 1] : 0x80;
        if (second < 0x80) {
            *out = unzigzag32((first & 0x7F) | (second << 7));
            *pos = at + 2;
            return OK;
        }
    }
    return read_varint_slow(p, pos, end, max_bytes, bits, out);
}

static PyObject *result(int kind, Py_ssize_t index, int64_t a, int64_t b)
{
    return Py_BuildValue("(inLL)", kind, index, (long long)a, (long long)b);
}

#define FIELD(var, max_bytes, bits)                                              \
    do {                                                                         \
        int status_ = read_varint(p, &pos, end, (max_bytes), (bits), &(var));    \
        if (status_ == RECORD_TRUNCATED)                                         \
            return result(RECORD_TRUNCATED, index, length, 0);                   \
        if (status_ != OK)                                                       \
            return result(status_, index, 0, 0);                                 \
    } while (0)

static PyObject *scan(const uint8_t *p, Py_ssize_t total, Py_ssize_t count)
{
    Py_ssize_t pos = 0;
    Py_ssize_t keyless = -1;
    int64_t max_delta = 0, min_delta = 0;
    for (Py_ssize_t index = 0; index < count; index++) {
        int64_t length, delta, offset_delta, size, headers;
        if (pos >= total)
            return result(PREMATURE_EOF, index, 0, 0);
        int status = read_varint(p, &pos, total, 5, 32, &length);
        if (status == RECORD_TRUNCATED)
            return result(PREMATURE_EOF, index, 0, 0);
        if (status != OK)
            return result(status, index, 0, 0);
        if (length < 0 || length > total - pos)
            return result(RECORD_SIZE, index, length, total - pos);
        Py_ssize_t end = pos + (Py_ssize_t)length;
        if (pos >= end)
            return result(RECORD_TRUNCATED, index, length, 0);
        pos += 1; /* attributes: unused in magic 2 */
        FIELD(delta, 10, 64);
        if (index == 0) {
            max_delta = min_delta = delta;
        } else if (delta > max_delta) {
            max_delta = delta;
        } else if (delta < min_delta) {
            min_delta = delta;
        }
        FIELD(offset_delta, 5, 32);
        if (offset_delta != index)
            return result(OFFSET_DELTA, index, offset_delta, 0);
        for (int field = 0; field < 2; field++) { /* key, value */
            FIELD(size, 5, 32);
            if (size >= 0) {
                if (size > end - pos)
                    return result(RECORD_TRUNCATED, index, length, 0);
                pos += (Py_ssize_t)size;
            } else if (field == 0 && keyless < 0) {
                keyless = index;
            }
        }
        FIELD(headers, 5, 32);
        if (headers < 0 || headers > end - pos)
            return result(HEADER_COUNT, index, headers, end - pos);
        for (int64_t h = 0; h < headers; h++) {
            FIELD(size, 5, 32);
            if (size < 0)
                return result(HEADER_KEY_SIZE, index, size, 0);
            if (size > end - pos)
                return result(RECORD_TRUNCATED, index, length, 0);
            pos += (Py_ssize_t)size;
            FIELD(size, 5, 32);
            if (size >= 0) {
                if (size > end - pos)
                    return result(RECORD_TRUNCATED, index, length, 0);
                pos += (Py_ssize_t)size;
            }
        }
        if (pos != end)
            return result(RECORD_LEFTOVER, index, length, end - pos);
    }
    if (pos != total)
        return result(TRAILING_BYTES, count, total - pos, 0);
    return result(OK, keyless, max_delta, min_delta);
}

static PyObject *scan_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "scan_records(section, count) takes 2 arguments");
        return NULL;
    }
    Py_ssize_t count = PyLong_AsSsize_t(args[1]);
    if (count == -1 && PyErr_Occurred())
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *out = scan((const uint8_t *)view.buf, view.len, count);
    PyBuffer_Release(&view);
    return out;
}

static PyMethodDef methods[] = {
    {"scan_records", (PyCFunction)(void (*)(void))scan_records, METH_FASTCALL,
     "scan_records(section, count) -> (kind, index, a, b); see kafkacompat.wire.validation."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "kafkacompat.wire._validate", "Record-walking accelerator.", -1, methods,
};

PyMODINIT_FUNC PyInit__validate(void)
{
    return PyModule_Create(&module);
}
