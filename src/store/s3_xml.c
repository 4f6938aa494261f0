// S3 XML parsing and the CompleteMultipartUpload body (see s3_xml.h). libxml2
// runs with network access and entity expansion off: a hostile server cannot
// make the client fetch URLs or expand entities.
#include "store/s3_xml.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <libxml/parser.h>
#include <libxml/tree.h>

static xmlDocPtr parse(const char *xml, size_t n) {
    if (!xml || n == 0 || n > (size_t)INT32_MAX) return NULL;
    return xmlReadMemory(xml, (int)n, "s3.xml", NULL, XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
}

static bool is(xmlNodePtr n, const char *name) {
    return n && n->type == XML_ELEMENT_NODE && !strcmp((const char *)n->name, name);
}

static xmlNodePtr child(xmlNodePtr parent, const char *name) {
    for (xmlNodePtr c = parent ? parent->children : NULL; c; c = c->next)
        if (is(c, name)) return c;
    return NULL;
}

// Text of parent/<name> into out (truncated to cap); "" when absent. Returns 1 when present.
static int child_text(xmlNodePtr parent, const char *name, char *out, size_t cap) {
    out[0] = 0;
    xmlNodePtr c = child(parent, name);
    if (!c) return 0;
    xmlChar *t = xmlNodeGetContent(c);
    snprintf(out, cap, "%s", t ? (const char *)t : "");
    xmlFree(t);
    return 1;
}

int s3_xml_error(const char *xml, size_t n, S3Error *out) {
    memset(out, 0, sizeof *out);
    xmlDocPtr doc = parse(xml, n);
    if (!doc) return -1;
    xmlNodePtr root = xmlDocGetRootElement(doc);
    int rc = -1;
    if (is(root, "Error")) {
        child_text(root, "Code", out->code, sizeof out->code);
        child_text(root, "Message", out->message, sizeof out->message);
        child_text(root, "BucketName", out->bucket, sizeof out->bucket);
        child_text(root, "Key", out->key, sizeof out->key);
        rc = 0;
    }
    xmlFreeDoc(doc);
    return rc;
}

int64_t s3_xml_parse_time(const char *s) {
    struct tm tm = {0};
    int y, mo, d, h, mi, sec;
    if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d", &y, &mo, &d, &h, &mi, &sec) != 6) return -1;
    if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60) return -1;
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = sec;
    return (int64_t)timegm(&tm);
}

static void strip_quotes(char *s) {
    size_t n = strlen(s);
    if (n >= 2 && s[0] == '"' && s[n - 1] == '"') {
        memmove(s, s + 1, n - 2);
        s[n - 2] = 0;
    }
}

// A listing may name a key XML cannot carry (bytes that are not UTF-8, raw
// control characters: a server that let such a key in), which would make the
// whole page unreadable. Each such byte b becomes the private-use character
// U+F700+b, so the page parses; restore() turns them back into the original
// bytes, and the key is then refused by store_key_check and skipped by name.
static bool xml_byte_ok(const unsigned char *s, size_t n, size_t *len) {
    if (s[0] < 0x20 && s[0] != '\t' && s[0] != '\n' && s[0] != '\r') return false;
    *len = store_utf8_len(s, n);
    return *len > 0;
}

static int sanitize(const char *xml, size_t n, Buf *out, bool *changed) {
    const unsigned char *s = (const unsigned char *)xml;
    *changed = false;
    for (size_t i = 0, len; i < n; i += len)
        if (!xml_byte_ok(s + i, n - i, &len)) {
            *changed = true;
            break;
        }
    if (!*changed) return 0;
    for (size_t i = 0, len; i < n; i += len) {
        if (xml_byte_ok(s + i, n - i, &len)) {
            if (buf_append(out, s + i, len) < 0) return -1;
            continue;
        }
        uint8_t pua[3] = {0xef, (uint8_t)(0x9c + (s[i] >> 6)), (uint8_t)(0x80 + (s[i] & 0x3f))};
        if (buf_append(out, pua, 3) < 0) return -1;
        len = 1;
    }
    return 0;
}

static void restore(char *key) {
    unsigned char *r = (unsigned char *)key, *w = r;
    while (*r) {
        if (r[0] == 0xef && r[1] >= 0x9c && r[1] <= 0x9f && r[2] >= 0x80 && r[2] <= 0xbf) {
            *w++ = (unsigned char)(((r[1] - 0x9c) << 6) | (r[2] - 0x80));
            r += 3;
        } else {
            *w++ = *r++;
        }
    }
    *w = 0;
}

// A key (or common prefix, without its trailing '/') pail can use; else one
// warning naming it, and false.
static bool usable(const char *key, bool prefix) {
    char k[STORE_MAX_KEY + 512];
    snprintf(k, sizeof k, "%s", key);
    size_t kl = strlen(k);
    if (prefix && kl > 1 && k[kl - 1] == '/') k[kl - 1] = 0;
    PailErr kerr = {0};
    if (store_key_check(k, &kerr) == 0) return true;
    char why[sizeof kerr.msg + 96];
    snprintf(why, sizeof why, "%s; no pail tool can name it: remove it with another tool", kerr.msg);
    store_warn_skipped("ListObjectsV2", key, why);
    return false;
}

int s3_xml_list(const char *xml, size_t n, const char *strip_prefix, StoreList *out, PailErr *err) {
    Buf clean = {0};
    bool changed = false;
    if (sanitize(xml, n, &clean, &changed) < 0) {
        buf_free(&clean);
        return err_set(err, PAIL_ERR_NOMEM, "out of memory");
    }
    xmlDocPtr doc = changed ? parse((const char *)clean.data, clean.len) : parse(xml, n);
    buf_free(&clean);
    if (!doc) return err_set(err, PAIL_ERR_INVALID, "ListObjectsV2 response is not XML (%zu bytes)", n);
    xmlNodePtr root = xmlDocGetRootElement(doc);
    if (!is(root, "ListBucketResult")) {
        err_set(err, PAIL_ERR_INVALID, "ListObjectsV2 response: root element is <%.64s>, expected <ListBucketResult>",
                root ? (const char *)root->name : "(none)");
        xmlFreeDoc(doc);
        return -1;
    }
    size_t sp = strip_prefix ? strlen(strip_prefix) : 0;
    int rc = 0;
    char text[STORE_MAX_KEY + 64];
    for (xmlNodePtr c = root->children; c && rc == 0; c = c->next) {
        if (is(c, "Contents")) {
            char key[STORE_MAX_KEY + 512], size[32], etag[80], lm[64];
            if (!child_text(c, "Key", key, sizeof key) || !key[0]) {
                rc = err_set(err, PAIL_ERR_INVALID, "ListObjectsV2 response: <Contents> without <Key>");
                break;
            }
            if (changed) restore(key);
            child_text(c, "Size", size, sizeof size);
            child_text(c, "ETag", etag, sizeof etag);
            child_text(c, "LastModified", lm, sizeof lm);
            strip_quotes(etag);
            char *end = NULL;
            unsigned long long sz = strtoull(size, &end, 10);
            if (!size[0] || *end) {
                char why[96];
                snprintf(why, sizeof why, "its size is '%.40s'", size);
                store_warn_skipped("ListObjectsV2", key, why);
                continue;
            }
            if (strncmp(key, strip_prefix ? strip_prefix : "", sp) || !key[sp]) continue;
            if (!usable(key, false)) continue;
            if (store_list_push(out, key + sp, sz, lm[0] ? s3_xml_parse_time(lm) : 0, etag) < 0)
                rc = err_set(err, PAIL_ERR_NOMEM, "out of memory");
        } else if (is(c, "CommonPrefixes")) {
            char p[STORE_MAX_KEY + 512];
            if (!child_text(c, "Prefix", p, sizeof p)) continue;
            if (changed) restore(p);
            if (strncmp(p, strip_prefix ? strip_prefix : "", sp) || !p[sp] || !usable(p, true)) continue;
            if (store_list_push_prefix(out, p + sp) < 0) rc = err_set(err, PAIL_ERR_NOMEM, "out of memory");
        } else if (is(c, "IsTruncated")) {
            child_text(root, "IsTruncated", text, sizeof text);
            out->truncated = !strcmp(text, "true");
        } else if (is(c, "NextContinuationToken")) {
            if (child_text(root, "NextContinuationToken", text, sizeof text) && strlen(text) >= sizeof out->next_token)
                rc = err_set(err, PAIL_ERR_INVALID, "ListObjectsV2 response: continuation token of %zu bytes is too long",
                             strlen(text));
            else
                snprintf(out->next_token, sizeof out->next_token, "%s", text);
        }
    }
    if (rc == 0 && out->truncated && !out->next_token[0])
        rc = err_set(err, PAIL_ERR_INVALID, "ListObjectsV2 response: truncated page without NextContinuationToken");
    xmlFreeDoc(doc);
    return rc;
}

int s3_xml_upload_id(const char *xml, size_t n, char *out, size_t cap, PailErr *err) {
    xmlDocPtr doc = parse(xml, n);
    if (!doc) return err_set(err, PAIL_ERR_INVALID, "CreateMultipartUpload response is not XML (%zu bytes)", n);
    xmlNodePtr root = xmlDocGetRootElement(doc);
    int rc = 0;
    if (!is(root, "InitiateMultipartUploadResult") || !child_text(root, "UploadId", out, cap) || !out[0])
        rc = err_set(err, PAIL_ERR_INVALID, "CreateMultipartUpload response has no <UploadId>");
    else if (strlen(out) >= cap - 1)
        rc = err_set(err, PAIL_ERR_INVALID, "CreateMultipartUpload response: UploadId longer than %zu bytes", cap - 2);
    xmlFreeDoc(doc);
    return rc;
}

int s3_xml_complete_body(Buf *out, char (*etags)[80], int n) {
    if (buf_printf(out, "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">") < 0) return -1;
    for (int i = 0; i < n; i++) {
        // ETags are quoted hex from the server; escape anyway rather than trust it.
        xmlChar *esc = xmlEncodeSpecialChars(NULL, (const xmlChar *)etags[i]);
        int rc = buf_printf(out, "<Part><PartNumber>%d</PartNumber><ETag>%s</ETag></Part>", i + 1,
                            esc ? (const char *)esc : "");
        xmlFree(esc);
        if (rc < 0) return -1;
    }
    return buf_printf(out, "</CompleteMultipartUpload>");
}
