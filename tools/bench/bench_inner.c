#include "al_cli.h"
int al_bench_inner(int argc, char **argv, al_err *err) {
    (void)argc;
    (void)argv;
    return al_errf(err, AL_EUNSUPPORTED, "bench inner: not built yet");
}
