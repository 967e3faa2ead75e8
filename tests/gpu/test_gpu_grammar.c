/* test_gpu_grammar.c — structured output's token masks on the GPU sampler (issue 28): requests
 * constrained by a grammar, sampled on the device (each row's mask sent up with the step,
 * written by the host while the device runs the forward or before the step is sent, applied
 * after the penalties and before the draw; decode steps as recorded graphs), give the
 * tokens the host sampler gives from the same logits (the same requests with logprobs on, which
 * sample on the host, the steps eager: the decode step's logits have the same bits either way),
 * constrained and unconstrained sequences together, greedy and sampled, with penalties; every
 * constrained text is a prefix of the grammar's language; a grammar that admits no token ends
 * its choice at once with an end-of-generation token (the server's "stop") on both paths.
 * Skips (77) without a GPU. */
#include "gpu_model_common.h"

#include "core/knobs.h"
#include "engine/grammar.h"

enum { NQ = 4, GT = 40 };

/* A choice's tokens, its text and how it ended. */
typedef struct q_out {
    int32_t n, tok[GT + 1];
    char text[4096];
    size_t len;
    int done;
    rf_finish_reason why;
} q_out;

static bool on_q(const rf_event *ev, void *user) {
    q_out *o = user;
    size_t n = 0;
    const char *t = rf_event_text(ev, &n);
    if (n && o->len + n < sizeof o->text) memcpy(o->text + o->len, t, n), o->len += n;
    if (rf_event_get_kind(ev) == RF_EVENT_TOKEN && o->n <= GT) o->tok[o->n++] = rf_event_token(ev);
    if (rf_event_get_kind(ev) == RF_EVENT_DONE) o->done = 1, o->why = rf_event_finish(ev);
    return true;
}

static rf_grammar *gbnf(const char *text) {
    rf_grammar *g = NULL;
    if (rf_grammar_parse_gbnf(text, strlen(text), &g)) fail_msg("grammar: %s", rf_last_error());
    return g;
}

/* Request k of a fixed mix: 0 and 2 constrained (sampled at 0.8 with a repeat penalty, greedy),
 * 1 unconstrained sampled, 3 constrained by g_none when given; host = logprobs on. */
static void submit_mix(rf_engine *e, rf_grammar *g, rf_grammar *g_none, const int32_t *prompt, int np, q_out *o,
                       bool host) {
    for (int k = 0; k < NQ; k++) {
        memset(&o[k], 0, sizeof o[k]);
        rf_request *q = rf_request_new();
        rf_request_set_prompt_ids(q, prompt + k, (size_t)np);
        rf_request_set(q, RF_REQ_MAX_TOKENS, GT);
        if (k != 2) {
            rf_request_set(q, RF_REQ_TEMPERATURE, 0.8);
            rf_request_set(q, RF_REQ_SEED, 1000 + k);
        }
        if (k == 0) rf_request_set(q, RF_REQ_REPEAT_PENALTY, 1.3);
        if (k == 0 || k == 2) rf_request_set_grammar(q, g);
        if (k == 3 && g_none) rf_request_set_grammar(q, g_none);
        if (host) rf_request_set(q, RF_REQ_LOGPROBS, 0);
        rf_request_set_callback(q, on_q, &o[k]);
        if (rf_engine_submit(e, q, NULL)) fail_msg("submit: %s", rf_last_error());
        rf_request_free(q);
    }
    while (rf_engine_get_stat(e, RF_STAT_RUNNING) + rf_engine_get_stat(e, RF_STAT_WAITING) > 0)
        if (rf_engine_step(e)) fail_msg("step: %s", rf_last_error());
}

/* The mix on the device and on the host with RF_GPU_MASK_OVERLAP at `overlap` (read when the
 * backend is made): each choice's tokens equal on both paths and constrained texts inside the
 * grammar; *uploads and *launches: the device phase's counts. */
static void run_mix(const char *overlap, q_out *dev, long long *uploads, long long *launches) {
    assert_int_equal(rf_knob_override(RF_KNOB_GPU_MASK_OVERLAP, overlap), RF_OK);
    char path[1200];
    mkmodel("tiny", "q8_0", path, sizeof path);
    rf_model *m = load(path, RF_DEVICE_GPU);
    rf_engine_config *c = rf_engine_config_new();
    rf_engine_config_set(c, RF_ENGINE_CTX, 256);
    rf_engine_config_set(c, RF_ENGINE_PARALLEL, NQ);
    rf_engine *e = NULL;
    if (rf_engine_new(m, c, &e)) fail_msg("engine: %s", rf_last_error());
    rf_engine_config_free(c);
    /* digits in braces: a random model's text must be pushed hard to stay inside */
    rf_grammar *g = gbnf("root ::= \"{\" num (\",\" num)* \"}\"\nnum ::= [0-9] [0-9]? [0-9]?\n");
    /* every sentence is over before any token: "" only, so no token is allowed at the start */
    rf_grammar *g_none = gbnf("root ::= \"\"\n");
    int32_t prompt[16];
    for (int i = 0; i < 16; i++) prompt[i] = 7 + (i * 131) % (m->hp.n_vocab - 20);
    q_out host[NQ];
    rf_backend_info i0, i1, i2;
    assert_int_equal(m->be->ops->info(m->be, false, &i0), RF_OK);
    submit_mix(e, g, g_none, prompt, 8, dev, false);
    assert_int_equal(m->be->ops->info(m->be, false, &i1), RF_OK);
    submit_mix(e, g, g_none, prompt, 8, host, true);
    assert_int_equal(m->be->ops->info(m->be, false, &i2), RF_OK);
    *uploads = (long long)(i1.uploads - i0.uploads);
    *launches = (long long)(i1.launches - i0.launches);
    printf("  RF_GPU_MASK_OVERLAP=%s: %lld graph launches and %lld uploads with masks on the device, %lld launches "
           "with host sampling\n", overlap, *launches, *uploads, (long long)(i2.launches - i1.launches));
    assert_true(*launches >= GT / 2); /* the masked decode steps ran as graphs */
    for (int k = 0; k < NQ; k++) {
        printf("  request %d (%s): device %d tokens, host %d tokens, finish %d / %d, text \"%.*s\"\n", k,
               k == 0 || k == 2 ? "grammar" : k == 3 ? "grammar admitting nothing" : "free", dev[k].n, host[k].n,
               (int)dev[k].why, (int)host[k].why, (int)(dev[k].len < 60 ? dev[k].len : 60), dev[k].text);
        assert_true(dev[k].done && host[k].done);
        assert_int_equal(dev[k].n, host[k].n);
        assert_memory_equal(dev[k].tok, host[k].tok, (size_t)dev[k].n * sizeof(int32_t));
        if (k == 0 || k == 2) {
            rf_gmatch *gm = NULL;
            assert_int_equal(rf_gmatch_new(g, &gm), RF_OK);
            if (!rf_gmatch_feed(gm, dev[k].text, dev[k].len))
                fail_msg("request %d: \"%.*s\" is not a prefix of the grammar's language", k, (int)dev[k].len,
                         dev[k].text);
            rf_gmatch_free(gm);
            assert_true(dev[k].len > 0);
        }
    }
    /* the grammar that admits nothing: the choice ends at once, with "stop" */
    assert_true(dev[3].why == RF_FINISH_EOS && dev[3].len == 0);
    rf_grammar_unref(g);
    rf_grammar_unref(g_none);
    rf_engine_free(e);
    rf_model_free(m);
    rf_knob_override(RF_KNOB_GPU_MASK_OVERLAP, NULL);
}

/* Masks written by a host task while the device runs the forward (RF_GPU_MASK_OVERLAP 1: steps
 * of any row count; the masks go up in a copy of their own) and before the step is sent (0): the
 * same tokens, each equal to the host sampler's; the overlapped steps each made one more upload. */
static void test_masks_on_device(void **state) {
    (void)state;
    q_out late[NQ], early[NQ];
    long long up_late, up_early, l_late, l_early;
    run_mix("1", late, &up_late, &l_late);
    run_mix("0", early, &up_early, &l_early);
    for (int k = 0; k < NQ; k++) {
        assert_int_equal(late[k].n, early[k].n);
        assert_memory_equal(late[k].tok, early[k].tok, (size_t)late[k].n * sizeof(int32_t));
    }
    assert_int_equal(l_late, l_early);
    assert_true(up_late > up_early); /* a masked step's own copy of its masks: the late path ran */
}

static int setup(void **state) {
    (void)state;
    gpu_test_init_or_skip("test_gpu_grammar");
    gpu_model_dirs();
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_masks_on_device),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
