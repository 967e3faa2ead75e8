/* schema_walks.c — texts the JSON Schema grammars admit, for a validator to judge (tests/server/
 * schema_walks_test.py, with the `jsonschema` package): reads one schema a line (JSON) from stdin,
 * compiles it (srv_json_grammar, as response_format json_schema does) and prints N random walks
 * through its grammar (fuzz_tool_walk_body.h's rf_tw_walk, seeded), each as one line: the
 * schema's index, a tab, the text as a JSON string. A schema that does not compile prints
 * "index\tERROR message", a walk that reached RF_TW_CAP "index\tUNFINISHED". Test-only; never
 * installed.
 *   usage: rf-schema-walks SEED N < schemas.jsonl */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../fuzz/fuzz_tool_walk_body.h"
#include "server/json_schema.h"
#include "test_util.h"

static uint8_t next_byte(void *user) { return (uint8_t)(rf_rng_u64((rf_rng *)user) >> 56); }

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: rf-schema-walks SEED N < schemas.jsonl\n");
        return 2;
    }
    rf_rng r;
    rf_rng_init(&r, strtoull(argv[1], NULL, 0));
    const int n = atoi(argv[2]);
    rf_tw_src src = {.next = next_byte, .user = &r};
    static char line[1 << 16], text[RF_TW_CAP];
    for (int idx = 0; fgets(line, sizeof line, stdin); idx++) {
        json_error_t je;
        json_t *sc = json_loads(line, 0, &je);
        rf_grammar *g = NULL;
        char err[256] = "";
        if (!sc || srv_json_grammar(json_is_object(sc) ? sc : NULL, &g, err, sizeof err)) {
            printf("%d\tERROR %s\n", idx, sc ? err : je.text);
            json_decref(sc);
            continue;
        }
        for (int w = 0; w < n; w++) {
            long len = rf_tw_walk(g, &src, text, sizeof text);
            if (len < 0) { /* reached RF_TW_CAP: a finish that does not converge (its bound's model) */
                printf("%d\tUNFINISHED\n", idx);
                continue;
            }
            json_t *s = json_stringn(text, (size_t)len);
            char *out = s ? json_dumps(s, JSON_ENCODE_ANY | JSON_ENSURE_ASCII) : NULL;
            if (!out) {
                fprintf(stderr, "schema %d: a walk that is not UTF-8: %.*s\n", idx, (int)len, text);
                return 1;
            }
            printf("%d\t%s\n", idx, out);
            free(out);
            json_decref(s);
        }
        rf_grammar_unref(g);
        json_decref(sc);
    }
    return 0;
}
