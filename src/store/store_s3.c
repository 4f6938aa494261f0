// s3:// backend placeholder until the SigV4/libcurl client lands.
#include "store/store.h"

int store_s3_open(Store *st, const char *bucket, const char *prefix, const StoreOptions *opt,
                  PailErr *err) {
    (void)st; (void)prefix; (void)opt;
    return err_set(err, PAIL_ERR_UNIMPLEMENTED, "s3://%s: the s3 backend is not built yet", bucket);
}
