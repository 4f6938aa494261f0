// grpo-ctl export: a pail adapter (file or store URL) as a PEFT folder that
// PEFT and vLLM load as is, or, with --merge --model DIR, a full Hugging Face
// checkpoint with the adapter merged into the base weights.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "ctl/ctl.h"
#include "lora/peft.h"
#include "model/modelgen.h"

int ctl_export(int argc, char **argv) {
    CtlStoreFlags sf = {0};
    char *adapter = NULL, *out = NULL, *model = NULL, *base_name = NULL, *dtype = NULL;
    bool merge = false;
    Flag fl[CTL_STORE_NFLAGS + 6] = {
        {"adapter", FLAG_STRING, &adapter, NULL, 1, 0, "pail adapter: a .h5 path or a store URL (adapters/v%08d.h5)"},
        {"out", FLAG_STRING, &out, NULL, 1, 0, "folder to write"},
        {"merge", FLAG_BOOL, &merge, "false", 1, 0, "write the base model with the adapter merged (needs --model)"},
        {"model", FLAG_STRING, &model, NULL, 1, 0, "the base model folder (checks base_sha256; needed by --merge)"},
        {"base-model", FLAG_STRING, &base_name, NULL, 1, 0, "base_model_name_or_path for adapter_config.json (default: --model)"},
        {"dtype", FLAG_STRING, &dtype, NULL, 1, 0,
         "--merge: the merged checkpoint's dtype: f32, bf16 or f16 (default f32; bf16 when the base is quantized: "
         "merging dequantizes it)"},
    };
    ctl_store_flags(fl + 6, &sf);
    int n = CTL_STORE_NFLAGS + 6, rc;
    const char *usage = "grpo-ctl export --adapter URL|FILE --out DIR [--merge --model DIR]";
    if ((rc = ctl_parse(usage, "Writes a PEFT adapter folder (adapter_config.json + adapter_model.safetensors), or with\n"
                               "--merge a Hugging Face checkpoint with the adapter merged.",
                        fl, n, argc, argv, NULL, NULL)) >= 0)
        goto done;
    rc = 2;
    if (!adapter || !out || (merge && !model) ||
        (dtype && strcmp(dtype, "f32") && strcmp(dtype, "bf16") && strcmp(dtype, "f16"))) {
        fprintf(stderr, "%s: need --adapter and --out (--merge needs --model; --dtype f32|bf16|f16)\nusage: %s\n", argv[0], usage);
        goto done;
    }
    rc = 1;
    PailErr err = {0};
    Buf b = {0};
    ModelWeights w = {0};
    bool have_model = false;
    LoraLayout lay = {0};
    float *p = NULL;
    AdapterMeta meta;
    char qdesc[MODEL_DTYPE_DESC] = "";
    if (model) {
        if (model_weights_probe(model, MODEL_DTYPE_AUTO, NULL, qdesc, &err) < 0 ||
            model_weights_load(&w, model, &err) < 0)  // f32: a quantized base dequantized
            goto fail;
        have_model = true;
    }
    bool quantized = strchr(qdesc, 'q') != NULL;
    if (!dtype && !(dtype = strdup(quantized ? "bf16" : "f32"))) {  // flags_free frees it
        err_set(&err, PAIL_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if (ctl_read_url_or_path(adapter, &sf, &b, &err) < 0 ||
        lora_adapter_read(b.data, b.len, adapter, have_model ? &w.cfg : NULL, &lay, &p, &meta, &err) < 0)
        goto fail;
    if (have_model && meta.base_sha256[0] && strcmp(meta.base_sha256, w.base_sha256)) {
        err_set(&err, PAIL_ERR_INVALID, "%s was trained on base %.12s..., --model %s is %.12s...", adapter,
                meta.base_sha256, model, w.base_sha256);
        goto fail;
    }
    if (merge) {
        lora_merge(model_weights_f32(&w), &w, &lay, p);  // loaded as f32: merged in fp32, rounded once at save
        char tj[4200];
        snprintf(tj, sizeof tj, "%s/tokenizer.json", model);
        ModelGenOptions o = {.dtype = !strcmp(dtype, "bf16") ? ST_DTYPE_BF16 : !strcmp(dtype, "f16") ? ST_DTYPE_F16 : ST_DTYPE_F32,
                             .tokenizer_dir = access(tj, R_OK) == 0 ? model : NULL};  // tokenizer files when present
        if (quantized)
            fprintf(stderr, "%s: the base %s is quantized (%s): merging dequantizes it; the merged checkpoint is %s\n",
                    argv[0], model, qdesc, dtype);
        if (model_weights_save(&w, out, &o, &err) < 0) goto fail;
        fprintf(stderr, "%s: wrote %s: %s with adapter v%08lld merged\n", argv[0], out, model, (long long)meta.version);
    } else {
        if (peft_export(&lay, p, have_model ? &w.cfg : NULL, base_name ? base_name : model, out, &err) < 0) goto fail;
        fprintf(stderr, "%s: wrote PEFT adapter %s (rank %d, adapter v%08lld)\n", argv[0], out, lay.cfg.rank,
                (long long)meta.version);
    }
    rc = 0;
fail:
    if (rc) fprintf(stderr, "%s: %s\n", argv[0], err.msg);
    buf_free(&b);
    free(p);
    lora_layout_free(&lay);
    if (have_model) model_weights_free(&w);
done:
    flags_free(fl, n);
    return rc;
}
