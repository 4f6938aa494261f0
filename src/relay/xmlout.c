// S3 XML documents for the relay (xmlout.h). Responses are written by hand
// (they are flat and few); the request body is read with libxml2, network and
// entity expansion off.
#include "relay/xmlout.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <libxml/parser.h>
#include <libxml/tree.h>
#include "store/sigv4.h"

#define XML_HEAD "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
#define S3_NS "http://s3.amazonaws.com/doc/2006-03-01/"

static int esc(Buf *out, const char *s) {
    for (; *s; s++) {
        int rc;
        if ((unsigned char)*s >= 0x80) {  // UTF-8 passes; anything else would make the document unreadable
            size_t l = store_utf8_len((const unsigned char *)s, strnlen(s, 4));
            rc = l ? buf_append(out, s, l) : buf_printf(out, "&#xFFFD;");
            if (rc < 0) return -1;
            if (l) s += l - 1;
            continue;
        }
        switch (*s) {
        case '&': rc = buf_append(out, "&amp;", 5); break;
        case '<': rc = buf_append(out, "&lt;", 4); break;
        case '>': rc = buf_append(out, "&gt;", 4); break;
        case '"': rc = buf_append(out, "&quot;", 6); break;
        case '\'': rc = buf_append(out, "&apos;", 6); break;
        default:
            // XML 1.0 cannot carry most control characters at all.
            if ((unsigned char)*s < 0x20 && *s != '\t' && *s != '\n' && *s != '\r') rc = buf_printf(out, "&#xFFFD;");
            else rc = buf_append(out, s, 1);
        }
        if (rc < 0) return -1;
    }
    return 0;
}

// A key-like value: URL-encoded when enc, else XML-escaped.
static int keyval(Buf *out, const char *s, bool enc) {
    return enc ? sigv4_uri_encode(out, s, strlen(s), true) : esc(out, s);
}

static int elem(Buf *out, const char *name, const char *val, bool enc) {
    if (buf_printf(out, "<%s>", name) < 0 || keyval(out, val, enc) < 0) return -1;
    return buf_printf(out, "</%s>", name);
}

int relay_xml_error(Buf *out, const char *code, const char *message, const char *resource, const char *request_id) {
    int rc = buf_printf(out, XML_HEAD "<Error><Code>%s</Code><Message>", code);
    rc |= esc(out, message ? message : "");
    rc |= buf_printf(out, "</Message>");
    if (resource && *resource) rc |= elem(out, "Resource", resource, false);
    rc |= buf_printf(out, "<RequestId>%s</RequestId></Error>", request_id ? request_id : "");
    return rc < 0 ? -1 : 0;
}

static void iso_time(char out[32], int64_t t) {
    time_t tt = (time_t)t;
    struct tm tm;
    gmtime_r(&tt, &tm);
    strftime(out, 32, "%Y-%m-%dT%H:%M:%S.000Z", &tm);
}

int relay_xml_list(Buf *out, const char *bucket, const RelayRoute *r, const StoreList *l) {
    bool enc = r->encoding_url;
    int rc = buf_printf(out, XML_HEAD "<ListBucketResult xmlns=\"" S3_NS "\">");
    rc |= elem(out, "Name", bucket, false);
    rc |= elem(out, "Prefix", r->prefix, enc);
    if (r->delimiter[0]) rc |= elem(out, "Delimiter", r->delimiter, enc);
    rc |= buf_printf(out, "<MaxKeys>%d</MaxKeys>", r->max_keys);
    if (enc) rc |= buf_printf(out, "<EncodingType>url</EncodingType>");
    rc |= buf_printf(out, "<IsTruncated>%s</IsTruncated>", l->truncated ? "true" : "false");
    if (r->list_v2) {
        rc |= buf_printf(out, "<KeyCount>%d</KeyCount>", l->n + l->nprefixes);
        if (r->start_after[0]) rc |= elem(out, "StartAfter", r->start_after, enc);
        if (r->token_raw[0]) rc |= elem(out, "ContinuationToken", r->token_raw, false);
        char tok[2 * STORE_MAX_KEY];
        if (l->truncated && l->next_token[0] && relay_token_encode(l->next_token, tok, sizeof tok) == 0)
            rc |= elem(out, "NextContinuationToken", tok, false);
    } else {
        rc |= elem(out, "Marker", r->start_after, enc);
        // V1 gives NextMarker only with a delimiter; clients use the last key otherwise.
        if (l->truncated && r->delimiter[0]) {
            const char *last = l->n ? l->entries[l->n - 1].key : "";
            if (l->nprefixes && strcmp(l->prefixes[l->nprefixes - 1], last) > 0) last = l->prefixes[l->nprefixes - 1];
            rc |= elem(out, "NextMarker", last, enc);
        }
    }
    for (int i = 0; i < l->n && rc == 0; i++) {
        const StoreEntry *e = &l->entries[i];
        char t[32];
        iso_time(t, e->mtime);
        rc |= buf_printf(out, "<Contents>");
        rc |= elem(out, "Key", e->key, enc);
        rc |= buf_printf(out, "<LastModified>%s</LastModified><ETag>&quot;", t);
        rc |= esc(out, e->etag);
        rc |= buf_printf(out, "&quot;</ETag><Size>%llu</Size><StorageClass>STANDARD</StorageClass></Contents>",
                         (unsigned long long)e->size);
    }
    for (int i = 0; i < l->nprefixes && rc == 0; i++) {
        rc |= buf_printf(out, "<CommonPrefixes>");
        rc |= elem(out, "Prefix", l->prefixes[i], enc);
        rc |= buf_printf(out, "</CommonPrefixes>");
    }
    rc |= buf_printf(out, "</ListBucketResult>");
    return rc < 0 ? -1 : 0;
}

int relay_xml_mp_create(Buf *out, const char *bucket, const char *key, const char *upload_id) {
    int rc = buf_printf(out, XML_HEAD "<InitiateMultipartUploadResult xmlns=\"" S3_NS "\">");
    rc |= elem(out, "Bucket", bucket, false);
    rc |= elem(out, "Key", key, false);
    rc |= elem(out, "UploadId", upload_id, false);
    rc |= buf_printf(out, "</InitiateMultipartUploadResult>");
    return rc < 0 ? -1 : 0;
}

int relay_xml_mp_complete(Buf *out, const char *bucket, const char *key, const char *etag) {
    int rc = buf_printf(out, XML_HEAD "<CompleteMultipartUploadResult xmlns=\"" S3_NS "\">");
    rc |= elem(out, "Bucket", bucket, false);
    rc |= elem(out, "Key", key, false);
    rc |= buf_printf(out, "<ETag>&quot;");
    rc |= esc(out, etag);
    rc |= buf_printf(out, "&quot;</ETag></CompleteMultipartUploadResult>");
    return rc < 0 ? -1 : 0;
}

int relay_xml_location(Buf *out) {
    return buf_printf(out, XML_HEAD "<LocationConstraint xmlns=\"" S3_NS "\"></LocationConstraint>") < 0 ? -1 : 0;
}

int relay_xml_buckets(Buf *out, const char *bucket) {
    int rc = buf_printf(out, XML_HEAD "<ListAllMyBucketsResult xmlns=\"" S3_NS "\"><Owner><ID>pail</ID>"
                             "<DisplayName>pail</DisplayName></Owner><Buckets><Bucket>");
    rc |= elem(out, "Name", bucket, false);
    rc |= buf_printf(out, "<CreationDate>2024-01-01T00:00:00.000Z</CreationDate></Bucket></Buckets>"
                          "</ListAllMyBucketsResult>");
    return rc < 0 ? -1 : 0;
}

static bool is(xmlNodePtr n, const char *name) {
    return n && n->type == XML_ELEMENT_NODE && !strcmp((const char *)n->name, name);
}

// libxml2 prints some errors (bad encodings) through its generic handler even
// with XML_PARSE_NOERROR: a hostile body must not write to the relay's stderr.
static void xml_silent(void *ctx, const char *msg, ...) {
    (void)ctx, (void)msg;
}

int relay_xml_parse_complete(const char *xml, size_t n, RelayPart **parts, int *nparts, RelayFail *fail,
                             PailErr *err) {
    xmlSetGenericErrorFunc(NULL, xml_silent);  // per thread in libxml2
    *parts = NULL;
    *nparts = 0;
    fail->status = 400;
    snprintf(fail->code, sizeof fail->code, "MalformedXML");
    if (!xml || n == 0 || n > (1u << 24)) return err_set(err, PAIL_ERR_INVALID, "CompleteMultipartUpload body is empty or too large");
    xmlDocPtr doc = xmlReadMemory(xml, (int)n, "complete.xml", NULL,
                                  XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
    xmlNodePtr root = doc ? xmlDocGetRootElement(doc) : NULL;
    if (!is(root, "CompleteMultipartUpload")) {
        if (doc) xmlFreeDoc(doc);
        return err_set(err, PAIL_ERR_INVALID, "CompleteMultipartUpload body is not a <CompleteMultipartUpload> document");
    }
    int cap = 0, cnt = 0;
    RelayPart *ps = NULL;
    for (xmlNodePtr c = root->children; c; c = c->next) {
        if (!is(c, "Part")) continue;
        RelayPart p = {0};
        bool have_num = false;
        for (xmlNodePtr f = c->children; f; f = f->next) {
            if (!is(f, "PartNumber") && !is(f, "ETag")) continue;
            xmlChar *t = xmlNodeGetContent(f);
            const char *s = t ? (const char *)t : "";
            if (is(f, "PartNumber")) {
                char *end;
                long v = strtol(s, &end, 10);
                have_num = *s && !*end && v >= 1 && v <= 10000;
                p.number = (int)v;
            } else {
                size_t l = strlen(s);
                if (l >= 2 && s[0] == '"' && s[l - 1] == '"') snprintf(p.etag, sizeof p.etag, "%.*s", (int)(l - 2), s + 1);
                else snprintf(p.etag, sizeof p.etag, "%s", s);
            }
            xmlFree(t);
        }
        if (!have_num || (cnt && p.number <= ps[cnt - 1].number)) {
            free(ps);
            xmlFreeDoc(doc);
            if (have_num) snprintf(fail->code, sizeof fail->code, "InvalidPartOrder");
            return err_set(err, PAIL_ERR_INVALID, "CompleteMultipartUpload: part %d: %s", cnt + 1,
                           have_num ? "part numbers must be ascending" : "missing or bad PartNumber");
        }
        if (cnt == cap) {
            cap = cap ? cap * 2 : 16;
            RelayPart *np = realloc(ps, (size_t)cap * sizeof *np);
            if (!np) {
                free(ps);
                xmlFreeDoc(doc);
                return err_set(err, PAIL_ERR_NOMEM, "out of memory");
            }
            ps = np;
        }
        ps[cnt++] = p;
    }
    xmlFreeDoc(doc);
    if (cnt == 0) {
        free(ps);
        return err_set(err, PAIL_ERR_INVALID, "CompleteMultipartUpload names no parts");
    }
    *parts = ps;
    *nparts = cnt;
    return 0;
}
