// TensorBoard event records: CRC-32C, TFRecord framing and the few protobuf
// fields of Event and Summary, hand-encoded (see tfevents.h).
#include "ctl/tfevents.h"
#include <string.h>

static uint32_t crc_table[256];

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
}

uint32_t tfevents_crc32c(const void *data, size_t len) {
    if (!crc_table[1]) crc_init();
    const uint8_t *p = data;
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < len; i++) c = crc_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

uint32_t tfevents_masked_crc(const void *data, size_t len) {
    uint32_t c = tfevents_crc32c(data, len);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

// ---- protobuf wire format: varint (0), fixed64 (1), length-delimited (2), fixed32 (5) ----

static int put_varint(Buf *b, uint64_t v) {
    uint8_t t[10];
    int n = 0;
    do {
        t[n++] = (uint8_t)((v & 0x7F) | (v >= 0x80 ? 0x80 : 0));
        v >>= 7;
    } while (v);
    return buf_append(b, t, (size_t)n);
}

static int put_le(Buf *b, uint64_t v, int nbytes) {
    uint8_t t[8];
    for (int i = 0; i < nbytes; i++) t[i] = (uint8_t)(v >> (8 * i));
    return buf_append(b, t, (size_t)nbytes);
}

static int put_bytes(Buf *b, int field, const void *data, size_t len) {
    if (put_varint(b, (uint64_t)field << 3 | 2) < 0 || put_varint(b, len) < 0) return -1;
    return buf_append(b, data, len);
}

static int put_double(Buf *b, int field, double v) {
    uint64_t u;
    memcpy(&u, &v, 8);
    return put_varint(b, (uint64_t)field << 3 | 1) < 0 ? -1 : put_le(b, u, 8);
}

static int put_float(Buf *b, int field, float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    return put_varint(b, (uint64_t)field << 3 | 5) < 0 ? -1 : put_le(b, u, 4);
}

void tfevents_event_begin(TfEvent *e, double wall_time, int64_t step) {
    buf_reset(&e->summary);
    e->wall_time = wall_time;
    e->step = step;
    e->nvalues = 0;
}

int tfevents_event_scalar(TfEvent *e, const char *tag, float value, PailErr *err) {
    size_t n = strlen(tag);
    if (n == 0 || n > 512) return err_set(err, PAIL_ERR_INVALID, "TensorBoard tag '%.40s': 1 to 512 bytes", tag);
    Buf v = {0};
    int rc = put_bytes(&v, 1, tag, n) < 0 || put_float(&v, 2, value) < 0 || put_bytes(&e->summary, 1, v.data, v.len) < 0;
    buf_free(&v);
    if (rc) return err_set(err, PAIL_ERR_NOMEM, "TensorBoard event: out of memory");
    e->nvalues++;
    return 0;
}

static int put_varint_field(Buf *b, int field, uint64_t v) {
    return put_varint(b, (uint64_t)field << 3 | 0) < 0 ? -1 : put_varint(b, v);
}

int tfevents_event_text_table(TfEvent *e, const char *tag, const char *const *cells, int rows, int cols,
                              PailErr *err) {
    size_t n = strlen(tag);
    if (n == 0 || n > 512) return err_set(err, PAIL_ERR_INVALID, "TensorBoard tag '%.40s': 1 to 512 bytes", tag);
    if (rows < 1 || cols < 1) return err_set(err, PAIL_ERR_INVALID, "TensorBoard text '%s': %d x %d cells", tag, rows, cols);
    static const char plugin[] = "text";
    Buf pd = {0}, md = {0}, dims = {0}, dim = {0}, t = {0}, v = {0};
    int rc = put_bytes(&pd, 1, plugin, sizeof plugin - 1) < 0 || put_bytes(&md, 1, pd.data, pd.len) < 0 ||
             put_varint_field(&md, 4, 2) < 0;
    for (int k = 0; k < 2 && !rc; k++) {
        buf_reset(&dim);
        rc = put_varint_field(&dim, 1, (uint64_t)(k ? cols : rows)) < 0 || put_bytes(&dims, 2, dim.data, dim.len) < 0;
    }
    rc = rc || put_varint_field(&t, 1, 7) < 0 || put_bytes(&t, 2, dims.data, dims.len) < 0;
    for (long i = 0; i < (long)rows * cols && !rc; i++)
        rc = put_bytes(&t, 8, cells[i] ? cells[i] : "", cells[i] ? strlen(cells[i]) : 0) < 0;
    rc = rc || put_bytes(&v, 1, tag, n) < 0 || put_bytes(&v, 8, t.data, t.len) < 0 ||
         put_bytes(&v, 9, md.data, md.len) < 0 || put_bytes(&e->summary, 1, v.data, v.len) < 0;
    buf_free(&pd);
    buf_free(&md);
    buf_free(&dims);
    buf_free(&dim);
    buf_free(&t);
    buf_free(&v);
    if (rc) return err_set(err, PAIL_ERR_NOMEM, "TensorBoard event: out of memory");
    e->nvalues++;
    return 0;
}

void tfevents_event_free(TfEvent *e) { buf_free(&e->summary); }

static int frame(Buf *out, const Buf *data, PailErr *err) {
    uint8_t len[8];
    for (int i = 0; i < 8; i++) len[i] = (uint8_t)((uint64_t)data->len >> (8 * i));
    if (buf_append(out, len, 8) < 0 || put_le(out, tfevents_masked_crc(len, 8), 4) < 0 ||
        buf_append(out, data->data, data->len) < 0 || put_le(out, tfevents_masked_crc(data->data, data->len), 4) < 0)
        return err_set(err, PAIL_ERR_NOMEM, "TensorBoard record: out of memory");
    return 0;
}

int tfevents_record(Buf *out, const TfEvent *e, PailErr *err) {
    Buf ev = {0};
    int rc = put_double(&ev, 1, e->wall_time) < 0 || put_varint(&ev, 2 << 3 | 0) < 0 ||
             put_varint(&ev, (uint64_t)e->step) < 0 ||
             put_bytes(&ev, 5, e->summary.data ? (const void *)e->summary.data : "", e->summary.len) < 0;
    rc = rc ? err_set(err, PAIL_ERR_NOMEM, "TensorBoard event: out of memory") : frame(out, &ev, err);
    buf_free(&ev);
    return rc;
}

int tfevents_record_version(Buf *out, double wall_time, PailErr *err) {
    Buf ev = {0};
    static const char v[] = "brain.Event:2";
    int rc = put_double(&ev, 1, wall_time) < 0 || put_bytes(&ev, 3, v, sizeof v - 1) < 0;
    rc = rc ? err_set(err, PAIL_ERR_NOMEM, "TensorBoard event: out of memory") : frame(out, &ev, err);
    buf_free(&ev);
    return rc;
}
