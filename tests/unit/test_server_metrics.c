/* test_server_metrics.c — /metrics' text without HTTP (src/server/metrics.c): the gauges of a
 * loaded model end with rocmforge_tp_size; a model on the CPU has no per-GPU series; a model on
 * GPUs has rocmforge_gpu_memory_total_bytes / _free_bytes and rocmforge_gpu_kv_bytes, one sample
 * per GPU labelled with its ordinal, and a GPU whose memory could not be read is left out of the
 * memory series (not reported as 0 free). Skipped (77) when the server is not part of the build. */
#define _GNU_SOURCE
#include "test_util.h"

#ifndef RF_HAVE_SERVER
#include <stdio.h>
int main(void) {
    printf("test_server_metrics: SKIPPED (built without libmicrohttpd: no server)\n");
    return RF_TEST_SKIP;
}
#else
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/metrics.h"

static char *render(const srv_gauges *g) {
    srv_metrics m;
    srv_metrics_init(&m);
    srv_buf b = {0};
    srv_metrics_render(&m, g, &b);
    srv_metrics_destroy(&m);
    assert_false(b.oom);
    char *s = strndup(b.p, b.len);
    srv_buf_free(&b);
    return s;
}

static bool has_line(const char *text, const char *line) {
    size_t n = strlen(line);
    for (const char *p = text; (p = strstr(p, line)); p += n)
        if ((p == text || p[-1] == '\n') && (p[n] == '\n' || p[n] == 0)) return true;
    return false;
}

static void test_cpu(void **state) {
    (void)state;
    srv_gauges g;
    memset(&g, 0, sizeof g);
    g.loaded = 1;
    g.tp_size = 2;
    g.kv_bytes = 8421376;
    char *t = render(&g);
    assert_true(has_line(t, "rocmforge_tp_size 2"));
    assert_true(has_line(t, "# TYPE rocmforge_tp_size gauge"));
    assert_true(has_line(t, "rocmforge_kv_bytes 8421376"));
    assert_null(strstr(t, "rocmforge_gpu_"));
    free(t);
    g.loaded = 0; /* not loaded yet: none of the engine's gauges */
    t = render(&g);
    assert_null(strstr(t, "rocmforge_tp_size"));
    free(t);
}

static void test_gpus(void **state) {
    (void)state;
    srv_gauges g;
    memset(&g, 0, sizeof g);
    g.loaded = 1;
    g.tp_size = 2;
    g.n_gpu = 2;
    g.gpu[0] = (srv_gpu_gauges){.device = 2, .mem_total = 150754820096, .mem_free = 140000000000, .kv_bytes = 4210688};
    g.gpu[1] = (srv_gpu_gauges){.device = 3, .mem_total = 150754820096, .mem_free = 139999997952, .kv_bytes = 4210688};
    char *t = render(&g);
    assert_true(has_line(t, "rocmforge_tp_size 2"));
    assert_true(has_line(t, "# TYPE rocmforge_gpu_memory_free_bytes gauge"));
    assert_true(has_line(t, "rocmforge_gpu_memory_total_bytes{gpu=\"2\"} 150754820096"));
    assert_true(has_line(t, "rocmforge_gpu_memory_total_bytes{gpu=\"3\"} 150754820096"));
    assert_true(has_line(t, "rocmforge_gpu_memory_free_bytes{gpu=\"2\"} 140000000000"));
    assert_true(has_line(t, "rocmforge_gpu_memory_free_bytes{gpu=\"3\"} 139999997952"));
    assert_true(has_line(t, "rocmforge_gpu_kv_bytes{gpu=\"2\"} 4210688"));
    assert_true(has_line(t, "rocmforge_gpu_kv_bytes{gpu=\"3\"} 4210688"));
    free(t);
    g.gpu[1].mem_total = -1; /* the driver did not answer for GPU 3: no memory samples for it */
    t = render(&g);
    assert_true(has_line(t, "rocmforge_gpu_memory_free_bytes{gpu=\"2\"} 140000000000"));
    assert_null(strstr(t, "rocmforge_gpu_memory_free_bytes{gpu=\"3\"}"));
    assert_null(strstr(t, "rocmforge_gpu_memory_total_bytes{gpu=\"3\"}"));
    assert_true(has_line(t, "rocmforge_gpu_kv_bytes{gpu=\"3\"} 4210688"));
    free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu),
        cmocka_unit_test(test_gpus),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
#endif
