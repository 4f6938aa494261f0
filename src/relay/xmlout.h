// The relay's S3 XML: response documents (errors, listings, multipart results)
// written into a Buf, and the one request body it reads, CompleteMultipartUpload.
// Keys are XML-escaped, or URL-encoded when the client asked encoding-type=url.
#pragma once
#include <stddef.h>
#include "core/buf.h"
#include "core/err.h"
#include "relay/request.h"
#include "store/store.h"

int relay_xml_error(Buf *out, const char *code, const char *message, const char *resource, const char *request_id);
// ListBucketResult (V2 when route->list_v2, else V1 with Marker/NextMarker).
int relay_xml_list(Buf *out, const char *bucket, const RelayRoute *route, const StoreList *l);
int relay_xml_mp_create(Buf *out, const char *bucket, const char *key, const char *upload_id);
int relay_xml_mp_complete(Buf *out, const char *bucket, const char *key, const char *etag);
int relay_xml_location(Buf *out);
int relay_xml_buckets(Buf *out, const char *bucket);

typedef struct {
    int number;
    char etag[80];  // quotes stripped
} RelayPart;
// Parses <CompleteMultipartUpload><Part><PartNumber>n</PartNumber><ETag>..</ETag>.
// Parts must be ascending and 1..10000; *parts is malloc'd. 0 / -1 (MalformedXML / InvalidPartOrder).
int relay_xml_parse_complete(const char *xml, size_t n, RelayPart **parts, int *nparts, RelayFail *fail,
                             PailErr *err);
