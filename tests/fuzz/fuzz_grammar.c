/* fuzz_grammar.c — libFuzzer target for constrained decoding's grammars: byte 0 picks GBNF or a
 * JSON Schema; the input up to the first NUL is the grammar / schema, the rest a text fed to
 * the recognizer. Invariants (a violation traps): compiling either succeeds or fails with a
 * message, never crashes; feeding never crashes; a text accepted as a whole is accepted again
 * when fed in two pieces, and a failed feed leaves the match where it was. Build: make fuzz. */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "engine/grammar.h"
#include "server/json_schema.h"

#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const char *src = (const char *)data + 1;
    size_t n = size - 1, gl = 0;
    while (gl < n && src[gl]) gl++;
    const char *text = gl < n ? src + gl + 1 : src + n;
    size_t tl = gl < n ? n - gl - 1 : 0;
    rf_grammar *g = NULL;
    if (data[0] & 1) {
        if (rf_grammar_parse_gbnf(src, gl, &g)) RF_FUZZ_CHECK(g == NULL);
    } else {
        json_error_t je;
        json_t *sc = json_loadb(src, gl, 0, &je);
        char err[256] = "";
        if (sc && srv_json_grammar(sc, &g, err, sizeof err)) RF_FUZZ_CHECK(err[0] && g == NULL);
        json_decref(sc);
    }
    if (!g) return 0;
    bool whole = rf_grammar_accepts(g, text, tl);
    rf_gmatch *m;
    if (rf_gmatch_new(g, &m) == RF_OK) {
        size_t half = tl / 2;
        bool a = rf_gmatch_feed(m, text, half);
        if (a) {
            bool b = rf_gmatch_feed(m, text + half, tl - half);
            if (b) RF_FUZZ_CHECK(whole == rf_gmatch_accepting(m));
        }
        if (!a || whole) RF_FUZZ_CHECK(!whole || a);
        rf_gmatch_free(m);
    }
    rf_grammar_unref(g);
    return 0;
}
