/* embed.c -- build-time helper: write a file's bytes as a C array.
 *   embed INPUT OUTPUT.c SYMBOL
 * defines `const char SYMBOL[]` (NUL-terminated) and `SYMBOL_len`. */
#include <stdio.h>

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: embed INPUT OUTPUT.c SYMBOL\n");
        return 2;
    }
    FILE *in = fopen(argv[1], "rb"), *out = fopen(argv[2], "w");
    if (!in || !out) {
        perror(in ? argv[2] : argv[1]);
        return 1;
    }
    fprintf(out, "/* generated from %s by tools/embed: do not edit */\n", argv[1]);
    fprintf(out, "const char %s[] = {", argv[3]);
    unsigned long n = 0;
    int c;
    while ((c = fgetc(in)) != EOF) fprintf(out, "%s%d,", n++ % 24 ? "" : "\n", c);
    fprintf(out, "0};\nconst unsigned long %s_len = %lu;\n", argv[3], n);
    fclose(in);
    return fclose(out) == 0 ? 0 : 1;
}
