/* test_fuzz_replay.c: runs a fuzz target (linked in) over its seed corpus
 * and every regression input in each build, so the targets' invariants and
 * past crashes are checked without libFuzzer. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

static int replay_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t len;
        char *buf = read_file(path, &len);
        if (!buf)
            continue;
        LLVMFuzzerTestOneInput((const unsigned char *)buf, len); /* aborts on a broken invariant */
        free(buf);
        n++;
    }
    closedir(d);
    return n;
}

static void fuzz_target_holds_on_seeds_and_regressions(void **state) {
    (void)state;
    int seeds = replay_dir(FUZZ_CORPUS);
    int regressions = replay_dir(FUZZ_REGRESSIONS);
    print_message("%d seeds, %d regressions\n", seeds, regressions);
    assert_true(seeds >= 5);
    /* and the edge cases no corpus file spells out */
    LLVMFuzzerTestOneInput((const unsigned char *)"", 0);
    LLVMFuzzerTestOneInput((const unsigned char *)"\xff\xff\xff\xff\xff\xff\xff\xff", 8);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fuzz_target_holds_on_seeds_and_regressions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
