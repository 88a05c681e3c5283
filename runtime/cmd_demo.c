#include "al_cli.h"
int al_cmd_demo(int argc, char **argv, al_err *err) {
    (void)argc;
    (void)argv;
    return al_errf(err, AL_EUNSUPPORTED, "demo: todo");
}
