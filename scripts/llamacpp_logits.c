// Last-position logits of a GGUF model, computed by llama.cpp itself (the
// golden data of crates/strata-models/tests/families_llamacpp.rs).
//
// Built and run by scripts/llamacpp_family_goldens.sh (see there); links
// against the vendored build's libllama.
//
//   llamacpp_logits MODEL OUT_F32 N_BATCH FLASH(0|1) TOKEN...
//
// Loads MODEL on the CPU (no GPU layers, one thread), decodes TOKEN... at
// positions 0.. in llama_decode calls of at most N_BATCH tokens (the KV
// cache carries over between them), and writes the last position's logits
// as n_vocab little-endian f32 to OUT_F32. FLASH selects flash attention
// (1) or the soft_max path (0).

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "llama.h"

static bool no_progress(float progress, void * user) {
    (void) progress;
    (void) user;
    return true;
}

static void quiet(enum ggml_log_level level, const char * text, void * user) {
    (void) user;
    if (level >= GGML_LOG_LEVEL_ERROR) {
        fputs(text, stderr);
    }
}

int main(int argc, char ** argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: %s MODEL OUT_F32 N_BATCH FLASH(0|1) TOKEN...\n", argv[0]);
        return 2;
    }
    const char * model_path = argv[1];
    const char * out_path = argv[2];
    const int n_batch = atoi(argv[3]);
    const int flash = atoi(argv[4]);
    const int n_tokens = argc - 5;
    if (n_batch <= 0 || n_tokens > 1024) {
        fprintf(stderr, "N_BATCH must be positive and the prompt at most 1024 tokens (n_ctx)\n");
        return 2;
    }
    llama_token * tokens = malloc(sizeof(llama_token) * (size_t) n_tokens);
    if (!tokens) {
        return 1;
    }
    for (int i = 0; i < n_tokens; i++) {
        tokens[i] = (llama_token) atoi(argv[5 + i]);
    }

    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.progress_callback = no_progress;
    struct llama_model * model = llama_model_load_from_file(model_path, mp);
    if (!model) {
        fprintf(stderr, "cannot load %s\n", model_path);
        return 1;
    }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 1024;
    cp.n_batch = (uint32_t) n_batch;
    cp.n_ubatch = (uint32_t) n_batch;
    cp.n_threads = 1;
    cp.n_threads_batch = 1;
    cp.flash_attn_type = flash ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    struct llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        fprintf(stderr, "cannot make a context\n");
        return 1;
    }
    for (int i = 0; i < n_tokens; i += n_batch) {
        const int n = n_tokens - i < n_batch ? n_tokens - i : n_batch;
        if (llama_decode(ctx, llama_batch_get_one(tokens + i, n)) != 0) {
            fprintf(stderr, "llama_decode failed at token %d\n", i);
            return 1;
        }
    }
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    const float * logits = llama_get_logits_ith(ctx, -1);
    FILE * f = fopen(out_path, "wb");
    if (!f || !logits || fwrite(logits, sizeof(float), (size_t) n_vocab, f) != (size_t) n_vocab) {
        fprintf(stderr, "cannot write %s\n", out_path);
        return 1;
    }
    fclose(f);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    free(tokens);
    return 0;
}
