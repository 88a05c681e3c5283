/* tok_ids.c DIR FILE.jsonl -- for tests/test_tokenizer.py: encode each
 * document (one JSON string per line) with the tokenizer in DIR and print its
 * ids, space-separated, one line per document. Exits 1 if any document does
 * not decode back to itself, or if the fast path and GPT-2's original merge
 * loop (al_bpe_encode_naive) disagree on it; stderr says which and where. */
#include "al_tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: tok_ids DIR FILE.jsonl\n");
        return 2;
    }
    al_err err = {0};
    al_bpe t;
    al_bpe_enc e;
    char *text;
    size_t len;
    if (al_bpe_load_dir(&t, argv[1], &err) || al_bpe_enc_init(&e, &t, &err) ||
        al_read_file(argv[2], &text, &len, &err)) {
        fprintf(stderr, "tok_ids: %s\n", err.msg);
        return 1;
    }
    al_bpe_ids ids = {0}, ref = {0};
    size_t doc = 0, bad_trip = 0, bad_naive = 0;
    for (char *line = text, *nl; line < text + len; line = nl + 1) {
        nl = strchr(line, '\n');
        if (!nl) nl = text + len;
        if (nl == line) continue;
        json_error_t je;
        json_t *j = json_loadb(line, (size_t)(nl - line), JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        if (!json_is_string(j)) {
            fprintf(stderr, "tok_ids: %s: document %zu: not a JSON string: %s\n", argv[2], doc,
                    je.text);
            return 1;
        }
        const char *s = json_string_value(j);
        size_t n = json_string_length(j);
        ids.n = ref.n = 0;
        char *back = NULL;
        size_t blen = 0;
        if (al_bpe_encode(&e, s, n, &ids, &err) || al_bpe_encode_naive(&e, s, n, &ref, &err) ||
            al_bpe_decode(&t, ids.v, ids.n, &back, &blen, &err)) {
            fprintf(stderr, "tok_ids: document %zu: %s\n", doc, err.msg);
            return 1;
        }
        if (blen != n || memcmp(back, s, n) != 0) {
            if (bad_trip++ < 5)
                fprintf(stderr, "tok_ids: document %zu: decode(encode(x)) != x\n", doc);
        }
        if (ref.n != ids.n || memcmp(ref.v, ids.v, ids.n * sizeof *ids.v) != 0) {
            if (bad_naive++ < 5)
                fprintf(stderr, "tok_ids: document %zu: GPT-2's merge loop gives other ids\n", doc);
        }
        for (size_t i = 0; i < ids.n; i++) printf(i ? " %u" : "%u", ids.v[i]);
        printf("\n");
        free(back);
        json_decref(j);
        doc++;
    }
    fprintf(stderr,
            "tok_ids: %zu documents, %zu not round-tripped, %zu differing from GPT-2's loop\n", doc,
            bad_trip, bad_naive);
    al_bpe_ids_free(&ids);
    al_bpe_ids_free(&ref);
    al_bpe_enc_free(&e);
    al_bpe_free(&t);
    free(text);
    return bad_trip || bad_naive ? 1 : 0;
}
