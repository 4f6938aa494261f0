// grpo-ctl plot: draws a run's reward curve (metrics/step-*.json) and held-out
// accuracy (eval/v*.json, placed at the step of the adapter version they
// score) as one SVG picture, so a run can be looked at without Python.
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/fsutil.h"
#include "ctl/ctl.h"
#include "store/runlayout.h"
#include "store/versions.h"

typedef struct { double x, y; } Pt;

static int load_json(Store *st, const char *key, json_t **out, PailErr *err) {
    Buf b = {0};
    int rc = store_get(st, key, &b, NULL, NULL, err);
    *out = rc == 0 ? json_loadb((char *)b.data, b.len, 0, NULL) : NULL;
    buf_free(&b);
    return rc == 0 && *out ? 0 : -1;
}

static int cmp_pt(const void *a, const void *b) {
    double x = ((const Pt *)a)->x, y = ((const Pt *)b)->x;
    return (x > y) - (x < y);
}

// Polyline in the plot box [x0, x0+w] x [y0, y0+h] for data in [xmin, xmax] x [ymin, ymax].
static void polyline(FILE *f, const Pt *p, int n, double xmin, double xmax, double ymin, double ymax, double x0,
                     double y0, double w, double h, const char *color, bool dots, double width) {
    if (n == 0) return;
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%.1f\" points=\"", color, width);
    for (int i = 0; i < n; i++)
        fprintf(f, "%.1f,%.1f ", x0 + (p[i].x - xmin) / (xmax - xmin) * w, y0 + h - (p[i].y - ymin) / (ymax - ymin) * h);
    fprintf(f, "\"/>\n");
    if (dots)
        for (int i = 0; i < n; i++)
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>\n",
                    x0 + (p[i].x - xmin) / (xmax - xmin) * w, y0 + h - (p[i].y - ymin) / (ymax - ymin) * h, color);
}

int ctl_plot(int argc, char **argv) {
    CtlStoreFlags sf = {0};
    char *out = NULL, *title = NULL;
    Flag fl[CTL_STORE_NFLAGS + 2] = {
        {"out", FLAG_STRING, &out, NULL, 1, 0, "the SVG file to write"},
        {"title", FLAG_STRING, &title, NULL, 1, 0, "title (default: the run URL)"},
    };
    ctl_store_flags(fl + 2, &sf);
    int n = CTL_STORE_NFLAGS + 2, npos = 0, rc;
    char **pos = NULL;
    const char *usage = "grpo-ctl plot RUN_URL --out FILE.svg";
    if ((rc = ctl_parse(usage, "Draws reward per step and held-out accuracy per version as an SVG.", fl, n, argc,
                        argv, &pos, &npos)) >= 0)
        goto done;
    rc = 2;
    if (npos != 1 || !out) {
        fprintf(stderr, "%s: expected RUN_URL and --out FILE.svg\nusage: %s\n", argv[0], usage);
        goto done;
    }
    rc = 1;
    PailErr err = {0};
    Store *st = NULL;
    StoreOptions so = ctl_store_options(&sf);
    if (store_open(&st, pos[0], &so, &err) < 0) {
        fprintf(stderr, "%s: %s\n", argv[0], err.msg);
        goto done;
    }
    StoreList l = {0};
    Pt *rw = NULL, *acc = NULL;
    int nr = 0, na = 0;
    // step of each published version, from the metrics
    double vstep[1 << 16];
    for (int i = 0; i < (1 << 16); i++) vstep[i] = -1;
    vstep[0] = 0;
    if (store_list_all(st, "metrics/step-", NULL, &l, &err) < 0) {
        fprintf(stderr, "%s: %s\n", argv[0], err.msg);
        store_close(st);
        goto done;
    }
    rw = calloc((size_t)l.n + 1, sizeof *rw);
    for (int i = 0; i < l.n; i++) {
        json_t *j;
        if (load_json(st, l.entries[i].key, &j, &err) < 0) continue;
        double step = json_number_value(json_object_get(j, "step"));
        rw[nr++] = (Pt){step, json_number_value(json_object_get(j, "reward"))};
        json_int_t v = json_integer_value(json_object_get(j, "version"));
        if (v >= 0 && v < (1 << 16) && vstep[v] < 0) vstep[v] = step;
        json_decref(j);
    }
    store_list_reset(&l);
    if (store_list_all(st, "eval/v", NULL, &l, &err) == 0) {
        acc = calloc((size_t)l.n + 1, sizeof *acc);
        for (int i = 0; i < l.n; i++) {
            long v = version_parse(&SERIES_EVALS, l.entries[i].key);
            json_t *j;
            if (v < 0 || load_json(st, l.entries[i].key, &j, &err) < 0) continue;
            double x = v < (1 << 16) && vstep[v] >= 0 ? vstep[v] : (double)v;
            json_t *a = json_object_get(j, "accuracy");  // absent: not defined for the run's reward
            if (json_is_number(a)) acc[na++] = (Pt){x, 100.0 * json_number_value(a)};
            json_decref(j);
        }
    }
    store_list_free(&l);
    store_close(st);
    if (nr == 0 && na == 0) {
        fprintf(stderr, "%s: %s has no metrics/step-*.json or eval/v*.json yet\n", argv[0], pos[0]);
        free(rw);
        free(acc);
        goto done;
    }
    qsort(rw, (size_t)nr, sizeof *rw, cmp_pt);
    if (acc) qsort(acc, (size_t)na, sizeof *acc, cmp_pt);
    double xmax = 1, rmin = 0, rmax = 1e-9;
    for (int i = 0; i < nr; i++) {
        xmax = fmax(xmax, rw[i].x);
        rmin = fmin(rmin, rw[i].y);
        rmax = fmax(rmax, rw[i].y);
    }
    for (int i = 0; i < na; i++) xmax = fmax(xmax, acc[i].x);
    if (rmax - rmin < 1e-9) rmax = rmin + 1;
    FILE *f = fopen(out, "w");
    if (!f) {
        fprintf(stderr, "%s: %s: cannot write\n", argv[0], out);
        free(rw);
        free(acc);
        goto done;
    }
    double W = 900, H = 500, x0 = 70, y0 = 50, w = 740, h = 360;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
               "font-size=\"13\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", W, H);
    fprintf(f, "<text x=\"%.0f\" y=\"28\" font-size=\"16\" font-weight=\"bold\">%s</text>\n", x0,
            title ? title : pos[0]);
    fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"#888\"/>\n", x0, y0, w, h);
    for (int k = 0; k <= 5; k++) {  // grid and ticks
        double gx = x0 + w * k / 5, gy = y0 + h - h * k / 5;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" stroke=\"#eee\"/>\n", gx, y0, gx, y0 + h);
        fprintf(f, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#eee\"/>\n", x0, gy, x0 + w, gy);
        fprintf(f, "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">%.0f</text>\n", gx, y0 + h + 18, xmax * k / 5);
        fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#1f77b4\">%.2f</text>\n", x0 - 6, gy + 4,
                rmin + (rmax - rmin) * k / 5);
        fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" fill=\"#d62728\">%.0f%%</text>\n", x0 + w + 6, gy + 4, 100.0 * k / 5);
    }
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">optimizer step</text>\n", x0 + w / 2, y0 + h + 38);
    // The per-step reward is noisy: drawn light, with a centred moving average
    // over 11 steps on top.
    Pt *avg = calloc((size_t)nr + 1, sizeof *avg);
    for (int i = 0; i < nr; i++) {
        double sum = 0;
        int k = 0;
        for (int j = i - 5; j <= i + 5; j++) if (j >= 0 && j < nr) { sum += rw[j].y; k++; }
        avg[i] = (Pt){rw[i].x, sum / k};
    }
    polyline(f, rw, nr, 0, xmax, rmin, rmax, x0, y0, w, h, "#aec7e8", false, 1);
    polyline(f, avg, nr, 0, xmax, rmin, rmax, x0, y0, w, h, "#1f77b4", false, 2.5);
    polyline(f, acc, na, 0, xmax, 0, 100, x0, y0, w, h, "#d62728", na < 60, 2);
    free(avg);
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" fill=\"#1f77b4\">&#8212; reward per step (light) and its 11-step mean</text>\n",
            x0, y0 + h + 60);
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" fill=\"#d62728\" text-anchor=\"end\">&#8212; held-out accuracy (eval worker, right axis)</text>\n",
            x0 + w, y0 + h + 60);
    fprintf(f, "</svg>\n");
    rc = fclose(f) == 0 ? 0 : 1;
    if (rc == 0) fprintf(stderr, "%s: wrote %s (%d steps, %d evaluations)\n", argv[0], out, nr, na);
    free(rw);
    free(acc);
done:
    free(pos);
    flags_free(fl, n);
    return rc;
}
