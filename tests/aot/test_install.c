/* test_install.c: `cmake --install` into a fresh prefix gives attnc, libattn
 * (static and shared, no LLVM), libattnc, the headers and pkg-config
 * files; examples/aot, a CMake project of its own, builds against that
 * prefix (running attnc compile at build time), and its program matches
 * `attnc run --engine reference`; and docs/api.md's link line for an object,
 * exactly as printed, links and runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"

static void sh(const char *cmd) {
    if (system(cmd) != 0)
        fail_msg("failed: %s", cmd);
}

static void install_tree_builds_and_runs_the_aot_example(void **state) {
    (void)state;
    char *dir = tmpdir_new(), cmd[8192];
    const char *pre = path_in(dir, "prefix"), *ex = path_in(dir, "aot");
    snprintf(cmd, sizeof cmd, "cmake --install %s --prefix %s > %s/install.log", ATTNC_BUILD_DIR,
             pre, dir);
    sh(cmd);
    const char *files[] = {"bin/attnc",
                           "lib/libattn.a",
                           "lib/libattn.so",
                           "lib/libattnc.a",
                           "lib/libattnc.so",
                           "include/attn.h",
                           "include/attn_kernels.h",
                           "include/attnc.h",
                           "lib/pkgconfig/attn.pc",
                           "lib/pkgconfig/attnc.pc",
                           "lib/pkgconfig/attnc-static.pc"};
    for (int i = 0; i < 11; i++) {
        snprintf(cmd, sizeof cmd, "test -f %s/%s", pre, files[i]);
        sh(cmd);
    }
    snprintf(cmd, sizeof cmd, "! ldd %s/lib/libattn.so | grep -qi llvm", pre);
    sh(cmd);
    snprintf(cmd, sizeof cmd,
             "PKG_CONFIG_PATH=%s/lib/pkgconfig pkg-config --libs attn | grep -q -- -lattn", pre);
    sh(cmd);
    snprintf(cmd, sizeof cmd,
             "cmake -S %s/examples/aot -B %s -DCMAKE_PREFIX_PATH=%s -DCMAKE_C_FLAGS='%s' "
             "> %s/configure.log && cmake --build %s > %s/build.log",
             ATTNC_SOURCE_DIR, ex, pre, AOT_FLAGS, dir, ex, dir);
    sh(cmd);
    const char *spec = ATTNC_SOURCE_DIR "/specs/seed.yaml";
    snprintf(cmd, sizeof cmd,
             "cd %s && %s/bin/attnc gen-weights %s -o w.safetensors > /dev/null && "
             "%s/bin/attnc gen-input %s --tokens 21 -o x.safetensors > /dev/null && "
             "%s/bin/attnc run %s --weights w.safetensors --input x.safetensors "
             "-o y.safetensors --engine reference > /dev/null",
             dir, pre, spec, pre, spec, pre, spec);
    sh(cmd);
    snprintf(cmd, sizeof cmd,
             "cd %s && %s/aot_example w.safetensors x.safetensors y.safetensors 13 > run.log", dir,
             ex);
    sh(cmd);
    snprintf(cmd, sizeof cmd, "grep -q 'prefill 13 + decode 8' %s/run.log", dir);
    sh(cmd);
    snprintf(cmd, sizeof cmd, "! ldd %s/aot_example | grep -qi llvm", ex);
    sh(cmd);
    /* docs/api.md's link line, exactly as printed, from the install tree (plus
     * the sanitizer flags of a sanitizer build: its libattn needs them) */
    const char app[] =
        "#include <stdio.h>\n#include \"attn.h\"\n#include \"seed.h\"\n"
        "int main(void) {\n"
        "    const attn_kernels *k = seed_kernels();\n"
        "    attn_weights *w; attn_block *b; attn_cache *c; int32_t s, n = 3;\n"
        "    static float x[3 * 768], y[3 * 768];\n"
        "    if (attn_weights_random(&k->config, 1, &w, NULL) || attn_block_new(k, NULL, &b) ||\n"
        "        attn_block_set_weights(b, w) || attn_cache_new(b, 16, &c) || attn_seq_new(c, &s) "
        "||\n"
        "        attn_forward(b, c, 1, &s, &n, x, y))\n"
        "        return 1;\n"
        "    printf(\"linked and ran\\n\");\n"
        "    attn_cache_free(c);\n"
        "    attn_block_free(b);\n"
        "    attn_weights_free(w);\n"
        "    return 0;\n"
        "}\n";
    char app_path[1024];
    snprintf(app_path, sizeof app_path, "%s/app.c", dir);
    write_file(app_path, app, sizeof app - 1);
    snprintf(
        cmd, sizeof cmd,
        "cd %s && %s/bin/attnc compile %s -o seed.o --header seed.h > /dev/null && "
        "cc %s app.c seed.o $(PKG_CONFIG_PATH=%s/lib/pkgconfig pkg-config --cflags --libs attn) "
        "-o app && ./app > app.log && grep -q 'linked and ran' app.log",
        dir, pre, spec, AOT_FLAGS, pre);
    sh(cmd);
    /* docs/api.md's JIT link lines: pkg-config --libs attnc alone (the shared
     * libattnc.so, found through the rpath), and attnc-static (the archive:
     * no libattnc.so needed at run time) */
    const char jit[] = "#include <stdio.h>\n#include \"attnc.h\"\n"
                       "int main(int argc, char **argv) {\n"
                       "    attnc_options o = attnc_options_default();\n"
                       "    attnc_jit *j;\n"
                       "    (void)argc;\n"
                       "    if (attnc_jit_compile_file(NULL, argv[1], &o, &j)) return 1;\n"
                       "    printf(\"compiled %s\\n\", attnc_jit_kernels(j)->config.name);\n"
                       "    attnc_jit_free(j);\n"
                       "    return 0;\n"
                       "}\n";
    snprintf(app_path, sizeof app_path, "%s/jit.c", dir);
    write_file(app_path, jit, sizeof jit - 1);
    const char *pcs[2] = {"attnc", "attnc-static"};
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd,
                 "cd %s && cc %s jit.c $(PKG_CONFIG_PATH=%s/lib/pkgconfig pkg-config --cflags "
                 "--libs %s) "
                 "-o jit_%d && ATTNC_CACHE_DIR= ./jit_%d %s > jit.log && grep -q 'compiled seed' "
                 "jit.log && "
                 "%s ldd jit_%d | grep -q 'libattnc.so'",
                 dir, AOT_FLAGS, pre, pcs[i], i, i, spec, i == 0 ? "" : "!", i);
        sh(cmd);
    }
    /* docs/api.md's Python install: pip from a copy of python/ into a venv (no
     * registry), libraries found through pkg-config's libdir (python
     * cannot load a sanitizer build's libraries) */
    if (AOT_FLAGS[0] == 0 && system("/usr/bin/python3 -c 'import venv, numpy' 2>/dev/null") == 0) {
        snprintf(
            cmd, sizeof cmd,
            "cd %s && cp -r %s/python py && /usr/bin/python3 -m venv --system-site-packages venv "
            "&& "
            "venv/bin/pip install -q --no-build-isolation --no-index ./py > pip.log 2>&1 && "
            "cd / && PKG_CONFIG_PATH=%s/lib/pkgconfig ATTNC_CACHE_DIR= %s/venv/bin/python -c "
            "\"import attnc; k = attnc.compile('%s'); "
            "assert attnc.library_dir() is not None and str(attnc.library_dir()).startswith('%s'); "
            "assert '/site-packages/' in attnc.__file__; print(k)\" > %s/py.log && "
            "grep -q 'Kernels seed' %s/py.log",
            dir, ATTNC_SOURCE_DIR, pre, dir, spec, pre, dir, dir);
        sh(cmd);
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s/prefix %s/aot %s/py %s/venv", dir, dir, dir, dir);
    sh(cmd);
    tmpdir_remove(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(install_tree_builds_and_runs_the_aot_example),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
