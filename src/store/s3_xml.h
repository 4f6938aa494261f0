// S3 XML bodies read with libxml2: ListObjectsV2 results, error documents,
// multipart-upload responses, and the CompleteMultipartUpload request body.
// Parsers take (pointer, length) of a response body; no network here. Element
// names are matched by local name, so any namespace (or none) is accepted.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "core/buf.h"
#include "core/err.h"
#include "store/store.h"

typedef struct {
    char code[64];         // e.g. "NoSuchKey", "SignatureDoesNotMatch"
    char message[256];
    char bucket[256];      // <BucketName> when the server names it
    char key[256];         // <Key> when the server names it
} S3Error;

// 0 when xml is an <Error> document (fields filled, missing ones ""), else -1.
// Never copies <SignatureProvided>, <StringToSign> or <CanonicalRequest>.
int s3_xml_error(const char *xml, size_t n, S3Error *out);

// Appends a ListBucketResult page to out: keys and common prefixes with
// strip_prefix removed (entries not under it are skipped), truncated flag and
// NextContinuationToken. An entry pail cannot use (a key store_key_check
// refuses, bytes that are not UTF-8 or XML characters, a malformed size) is
// skipped with one warning naming it (store_warn_skipped), never failing the
// page. -1 with err naming what is malformed in the document itself.
int s3_xml_list(const char *xml, size_t n, const char *strip_prefix, StoreList *out, PailErr *err);

// <InitiateMultipartUploadResult><UploadId>: copies it into out.
int s3_xml_upload_id(const char *xml, size_t n, char *out, size_t cap, PailErr *err);

// <CompleteMultipartUpload> body for parts 1..n with the ETags the parts returned.
int s3_xml_complete_body(Buf *out, char (*etags)[80], int n);

// "2009-10-12T17:50:30.000Z" -> unix seconds; -1 when malformed.
int64_t s3_xml_parse_time(const char *s);
