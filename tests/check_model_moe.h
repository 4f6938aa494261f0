// Helpers the mixture-of-experts model suites share (check_model_moe.c, check_model_gptoss.c): a
// config.json text parsed, a tiny random checkpoint written, a file tensor read back as fp32.
#pragma once
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "model/config.h"
#include "model/modelgen.h"
#include "model/safetensors.h"

static inline int parse_cfg(ModelConfig *c, const char *json, PailErr *err) {
    return model_config_parse(c, json, strlen(json), "config.json", err);
}

// The "tiny" shape of type written into root/sub (dir) in dtype dt, seed 7; its config in cfg.
static inline void tiny_gen(const char *root, const char *sub, ModelType type, SafeTensorsDtype dt, ModelConfig *cfg,
                            char *dir, size_t cap) {
    snprintf(dir, cap, "%s/%s", root, sub);
    ck_assert_int_eq(modelgen_shape(cfg, "tiny", type), 0);
    ModelGenOptions opt = {.dtype = dt, .seed = 7};
    PailErr err = {0};
    ck_assert_msg(modelgen_write(cfg, dir, &opt, &err) == 0, "%s", err.msg);
}

// The file tensor `name` as fp32 (n values; the caller frees it).
static inline float *file_f32(const SafeTensors *st, const char *name, size_t n) {
    const SafeTensor *t = safetensors_find(st, name);
    ck_assert_msg(t != NULL, "no tensor %s", name);
    ck_assert_uint_eq(t->nelem, n);
    float *x = malloc(n * sizeof *x);
    ck_assert_int_eq(safetensors_to_f32(x, t->data, t->dtype, n), 0);
    return x;
}
