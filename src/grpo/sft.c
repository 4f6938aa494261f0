// Supervised warm-up (see sft.h): rows -> token ids (prompt, completion + EOS)
// -> seeded epoch shuffles -> packed micro-batches -> -mean log p(completion)
// -> LoRA or full gradients -> AdamW -> adapter file or checkpoint folder.
// The adapter, gradients and moments live on the compute backend
// (lora/trainable.h); full training keeps the base weights on the CPU.
#include "grpo/sft.h"
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/fsutil.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/rng.h"
#include "core/timeutil.h"
#include "grpo/pack.h"
#include "kernels.h"
#include "lora/lora.h"
#include "lora/trainable.h"
#include "model/memplan.h"
#include "model/device.h"
#include "model/modelgen.h"
#include "model/transformer.h"
#include "rollout/generate.h"
#include "shard/h5file.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    int32_t *ids;   // prompt then completion (+ EOS)
    int n, plen;    // total, prompt part
} Example;

// The packer's view of an example: the completion (after plen) is scored.
static PackSeq example_seq(const Example *e) {
    return (PackSeq){.prompt = e->ids, .n_prompt = e->plen, .completion = e->ids + e->plen, .n_completion = e->n - e->plen};
}

// text: c->data_path's bytes, read once by sft_run (a pipe cannot be read
// again), consumed here.
static int load_examples(const SftConfig *c, Buf *textp, Tokenizer *tok, const ChatTemplate *chat, const PailErr *no_chat,
                         int32_t eos, Example **out, int *nout, PailErr *err) {
    Buf text = *textp;
    *textp = (Buf){0};
    int cap = 1024, n = 0, lineno = 0, rc = 0, skipped = 0;
    Example *ex = malloc((size_t)cap * sizeof *ex);
    if (!ex) {
        buf_free(&text);
        return err_set(err, PAIL_ERR_NOMEM, "%s: out of memory", c->data_path);
    }
    char *save = NULL;
    for (char *line = strtok_r((char *)text.data, "\n", &save); line && rc == 0; line = strtok_r(NULL, "\n", &save)) {
        lineno++;
        if (!*line) continue;
        json_error_t jerr;
        json_t *j = json_loads(line, 0, &jerr);
        if (!json_is_object(j)) {
            rc = err_set(err, PAIL_ERR_INVALID, "%s:%d: not a JSON object (%s)", c->data_path, lineno, jerr.text);
            json_decref(j);
            break;
        }
        Buf ptext = {0};
        const char *comp = NULL;
        bool templated = false;  // a chat template wrote the prompt's special tokens
        json_t *msgs = json_object_get(j, "messages");
        if (json_is_array(msgs) && json_array_size(msgs) >= 2) {
            json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
            comp = json_string_value(json_object_get(last, "content"));
            const char *role = json_string_value(json_object_get(last, "role"));
            if (!comp || !role || strcmp(role, "assistant")) {
                rc = err_set(err, PAIL_ERR_INVALID, "%s:%d: the last message must be the assistant's completion",
                             c->data_path, lineno);
            } else if (no_chat) {
                rc = err_set(err, PAIL_ERR_INVALID, "%s:%d: a messages row needs a chat template: %s", c->data_path,
                             lineno, no_chat->msg);
            } else {
                json_t *head = json_array();
                for (size_t k = 0; k + 1 < json_array_size(msgs); k++) json_array_append(head, json_array_get(msgs, k));
                if (chat_render(chat, head, json_object_get(j, "tools"), true, &ptext, err) < 0)
                    rc = err_wrap(err, "%s:%d", c->data_path, lineno);
                templated = !chat->plain_format;
                json_decref(head);
            }
        } else {
            const char *p = json_string_value(json_object_get(j, "prompt"));
            comp = json_string_value(json_object_get(j, "completion"));
            if (!p || !comp) {
                rc = err_set(err, PAIL_ERR_INVALID, "%s:%d: expected {\"prompt\": str, \"completion\": str} or "
                             "{\"messages\": [...]}", c->data_path, lineno);
            } else if (c->chat && !no_chat) {
                if (chat_render_prompt(chat, p, true, &ptext, err) < 0) rc = err_wrap(err, "%s:%d", c->data_path, lineno);
                templated = !chat->plain_format;
            } else if (buf_append(&ptext, p, strlen(p)) < 0) {
                rc = err_set(err, PAIL_ERR_NOMEM, "%s:%d: out of memory", c->data_path, lineno);
            }
        }
        TokenIds ids = {0};
        // a plain prompt as the worker encodes it (tokenizer_encode_text: the post_processor's <bos>)
        if (rc == 0 && (templated ? tokenizer_encode : tokenizer_encode_text)(tok, ptext.data ? (char *)ptext.data : "",
                                                                              ptext.len, &ids, err) < 0)
            rc = err_wrap(err, "%s:%d", c->data_path, lineno);
        int plen = (int)ids.len;
        if (rc == 0 && tokenizer_encode(tok, comp, strlen(comp), &ids, err) < 0)
            rc = err_wrap(err, "%s:%d", c->data_path, lineno);
        if (rc == 0 && eos >= 0 && token_ids_push(&ids, eos) < 0)
            rc = err_set(err, PAIL_ERR_NOMEM, "%s:%d: out of memory", c->data_path, lineno);
        buf_free(&ptext);
        json_decref(j);
        if (rc < 0) { token_ids_free(&ids); break; }
        Example e = {.ids = ids.data, .n = (int)ids.len, .plen = plen};
        PackSeq seq = example_seq(&e);
        if (plen < 1 || e.n <= plen || pack_rows(&seq) > c->token_budget) {
            skipped++;
            token_ids_free(&ids);
            continue;
        }
        if (n == cap) {
            Example *grown = realloc(ex, (size_t)cap * 2 * sizeof *ex);
            if (!grown) {
                token_ids_free(&ids);
                rc = err_set(err, PAIL_ERR_NOMEM, "%s:%d: out of memory for %d examples", c->data_path, lineno, n);
                break;
            }
            ex = grown;
            cap *= 2;
        }
        ex[n++] = e;
    }
    buf_free(&text);
    if (rc == 0 && n == 0) rc = err_set(err, PAIL_ERR_INVALID, "%s: no usable examples", c->data_path);
    if (rc < 0) {
        for (int i = 0; i < n; i++) free(ex[i].ids);
        free(ex);
        return -1;
    }
    if (skipped) log_warn("%s: %d rows skipped (empty prompt or completion, or longer than --token-budget)",
                          c->data_path, skipped);
    *out = ex;
    *nout = n;
    return 0;
}

typedef struct {  // a step's buffers, pieces of one planned block
    PackRow row;      // token budget T
    float *logp, *dlogp;  // (T)
    int64_t *order;   // (examples) the epoch's shuffled order
    int64_t *sel;     // (batch) the step's examples
} SftBufs;

static void plan_step(SftBufs *b, MemPlan *p, int T, int nex, long batch) {
    pack_plan(&b->row, p, T, T);
    b->logp = mem_plan_take(p, (size_t)T * sizeof(float));
    b->dlogp = mem_plan_take(p, (size_t)T * sizeof(float));
    b->order = mem_plan_take(p, (size_t)nex * sizeof(int64_t));
    b->sel = mem_plan_take(p, (size_t)batch * sizeof(int64_t));
}

static void shuffle(int64_t *order, int n, Rng *r) {
    for (int i = n - 1; i > 0; i--) {
        int j = (int)rng_below(r, (uint64_t)i + 1);
        int64_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

// Greedy exact-match accuracy on validation examples: the generated ids up to
// and including EOS equal the completion's.
static int validate(Generator *gen, const Example *ex, int n, double *acc, PailErr *err) {
    GenPrompt *gp = calloc((size_t)n, sizeof *gp);
    GenCompletion *out = calloc((size_t)n, sizeof *out);
    if (!gp || !out) { free(gp); free(out); return err_set(err, PAIL_ERR_NOMEM, "out of memory"); }
    for (int i = 0; i < n; i++) gp[i] = (GenPrompt){.ids = ex[i].ids, .n = ex[i].plen, .seed = (uint64_t)i};
    int rc = generator_run(gen, gp, n, out, err), hits = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        int want = ex[i].n - ex[i].plen;
        hits += out[i].n == want && !memcmp(out[i].ids, ex[i].ids + ex[i].plen, (size_t)want * sizeof(int32_t));
    }
    free(gp);
    free(out);
    *acc = n ? (double)hits / n : 0;
    return rc;
}

// Checked before the memory plan and the weights: every row of path is a JSON
// object with "prompt" and "completion" strings or "messages" (2 or more) ending
// in the assistant's completion. The error counts the rows that are not and
// names the first lines (1-based, blank lines counted); what each row renders
// to is load_examples' (after the weights, with the tokenizer and the template).
static int sft_check_rows(const Buf *textp, const char *path, const char *flag, PailErr *err) {
    const Buf text = *textp;
    int64_t rows = 0, miss = 0, lineno = 0;
    char lines[200] = "";
    size_t used = 0;
    const char *p = text.data ? (const char *)text.data : "", *end = p + text.len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        lineno++;
        size_t k = strspn(p, " \t\r");
        if (k < n) {
            rows++;
            json_t *j = json_loadb(p, n, 0, NULL);
            json_t *msgs = json_object_get(j, "messages");
            json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
            const char *role = json_string_value(json_object_get(last, "role"));
            bool ok = json_is_array(msgs)
                          ? json_array_size(msgs) >= 2 && role && !strcmp(role, "assistant") &&
                                json_is_string(json_object_get(last, "content"))
                          : json_is_string(json_object_get(j, "prompt")) && json_is_string(json_object_get(j, "completion"));
            json_decref(j);
            if (!ok) {
                if (used < sizeof lines - 24)
                    used += (size_t)snprintf(lines + used, sizeof lines - used, "%s%lld", miss ? ", " : "", (long long)lineno);
                else if (used < sizeof lines) {
                    snprintf(lines + used, sizeof lines - used, ", ...");
                    used = sizeof lines;  // the list is closed
                }
                miss++;
            }
        }
        p += n + 1;
    }
    if (!miss) return 0;
    return err_set(err, PAIL_ERR_INVALID, "%s %s: %lld of %lld rows are not {\"prompt\": str, \"completion\": str} or "
                   "{\"messages\": [..., assistant]}: line%s %s", flag, path, (long long)miss, (long long)rows,
                   miss > 1 ? "s" : "", lines);
}

// --full trains fp32 master weights in place; a LoRA warm-up holds the base as --dtype says.
static int sft_dtype(const SftConfig *c) { return c->full ? (int)DT_F32 : c->weights_dtype; }

// The memory plan from the config alone, printed and checked before the weights are loaded.
static int sft_plan_check(const SftConfig *c, PailErr *err) {
    ModelConfig mc;
    if (model_config_load(&mc, c->model_dir, err) < 0) return -1;
    char wdesc[MODEL_DTYPE_DESC];
    size_t wbytes = 0;
    if (dtype_plan(c->model_dir, sft_dtype(c), wdesc, &wbytes, err) < 0) return -1;
    MemoryPlanSpec spec = {.role = MEMPLAN_TRAIN, .weights_dtype = wdesc, .weights_bytes = wbytes,
                           .lora_rank = c->full ? 0 : c->lora_rank,
                           .lora_targets = c->lora_targets, .token_budget = c->token_budget, .full = c->full};
    MemoryPlan mp;
    if (memplan_build(&mp, &mc, &spec, (c->backend ? c->backend : backend_cpu())->desc, err) < 0) return -1;
    SftBufs b = {0};  // the step's block as sft_run sizes it (the examples' order, 8 bytes each, aside)
    MemPlan dry = {0};
    plan_step(&b, &dry, c->token_budget, 0, c->batch);
    memplan_set_own(&mp, mp.lora + dry.used);
    memplan_print(stderr, &mp, "grpo-train --sft");
    return memplan_check(&mp, c->max_memory, err);
}

int sft_run(const SftConfig *c, volatile sig_atomic_t *stop, PailErr *err) {
    ModelWeights w;
    Backend *be = c->backend ? c->backend : backend_cpu();
    if (c->full && !be->host_memory)
        return err_set(err, PAIL_ERR_UNSUPPORTED, "--sft --full trains the base weights in host memory: --device %s "
                       "is for LoRA (use --device cpu)", be->ops->name);
    // Each file is read once (it may be a pipe: --sft <(...)), checked, then loaded.
    Buf train_text = {0}, valid_text = {0};
    if (fs_read_file(c->data_path, &train_text, err) < 0) return err_wrap(err, "--sft");
    if (c->valid_path && fs_read_file(c->valid_path, &valid_text, err) < 0) {
        buf_free(&train_text);
        return err_wrap(err, "--sft-valid");
    }
    if (sft_check_rows(&train_text, c->data_path, "--sft", err) < 0 ||
        (c->valid_path && sft_check_rows(&valid_text, c->valid_path, "--sft-valid", err) < 0) ||
        sft_plan_check(c, err) < 0 || model_weights_load_as(&w, c->model_dir, sft_dtype(c), err) < 0) {
        buf_free(&train_text);
        buf_free(&valid_text);
        return -1;
    }
    dtype_log_weights(&w);
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.json", c->model_dir);
    Tokenizer *tok = NULL;
    ChatTemplate chat = {0};
    bool have_chat = false;
    Example *ex = NULL;
    int nex = 0, rc = -1;
    LoraLayout lay = {0};
    Transformer *tf = NULL;
    Trainable *ts = NULL;
    float *hparams = NULL;  // LoRA: the adapter on the host (its init, validation, the file written)
    void *block = NULL;  // the step's buffers (plan_step)
    SftBufs b = {0};
    FILE *mf = NULL;
    Example *vex = NULL;
    int nvex = 0;
    Transformer *vtf = NULL;
    Generator *vgen = NULL;
    if (tokenizer_load(&tok, path, err) < 0) goto out;
    const ChatSource *cs = &c->chat_source;
    PailErr cerr = {0};
    have_chat = chat_template_load(&chat, c->model_dir, NULL, cs, &cerr) == 0;
    if (!have_chat && (c->chat || chat_source_given(cs))) {
        *err = cerr;
        goto out;
    }
    if (have_chat) log_info("chat template: %s (sha256 %.16s)", chat.source, chat.sha256);
    int32_t eos = w.cfg.n_eos > 0 ? w.cfg.eos_token_ids[0] : tokenizer_eos_id(tok);
    if (load_examples(c, &train_text, tok, &chat, have_chat ? NULL : &cerr, eos, &ex, &nex, err) < 0) goto out;
    if (c->valid_path) {
        SftConfig vc = *c;
        vc.data_path = c->valid_path;
        if (load_examples(&vc, &valid_text, tok, &chat, have_chat ? NULL : &cerr, eos, &vex, &nvex, err) < 0) goto out;
    }
    size_t n;
    if (c->full) {
        n = w.num_params;  // the base weights, trained in place (loaded as f32)
        if (trainable_open(&ts, be, n, true, model_weights_f32(&w), err) < 0) goto out;
    } else {
        LoraConfig lc = {.rank = c->lora_rank, .alpha = c->lora_alpha, .rslora = c->rslora, .targets = c->lora_targets};
        if (lora_layout_build(&lay, &w.cfg, &lc, err) < 0) goto out;
        n = (size_t)lay.n_params;
        if (!(hparams = malloc(n * sizeof(float)))) { err_set(err, PAIL_ERR_NOMEM, "out of memory"); goto out; }
        lora_init(&lay, hparams, (uint64_t)c->seed);
        if (trainable_open(&ts, be, n, true, NULL, err) < 0 || trainable_load(ts, hparams, NULL, NULL, err) < 0)
            goto out;
    }
    TransformerPlan plan = {.max_tokens = c->token_budget, .backward = true, .full = c->full,
                            .lora_rank = c->full ? 0 : lay.cfg.rank, .backend = be};
    if (transformer_init(&tf, &w, &plan, err) < 0) goto out;
    if (!c->full && transformer_set_lora(tf, &lay, trainable_params(ts), err) < 0) goto out;
    if (nvex) {  // greedy generation over the same weights (and adapter) for validation
        int maxp = 1, maxc = 1;
        for (int i = 0; i < nvex; i++) {
            if (vex[i].plen > maxp) maxp = vex[i].plen;
            if (vex[i].n - vex[i].plen > maxc) maxc = vex[i].n - vex[i].plen;
        }
        TransformerPlan vp = {.max_tokens = maxp > 64 ? maxp : 64, .lora_rank = plan.lora_rank};
        GenConfig gc = {.group_size = 1, .max_new_tokens = maxc, .batch_size = 64, .max_prompt_tokens = maxp,
                        .max_prompts = nvex,
                        .sampler = {.temperature = 0, .top_p = 1}, .stop_ids = &eos, .n_stop_ids = eos >= 0};
        // greedy decoding on the CPU, over the host copy of the adapter refreshed before
        // each validation: a second transformer on a device would hold a second copy of
        // the base weights there
        if (transformer_init(&vtf, &w, &vp, err) < 0 || (!c->full && transformer_set_lora(vtf, &lay, hparams, err) < 0) ||
            generator_init(&vgen, vtf, &w.cfg, &gc, err) < 0)
            goto out;
    }
    MemPlan dry = {0};
    plan_step(&b, &dry, c->token_budget, nex, c->batch);
    if (!(block = mem_alloc_big(dry.used))) {
        err_set(err, PAIL_ERR_NOMEM, "sft: out of memory for the step's buffers (%zu MiB)", dry.used >> 20);
        goto out;
    }
    MemPlan real = {block, 0};
    plan_step(&b, &real, c->token_budget, nex, c->batch);
    int64_t *order = b.order, *sel = b.sel;
    PackRow *row = &b.row;
    for (int i = 0; i < nex; i++) order[i] = i;
    Rng rng;
    rng_seed(&rng, (uint64_t)c->seed, 0x736674);
    shuffle(order, nex, &rng);
    if (c->metrics_path && !(mf = fopen(c->metrics_path, "a"))) {
        err_set(err, PAIL_ERR_IO, "--metrics %s: cannot open", c->metrics_path);
        goto out;
    }
    log_info("sft: %d examples from %s, %s training of %zu parameters, %ld steps of %ld examples", nex, c->data_path,
             c->full ? "full" : "LoRA", n, c->steps, c->batch);
    LrSchedule sched = {.kind = c->schedule, .lr = c->lr, .min_lr_ratio = c->min_lr_ratio,
                        .warmup_steps = c->warmup_steps, .steps = c->steps};
    int cursor = 0;
    double t0 = time_mono_s(), loss_acc = 0, tok_acc = 0;
    int64_t step;
    for (step = 0; step < c->steps && !(stop && *stop); step++) {
        // The step's examples and its completion-token count (the loss normalizer).
        int nb = (int)c->batch;
        for (int k = 0; k < nb; k++) {
            if (cursor == nex) { shuffle(order, nex, &rng); cursor = 0; }
            sel[k] = order[cursor++];
        }
        double ctoks = 0;
        for (int k = 0; k < nb; k++) ctoks += ex[sel[k]].n - ex[sel[k]].plen;
        double step_loss = 0;  // the gradients are zero: since the load, or the last step
        int k = 0;
        while (k < nb) {  // micro-batches: as many examples as the token budget holds
            pack_reset(row);
            for (; k < nb; k++) {
                PackSeq seq = example_seq(&ex[sel[k]]);
                if (pack_add(row, &seq) < 0) break;
            }
            const int *tgt = row->tgt;
            float *logp = b.logp, *dlogp = b.dlogp;
            if (transformer_forward(tf, logp, NULL, row->tok, row->pos, row->cu, row->nseq, row->T, tgt, 1.0f, err) < 0)
                goto out;
            for (int t = 0; t < row->T; t++) {
                dlogp[t] = tgt[t] >= 0 ? (float)(-1.0 / ctoks) : 0.0f;
                if (tgt[t] >= 0) step_loss -= logp[t] / ctoks;
            }
            float *grads = trainable_grads(ts);
            if (transformer_backward(tf, c->full ? NULL : grads, c->full ? grads : NULL, dlogp, err) < 0) goto out;
        }
        double sumsq, lr = lr_schedule_at(&sched, step);
        TrainableHyper h = {.lr = lr, .beta1 = (float)c->beta1, .beta2 = (float)c->beta2, .eps = (float)c->adam_eps,
                            .weight_decay = (float)c->weight_decay, .max_grad_norm = (float)c->max_grad_norm};
        int up = trainable_step(ts, &h, (int)(step + 1), &sumsq, err);
        if (up < 0) goto out;
        if (up) log_warn("sft step %lld skipped: non-finite gradients (sum of squares %g)", (long long)step + 1, sumsq);
        loss_acc += step_loss;
        tok_acc += ctoks;
        if ((step + 1) % c->log_every == 0 || step + 1 == c->steps) {
            double secs = time_mono_s() - t0;
            fprintf(stderr, "sft step %lld/%ld | loss %.4f | lr %.2e | grad norm %.3f | %.0f s\n", (long long)step + 1,
                    c->steps, loss_acc / c->log_every, lr, sqrt(sumsq), secs);
            if (mf) fprintf(mf, "{\"step\": %lld, \"loss\": %.6f, \"learning_rate\": %g, \"grad_norm\": %.6f, "
                                "\"completion_tokens\": %.0f, \"seconds\": %.3f}\n",
                            (long long)step + 1, loss_acc / c->log_every, lr, sqrt(sumsq), tok_acc, secs);
            loss_acc = tok_acc = 0;
        }
        if (vgen && c->valid_every > 0 && (step + 1) % c->valid_every == 0) {
            double acc = 0;
            if (!c->full && trainable_save(ts, hparams, NULL, NULL, err) < 0) goto out;
            if (validate(vgen, vex, nvex, &acc, err) < 0) goto out;
            fprintf(stderr, "sft step %lld | validation exact match %.1f%% (%d examples)\n", (long long)step + 1,
                    100 * acc, nvex);
            if (mf) fprintf(mf, "{\"step\": %lld, \"valid_accuracy\": %.6f}\n", (long long)step + 1, acc);
            if (c->stop_accuracy > 0 && acc >= c->stop_accuracy) {
                log_info("sft: validation accuracy %.1f%% reached the target %.1f%% at step %lld", 100 * acc,
                         100 * c->stop_accuracy, (long long)step + 1);
                step++;
                break;
            }
        }
    }
    // Save.
    if (c->full) {
        char tdir[4200];
        snprintf(tdir, sizeof tdir, "%s", c->model_dir);
        ModelGenOptions o = {.dtype = ST_DTYPE_F32, .tokenizer_dir = tdir};
        if (model_weights_save(&w, c->out, &o, err) < 0) goto out;
        log_info("sft: wrote the trained checkpoint to %s after %lld steps", c->out, (long long)step);
    } else {
        Buf img = {0};
        AdapterMeta meta = {.step = step, .created_unix = time_unix_s()};
        snprintf(meta.base_sha256, sizeof meta.base_sha256, "%s", w.base_sha256);
        if (trainable_save(ts, hparams, NULL, NULL, err) < 0 || lora_adapter_write(&lay, hparams, &meta, &img, err) < 0 ||
            h5f_write_path(&img, c->out, err) < 0) {
            buf_free(&img);
            goto out;
        }
        buf_free(&img);
        log_info("sft: wrote the adapter to %s after %lld steps (use it with --init-adapter)", c->out, (long long)step);
    }
    rc = 0;
out:
    buf_free(&train_text);  // what load_examples did not consume (an early failure)
    buf_free(&valid_text);
    if (mf) fclose(mf);
    generator_free(vgen);
    transformer_free(vtf);
    for (int i = 0; i < nvex; i++) free(vex[i].ids);
    free(vex);
    for (int i = 0; i < nex; i++) free(ex[i].ids);
    free(ex);
    free(block);
    transformer_free(tf);
    trainable_close(ts);
    free(hparams);
    lora_layout_free(&lay);
    if (have_chat) chat_template_free(&chat);
    tokenizer_free(tok);
    model_weights_free(&w);
    return rc;
}
